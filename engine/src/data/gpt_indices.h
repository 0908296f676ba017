// Megatron-core's GPT sampling arithmetic, transcribed function by function: how many epochs
// a split needs, the shuffled document index, the sample index (helpers.cpp
// build_sample_idx), the shuffled sample order, the tokens of one sample, the blending
// indices and the per-dataset sample counts of a blend. Pure functions without I/O; the
// cache lives in index_cache.h, the datasets and --split in gpt_dataset.cpp.
//
// "Documents" here are the sequences of the IndexedDataset, as in Megatron-core, whose
// GPTDataset.numel_low_level_dataset counts sequence_lengths (identical to documents unless
// the data was preprocessed with --split-sentences).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/numpy_random.h"

namespace lattice::gpt_index {

// GPTDatasetConfig.add_extra_token_to_sequence (default true): a sample holds seq_length + 1
// tokens, the inputs and, shifted by one, the labels.
constexpr int kAddExtraToken = 1;
// GPTDataset._build_document_sample_shuffle_indices: the last epoch is shuffled separately
// when fewer than int(0.80 * samples per epoch) of its samples are used.
constexpr double kSeparateFinalEpochThreshold = 0.80;
// BlendedMegatronDatasetConfig.mid_level_dataset_surplus (--mid-level-dataset-surplus).
constexpr double kMidLevelDatasetSurplus = 0.005;

struct GptIndices {
  int num_epochs = 0;
  bool separate_final_epoch = false;
  std::vector<int32_t> document_index;  // (num_epochs * documents): sequence ids
  std::vector<int64_t> sample_index;    // (samples + 1, 2): (position in document_index, offset)
  std::vector<int64_t> shuffle_index;   // (samples): permutation of [0, samples)
  int64_t num_samples() const { return static_cast<int64_t>(shuffle_index.size()); }
};

// numpy.sum(sequence_lengths[begin:end]).
int64_t tokens_per_epoch(std::span<const int32_t> sequence_lengths, size_t begin, size_t end);

// GPTDataset._get_num_epochs: the fewest epochs whose tokens cover
// num_samples * seq_length + 1. Precondition: tokens_per_epoch > 0.
int num_epochs(int64_t tokens_per_epoch, int64_t num_samples, int seq_length);

// _build_document_index: documents [begin, end) repeated num_epochs times and shuffled;
// with separate_final_epoch the first num_epochs - 1 epochs and the last one are shuffled
// apart (in that order, from the same stream).
std::vector<int32_t> build_document_index(size_t begin, size_t end, int num_epochs,
                                          NumpyRandomState& random_state,
                                          bool separate_final_epoch);

// helpers.cpp build_sample_idx with drop_last_partial_sequence = true:
// (num_epochs * tokens_per_epoch - 1) / seq_length samples, each starting where the previous
// one's last token (its final label) lies, so consecutive samples share exactly one token.
std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int32_t> document_index, int seq_length,
                                        int num_epochs, int64_t tokens_per_epoch);

// _build_shuffle_index: [0, num_samples) shuffled, then [num_samples, total_size) shuffled.
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size,
                                         NumpyRandomState& random_state);

// GPTDataset._build_document_sample_shuffle_indices: all three arrays from one
// RandomState(seed). Preconditions: seq_length > 1, tokens_per_epoch > 1, seed < 2**32.
GptIndices build_gpt_indices(std::span<const int32_t> sequence_lengths, size_t begin, size_t end,
                             int64_t num_samples, int seq_length, uint32_t seed);

// GPTDataset._query_document_sample_shuffle_indices for the sample at `position` of the
// sample index (after the shuffle mapping): seq_length + 1 tokens into `tokens`.
void gather_sample(const IndexedDataset& data, std::span<const int32_t> document_index,
                   std::span<const int64_t> sample_index, int64_t position, int seq_length,
                   int32_t* tokens);

// megatron.core.datasets.utils.normalize: numpy float64 w / numpy.sum(w) (numpy's pairwise
// summation, so the last bits agree too).
std::vector<double> normalize(std::span<const double> weights);

// helpers.cpp build_blending_indices: at step i every dataset's error is
// weight * max(i, 1) - samples taken so far; the largest error wins (the first on ties).
struct BlendingIndices {
  std::vector<int16_t> dataset_index;         // (size): which dataset
  std::vector<int64_t> dataset_sample_index;  // (size): which sample of it
};
BlendingIndices build_blending_indices(std::span<const double> weights, int64_t size);

// BlendedMegatronDatasetBuilder._get_size_per_split_per_dataset for one split:
// ceil(ceil(size * weight) * (1 + surplus)) per dataset.
std::vector<int64_t> size_per_dataset(std::span<const double> normalized_weights, int64_t size,
                                      double surplus);

}  // namespace lattice::gpt_index
