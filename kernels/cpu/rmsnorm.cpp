// RMSNorm over the channel dimension (Llama), and the residual add fused into it, as
// layernorm.cpp does for LayerNorm. The mean of squares is accumulated in double; the weight
// gradient is reduced per thread and then summed in thread order (deterministic for a thread
// count).
#include <omp.h>

#include <cmath>
#include <vector>

#include "lattice/kernels.h"
#include "parallel.h"

LATTICE_ISA_BEGIN

namespace {

// One row: o (C) = x * rstd * weight; *rstd saved. Both forwards run this same code, so the
// fused op equals the add followed by rmsnorm_forward bit for bit.
template <typename T>
inline __attribute__((always_inline)) void rmsnorm_row(T* o, T* rstd, const T* x, const T* weight,
                                                       int C, float eps) {
  double squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int c = 0; c < C; c++) squares += static_cast<double>(x[c]) * x[c];
  const T s = static_cast<T>(1.0 / std::sqrt(squares / C + eps));
#pragma omp simd
  for (int c = 0; c < C; c++) o[c] = x[c] * s * weight[c];
  *rstd = s;
}

}  // namespace

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= cpu::kMinParallelWork)
  for (int n = 0; n < N; n++) {
    const size_t row = static_cast<size_t>(n) * C;
    rmsnorm_row(out + row, rstd + n, inp + row, weight, C, eps);
  }
}

template <typename T>
void residual_rmsnorm_forward(T* residual_out, T* out, T* rstd, const T* residual, const T* x,
                              const T* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= cpu::kMinParallelWork)
  for (int n = 0; n < N; n++) {
    const size_t row = static_cast<size_t>(n) * C;
    T* r = residual_out + row;
    const T* a = residual + row;
    const T* b = x + row;
#pragma omp simd
    for (int c = 0; c < C; c++) r[c] = a[c] + b[c];
    rmsnorm_row(out + row, rstd + n, r, weight, C, eps);
  }
}

// With xhat = x * s (s = rstd): out = xhat * w, so dweight += d * xhat and
// dx = s * (w d - xhat * mean(w d * xhat)).
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C) {
  const int threads = num_threads();
  std::vector<T> partial(static_cast<size_t>(threads) * C, T(0));  // (threads, C)
#pragma omp parallel num_threads(threads)
  {
    T* pw = partial.data() + static_cast<size_t>(omp_get_thread_num()) * C;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const T* x = inp + static_cast<size_t>(n) * C;
      const T* d = dout + static_cast<size_t>(n) * C;
      T* di = dinp + static_cast<size_t>(n) * C;
      const T s = rstd[n];
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; c++) dot += weight[c] * d[c] * x[c] * s;
      dot /= C;
#pragma omp simd
      for (int c = 0; c < C; c++) {
        const T xhat = x[c] * s;
        pw[c] += xhat * d[c];
        di[c] += (weight[c] * d[c] - xhat * dot) * s;
      }
    }
  }
  for (int t = 0; t < threads; t++) {
    const T* pw = partial.data() + static_cast<size_t>(t) * C;
    for (int c = 0; c < C; c++) dweight[c] += pw[c];
  }
}

template void rmsnorm_forward(float*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward(double*, double*, const double*, const double*, int, int, float);
template void residual_rmsnorm_forward(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, float);
template void residual_rmsnorm_forward(double*, double*, double*, const double*, const double*,
                                       const double*, int, int, float);
template void rmsnorm_backward(float*, float*, const float*, const float*, const float*,
                               const float*, int, int);
template void rmsnorm_backward(double*, double*, const double*, const double*, const double*,
                               const double*, int, int);

LATTICE_ISA_END
