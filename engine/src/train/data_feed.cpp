#include "train/data_feed.h"

#include "data/batch_sampler.h"
#include "data/mock_data.h"

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
  GptDatasetOptions options;
  options.seq_length = mc.seq_length;
  options.seed = o.seed;
  options.cache_dir = o.data_cache_path;
  Result<DataSplits> splits = build_gpt_splits(*blend, o.split, int64_t{o.train_iters} * gb, valid,
                                               int64_t{o.eval_iters} * gb, options);
  if (!splits) return splits.status();
  if (!splits->train)
    return Status::invalid_argument("--split " + o.split + " leaves no documents for training");
  d.train = std::move(splits->train);
  d.valid = std::move(splits->valid);
  d.test = std::move(splits->test);
  return d;
}

Status fill_micro_batch(const SampleSource& source, int64_t consumed, int micro_index, int B,
                        int dp_size, int dp_rank, int vocab_size, std::vector<int32_t>& sample,
                        int32_t* inputs, int32_t* targets) {
  const int T = source.seq_length();
  for (int b = 0; b < B; b++) {
    const int64_t index = sample_index(consumed, B, dp_size, dp_rank, micro_index, b);
    source.sample(index % source.size(), sample.data());
    for (int t = 0; t <= T; t++)
      if (sample[t] < 0 || sample[t] >= vocab_size)
        return Status::invalid_argument(
            "sample " + std::to_string(index) + " holds token id " + std::to_string(sample[t]) +
            ", outside the model's vocabulary of " + std::to_string(vocab_size) +
            " (was the dataset made with another tokenizer?)");
    std::copy(sample.begin(), sample.begin() + T, inputs + static_cast<size_t>(b) * T);
    std::copy(sample.begin() + 1, sample.end(), targets + static_cast<size_t>(b) * T);
  }
  return Status::ok();
}


}  // namespace lattice
