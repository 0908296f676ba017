// SFT samples (Note [SFT samples] in sft_dataset.h) and --data-path for --sft: each prefix's
// token dataset opened with its loss mask, split and blended as build_gpt_splits does.
#include "data/sft_dataset.h"

#include <algorithm>
#include <cassert>
#include <filesystem>
#include <span>

namespace lattice {

std::string loss_mask_prefix(const std::string& prefix) {
  return prefix + "_loss_mask";
}

namespace {

class SftDataset final : public MaskedSampleSource {
 public:
  SftDataset(std::shared_ptr<const IndexedDataset> tokens,
             std::shared_ptr<const IndexedDataset> mask, std::vector<size_t> pack_starts,
             int64_t num_samples, const SftDatasetOptions& options)
      : tokens_(std::move(tokens)),
        mask_(std::move(mask)),
        starts_(std::move(pack_starts)),
        size_(std::max<int64_t>(num_samples, static_cast<int64_t>(starts_.size() - 1))),
        options_(options) {}

  int64_t size() const override { return size_; }
  int seq_length() const override { return options_.seq_length; }
  void sample_with_mask(int64_t index, int32_t* tokens, uint8_t* loss_mask,
                        int32_t* positions) const override {
    assert(0 <= index && index < size_);
    const size_t packs = starts_.size() - 1;
    const size_t p = static_cast<size_t>(index) % packs;
    const size_t length = static_cast<size_t>(options_.seq_length) + 1;
    std::vector<int32_t> mask_ids;
    size_t filled = 0;
    for (size_t doc = starts_[p]; doc < starts_[p + 1] && filled < length; doc++) {
      const size_t n =
          std::min(length - filled, static_cast<size_t>(tokens_->sequence_lengths()[doc]));
      tokens_->read(doc, 0, n, tokens + filled);
      mask_ids.resize(n);
      mask_->read(doc, 0, n, mask_ids.data());
      for (size_t t = 0; t < n; t++) {
        loss_mask[filled + t] = mask_ids[t] != 0 ? 1 : 0;
        positions[filled + t] = static_cast<int32_t>(t);
      }
      // A packed conversation's first token is no target of the one before it.
      if (filled > 0) loss_mask[filled] = 0;
      filled += n;
    }
    for (size_t t = filled; t < length; t++) {
      tokens[t] = options_.pad_token_id;
      loss_mask[t] = 0;
      positions[t] = t > 0 ? positions[t - 1] + 1 : 0;
    }
  }

 private:
  std::shared_ptr<const IndexedDataset> tokens_, mask_;
  std::vector<size_t> starts_;  // (packs + 1) first conversation of each sample, then doc_end
  int64_t size_;
  SftDatasetOptions options_;
};

// The first conversation of every sample over [begin, end), then end (Note [SFT samples]).
std::vector<size_t> pack_starts(std::span<const int32_t> lengths, size_t begin, size_t end,
                                int seq_length, bool packing) {
  std::vector<size_t> starts;
  const int64_t capacity = int64_t{seq_length} + 1;
  int64_t filled = 0;
  for (size_t doc = begin; doc < end; doc++) {
    const int64_t n = std::min<int64_t>(lengths[doc], capacity);
    if (!packing || starts.empty() || filled + n > capacity) {
      starts.push_back(doc);
      filled = 0;
    }
    filled += n;
  }
  starts.push_back(end);
  return starts;
}

struct SftPrefix {
  std::shared_ptr<const IndexedDataset> tokens, mask;
};

Result<SftPrefix> open_sft_prefix(const std::string& prefix) {
  auto tokens = IndexedDataset::open(prefix);
  if (!tokens) return tokens.status();
  const std::string mask_prefix = loss_mask_prefix(prefix);
  for (const char* ext : {".idx", ".bin"})
    if (!std::filesystem::exists(mask_prefix + ext))
      return Status::invalid_argument(
          "--sft: " + mask_prefix + ext + " is missing; an SFT dataset needs the loss mask that " +
          "`lattice data preprocess` writes beside " + prefix + ".bin/.idx when it renders chat " +
          "JSONL with a chat template");
  auto mask = IndexedDataset::open(mask_prefix);
  if (!mask) return mask.status();
  const auto a = (*tokens)->sequence_lengths(), b = (*mask)->sequence_lengths();
  if (a.size() != b.size())
    return Status::invalid_argument("--sft: " + mask_prefix + " holds " + std::to_string(b.size()) +
                                    " conversations, " + prefix + " holds " +
                                    std::to_string(a.size()));
  for (size_t i = 0; i < a.size(); i++)
    if (a[i] != b[i])
      return Status::invalid_argument("--sft: conversation " + std::to_string(i) + " of " + prefix +
                                      " has " + std::to_string(a[i]) +
                                      " tokens but its loss mask in " + mask_prefix + " has " +
                                      std::to_string(b[i]));
  return SftPrefix{std::move(*tokens), std::move(*mask)};
}

}  // namespace

Result<std::unique_ptr<SampleSource>> build_sft_dataset(
    std::shared_ptr<const IndexedDataset> tokens, std::shared_ptr<const IndexedDataset> mask,
    size_t doc_begin, size_t doc_end, int64_t num_samples, const SftDatasetOptions& options) {
  if (options.seq_length < 1)
    return Status::invalid_argument("--seq-length " + std::to_string(options.seq_length) +
                                    " is too short for SFT samples");
  if (doc_begin >= doc_end)
    return Status::invalid_argument("--sft: a split of " + tokens->prefix() +
                                    " holds no conversations");
  std::vector<size_t> starts = pack_starts(tokens->sequence_lengths(), doc_begin, doc_end,
                                           options.seq_length, options.packing);
  return std::unique_ptr<SampleSource>(
      new SftDataset(std::move(tokens), std::move(mask), std::move(starts), num_samples, options));
}

Result<DataSplits> build_sft_splits(const std::vector<std::pair<double, std::string>>& blend,
                                    const std::string& split, int64_t train_samples,
                                    int64_t valid_samples, int64_t test_samples,
                                    const SftDatasetOptions& options) {
  if (blend.empty()) return Status::invalid_argument("--data-path: no dataset given");
  std::vector<SftPrefix> prefixes;
  std::vector<std::vector<size_t>> bounds;  // per prefix: [0, a, b, n] over its conversations
  for (const auto& [weight, prefix] : blend) {
    auto opened = open_sft_prefix(prefix);
    if (!opened) return opened.status();
    auto split_bounds = split_boundaries(split, opened->tokens->num_sequences());
    if (!split_bounds) return split_bounds.status();
    bounds.push_back(std::move(*split_bounds));
    prefixes.push_back(std::move(*opened));
  }
  return build_blended_splits(blend, split, {train_samples, valid_samples, test_samples}, bounds,
                              [&](size_t k, size_t s, int64_t n) {
                                return build_sft_dataset(prefixes[k].tokens, prefixes[k].mask,
                                                         bounds[k][s], bounds[k][s + 1], n,
                                                         options);
                              });
}

}  // namespace lattice
