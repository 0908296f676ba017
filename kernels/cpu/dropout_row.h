// Dropout over a row of floats, drawing dropout_hash.h's masks for a whole vector of indices at
// once (residual.cpp, attention.cpp); private to the CPU kernels. The hash's 64-bit multiplies
// have no AVX2 (nor SSE2) instruction, so the auto-vectoriser left those copies' dropout loops
// scalar; here GCC's vector extensions emulate them with 32-bit multiplies, and AVX-512 DQ
// multiplies directly (Note [CPU dispatch]).
#pragma once

#include <cstddef>
#include <cstdint>

#include "isa_region.h"
#include "lattice/dropout_hash.h"
#include "simd.h"

LATTICE_ISA_BEGIN

// Half a register of floats beside a register of 64-bit hashes: the lanes pair up without a
// shuffle across registers (GCC lowers a vector wider than the register through memory).
inline constexpr int kHashLanes = LATTICE_ISA_VEC_BYTES / 8;
typedef uint64_t vu64 __attribute__((vector_size(LATTICE_ISA_VEC_BYTES)));
typedef uint32_t vu32 __attribute__((vector_size(LATTICE_ISA_VEC_BYTES)));
typedef uint32_t vu32half __attribute__((vector_size(LATTICE_ISA_VEC_BYTES / 2)));
typedef int32_t vint_half __attribute__((vector_size(LATTICE_ISA_VEC_BYTES / 2)));
typedef float vfloat_half __attribute__((vector_size(LATTICE_ISA_VEC_BYTES / 2)));

// The high 32 bits of each 64-bit lane: one shuffle.
inline vu32half high_halves(vu64 z) {
  const vu32 w = (vu32)z;
#if LATTICE_ISA_VEC_BYTES == 64
  return __builtin_shufflevector(w, w, 1, 3, 5, 7, 9, 11, 13, 15);
#elif LATTICE_ISA_VEC_BYTES == 32
  return __builtin_shufflevector(w, w, 1, 3, 5, 7);
#else
  return __builtin_shufflevector(w, w, 1, 3);
#endif
}

// out[j] = (add ? add[j] : 0) + (kept(index0 + j) ? x[j] * scale : 0) for j in [0, n); out may
// be x or add.
inline void dropout_row(float* out, const float* add, const float* x, size_t n, uint64_t key,
                        uint64_t index0, uint32_t threshold, float scale) {
  // dropout_hash lane by lane. Its first multiply, (index + 1) * kSplitmixStep, steps by a
  // constant from one vector to the next, so it becomes an add (the other two stay: without
  // AVX-512 DQ each 64-bit multiply is three 32-bit ones).
  vu64 start;
  for (int k = 0; k < kHashLanes; k++) start[k] = key + (index0 + k + 1) * kSplitmixStep;
  const uint64_t stride = kHashLanes * kSplitmixStep;
  size_t j = 0;
  for (; j + kHashLanes <= n; j += kHashLanes, start += stride) {
    vu64 z = (start ^ (start >> 30)) * kSplitmixMul1;
    z = (z ^ (z >> 27)) * kSplitmixMul2;
    // The mask compares the high half of z ^ (z >> 31), which is hi ^ (hi >> 31) for z's high
    // half hi: the lanes narrow before the last step.
    const vu32half hi = high_halves(z);
    const vint_half keep = (hi ^ (hi >> 31)) >= (vu32half{} + threshold);
    vfloat_half v;
    __builtin_memcpy(&v, x + j, sizeof v);
    v = (vfloat_half)((vint_half)(v * scale) & keep);
    if (add) {
      vfloat_half a;
      __builtin_memcpy(&a, add + j, sizeof a);
      v += a;
    }
    __builtin_memcpy(out + j, &v, sizeof v);
  }
  for (; j < n; j++) {
    const float kept = dropout_keep(key, index0 + j, threshold) ? x[j] * scale : 0.0f;
    out[j] = add ? add[j] + kept : kept;
  }
}

LATTICE_ISA_END
