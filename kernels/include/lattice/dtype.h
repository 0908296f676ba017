// Element types: the one enum that names what a buffer holds, for host and device buffers
// alike (communicators, the op lists), and the 16-bit storage types with their host
// conversions. No CUDA header is needed: bf16 and fp16 are plain 16-bit structs,
// bit-identical to __nv_bfloat16 and __half, so CPU code and the CUDA op list share them.
// Non-goals: 16-bit arithmetic on the host (widen to float, compute, round back), file
// formats' own dtype tags (safetensors::Dtype, the indexed dataset's TokenDtype).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lattice {

enum class DType { kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt64, kUInt8 };

// Bytes per element; 0 for a value outside the enum.
constexpr size_t dtype_size(DType type) {
  switch (type) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

// bfloat16 storage, bit-identical to __nv_bfloat16: fp32's 8-bit exponent, 7-bit mantissa.
struct bf16 {
  uint16_t bits;
};
// Host conversions: round to nearest even; NaN stays NaN.
inline bf16 to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}
inline float from_bf16(bf16 x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE binary16 storage, bit-identical to __half: 10-bit mantissa (finer than bf16's 7), but
// the range ends at 65504 (the reason for loss scaling) and below 2^-14 it is subnormal.
struct fp16 {
  uint16_t bits;
};
// Host conversions, as __float2half_rn / __half2float: round to nearest even, subnormals
// kept, overflow to inf (from 65520 up: the tie above 65504 rounds to even, i.e. away),
// NaN stays NaN.
inline fp16 to_fp16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return fp16{static_cast<uint16_t>(sign | 0x7e00u)};   // NaN
  if (u >= 0x477ff000u) return fp16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: inf
  if (u >= 0x38800000u) {  // >= 2^-14: normal; rebias the exponent (127 -> 15), round 13 bits
    u -= 112u << 23;
    u += 0xfffu + ((u >> 13) & 1u);
    return fp16{static_cast<uint16_t>(sign | (u >> 13))};
  }
  const int e = static_cast<int>(u >> 23);  // subnormal result: a multiple of 2^-24
  if (e < 102) return fp16{sign};           // below 2^-25 (the tie at 2^-25 rounds to 0)
  const uint32_t mant = (u & 0x7fffffu) | 0x800000u;
  const int shift = 126 - e;  // 14..24
  uint32_t m = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1u))) m++;  // may carry into the smallest normal
  return fp16{static_cast<uint16_t>(sign | m)};
}
inline float from_fp16(fp16 x) {
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  const uint32_t exp = (x.bits >> 10) & 0x1fu, mant = x.bits & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float f = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -f : f;
  }
  const uint32_t u = sign | (exp == 0x1f ? 0x7f800000u | (mant << 13)  // inf, NaN
                                         : ((exp + 112u) << 23) | (mant << 13));
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The DType of a C++ element type: dtype_of<float>() == DType::kFloat32.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::kBFloat16;
}
template <>
constexpr DType dtype_of<fp16>() {
  return DType::kFloat16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::kUInt8;
}

}  // namespace lattice
