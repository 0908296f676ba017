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

template void softmax_cross_entropy(float*, float*, const float*, const int32_t*, int, int, float);
template void softmax_cross_entropy(double*, double*, const double*, const int32_t*, int, int,
                                    float);

}  // namespace lattice::kernels
