// LayerNorm over the channel dimension, and the residual add fused into it (the CUDA op list's
// order: docs/one-engine.md 3.3). Row statistics are accumulated in double; the weight/bias
// gradients are reduced per thread and then summed in thread order.
#include <omp.h>

#include <cmath>
#include <vector>

#include "lattice/kernels.h"
#include "parallel.h"

LATTICE_ISA_BEGIN

namespace {

// One row: o (C) = (x - mean) * rstd * weight + bias; *mean, *rstd saved. Both forwards run
// this same code, so the fused op equals the add followed by layernorm_forward bit for bit.
template <typename T>
inline __attribute__((always_inline)) void layernorm_row(T* o, T* mean, T* rstd, const T* x,
                                                         const T* weight, const T* bias, int C) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += x[c];
  const double m = sum / C;
  double var = 0;
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
  const double s = 1.0 / std::sqrt(var / C + kLayerNormEps);
  const T tm = static_cast<T>(m), ts = static_cast<T>(s);
#pragma omp simd
  for (int c = 0; c < C; c++) o[c] = (x[c] - tm) * ts * weight[c] + bias[c];
  *mean = tm;
  *rstd = ts;
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= cpu::kMinParallelWork)
  for (int n = 0; n < N; n++) {
    const size_t row = static_cast<size_t>(n) * C;
    layernorm_row(out + row, mean + n, rstd + n, inp + row, weight, bias, C);
  }
}

// One pass over each row: the sum is stored, then normalised while it is in cache.
template <typename T>
void residual_layernorm_forward(T* residual_out, T* out, T* mean, T* rstd, const T* residual,
                                const T* x, const T* weight, const T* bias, int N, int C) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= cpu::kMinParallelWork)
  for (int n = 0; n < N; n++) {
    const size_t row = static_cast<size_t>(n) * C;
    T* r = residual_out + row;
    const T* a = residual + row;
    const T* b = x + row;
#pragma omp simd
    for (int c = 0; c < C; c++) r[c] = a[c] + b[c];
    layernorm_row(out + row, mean + n, rstd + n, r, weight, bias, C);
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C) {
  const int threads = num_threads();
  std::vector<T> partial(static_cast<size_t>(threads) * 2 * C, T(0));  // (threads, 2, C)
#pragma omp parallel num_threads(threads)
  {
    T* pw = partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * C;
    T* pb = pw + C;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const T* x = inp + static_cast<size_t>(n) * C;
      const T* d = dout + static_cast<size_t>(n) * C;
      T* di = dinp + static_cast<size_t>(n) * C;
      const T m = mean[n], s = rstd[n];
      T dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; c++) {
        const T xhat = (x[c] - m) * s;
        const T dn = weight[c] * d[c];
        dnorm_mean += dn;
        dnorm_norm_mean += dn * xhat;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
#pragma omp simd
      for (int c = 0; c < C; c++) {
        const T xhat = (x[c] - m) * s;
        pb[c] += d[c];
        pw[c] += xhat * d[c];
        di[c] += (weight[c] * d[c] - dnorm_mean - xhat * dnorm_norm_mean) * s;
      }
    }
  }
  for (int t = 0; t < threads; t++) {
    const T* pw = partial.data() + static_cast<size_t>(t) * 2 * C;
    for (int c = 0; c < C; c++) {
      dweight[c] += pw[c];
      dbias[c] += pw[C + c];
    }
  }
}

template void layernorm_forward(float*, float*, float*, const float*, const float*, const float*,
                                int, int);
template void layernorm_forward(double*, double*, double*, const double*, const double*,
                                const double*, int, int);
template void residual_layernorm_forward(float*, float*, float*, float*, const float*, const float*,
                                         const float*, const float*, int, int);
template void residual_layernorm_forward(double*, double*, double*, double*, const double*,
                                         const double*, const double*, const double*, int, int);
template void layernorm_backward(float*, float*, float*, const float*, const float*, const float*,
                                 const float*, const float*, int, int);
template void layernorm_backward(double*, double*, double*, const double*, const double*,
                                 const double*, const double*, const double*, int, int);

LATTICE_ISA_END
