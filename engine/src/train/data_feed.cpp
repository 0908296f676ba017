#include "train/data_feed.h"

#include "data/batch_sampler.h"
#include "data/image_text_source.h"
#include "data/mock_data.h"
#include "data/sft_dataset.h"
#include "lattice/kernels.h"

namespace lattice {

namespace {

// --mock-data as a SampleSource: an endless stream.
class MockSource : public SampleSource {
 public:
  MockSource(uint64_t seed, int vocab_size, int seq_length)
      : data_(seed, vocab_size, seq_length), seq_length_(seq_length) {}
  int64_t size() const override { return INT64_MAX / 4; }
  int seq_length() const override { return seq_length_; }
  void sample(int64_t index, int32_t* tokens) const override { data_.sample(index, tokens); }

 private:
  mutable MockGptData data_;  // grows its document table lazily
  int seq_length_;
};

}  // namespace

Result<DataSources> open_data(const TrainOptions& o, const ModelConfig& mc) {
  DataSources d;
  const bool vision = !o.vision_model_type.empty();
  ImageTextSourceOptions image_text;
  if (vision) image_text = image_text_options(mc, o.vision_config());  // Note [image-text samples]
  if (o.mock_data && vision) {
    for (auto [source, seed] : {std::pair{&d.train, o.seed}, std::pair{&d.valid, o.seed + 1}}) {
      Result<std::unique_ptr<SampleSource>> made = mock_image_text_source(seed, image_text);
      if (!made) return made.status();
      *source = std::move(*made);
    }
    return d;
  }
  if (o.mock_data) {
    d.train = std::make_unique<MockSource>(o.seed, mc.vocab_size, mc.seq_length);
    // Held-out mock samples: another seed's stream.
    d.valid = std::make_unique<MockSource>(o.seed + 1, mc.vocab_size, mc.seq_length);
    return d;
  }
  Result<std::vector<std::pair<double, std::string>>> blend = o.data_blend();
  if (!blend) return blend.status();
  const int64_t gb = o.global_batch_size;
  const int64_t valid = (o.train_iters / o.eval_interval + 1) * int64_t{o.eval_iters} * gb;
  auto build = [&]() -> Result<DataSplits> {
    const int64_t train = int64_t{o.train_iters} * gb, test = int64_t{o.eval_iters} * gb;
    if (vision) return build_image_text_splits(*blend, o.split, train, valid, test, image_text);
    if (o.sft) {
      SftDatasetOptions options;
      options.seq_length = mc.seq_length;
      options.packing = o.sft_packing;
      return build_sft_splits(*blend, o.split, train, valid, test, options);
    }
    GptDatasetOptions options;
    options.seq_length = mc.seq_length;
    options.seed = o.seed;
    options.cache_dir = o.data_cache_path;
    return build_gpt_splits(*blend, o.split, train, valid, test, options);
  };
  Result<DataSplits> splits = build();
  if (!splits) return splits.status();
  if (!splits->train)
    return Status::invalid_argument("--split " + o.split + " leaves no documents for training");
  d.train = std::move(splits->train);
  d.valid = std::move(splits->valid);
  d.test = std::move(splits->test);
  return d;
}

namespace {

// The index of sample b of micro-batch `micro_index` of rank dp_rank's slice of the global
// batch at `consumed` (data/batch_sampler.h), wrapped into the source: the one choice of
// samples fill_micro_batch, fill_micro_batch_images and count_targets share.
int64_t micro_batch_sample(const SampleSource& source, int64_t consumed, int micro_index, int B,
                           int dp_size, int dp_rank, int b) {
  return sample_index(consumed, B, dp_size, dp_rank, micro_index, b) % source.size();
}

// Sample `index` into sample (T + 1), its loss mask and positions (T + 1) when the source has
// them; false where it has none.
bool read_sample(const SampleSource& source, int64_t index, std::vector<int32_t>& sample,
                 std::vector<uint8_t>& mask, std::vector<int32_t>& positions) {
  const size_t n = static_cast<size_t>(source.seq_length()) + 1;
  if (!source.has_loss_mask()) {
    source.sample(index, sample.data());
    return false;
  }
  mask.resize(n);
  positions.resize(n);
  source.sample_with_mask(index, sample.data(), mask.data(), positions.data());
  return true;
}

}  // namespace

Status fill_micro_batch(const SampleSource& source, int64_t consumed, int micro_index, int B,
                        int dp_size, int dp_rank, int vocab_size, std::vector<int32_t>& sample,
                        int32_t* inputs, int32_t* targets, int32_t* positions) {
  const int T = source.seq_length();
  // Image-text samples also hold the image id, the tokenizer's vocabulary size (Note
  // [image-text tokens]), which the model never looks up in its embedding.
  const int64_t limit = int64_t{vocab_size} + (source.images_per_sample() > 0 ? 1 : 0);
  std::vector<uint8_t> mask;
  std::vector<int32_t> pos;
  for (int b = 0; b < B; b++) {
    const int64_t index = micro_batch_sample(source, consumed, micro_index, B, dp_size, dp_rank, b);
    if (Status s = source.check_sample(index); !s) return s;
    const bool masked = read_sample(source, index, sample, mask, pos);
    for (int t = 0; t <= T; t++)
      if (sample[t] < 0 || sample[t] >= limit)
        return Status::invalid_argument(
            "sample " + std::to_string(index) + " holds token id " + std::to_string(sample[t]) +
            ", outside the model's vocabulary of " + std::to_string(vocab_size) +
            " (was the dataset made with another tokenizer?)");
    const size_t row = static_cast<size_t>(b) * T;
    if (inputs) std::copy(sample.begin(), sample.begin() + T, inputs + row);
    if (targets) {
      std::copy(sample.begin() + 1, sample.end(), targets + row);
      if (masked)
        for (int t = 0; t < T; t++)
          if (!mask[t + 1]) targets[row + t] = kernels::kIgnoreIndex;
    }
    if (positions)
      for (int t = 0; t < T; t++) positions[row + t] = masked ? pos[t] : t;
  }
  return Status::ok();
}

Status fill_micro_batch_images(const SampleSource& source, int64_t consumed, int micro_index, int B,
                               int dp_size, int dp_rank, float* images) {
  const int n = source.images_per_sample(), S = source.image_size();
  if (n <= 0)
    return Status::invalid_argument("the training data has no images for the vision encoder");
  const size_t per_sample = size_t(n) * 3 * S * S;
  for (int b = 0; b < B; b++)
    source.sample_images(micro_batch_sample(source, consumed, micro_index, B, dp_size, dp_rank, b),
                         images + b * per_sample);
  return Status::ok();
}

int64_t count_targets(const SampleSource& source, int64_t consumed, int micro_batches, int B,
                      int dp_size, int dp_rank) {
  const int T = source.seq_length();
  if (!source.has_loss_mask()) return int64_t{micro_batches} * B * T;
  std::vector<int32_t> sample(static_cast<size_t>(T) + 1), pos;
  std::vector<uint8_t> mask;
  int64_t count = 0;
  for (int m = 0; m < micro_batches; m++)
    for (int b = 0; b < B; b++) {
      read_sample(source, micro_batch_sample(source, consumed, m, B, dp_size, dp_rank, b), sample,
                  mask, pos);
      for (int t = 1; t <= T; t++) count += mask[t] ? 1 : 0;
    }
  return count;
}

}  // namespace lattice
