// Megatron's --mock-data: synthetic documents [1, 2, ..., n-1, EOD] of seeded random length,
// concatenated and cut into samples of seq-length + 1 tokens. Learnable (each token predicts
// its successor) so a run on it shows the loss falling. Real datasets: the data issue.
#pragma once

#include <cstdint>
#include <vector>

namespace lattice {

class MockGptData {
 public:
  MockGptData(uint64_t seed, int vocab_size, int seq_length);
  // tokens (seq + 1) of sample `index` (any index >= 0; deterministic).
  void sample(int64_t index, int32_t* tokens);
  int eod() const { return vocab_size_ - 1; }

 private:
  int64_t document_length(int64_t doc) const;
  uint64_t seed_;
  int vocab_size_, seq_length_;
  std::vector<int64_t> doc_start_;  // prefix sums of document lengths, grown on demand
};

}  // namespace lattice
