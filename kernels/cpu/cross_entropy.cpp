// Fused softmax + cross-entropy: the probabilities are never stored separately; with
// dlogits aliasing logits the (N, V) logits buffer becomes its own gradient. Row sums are
// accumulated in double whatever the element type.
#include <algorithm>
#include <cmath>

#include "lattice/kernels.h"
#include "vec_math.h"

namespace lattice::kernels {

template <typename T>
void softmax_cross_entropy(T* losses, T* dlogits, const T* logits, const int32_t* targets, int N,
                           int V, float grad_scale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = logits + static_cast<size_t>(n) * V;
    const int target = targets[n];
    T maxv = x[0];
#pragma omp simd reduction(max : maxv)
    for (int i = 1; i < V; i++) maxv = std::max(maxv, x[i]);
    const T target_logit = x[target];
    double sum = 0;
    if (dlogits) {
      T* d = dlogits + static_cast<size_t>(n) * V;
      double partial = 0;  // double: the float sum over ~50k terms would lose ~1e-5
#pragma omp simd reduction(+ : partial)
      for (int i = 0; i < V; i++) {
        d[i] = cpu::exp_approx(x[i] - maxv);
        partial += d[i];
      }
      sum = partial;
      const T g = static_cast<T>(grad_scale / sum);
#pragma omp simd
      for (int i = 0; i < V; i++) d[i] *= g;
      d[target] -= static_cast<T>(grad_scale);
    } else {
      double partial = 0;
#pragma omp simd reduction(+ : partial)
      for (int i = 0; i < V; i++) partial += cpu::exp_approx(x[i] - maxv);
      sum = partial;
    }
    losses[n] = static_cast<T>(std::log(sum) - static_cast<double>(target_logit - maxv));
  }
}

template <typename T>
void cross_entropy_shard_max(T* row_max, const T* logits, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = logits + static_cast<size_t>(n) * V;
    T maxv = x[0];
#pragma omp simd reduction(max : maxv)
    for (int i = 1; i < V; i++) maxv = std::max(maxv, x[i]);
    row_max[n] = maxv;
  }
}

template <typename T>
void cross_entropy_shard_sums(double* sum_exp, T* target_logit, const T* logits, const T* row_max,
                              const int32_t* targets, int vocab_begin, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T* x = logits + static_cast<size_t>(n) * V;
    const T maxv = row_max[n];
    double partial = 0;
#pragma omp simd reduction(+ : partial)
    for (int i = 0; i < V; i++) partial += cpu::exp_approx(x[i] - maxv);
    sum_exp[n] = partial;
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
    const T maxv = row_max[n];
    losses[n] = static_cast<T>(std::log(sum_exp[n]) - static_cast<double>(target_logit[n] - maxv));
    if (!dlogits) continue;
    const T* x = logits + static_cast<size_t>(n) * V;
    T* d = dlogits + static_cast<size_t>(n) * V;
    const T g = static_cast<T>(grad_scale / sum_exp[n]);
#pragma omp simd
    for (int i = 0; i < V; i++) d[i] = cpu::exp_approx(x[i] - maxv) * g;
    const int local = targets[n] - vocab_begin;
    if (local >= 0 && local < V) d[local] -= static_cast<T>(grad_scale);
  }
}

#define LATTICE_SHARD_CE(T)                                                                    \
  template void cross_entropy_shard_max(T*, const T*, int, int);                               \
  template void cross_entropy_shard_sums(double*, T*, const T*, const T*, const int32_t*, int,  \
                                         int, int);                                            \
  template void cross_entropy_shard_finish(T*, T*, const T*, const T*, const double*, const T*, \
                                           const int32_t*, int, int, int, float);
LATTICE_SHARD_CE(float)
LATTICE_SHARD_CE(double)
#undef LATTICE_SHARD_CE

template void softmax_cross_entropy(float*, float*, const float*, const int32_t*, int, int, float);
template void softmax_cross_entropy(double*, double*, const double*, const int32_t*, int, int,
                                    float);

}  // namespace lattice::kernels
