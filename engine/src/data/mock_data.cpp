#include "data/mock_data.h"

#include <algorithm>

#include "lattice/dropout_hash.h"

namespace lattice {

MockGptData::MockGptData(uint64_t seed, int vocab_size, int seq_length)
    : seed_(seed), vocab_size_(vocab_size), seq_length_(seq_length), doc_start_{0} {}

int64_t MockGptData::document_length(int64_t doc) const {
  // Between 2 and 2 * seq-length tokens, like Megatron's mock lengths around the sequence length.
  return 2 + static_cast<int64_t>(kernels::dropout_hash(seed_, doc) % (2 * seq_length_ - 1));
}

void MockGptData::sample(int64_t index, int32_t* tokens) {
  const int64_t begin = index * seq_length_, end = begin + seq_length_ + 1;
  while (doc_start_.back() < end)
    doc_start_.push_back(doc_start_.back() + document_length(doc_start_.size() - 1));
  int64_t doc =
      std::upper_bound(doc_start_.begin(), doc_start_.end(), begin) - doc_start_.begin() - 1;
  for (int64_t pos = begin; pos < end; pos++) {
    while (pos >= doc_start_[doc + 1]) doc++;
    const int64_t j = pos - doc_start_[doc], length = doc_start_[doc + 1] - doc_start_[doc];
    tokens[pos - begin] =
        j == length - 1 ? eod() : static_cast<int32_t>(1 + j % std::max(1, vocab_size_ - 2));
  }
}

}  // namespace lattice
