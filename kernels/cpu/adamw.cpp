// AdamW step (decoupled weight decay, bias-corrected moments) and the reductions the
// optimizer needs (global gradient norm, scaling for clipping).
#include <omp.h>

#include <cmath>
#include <vector>

#include "isa_region.h"
#include "lattice/kernels.h"

LATTICE_ISA_BEGIN

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, const AdamWParams& p) {
  const T b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, wd = p.weight_decay;
  const T c1 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), p.step)));
  const T c2 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), p.step)));
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const T g = grad[i];
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * ((mi * c1) / (std::sqrt(vi * c2) + eps) + wd * param[i]);
  }
}

template <typename T>
double sum_squares(const T* x, size_t n) {
  const int threads = num_threads();
  std::vector<double> partial(static_cast<size_t>(threads), 0.0);
#pragma omp parallel num_threads(threads)
  {
    double s = 0;
#pragma omp for simd schedule(static)
    for (size_t i = 0; i < n; i++) s += static_cast<double>(x[i]) * x[i];
    partial[omp_get_thread_num()] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

template <typename T>
void scale(T* x, size_t n, T s) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

template void adamw_update(float*, const float*, float*, float*, size_t, const AdamWParams&);
template void adamw_update(double*, const double*, double*, double*, size_t, const AdamWParams&);
template double sum_squares(const float*, size_t);
template double sum_squares(const double*, size_t);
template void scale(float*, size_t, float);
template void scale(double*, size_t, double);

LATTICE_ISA_END
