// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Compiled once per
// ISA (Note [CPU dispatch]); float runs explicit vectors, double (the gradient checks'
// reference) runs libm's tanh.
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "parallel.h"
#include "simd.h"
#include "vec_math.h"

LATTICE_ISA_BEGIN

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

vfloat gelu_vec(vfloat x) {
  const float a = kSqrt2OverPi, b = kCubic;
  return 0.5f * x * (1.0f + tanh_vec(a * (x + b * x * x * x)));
}

vfloat gelu_grad_vec(vfloat x, vfloat dout) {
  const float a = kSqrt2OverPi, b = kCubic;
  const vfloat th = tanh_vec(a * (x + b * x * x * x));
  const vfloat sech2 = 1.0f - th * th;
  return (0.5f * (1.0f + th) + 0.5f * x * sech2 * a * (1.0f + 3.0f * b * x * x)) * dout;
}

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for_blocks(n, [&](size_t i0, size_t i1) {
      map(out + i0, inp + i0, i1 - i0, [&](vfloat x) { return gelu_vec(x); });
    });
  } else {
    const T a = static_cast<T>(kSqrt2OverPi), b = static_cast<T>(kCubic);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
    for (size_t i = 0; i < n; i++) {
      const T x = inp[i];
      out[i] = T(0.5) * x * (T(1) + cpu::tanh_approx(a * (x + b * x * x * x)));
    }
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for_blocks(n, [&](size_t i0, size_t i1) {
      map(dinp + i0, inp + i0, dout + i0, i1 - i0,
          [&](vfloat x, vfloat d) { return gelu_grad_vec(x, d); });
    });
  } else {
    const T a = static_cast<T>(kSqrt2OverPi), b = static_cast<T>(kCubic);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
    for (size_t i = 0; i < n; i++) {
      const T x = inp[i];
      const T th = cpu::tanh_approx(a * (x + b * x * x * x));
      const T sech2 = T(1) - th * th;
      const T grad = T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * a * (T(1) + T(3) * b * x * x);
      dinp[i] = grad * dout[i];
    }
  }
}

template void gelu_forward(float*, const float*, size_t);
template void gelu_forward(double*, const double*, size_t);
template void gelu_backward(float*, const float*, const float*, size_t);
template void gelu_backward(double*, const double*, const double*, size_t);

LATTICE_ISA_END
