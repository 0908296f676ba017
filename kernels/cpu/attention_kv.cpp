// Attention of single query rows against a key/value cache: the incremental-decoding form of
// attention_forward (kernels.h). Each row first stores its own key and value at its (slot,
// position), then attends to positions [0, position] of its slot, so a prompt's rows can be
// processed together (prefill) as well as one new token per sequence (decode).
// Non-goal: dropout (inference only) and a paged cache. Compiled once per ISA (Note [CPU
// dispatch]).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "lattice/kernels.h"
#include "parallel.h"
#include "simd.h"
#include "vec_math.h"

LATTICE_ISA_BEGIN

template <typename T>
void attention_kv_forward(T* out, T* k_cache, T* v_cache, const T* qkv, const int32_t* slots,
                          const int32_t* positions, int M, int NH, int HS, int max_T, T* workspace,
                          int kv_heads) {
  const int KV = kv_heads > 0 ? kv_heads : NH, Q = NH / KV;
  const size_t ld = static_cast<size_t>(NH + 2 * KV) * HS, C = static_cast<size_t>(NH) * HS;
  auto cache_at = [&](int slot, int g, int pos) {
    return ((static_cast<size_t>(slot) * KV + g) * max_T + pos) * HS;
  };
  // Group g's columns in a row: its Q query heads, its key, its value (kernels.h).
  const size_t group_width = static_cast<size_t>(Q + 2) * HS;
  // Every key and value first: a row may attend to an earlier row of the same call.
#pragma omp parallel for schedule(static) if (M * ld >= cpu::kMinParallelWork)
  for (int mg = 0; mg < M * KV; mg++) {
    const int m = mg / KV, g = mg % KV;
    const T* key = qkv + m * ld + g * group_width + static_cast<size_t>(Q) * HS;
    const size_t at = cache_at(slots[m], g, positions[m]);
    std::memcpy(k_cache + at, key, HS * sizeof(T));
    std::memcpy(v_cache + at, key + HS, HS * sizeof(T));
  }
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(HS)));
  size_t work = 0;  // multiply-adds of q k^T and p v
  for (int m = 0; m < M; m++) work += 2 * (positions[m] + size_t{1}) * C;
#pragma omp parallel for schedule(dynamic, 1) if (work >= 8 * cpu::kMinParallelWork)
  for (int mh = 0; mh < M * NH; mh++) {
    const int m = mh / NH, h = mh % NH, n = positions[m] + 1;
    const T* q = qkv + m * ld + (h / Q) * group_width + static_cast<size_t>(h % Q) * HS;
    const T* K = k_cache + cache_at(slots[m], h / Q, 0);
    const T* V = v_cache + cache_at(slots[m], h / Q, 0);
    T* scores = workspace + static_cast<size_t>(omp_get_thread_num()) * max_T;
    T maxv = -INFINITY;
    for (int j = 0; j < n; j++) {
      const T* kj = K + static_cast<size_t>(j) * HS;
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < HS; d++) dot += q[d] * kj[d];
      scores[j] = dot * scale;
      maxv = std::max(maxv, scores[j]);
    }
    T sum = 0;
    if constexpr (std::is_same_v<T, float>) {
      sum = static_cast<T>(exp_shifted(scores, scores, n, maxv));
    } else {
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < n; j++) {
        scores[j] = cpu::exp_approx(scores[j] - maxv);
        sum += scores[j];
      }
    }
    const T inv = T(1) / sum;
    T* o = out + m * C + static_cast<size_t>(h) * HS;
    std::fill(o, o + HS, T(0));
    for (int j = 0; j < n; j++) {
      const T p = scores[j] * inv;
      const T* vj = V + static_cast<size_t>(j) * HS;
#pragma omp simd
      for (int d = 0; d < HS; d++) o[d] += p * vj[d];
    }
  }
}

template void attention_kv_forward(float*, float*, float*, const float*, const int32_t*,
                                   const int32_t*, int, int, int, int, float*, int);
template void attention_kv_forward(double*, double*, double*, const double*, const int32_t*,
                                   const int32_t*, int, int, int, int, double*, int);

LATTICE_ISA_END
