// Fused softmax + cross-entropy: the probabilities are never stored separately; with
// dlogits aliasing logits the (N, V) logits buffer becomes its own gradient. Row sums are
// accumulated in double whatever the element type (float: per block of float lanes, simd.h).
// Compiled once per ISA (Note [CPU dispatch]). A negative target (kIgnoreIndex) is a row that
// carries no loss and no gradient: its loss and its dlogits row are 0 (SFT's masked tokens).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "simd.h"
#include "vec_math.h"

LATTICE_ISA_BEGIN

namespace {

// Row operations: explicit vectors for float (simd.h), plain loops for double.
template <typename T>
T scalar_row_max(const T* x, int V) {
  T maxv = x[0];
#pragma omp simd reduction(max : maxv)
  for (int i = 1; i < V; i++) maxv = std::max(maxv, x[i]);
  return maxv;
}

template <typename T>
T max_of_row(const T* x, int V) {
  if constexpr (std::is_same_v<T, float>)
    return row_max(x, V);
  else
    return scalar_row_max(x, V);
}

// sum of exp(x - maxv) over the row; when d is non-null it also receives the exponentials.
template <typename T>
double sum_exp(T* d, const T* x, int V, T maxv) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_shifted(d, x, V, maxv);
  } else {
    double partial = 0;
    if (d) {
#pragma omp simd reduction(+ : partial)
      for (int i = 0; i < V; i++) {
        d[i] = cpu::exp_approx(x[i] - maxv);
        partial += d[i];
      }
    } else {
#pragma omp simd reduction(+ : partial)
      for (int i = 0; i < V; i++) partial += cpu::exp_approx(x[i] - maxv);
    }
    return partial;
  }
}

// d = exp(x - maxv) * g over the row.
template <typename T>
void exp_scaled(T* d, const T* x, int V, T maxv, T g) {
  if constexpr (std::is_same_v<T, float>) {
    exp_shifted_scaled(d, x, V, maxv, g);
  } else {
#pragma omp simd
    for (int i = 0; i < V; i++) d[i] = cpu::exp_approx(x[i] - maxv) * g;
  }
}

// d *= g over the row.
template <typename T>
void scale_by(T* d, int V, T g) {
  if constexpr (std::is_same_v<T, float>) {
    scale_row(d, V, g);
  } else {
#pragma omp simd
    for (int i = 0; i < V; i++) d[i] *= g;
  }
}

// An ignored row (negative target): no loss, and a zero gradient row when one is wanted.
template <typename T>
void ignore_row(T* loss, T* dlogits, int n, int V) {
  *loss = T(0);
  if (dlogits) std::fill_n(dlogits + static_cast<size_t>(n) * V, V, T(0));
}

}  // namespace

template <typename T>
void softmax_cross_entropy(T* losses, T* dlogits, const T* logits, const int32_t* targets, int N,
                           int V, float grad_scale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = logits + static_cast<size_t>(n) * V;
    const int target = targets[n];
    if (target < 0) {
      ignore_row(losses + n, dlogits, n, V);
      continue;
    }
    const T maxv = max_of_row(x, V);
    const T target_logit = x[target];
    double sum = 0;
    if (dlogits) {
      T* d = dlogits + static_cast<size_t>(n) * V;
      sum = sum_exp(d, x, V, maxv);
      scale_by(d, V, static_cast<T>(grad_scale / sum));
      d[target] -= static_cast<T>(grad_scale);
    } else {
      sum = sum_exp(static_cast<T*>(nullptr), x, V, maxv);
    }
    losses[n] = static_cast<T>(std::log(sum) - static_cast<double>(target_logit - maxv));
  }
}

template <typename T>
void cross_entropy_shard_max(T* row_max, const T* logits, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) row_max[n] = max_of_row(logits + static_cast<size_t>(n) * V, V);
}

template <typename T>
void cross_entropy_shard_sums(double* sum_exp_out, T* target_logit, const T* logits,
                              const T* row_max, const int32_t* targets, int vocab_begin, int N,
                              int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = logits + static_cast<size_t>(n) * V;
    sum_exp_out[n] = sum_exp(static_cast<T*>(nullptr), x, V, row_max[n]);
    const int local = targets[n] - vocab_begin;
    target_logit[n] = local >= 0 && local < V ? x[local] : T(0);
  }
}

template <typename T>
void cross_entropy_shard_finish(T* losses, T* dlogits, const T* logits, const T* row_max,
                                const double* sum_exp, const T* target_logit,
                                const int32_t* targets, int vocab_begin, int N, int V,
                                float grad_scale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    if (targets[n] < 0) {
      ignore_row(losses + n, dlogits, n, V);
      continue;
    }
    const T maxv = row_max[n];
    losses[n] = static_cast<T>(std::log(sum_exp[n]) - static_cast<double>(target_logit[n] - maxv));
    if (!dlogits) continue;
    const T* x = logits + static_cast<size_t>(n) * V;
    T* d = dlogits + static_cast<size_t>(n) * V;
    exp_scaled(d, x, V, maxv, static_cast<T>(grad_scale / sum_exp[n]));
    const int local = targets[n] - vocab_begin;
    if (local >= 0 && local < V) d[local] -= static_cast<T>(grad_scale);
  }
}

#define LATTICE_SHARD_CE(T)                                                                     \
  template void cross_entropy_shard_max(T*, const T*, int, int);                                \
  template void cross_entropy_shard_sums(double*, T*, const T*, const T*, const int32_t*, int,  \
                                         int, int);                                             \
  template void cross_entropy_shard_finish(T*, T*, const T*, const T*, const double*, const T*, \
                                           const int32_t*, int, int, int, float);
LATTICE_SHARD_CE(float)
LATTICE_SHARD_CE(double)
#undef LATTICE_SHARD_CE

template void softmax_cross_entropy(float*, float*, const float*, const int32_t*, int, int, float);
template void softmax_cross_entropy(double*, double*, const double*, const int32_t*, int, int,
                                    float);

LATTICE_ISA_END
