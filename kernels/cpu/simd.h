// Explicit float vectors for the loops the compiler leaves scalar at some widths: exp and tanh
// (their range clamps turn into branches, and nearbyint has no AVX2 vector form), and the row
// reductions of the softmaxes; private to the CPU kernels. GCC vector extensions of the ISA's
// width (LATTICE_ISA_VEC_BYTES), so one source serves every ISA (Note [CPU dispatch]). The exp is
// fast-exp's polynomial (design-notes "fast-exp") with the rounding done by adding 1.5 * 2^23.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "isa_region.h"

LATTICE_ISA_BEGIN

inline constexpr int kLanes = LATTICE_ISA_VEC_BYTES / sizeof(float);
typedef float vfloat __attribute__((vector_size(LATTICE_ISA_VEC_BYTES)));
typedef int32_t vint __attribute__((vector_size(LATTICE_ISA_VEC_BYTES)));

inline vfloat load(const float* p) {
  vfloat v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vfloat v) {
  __builtin_memcpy(p, &v, sizeof v);
}
// The first n < kLanes elements, the rest zero.
inline vfloat load_partial(const float* p, size_t n) {
  float lanes[kLanes] = {};
  __builtin_memcpy(lanes, p, n * sizeof(float));
  return load(lanes);
}
inline void store_partial(float* p, vfloat v, size_t n) {
  float lanes[kLanes];
  store(lanes, v);
  __builtin_memcpy(p, lanes, n * sizeof(float));
}
inline vfloat splat(float x) {
  return vfloat{} + x;
}
// a < b ? a : b and a > b ? a : b, which is what MINPS and MAXPS compute (b where either is NaN
// or both are zero); written as the conditional, GCC compared and blended: two instructions (or
// a compare and a masked move) where one does.
inline vfloat min(vfloat a, vfloat b) {
#if LATTICE_ISA_VEC_BYTES == 64
  // The masked form with every lane set: GCC 12 warns on _mm512_min_ps's undefined source.
  return (vfloat)_mm512_mask_min_ps((__m512)a, (__mmask16)-1, (__m512)a, (__m512)b);
#elif LATTICE_ISA_VEC_BYTES == 32
  return (vfloat)_mm256_min_ps((__m256)a, (__m256)b);
#else
  return (vfloat)_mm_min_ps((__m128)a, (__m128)b);
#endif
}
inline vfloat max(vfloat a, vfloat b) {
#if LATTICE_ISA_VEC_BYTES == 64
  return (vfloat)_mm512_mask_max_ps((__m512)a, (__mmask16)-1, (__m512)a, (__m512)b);
#elif LATTICE_ISA_VEC_BYTES == 32
  return (vfloat)_mm256_max_ps((__m256)a, (__m256)b);
#else
  return (vfloat)_mm_max_ps((__m128)a, (__m128)b);
#endif
}
inline float reduce_add(vfloat v) {
  float s = 0;
  for (int k = 0; k < kLanes; k++) s += v[k];
  return s;
}
inline float reduce_max(vfloat v) {
  float m = v[0];
  for (int k = 1; k < kLanes; k++) m = std::max(m, v[k]);
  return m;
}

// exp(x) for x in [-87.3, 88.3], where 2^n is a normal float.
inline vfloat exp_in_range(vfloat x) {
  // Round x / ln 2 to the nearest integer: adding 1.5 * 2^23 leaves no fraction bits.
  const vfloat n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const vfloat r = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n ln2 in two parts
  vfloat p = splat(1.9875691500E-4f);
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  const vint bits = (__builtin_convertvector(n, vint) + 127) << 23;  // 2^n
  return p * (vfloat)bits;
}

inline vfloat exp_vec(vfloat x) {
  return exp_in_range(min(max(x, splat(-87.3f)), splat(88.3f)));
}

inline vfloat tanh_vec(vfloat x) {
  // tanh is +-1 in float beyond +-9; 2x then lies inside exp's range, which needs no clamp.
  const vfloat e = exp_in_range(2.0f * min(max(x, splat(-9.0f)), splat(9.0f)));
  return (e - 1.0f) / (e + 1.0f);
}

// Elements [0, n) of `out` = f(elements of `in`), whole vectors then one padded vector.
template <typename F>
inline void map(float* out, const float* in, size_t n, F f) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + i, f(load(in + i)));
  if (i < n) store_partial(out + i, f(load_partial(in + i, n - i)), n - i);
}
template <typename F>
inline void map(float* out, const float* a, const float* b, size_t n, F f) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + i, f(load(a + i), load(b + i)));
  if (i < n)
    store_partial(out + i, f(load_partial(a + i, n - i), load_partial(b + i, n - i)), n - i);
}

// Softmax rows. Sums are taken in float lanes over blocks of kSumBlock elements and the blocks
// added in double: a float sum over a 50k vocabulary would lose ~1e-5.
inline constexpr size_t kSumBlock = 1024;

inline float row_max(const float* x, size_t n) {
  vfloat m = splat(x[0]);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) m = max(m, load(x + i));
  float r = reduce_max(m);
  for (; i < n; i++) r = std::max(r, x[i]);
  return r;
}

// d[i] = exp(x[i] - shift) (d may be x, or null to store nothing); returns the sum of them.
inline double exp_shifted(float* d, const float* x, size_t n, float shift) {
  const vfloat s = splat(shift);
  double total = 0;
  for (size_t i0 = 0; i0 < n; i0 += kSumBlock) {
    const size_t i1 = std::min(n, i0 + kSumBlock);
    vfloat acc{};
    size_t i = i0;
    for (; i + kLanes <= i1; i += kLanes) {
      const vfloat e = exp_vec(load(x + i) - s);
      if (d) store(d + i, e);
      acc += e;
    }
    if (i < i1) {
      const vfloat e = exp_vec(load_partial(x + i, i1 - i) - s);
      if (d) store_partial(d + i, e, i1 - i);
      vfloat mask{};
      for (size_t k = 0; k < i1 - i; k++) mask[k] = 1.0f;
      acc += e * mask;
    }
    total += reduce_add(acc);
  }
  return total;
}

// d[i] = exp(x[i] - shift) * g (d may be x).
inline void exp_shifted_scaled(float* d, const float* x, size_t n, float shift, float g) {
  const vfloat s = splat(shift), gv = splat(g);
  map(d, x, n, [&](vfloat v) { return exp_vec(v - s) * gv; });
}

// d[i] *= g
inline void scale_row(float* d, size_t n, float g) {
  const vfloat gv = splat(g);
  map(d, d, n, [&](vfloat v) { return v * gv; });
}

LATTICE_ISA_END
