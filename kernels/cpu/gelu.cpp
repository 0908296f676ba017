// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include "lattice/kernels.h"
#include "parallel.h"
#include "vec_math.h"

namespace lattice::kernels {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  const T a = static_cast<T>(kSqrt2OverPi), b = static_cast<T>(kCubic);
#pragma omp parallel for simd schedule(static) if (n >= cpu::kMinParallelWork)
  for (size_t i = 0; i < n; i++) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + cpu::tanh_approx(a * (x + b * x * x * x)));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const T a = static_cast<T>(kSqrt2OverPi), b = static_cast<T>(kCubic);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const T x = inp[i];
    const T th = cpu::tanh_approx(a * (x + b * x * x * x));
    const T sech2 = T(1) - th * th;
    const T grad = T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * a * (T(1) + T(3) * b * x * x);
    dinp[i] = grad * dout[i];
  }
}

template void gelu_forward(float*, const float*, size_t);
template void gelu_forward(double*, const double*, size_t);
template void gelu_backward(float*, const float*, const float*, size_t);
template void gelu_backward(double*, const double*, const double*, size_t);

}  // namespace lattice::kernels
