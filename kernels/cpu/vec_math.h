// Vectorisable exp/tanh for the element-wise kernels; private to the CPU kernels.
// glibc only exposes its SIMD expf under -ffast-math, which would also break inf/NaN checks,
// so float uses a Cephes-style polynomial (max error ~2 ulp on [-87, 88]); double uses libm.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace lattice::kernels::cpu {

inline float exp_approx(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n ln2 in two parts
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
inline double exp_approx(double x) {
  return std::exp(x);
}

inline float tanh_approx(float x) {
  const float a = x > 9.0f ? 9.0f : (x < -9.0f ? -9.0f : x);
  const float e = exp_approx(2.0f * a);
  return (e - 1.0f) / (e + 1.0f);
}
inline double tanh_approx(double x) {
  return std::tanh(x);
}

}  // namespace lattice::kernels::cpu
