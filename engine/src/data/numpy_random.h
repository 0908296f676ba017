// numpy's legacy numpy.random.RandomState(seed), as far as Megatron's GPTDataset uses it:
// integer seeding and shuffle() of a 1-D array. Bit-exact with numpy (pinned by
// tests/data/numpy_shuffles.json); not a general-purpose random number generator.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>

namespace lattice {

class NumpyRandomState {
 public:
  // RandomState(seed): numpy's _legacy_seeding calls mt19937_seed (Knuth's initialisation,
  // the reference MT19937 init_genrand) for an integer seed in [0, 2**32 - 1].
  explicit NumpyRandomState(uint32_t seed);

  uint32_t next_uint32();  // mt19937_next32: one tempered MT19937 output
  // mt19937_next64: two outputs, the first in the high half. (numpy's C leaves the order of
  // evaluation unspecified; its builds evaluate left to right, checked against randint.)
  uint64_t next_uint64();

  // numpy's random_interval (distributions.c): uniform in [0, max] by masked rejection,
  // drawing 32 bits while max <= 0xffffffff and 64 bits above.
  uint64_t random_interval(uint64_t max);

  // RandomState.shuffle on a 1-D array (mtrand.pyx _shuffle_raw): Fisher-Yates from the last
  // element down, j = random_interval(i) for i = n-1 .. 1, then swap x[i] and x[j].
  template <typename T>
  void shuffle(std::span<T> x) {
    for (size_t i = x.size() > 0 ? x.size() - 1 : 0; i > 0; --i) {
      const size_t j = static_cast<size_t>(random_interval(i));
      std::swap(x[i], x[j]);
    }
  }

 private:
  void generate();  // mt19937_gen: the next 624 words of state

  std::array<uint32_t, 624> key_{};
  int pos_ = 624;
};

}  // namespace lattice
