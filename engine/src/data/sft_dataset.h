// Supervised fine-tuning data (--sft): Megatron's SFTDataset over Lattice's on-disk form of a
// chat corpus, a token dataset `{prefix}.bin/.idx` (one sequence per conversation) and its
// uint8 loss mask `{prefix}_loss_mask.bin/.idx` with identical sequence lengths (both written
// by `lattice data preprocess` from chat JSONL). Tokenisation and chat templates are not here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"

namespace lattice {

// The loss mask's prefix for a token dataset's prefix: `{prefix}_loss_mask`.
std::string loss_mask_prefix(const std::string& prefix);

struct SftDatasetOptions {
  int seq_length = 0;
  // --sft-packing: several conversations per sample (Note [SFT samples]); false: one.
  bool packing = false;
  int32_t pad_token_id = 0;  // fills a sample's tail; always masked, so only its id matters
};

// Note [SFT samples]: sample i of a split is its conversation (or pack) i mod count, in
// document order, as Megatron's SFTDataset reads `indices[idx % len(indices)]` without any
// shuffle; epochs repeat the split. A sample has seq_length + 1 tokens, like a GPT sample:
// - one conversation per sample: its first seq_length + 1 tokens (a longer one is truncated
//   on the right), the rest padded with pad_token_id and masked;
// - --sft-packing: consecutive conversations are packed greedily, in order, while the next
//   one fits in seq_length + 1 tokens (one longer than that gets a sample of its own,
//   truncated), then padded as above. The mask of each packed conversation's first token is
//   cleared, so no conversation's last token is trained to predict the next one's start, and
//   positions restart at 0 at each conversation: attention that lets query t see keys
//   [t - positions[t], t] never crosses a conversation (the packed-attention contract).
// Padding continues the last conversation's positions (Megatron's extend_with_padding).
// The targets of inputs x[0..T-1] are x[t+1] where loss_mask[t+1], else ignored
// (kernels::kIgnoreIndex).
//
// One split over conversations [doc_begin, doc_end) of `tokens` and `mask` (already checked to
// agree); size() is at least num_samples and at least one pass over the split.
Result<std::unique_ptr<SampleSource>> build_sft_dataset(
    std::shared_ptr<const IndexedDataset> tokens, std::shared_ptr<const IndexedDataset> mask,
    size_t doc_begin, size_t doc_end, int64_t num_samples, const SftDatasetOptions& options);

// --data-path [W1] P1 [W2 P2 ...] --split S for SFT: as build_gpt_splits (the same document
// splits, blend weights, per-prefix sizes and BlendedDataset), each prefix opened with its
// loss mask. Errors name the missing file, or the first conversation whose lengths differ.
Result<DataSplits> build_sft_splits(const std::vector<std::pair<double, std::string>>& blend,
                                    const std::string& split, int64_t train_samples,
                                    int64_t valid_samples, int64_t test_samples,
                                    const SftDatasetOptions& options);

}  // namespace lattice
