// GPTDataset and BlendedDataset as SampleSources, and --split. The index arithmetic is in
// gpt_indices.cpp, the on-disk cache in index_cache.cpp, --data-path in gpt_splits.cpp.
#include "data/gpt_dataset.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "data/gpt_indices.h"
#include "data/index_cache.h"

namespace lattice {

void SampleSource::sample_with_mask(int64_t index, int32_t* tokens, uint8_t* loss_mask,
                                    int32_t* positions) const {
  sample(index, tokens);
  for (int t = 0; t <= seq_length(); t++) loss_mask[t] = 1, positions[t] = t;
}

void MaskedSampleSource::sample(int64_t index, int32_t* tokens) const {
  std::vector<uint8_t> mask(static_cast<size_t>(seq_length()) + 1);
  std::vector<int32_t> positions(mask.size());
  sample_with_mask(index, tokens, mask.data(), positions.data());
}

void SampleSource::sample_images(int64_t, float*) const {
  assert(false && "sample_images: the source has no images");
  std::abort();
}

namespace {

// Megatron-core GPTDataset: sample i is sample_index entry shuffle_index[i] (gpt_dataset.py
// GPTDataset.__getitem__ / _query_document_sample_shuffle_indices).
class GptDataset final : public SampleSource {
 public:
  GptDataset(std::shared_ptr<const IndexedDataset> data, gpt_index::GptIndices indices,
             int seq_length)
      : data_(std::move(data)), indices_(std::move(indices)), seq_length_(seq_length) {}

  // Megatron's __len__: every sample the index holds, which is at least the number asked for.
  int64_t size() const override { return indices_.num_samples(); }
  int seq_length() const override { return seq_length_; }
  void sample(int64_t index, int32_t* tokens) const override {
    assert(0 <= index && index < size());
    gpt_index::gather_sample(*data_, indices_.document_index, indices_.sample_index,
                             indices_.shuffle_index[static_cast<size_t>(index)], seq_length_,
                             tokens);
  }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  gpt_index::GptIndices indices_;
  int seq_length_;
};

// Megatron-core BlendedDataset (blended_dataset.py): sample i is sample
// dataset_sample_index[i] of dataset dataset_index[i].
class BlendedDataset final : public SampleSource {
 public:
  BlendedDataset(std::vector<std::unique_ptr<SampleSource>> sources,
                 gpt_index::BlendingIndices indices)
      : sources_(std::move(sources)), indices_(std::move(indices)) {}

  int64_t size() const override { return static_cast<int64_t>(indices_.dataset_index.size()); }
  int seq_length() const override { return sources_.front()->seq_length(); }
  void sample(int64_t index, int32_t* tokens) const override {
    assert(0 <= index && index < size());
    const auto i = static_cast<size_t>(index);
    sources_[static_cast<size_t>(indices_.dataset_index[i])]->sample(
        indices_.dataset_sample_index[i], tokens);
  }
  // SFT blends: every member is an SFT source (build_sft_splits blends only those).
  bool has_loss_mask() const override { return sources_.front()->has_loss_mask(); }
  void sample_with_mask(int64_t index, int32_t* tokens, uint8_t* loss_mask,
                        int32_t* positions) const override {
    assert(0 <= index && index < size());
    const auto i = static_cast<size_t>(index);
    sources_[static_cast<size_t>(indices_.dataset_index[i])]->sample_with_mask(
        indices_.dataset_sample_index[i], tokens, loss_mask, positions);
  }
  Status check_sample(int64_t index) const override {
    assert(0 <= index && index < size());
    const auto i = static_cast<size_t>(index);
    return sources_[static_cast<size_t>(indices_.dataset_index[i])]->check_sample(
        indices_.dataset_sample_index[i]);
  }
  // Image-text blends: as many image slots as the member with the most; a member fills its
  // own slots, the rest stay zero.
  int images_per_sample() const override {
    int most = 0;
    for (const auto& s : sources_) most = std::max(most, s->images_per_sample());
    return most;
  }
  int image_size() const override { return sources_.front()->image_size(); }
  // One normalisation for the blend (build_image_text_splits refuses members that differ).
  std::array<float, 3> image_mean() const override { return sources_.front()->image_mean(); }
  std::array<float, 3> image_std() const override { return sources_.front()->image_std(); }
  void sample_images(int64_t index, float* images) const override {
    assert(0 <= index && index < size());
    const auto i = static_cast<size_t>(index);
    const SampleSource& member = *sources_[static_cast<size_t>(indices_.dataset_index[i])];
    const size_t image = size_t{3} * image_size() * image_size();
    std::fill(images + member.images_per_sample() * image, images + images_per_sample() * image,
              0.0f);
    member.sample_images(indices_.dataset_sample_index[i], images);
  }

 private:
  std::vector<std::unique_ptr<SampleSource>> sources_;
  gpt_index::BlendingIndices indices_;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Digits with at most one decimal point, at least one digit: what Megatron's split regex
// [.0-9]+ reads as a weight, minus the strings float() would refuse.
bool parse_weight(std::string_view field, double* value) {
  int digits = 0;
  int points = 0;
  for (const char c : field) {
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c == '.') {
      ++points;
    } else {
      return false;
    }
  }
  if (digits == 0 || points > 1) return false;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), *value);
  return ec == std::errc() && end == field.data() + field.size();
}

}  // namespace

Result<std::vector<size_t>> split_boundaries(const std::string& split, size_t num_documents) {
  const auto fail = [&](const std::string& why) {
    return Status::invalid_argument("--split \"" + split + "\": " + why +
                                    "; give up to three non-negative weights for train, "
                                    "valid and test, such as 969,30,1");
  };
  // parse_and_normalize_split (blended_megatron_dataset_config.py), stricter about what a
  // weight is: Megatron's regex would read "-1" as 1 and "a,b" as no split at all.
  std::vector<double> weights;
  std::string_view rest = split;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view field = trim(rest.substr(0, comma));
    double weight = 0.0;
    if (!parse_weight(field, &weight)) {
      // (appended, not "\"" + std::string(field): GCC 12 -Wrestrict false positive)
      std::string why = "\"";
      why.append(field);
      return fail(why.append("\" is not a non-negative number"));
    }
    weights.push_back(weight);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (weights.size() > 3) return fail(std::to_string(weights.size()) + " weights given");
  weights.resize(3, 0.0);
  if (weights[0] + weights[1] + weights[2] <= 0.0) return fail("the weights sum to zero");
  const std::vector<double> normalized = gpt_index::normalize(weights);
  // convert_split_vector_to_split_matrix accumulates the weights from 0;
  // _build_megatron_dataset_splits takes int(round(bookend * n)), and Python rounds half to
  // even, as nearbyint does in the default rounding mode.
  std::vector<size_t> bounds{0};
  double cumulative = 0.0;
  for (const double w : normalized) {
    cumulative = cumulative + w;
    bounds.push_back(
        static_cast<size_t>(std::nearbyint(cumulative * static_cast<double>(num_documents))));
  }
  return bounds;
}

Result<std::unique_ptr<SampleSource>> build_gpt_dataset(std::shared_ptr<const IndexedDataset> data,
                                                        size_t doc_begin, size_t doc_end,
                                                        int64_t num_samples,
                                                        const std::string& split_name,
                                                        const GptDatasetOptions& options) {
  assert(data != nullptr);
  const std::string where = "the " + split_name + " split of " + data->prefix() + " (sequences [" +
                            std::to_string(doc_begin) + ", " + std::to_string(doc_end) + "))";
  if (doc_begin > doc_end || doc_end > data->num_sequences()) {
    return Status::invalid_argument(where + " lies outside the dataset's " +
                                    std::to_string(data->num_sequences()) + " sequences");
  }
  if (doc_end > static_cast<size_t>(INT32_MAX)) {  // Megatron's document index is int32
    return Status::invalid_argument(where +
                                    ": sequence ids above 2**31 - 1 do not fit "
                                    "GPTDataset's int32 document index");
  }
  if (options.seq_length < 2) {
    return Status::invalid_argument("--seq-length " + std::to_string(options.seq_length) +
                                    " is too short: GPTDataset needs at least 2");
  }
  if (options.seed > 0xffffffffULL) {
    return Status::invalid_argument(
        "--seed " + std::to_string(options.seed) +
        " is out of range: the data order comes from numpy.random.RandomState(seed) as in "
        "Megatron, which takes seeds from 0 to 4294967295");
  }
  if (num_samples < 0) {
    return Status::invalid_argument(where + ": " + std::to_string(num_samples) +
                                    " samples requested");
  }
  const int64_t tokens = gpt_index::tokens_per_epoch(data->sequence_lengths(), doc_begin, doc_end);
  if (tokens < 2) {
    return Status::invalid_argument(where + " holds " + std::to_string(tokens) +
                                    " tokens, too few for a sample; check --split and the data");
  }
  LoadedGptIndices loaded =
      load_or_build_gpt_indices(*data, doc_begin, doc_end, num_samples, split_name, options);
  std::fprintf(stderr, "lattice: %s\n", loaded.note.c_str());
  return std::unique_ptr<SampleSource>(
      new GptDataset(std::move(data), std::move(loaded.indices), options.seq_length));
}

Result<std::unique_ptr<SampleSource>> blend_datasets(
    std::vector<std::pair<double, std::unique_ptr<SampleSource>>> sources, int64_t num_samples) {
  if (sources.empty()) return Status::invalid_argument("--data-path: no dataset to blend");
  // BlendedDataset asserts len(datasets) < 32767 (its dataset index is int16).
  if (sources.size() >= 32767) {
    return Status::invalid_argument("--data-path names " + std::to_string(sources.size()) +
                                    " datasets; a blend takes at most 32766");
  }
  if (num_samples < 0) {
    return Status::invalid_argument("a blend of " + std::to_string(num_samples) + " samples");
  }
  std::vector<double> weights;
  double sum = 0.0;
  for (size_t k = 0; k < sources.size(); ++k) {
    const double w = sources[k].first;
    assert(sources[k].second != nullptr);
    if (!std::isfinite(w) || w < 0.0) {
      return Status::invalid_argument("--data-path: weight " + std::to_string(w) + " of dataset " +
                                      std::to_string(k + 1) + " is not a non-negative number");
    }
    if (sources[k].second->seq_length() != sources[0].second->seq_length()) {
      return Status::invalid_argument("a blend of datasets with different sequence lengths");
    }
    weights.push_back(w);
    sum += w;
  }
  if (sum <= 0.0) return Status::invalid_argument("--data-path: the weights sum to zero");
  // BlendedDataset.__init__ normalises (again, after the builder: "redundant normalization
  // for bitwise identical comparison with Megatron-LM").
  const std::vector<double> normalized = gpt_index::normalize(weights);
  gpt_index::BlendingIndices indices = gpt_index::build_blending_indices(normalized, num_samples);
  std::vector<int64_t> drawn(sources.size(), 0);
  for (const int16_t d : indices.dataset_index) ++drawn[static_cast<size_t>(d)];
  std::vector<std::unique_ptr<SampleSource>> owned;
  for (size_t k = 0; k < sources.size(); ++k) {
    if (drawn[k] > sources[k].second->size()) {
      return Status::invalid_argument(
          "the blend of " + std::to_string(num_samples) + " samples draws " +
          std::to_string(drawn[k]) + " from dataset " + std::to_string(k + 1) +
          ", which has only " + std::to_string(sources[k].second->size()));
    }
    owned.push_back(std::move(sources[k].second));
  }
  return std::unique_ptr<SampleSource>(new BlendedDataset(std::move(owned), std::move(indices)));
}

}  // namespace lattice
