// A sample with its loss mask and positions, as a SampleSource with a loss mask gives it
// (SampleSource::sample_with_mask): for tests of the SFT and image-text datasets.
#pragma once

#include <cstdint>
#include <vector>

#include "data/gpt_dataset.h"

namespace lattice::testing {

struct MaskedSample {
  std::vector<int32_t> tokens, positions;  // (seq_length + 1)
  std::vector<uint8_t> mask;               // (seq_length + 1)
};

inline MaskedSample read_masked(const SampleSource& s, int64_t index) {
  const size_t n = static_cast<size_t>(s.seq_length()) + 1;
  MaskedSample out{std::vector<int32_t>(n), std::vector<int32_t>(n), std::vector<uint8_t>(n)};
  s.sample_with_mask(index, out.tokens.data(), out.mask.data(), out.positions.data());
  return out;
}

}  // namespace lattice::testing
