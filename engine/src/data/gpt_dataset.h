// Megatron-core's GPTDataset and BlendedDataset: which tokens make up training sample i.
// Documents are shuffled per epoch, packed into samples of seq_length + 1 tokens across
// document boundaries, and the sample order shuffled, all from the seed with numpy's legacy
// RandomState algorithm, so that the same data, seed and flags give Megatron's sample order.
// The index arrays are cached on disk, keyed by a hash of everything they depend on.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/indexed_dataset.h"
#include "lattice/status.h"
#include "lattice/vision_config.h"

namespace lattice {

// Anything that yields samples of seq_length + 1 tokens by index.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  virtual int seq_length() const = 0;
  // tokens (seq_length + 1) of sample `index`, 0 <= index < size().
  virtual void sample(int64_t index, int32_t* tokens) const = 0;
  // True for a source whose samples carry a loss mask and per-token positions (SFT,
  // sft_dataset.h); pretraining sources have neither (every next token is a target, positions
  // 0..seq_length-1).
  virtual bool has_loss_mask() const { return false; }
  // Sample `index` with its loss mask and positions, each (seq_length + 1) like tokens:
  // loss_mask[t] = 1 where token t is a loss target (the target of input t - 1), positions[t] =
  // token t's position within its document (0 at each document's first token). Only where
  // has_loss_mask(); the default (never called) gives an all-ones mask and 0..seq_length.
  virtual void sample_with_mask(int64_t index, int32_t* tokens, uint8_t* loss_mask,
                                int32_t* positions) const;
  // Sample `index`'s consistency checks that opening the data leaves to the read (an image-text
  // document's placeholders and images agree, ImageTextDataset::check); fill_micro_batch calls it
  // for every sample it reads. Errors name the file and the sample.
  virtual Status check_sample(int64_t /*index*/) const { return Status::ok(); }
  // Vision-language sources: how many images each sample carries at most (the encoder's batch
  // per sequence); 0 for text sources.
  virtual int images_per_sample() const { return 0; }
  // The side S of their square images, in pixels; 0 for text sources.
  virtual int image_size() const { return 0; }
  // The per-channel mean and std sample_images normalised with (RGB, on pixel / 255; CLIP's
  // unless the dataset says otherwise): what a checkpoint records for generation
  // (VisionConfig::image_mean, image_std).
  virtual std::array<float, 3> image_mean() const { return kClipImageMean; }
  virtual std::array<float, 3> image_std() const { return kClipImageStd; }
  // Sample `index`'s images, normalised float CHW, (images_per_sample(), 3, S, S); slots past
  // the sample's own images zero. Only where images_per_sample() > 0 (the default aborts).
  virtual void sample_images(int64_t index, float* images) const;
};

// A source whose samples carry a loss mask and positions (SFT, image-text): sample() gives
// sample_with_mask()'s tokens.
class MaskedSampleSource : public SampleSource {
 public:
  bool has_loss_mask() const override { return true; }
  void sample(int64_t index, int32_t* tokens) const override;
  void sample_with_mask(int64_t index, int32_t* tokens, uint8_t* loss_mask,
                        int32_t* positions) const override = 0;
};

struct GptDatasetOptions {
  int seq_length = 0;
  uint64_t seed = 1234;   // --seed
  std::string cache_dir;  // --data-cache-path; empty: `{dirname(prefix)}/cache`
};

// One split (documents [doc_begin, doc_end) of `data`) of at least `num_samples` samples.
// `split_name` ("train", "valid", "test") enters the cache key and file names.
// "Documents" are the dataset's sequences, as Megatron-core splits them (identical unless
// the data was preprocessed with --split-sentences). Prints one line to stderr saying
// whether the indices were loaded from the cache, built and saved, or built in memory.
Result<std::unique_ptr<SampleSource>> build_gpt_dataset(std::shared_ptr<const IndexedDataset> data,
                                                        size_t doc_begin, size_t doc_end,
                                                        int64_t num_samples,
                                                        const std::string& split_name,
                                                        const GptDatasetOptions& options);

// Megatron's BlendedDataset: `num_samples` samples drawn from `sources` so that after every
// prefix the share of each source is as close as possible to its normalised weight.
Result<std::unique_ptr<SampleSource>> blend_datasets(
    std::vector<std::pair<double, std::unique_ptr<SampleSource>>> sources, int64_t num_samples);

// --split "969,30,1" -> document boundaries [0, a, b, n] for train / valid / test, computed as
// Megatron's get_split_indices. Errors name the flag.
Result<std::vector<size_t>> split_boundaries(const std::string& split, size_t num_documents);

struct DataSplits {
  std::unique_ptr<SampleSource> train, valid, test;  // null where that split is empty
};

// The whole of --data-path [W1] P1 [W2 P2 ...] --split S: each prefix is split, each split
// built as a GPTDataset, and blended by weight when there are several prefixes (as current
// Megatron-core sizes them: each prefix serves ceil(weight * n) samples and is built with
// ceil(ceil(weight * n) * 1.005); the blend has the sum of the former). A single prefix is
// built as Megatron builds an unweighted `--data-path P`; its weight is ignored.
// The names of the three splits, in DataSplits order.
inline constexpr std::array<const char*, 3> kSplitNames = {"train", "valid", "test"};

// Split s (0 train, 1 valid, 2 test) of prefix k holding at least n samples.
using SplitBuilder =
    std::function<Result<std::unique_ptr<SampleSource>>(size_t k, size_t s, int64_t n)>;

// What build_gpt_splits does once the prefixes are open and `bounds[k]` = [0, a, b, n] holds
// prefix k's document boundaries: one prefix builds each non-empty split with exactly the
// samples asked for; several blend each split by weight. Shared by the GPT, SFT and
// image-text datasets.
Result<DataSplits> build_blended_splits(const std::vector<std::pair<double, std::string>>& blend,
                                        const std::string& split,
                                        const std::array<int64_t, 3>& samples,
                                        const std::vector<std::vector<size_t>>& bounds,
                                        const SplitBuilder& build);

Result<DataSplits> build_gpt_splits(const std::vector<std::pair<double, std::string>>& blend,
                                    const std::string& split, int64_t train_samples,
                                    int64_t valid_samples, int64_t test_samples,
                                    const GptDatasetOptions& options);

}  // namespace lattice
