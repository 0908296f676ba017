// Which sample of the training stream each rank reads: Megatron's MegatronPretrainingSampler.
// A global batch starting at `consumed` samples is cut into micro-batch rounds of
// micro_batch * dp_size samples; data-parallel rank r takes [r * micro_batch, (r+1) *
// micro_batch) of every round, so the ranks' slices are disjoint and cover the global batch.
#pragma once

#include <cstdint>

namespace lattice {

inline int64_t sample_index(int64_t consumed, int micro_batch, int dp_size, int dp_rank,
                            int micro_index, int b) {
  return consumed + static_cast<int64_t>(micro_index) * micro_batch * dp_size +
         static_cast<int64_t>(dp_rank) * micro_batch + b;
}

}  // namespace lattice
