// Rotary position embedding (RoPE) in place on the query and key heads of a grouped QKV
// activation (kernels.h: the layout of attention_forward), and its backward, the transposed
// rotation. Element-wise per row and head; rows run in parallel.
#include <cstddef>
#include <cstdint>

#include "lattice/kernels.h"
#include "parallel.h"

LATTICE_ISA_BEGIN

namespace {

// Rotates the first R dims of every query and key head of one row by the angle table row
// (c, s) (R/2 each); sign +1 is the forward rotation, -1 its transpose (the backward).
template <typename T>
void rotate_row(T* row, const T* c, const T* s, int NH, int KV, int HS, int R, T sign) {
  const int Q = NH / KV, half = R / 2;
  for (int g = 0; g < KV; g++) {
    T* group = row + static_cast<size_t>(g) * (Q + 2) * HS;
    for (int j = 0; j <= Q; j++) {  // Q query heads, then the group's key head
      T* x = group + static_cast<size_t>(j) * HS;
#pragma omp simd
      for (int i = 0; i < half; i++) {
        const T x1 = x[i], x2 = x[i + half], sn = sign * s[i];
        x[i] = x1 * c[i] - x2 * sn;
        x[i + half] = x2 * c[i] + x1 * sn;
      }
    }
  }
}

template <typename T>
void rope_apply(T* qkv, const T* cos, const T* sin, const int32_t* positions, int N, int T_, int NH,
                int KV, int HS, int R, T sign) {
  const size_t width = static_cast<size_t>(NH + 2 * KV) * HS;
  const size_t half = static_cast<size_t>(R / 2);
#pragma omp parallel for schedule(static) if (N * width >= cpu::kMinParallelWork)
  for (int n = 0; n < N; n++) {
    const size_t p = positions ? static_cast<size_t>(positions[n]) : static_cast<size_t>(n % T_);
    rotate_row(qkv + n * width, cos + p * half, sin + p * half, NH, KV, HS, R, sign);
  }
}

}  // namespace

template <typename T>
void rope_forward(T* qkv, const T* cos, const T* sin, const int32_t* positions, int N, int T_,
                  int NH, int KV, int HS, int rotary_dim) {
  rope_apply(qkv, cos, sin, positions, N, T_, NH, KV, HS, rotary_dim, T(1));
}

template <typename T>
void rope_backward(T* dqkv, const T* cos, const T* sin, const int32_t* positions, int N, int T_,
                   int NH, int KV, int HS, int rotary_dim) {
  rope_apply(dqkv, cos, sin, positions, N, T_, NH, KV, HS, rotary_dim, T(-1));
}

template void rope_forward(float*, const float*, const float*, const int32_t*, int, int, int, int,
                           int, int);
template void rope_forward(double*, const double*, const double*, const int32_t*, int, int, int,
                           int, int, int);
template void rope_backward(float*, const float*, const float*, const int32_t*, int, int, int, int,
                            int, int);
template void rope_backward(double*, const double*, const double*, const int32_t*, int, int, int,
                            int, int, int);

LATTICE_ISA_END
