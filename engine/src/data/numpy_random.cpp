// MT19937 as numpy implements it (numpy/random/src/mt19937/mt19937.c, mt19937.h) and
// numpy's bounded draw for shuffles (numpy/random/src/distributions/distributions.c).
#include "data/numpy_random.h"

namespace lattice {

namespace {
constexpr int kN = 624;  // _MT19937_N, RK_STATE_LEN
constexpr int kM = 397;  // _MT19937_M
constexpr uint32_t kMatrixA = 0x9908b0dfU;
constexpr uint32_t kUpperMask = 0x80000000U;
constexpr uint32_t kLowerMask = 0x7fffffffU;

uint32_t twist(uint32_t upper_from, uint32_t lower_from, uint32_t xor_with) {
  const uint32_t y = (upper_from & kUpperMask) | (lower_from & kLowerMask);
  return xor_with ^ (y >> 1) ^ ((0U - (y & 1U)) & kMatrixA);
}
}  // namespace

NumpyRandomState::NumpyRandomState(uint32_t seed) {
  // mt19937_seed: key[pos] = seed; seed = 1812433253 * (seed ^ (seed >> 30)) + pos + 1.
  for (int pos = 0; pos < kN; ++pos) {
    key_[pos] = seed;
    seed = 1812433253U * (seed ^ (seed >> 30)) + static_cast<uint32_t>(pos) + 1U;
  }
  pos_ = kN;
}

void NumpyRandomState::generate() {
  int i = 0;
  for (; i < kN - kM; ++i) key_[i] = twist(key_[i], key_[i + 1], key_[i + kM]);
  for (; i < kN - 1; ++i) key_[i] = twist(key_[i], key_[i + 1], key_[i + kM - kN]);
  key_[kN - 1] = twist(key_[kN - 1], key_[0], key_[kM - 1]);
  pos_ = 0;
}

uint32_t NumpyRandomState::next_uint32() {
  if (pos_ == kN) generate();
  uint32_t y = key_[pos_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

uint64_t NumpyRandomState::next_uint64() {
  const uint64_t high = next_uint32();
  const uint64_t low = next_uint32();
  return (high << 32) | low;
}

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;  // the smallest all-ones mask >= max
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value = 0;
  if (max <= 0xffffffffULL) {
    while ((value = (next_uint32() & mask)) > max) {
    }
  } else {
    while ((value = (next_uint64() & mask)) > max) {
    }
  }
  return value;
}

}  // namespace lattice
