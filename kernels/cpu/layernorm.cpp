// LayerNorm over the channel dimension. Row statistics are accumulated in double; the
// weight/bias gradients are reduced per thread and then summed in thread order.
#include <omp.h>

#include <cmath>
#include <vector>

#include "lattice/kernels.h"
#include "parallel.h"

LATTICE_ISA_BEGIN

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= cpu::kMinParallelWork)
  for (int n = 0; n < N; n++) {
    const T* x = inp + static_cast<size_t>(n) * C;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; c++) sum += x[c];
    const double m = sum / C;
    double var = 0;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    const double s = 1.0 / std::sqrt(var / C + kLayerNormEps);
    T* o = out + static_cast<size_t>(n) * C;
    const T tm = static_cast<T>(m), ts = static_cast<T>(s);
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - tm) * ts * weight[c] + bias[c];
    mean[n] = tm;
    rstd[n] = ts;
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
template void layernorm_backward(float*, float*, float*, const float*, const float*, const float*,
                                 const float*, const float*, int, int);
template void layernorm_backward(double*, double*, double*, const double*, const double*,
                                 const double*, const double*, const double*, int, int);

LATTICE_ISA_END
