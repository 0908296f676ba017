// The counter-based hash behind every dropout mask (see kernels.h): the mask of element
// `index` under `key` is a pure function, so backward and recomputation never store masks.
#pragma once

#include <cstdint>

// The CUDA kernels (kernels/cuda/) draw the same masks from device code.
#ifdef __CUDACC__
#define LATTICE_HOST_DEVICE __host__ __device__
#else
#define LATTICE_HOST_DEVICE
#endif

namespace lattice::kernels {

// splitmix64's index step and finaliser multipliers. kernels/cpu/dropout_row.h draws the same
// hash over a vector of indices at once (AVX2 has no 64-bit multiply for the compiler to find).
inline constexpr uint64_t kSplitmixStep = 0x9E3779B97F4A7C15ull;
inline constexpr uint64_t kSplitmixMul1 = 0xBF58476D1CE4E5B9ull;
inline constexpr uint64_t kSplitmixMul2 = 0x94D049BB133111EBull;

// splitmix64's finaliser over (key, index): well mixed, cheap, vectorisable.
LATTICE_HOST_DEVICE inline uint64_t dropout_hash(uint64_t key, uint64_t index) {
  uint64_t z = key + (index + 1) * kSplitmixStep;
  z = (z ^ (z >> 30)) * kSplitmixMul1;
  z = (z ^ (z >> 27)) * kSplitmixMul2;
  return z ^ (z >> 31);
}

// Keep threshold on the top 32 bits of the hash: kept when hash32 >= drop_threshold(p).
LATTICE_HOST_DEVICE inline uint32_t dropout_threshold(float p) {
  return static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0);
}

LATTICE_HOST_DEVICE inline bool dropout_keep(uint64_t key, uint64_t index, uint32_t threshold) {
  return static_cast<uint32_t>(dropout_hash(key, index) >> 32) >= threshold;
}

// Keys for the independent dropout sites of one forward pass.
LATTICE_HOST_DEVICE inline uint64_t dropout_key(uint64_t seed, uint64_t iteration,
                                                uint64_t micro_batch, uint64_t site) {
  return dropout_hash(dropout_hash(dropout_hash(seed, iteration), micro_batch), site);
}

}  // namespace lattice::kernels
