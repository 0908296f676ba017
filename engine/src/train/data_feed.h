// The training loop's data: the train / valid / test sample streams a run reads (mock data, or
// GPT, SFT or image-text datasets over indexed files), and the micro-batches (with their images
// for a vision model) each data-parallel rank takes.
#pragma once

#include <cstdint>
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
// data/batch_sampler.h); checks every id against the vocabulary: 0 <= id < vocab_size, the
// tokenizer's, or id == vocab_size (the image id) for an image-text source, and runs the
// source's own checks of each sample (SampleSource::check_sample). With a source that has
// a loss mask (SFT), targets[t] = loss_mask[t + 1] ? x[t + 1] : kernels::kIgnoreIndex. positions
// (B, T), when non-null, receives each input token's position within its document
// (SampleSource::sample_with_mask; 0..T-1 for pretraining sources) for packed attention.
// inputs or targets may be null (a middle pipeline stage needs only the positions).
Status fill_micro_batch(const SampleSource& source, int64_t consumed, int micro_index, int B,
                        int dp_size, int dp_rank, int vocab_size, std::vector<int32_t>& sample,
                        int32_t* inputs, int32_t* targets, int32_t* positions = nullptr);

// Fills images (B * images_per_sample, 3, S, S) with the images of exactly the samples
// fill_micro_batch puts in the same micro-batch, in the same order, normalised float CHW
// (SampleSource::sample_images; a sample's unused slots zero). S = source.image_size(). Fails
// for a source without images.
Status fill_micro_batch_images(const SampleSource& source, int64_t consumed, int micro_index, int B,
                               int dp_size, int dp_rank, float* images);

// The number of loss targets (targets that are not ignored) in data-parallel rank `dp_rank`'s
// `micro_batches` micro-batches of the global batch at `consumed`: B * T per micro-batch for a
// source without a loss mask. Summed over the data-parallel group it is the global batch's,
// the denominator of the SFT loss (Note [SFT loss normalisation] in trainer.cpp).
int64_t count_targets(const SampleSource& source, int64_t consumed, int micro_batches, int B,
                      int dp_size, int dp_rank);

}  // namespace lattice
