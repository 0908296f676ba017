// The training loop's data: the train / valid / test sample streams a run reads (mock data or
// GPT datasets over indexed files), and the micro-batches each data-parallel rank takes.
#pragma once

#include <memory>
#include <vector>

#include "data/gpt_dataset.h"
#include "lattice/train_options.h"

namespace lattice {

struct DataSources {
  std::unique_ptr<SampleSource> train, valid, test;
};

// Opens the splits the options name (building or reading the cached sample indices).
Result<DataSources> open_data(const TrainOptions& options, const ModelConfig& model);

// Fills inputs and targets (B, T) with micro-batch `micro_index` of data-parallel rank
// `dp_rank`'s slice of the global batch that starts at `consumed` (Megatron's sampler,
// data/batch_sampler.h); checks every id against the vocabulary.
Status fill_micro_batch(const SampleSource& source, int64_t consumed, int micro_index, int B,
                        int dp_size, int dp_rank, int vocab_size, std::vector<int32_t>& sample,
                        int32_t* inputs, int32_t* targets);

}  // namespace lattice
