// Image-text samples (Note [image-text samples] in image_text_source.h) and --data-path with a
// vision model: each prefix opened as an ImageTextDataset, split and blended as for SFT.
#include "data/image_text_source.h"

#include <algorithm>
#include <cassert>
#include <climits>

#include "lattice/dropout_hash.h"

namespace lattice {

namespace {

class ImageTextSource final : public MaskedSampleSource {
 public:
  ImageTextSource(std::shared_ptr<const ImageTextDataset> data, size_t doc_begin, size_t doc_end,
                  int64_t num_samples, int images_per_sample, const ImageTextSourceOptions& o)
      : data_(std::move(data)),
        begin_(doc_begin),
        count_(doc_end - doc_begin),
        size_(std::max<int64_t>(num_samples, static_cast<int64_t>(count_))),
        images_(images_per_sample),
        options_(o) {}

  int64_t size() const override { return size_; }
  int seq_length() const override { return options_.seq_length; }
  void sample_with_mask(int64_t index, int32_t* tokens, uint8_t* loss_mask,
                        int32_t* positions) const override {
    const ImageTextDataset::Sample s = data_->text(document(index));
    const size_t length = static_cast<size_t>(options_.seq_length) + 1;
    const int32_t image_id = data_->image_token_id();
    size_t filled = 0;
    for (size_t t = 0; t < s.tokens.size() && filled < length; t++) {
      const bool image = s.tokens[t] == image_id;
      const size_t copies = image ? static_cast<size_t>(options_.patches) : 1;
      for (size_t c = 0; c < copies && filled < length; c++, filled++) {
        tokens[filled] = s.tokens[t];
        loss_mask[filled] = !image && s.loss_mask[t] != 0 ? 1 : 0;
      }
    }
    for (size_t t = filled; t < length; t++) {
      tokens[t] = options_.pad_token_id;
      loss_mask[t] = 0;
    }
    for (size_t t = 0; t < length; t++) positions[t] = static_cast<int32_t>(t);
  }
  Status check_sample(int64_t index) const override { return data_->check(document(index)); }
  int images_per_sample() const override { return images_; }
  int image_size() const override { return data_->image_size(); }
  std::array<float, 3> image_mean() const override { return data_->norm().mean; }
  std::array<float, 3> image_std() const override { return data_->norm().std; }
  void sample_images(int64_t index, float* images) const override {
    const size_t doc = document(index);
    const int S = data_->image_size();
    const size_t pixels = size_t(S) * S;
    const int n = data_->num_images(doc);
    assert(n <= images_);
    std::vector<uint8_t> hwc(pixels * 3);
    for (int k = 0; k < n; k++) {
      data_->read_image(doc, k, hwc.data());
      normalize_image(hwc.data(), S, data_->norm(), images + k * 3 * pixels);
    }
    std::fill(images + n * 3 * pixels, images + images_ * 3 * pixels, 0.0f);
  }

 private:
  size_t document(int64_t index) const {
    assert(0 <= index && index < size_);
    return begin_ + static_cast<size_t>(index) % count_;
  }

  std::shared_ptr<const ImageTextDataset> data_;
  size_t begin_, count_;  // the split's documents [begin_, begin_ + count_)
  int64_t size_;
  int images_;  // images_per_sample()
  ImageTextSourceOptions options_;
};

// Note in mock_image_text_source's header comment.
class MockImageTextSource final : public MaskedSampleSource {
 public:
  MockImageTextSource(uint64_t seed, const ImageTextSourceOptions& o)
      : seed_(seed),
        text_ids_(o.image_token_id - 1),
        colours_(std::min(6, text_ids_)),
        options_(o) {}

  int64_t size() const override { return INT64_MAX / 4; }
  int seq_length() const override { return options_.seq_length; }
  void sample_with_mask(int64_t index, int32_t* tokens, uint8_t* loss_mask,
                        int32_t* positions) const override {
    const int colour = this->colour(index);
    for (int t = 0; t <= options_.seq_length; t++) {
      const int j = t - options_.patches;  // the text token's place after the image
      tokens[t] = j < 0 ? options_.image_token_id : 1 + (colour + j) % text_ids_;
      loss_mask[t] = j < 0 ? 0 : 1;
      positions[t] = t;
    }
  }
  int images_per_sample() const override { return 1; }
  int image_size() const override { return options_.img_h; }
  void sample_images(int64_t index, float* images) const override {
    static constexpr uint8_t kPalette[6][3] = {{220, 40, 40},  {40, 180, 60},  {40, 80, 220},
                                               {230, 210, 40}, {140, 60, 180}, {240, 140, 30}};
    const int S = options_.img_h;
    std::vector<uint8_t> hwc(size_t(S) * S * 3);
    for (size_t p = 0; p < hwc.size(); p++) hwc[p] = kPalette[colour(index)][p % 3];
    normalize_image(hwc.data(), S, ImageNorm{}, images);
  }

 private:
  int colour(int64_t index) const {
    return static_cast<int>(kernels::dropout_hash(seed_, static_cast<uint64_t>(index)) %
                            static_cast<uint64_t>(colours_));
  }
  uint64_t seed_;
  int text_ids_;  // text ids 1..text_ids_ (0 unused)
  int colours_;
  ImageTextSourceOptions options_;
};

// The dataset at `prefix`, checked against the vision model's options.
Result<std::shared_ptr<const ImageTextDataset>> open_prefix(const std::string& prefix,
                                                            const ImageTextSourceOptions& o) {
  Result<std::unique_ptr<ImageTextDataset>> opened = ImageTextDataset::open(prefix);
  if (!opened) return opened.status();
  const ImageTextDataset& d = **opened;
  const std::string meta = prefix + kImagesSuffix + ".json";
  if (d.image_size() != o.img_h || d.image_size() != o.img_w)
    return Status::invalid_argument(
        "--img-h " + std::to_string(o.img_h) + " and --img-w " + std::to_string(o.img_w) +
        " must both equal the image_size " + std::to_string(d.image_size()) + " in " + meta +
        " (preprocess with --image-size " + std::to_string(o.img_h) + " or set both flags to " +
        std::to_string(d.image_size()) + ")");
  if (o.image_token_id >= 0 && d.image_token_id() != o.image_token_id)
    return Status::invalid_argument(
        meta + " has image_token_id " + std::to_string(d.image_token_id()) +
        " but the tokenizer's vocabulary size (the image id) is " +
        std::to_string(o.image_token_id) + "; was the dataset made with another tokenizer?");
  return std::shared_ptr<const ImageTextDataset>(std::move(*opened));
}

}  // namespace

Result<std::unique_ptr<SampleSource>> build_image_text_dataset(
    std::shared_ptr<const ImageTextDataset> data, size_t doc_begin, size_t doc_end,
    int64_t num_samples, int images_per_sample, const ImageTextSourceOptions& options) {
  if (options.seq_length < 1)
    return Status::invalid_argument("--seq-length " + std::to_string(options.seq_length) +
                                    " is too short for image-text samples");
  if (options.patches < 1)
    return Status::invalid_argument("the vision encoder has no patches (--img-h, --img-w and " +
                                    std::string("--patch-dim)"));
  if (doc_begin >= doc_end)
    return Status::invalid_argument("a split of the image-text dataset holds no samples");
  assert(images_per_sample >= data->max_images());
  return std::unique_ptr<SampleSource>(new ImageTextSource(
      std::move(data), doc_begin, doc_end, num_samples, images_per_sample, options));
}

Result<std::unique_ptr<SampleSource>> mock_image_text_source(uint64_t seed,
                                                             const ImageTextSourceOptions& o) {
  if (o.img_h != o.img_w || o.img_h < 1)
    return Status::invalid_argument(
        "--mock-data with a vision model draws square images: --img-h " + std::to_string(o.img_h) +
        " and --img-w " + std::to_string(o.img_w) + " must be equal");
  if (o.num_channels != 3)
    return Status::invalid_argument("--num-channels " + std::to_string(o.num_channels) +
                                    " must be 3 for --mock-data images (RGB)");
  if (o.image_token_id < 3)
    return Status::invalid_argument(
        "--vocab-size " + std::to_string(o.image_token_id) +
        " is too small for --mock-data with a vision model (at least 3)");
  if (o.seq_length < 1 || o.patches < 1)
    return Status::invalid_argument(
        "--seq-length and the vision encoder's patches must be positive");
  return std::unique_ptr<SampleSource>(new MockImageTextSource(seed, o));
}

Result<DataSplits> build_image_text_splits(const std::vector<std::pair<double, std::string>>& blend,
                                           const std::string& split, int64_t train_samples,
                                           int64_t valid_samples, int64_t test_samples,
                                           const ImageTextSourceOptions& options) {
  if (blend.empty()) return Status::invalid_argument("--data-path: no dataset given");
  if (options.num_channels != 3)
    return Status::invalid_argument("--num-channels " + std::to_string(options.num_channels) +
                                    " must be 3 to train on image-text data (its images are RGB)");
  std::vector<std::shared_ptr<const ImageTextDataset>> datasets;
  std::vector<std::vector<size_t>> bounds;  // per prefix: [0, a, b, n] over its documents
  int images_per_sample = 1;
  for (const auto& [weight, prefix] : blend) {
    auto opened = open_prefix(prefix, options);
    if (!opened) return opened.status();
    auto split_bounds = split_boundaries(split, (*opened)->size());
    if (!split_bounds) return split_bounds.status();
    bounds.push_back(std::move(*split_bounds));
    images_per_sample = std::max(images_per_sample, (*opened)->max_images());
    // One normalisation per run: the checkpoint records it for generation.
    if (!datasets.empty() && ((*opened)->norm().mean != datasets.front()->norm().mean ||
                              (*opened)->norm().std != datasets.front()->norm().std))
      return Status::invalid_argument(
          "--data-path: " + prefix + kImagesSuffix + ".json and " + blend.front().second +
          kImagesSuffix +
          ".json normalise images with different mean/std; blend datasets preprocessed with the "
          "same --image-mean and --image-std");
    datasets.push_back(std::move(*opened));
  }
  return build_blended_splits(blend, split, {train_samples, valid_samples, test_samples}, bounds,
                              [&](size_t k, size_t s, int64_t n) {
                                return build_image_text_dataset(datasets[k], bounds[k][s],
                                                                bounds[k][s + 1], n,
                                                                images_per_sample, options);
                              });
}

ImageTextSourceOptions image_text_options(const ModelConfig& m, const VisionConfig& v) {
  ImageTextSourceOptions o;
  o.seq_length = m.seq_length;
  o.patches = v.patches();
  o.img_h = v.img_h;
  o.img_w = v.img_w;
  o.num_channels = v.num_channels;
  o.image_token_id = m.vocab_size;  // Note [image-text tokens]
  return o;
}

}  // namespace lattice
