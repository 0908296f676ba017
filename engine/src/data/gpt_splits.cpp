// --data-path [W1] P1 [W2 P2 ...] --split S as Megatron-core's BlendedMegatronDatasetBuilder
// builds it (blended_megatron_dataset_builder.py _build_blended_dataset_splits): every
// prefix split by --split; one prefix gives plain GPTDatasets, several give BlendedDatasets
// over per-prefix GPTDatasets sized with Megatron's surplus.
#include <array>
#include <cassert>

#include "data/gpt_dataset.h"
#include "data/gpt_indices.h"

namespace lattice {

Result<DataSplits> build_blended_splits(const std::vector<std::pair<double, std::string>>& blend,
                                        const std::string& split,
                                        const std::array<int64_t, 3>& samples,
                                        const std::vector<std::vector<size_t>>& bounds,
                                        const SplitBuilder& build) {
  assert(bounds.size() == blend.size());
  std::array<std::unique_ptr<SampleSource>, 3> out;
  if (blend.size() == 1) {
    // One prefix is built as Megatron builds `--data-path P` (no weight): the split's
    // dataset with exactly the samples asked for; an empty split stays null.
    for (size_t s = 0; s < 3; ++s) {
      if (bounds[0][s] == bounds[0][s + 1]) continue;
      auto built = build(0, s, samples[s]);
      if (!built) return built.status();
      out[s] = std::move(*built);
    }
    return DataSplits{std::move(out[0]), std::move(out[1]), std::move(out[2])};
  }
  std::vector<double> raw_weights;
  for (const auto& entry : blend) {
    if (!(entry.first > 0.0)) {
      return Status::invalid_argument("--data-path: weight " + std::to_string(entry.first) +
                                      " of " + entry.second + " is not positive");
    }
    raw_weights.push_back(entry.first);
  }
  const std::vector<double> weights = gpt_index::normalize(raw_weights);
  for (size_t s = 0; s < 3; ++s) {
    if (samples[s] == 0) continue;
    // _get_size_per_split_per_dataset: each prefix serves ceil(n * w) samples of the blend
    // and is built with (1 + surplus) times that; the blend has their sum.
    const std::vector<int64_t> target = gpt_index::size_per_dataset(weights, samples[s], 0.0);
    const std::vector<int64_t> buffer =
        gpt_index::size_per_dataset(weights, samples[s], gpt_index::kMidLevelDatasetSurplus);
    size_t empty = 0;
    for (size_t k = 0; k < blend.size(); ++k) empty += bounds[k][s] == bounds[k][s + 1] ? 1 : 0;
    if (empty == blend.size()) continue;  // e.g. a zero weight in --split: no such split
    std::vector<std::pair<double, std::unique_ptr<SampleSource>>> members;
    int64_t size = 0;
    for (size_t k = 0; k < blend.size(); ++k) {
      if (bounds[k][s] == bounds[k][s + 1]) {
        return Status::invalid_argument(
            "--split \"" + split + "\" leaves the " + kSplitNames[s] + " split of " +
            blend[k].second + " (" + std::to_string(bounds[k].back()) + " documents) empty, but " +
            std::to_string(samples[s]) + " " + kSplitNames[s] +
            " samples are needed from the blend");
      }
      auto built = build(k, s, buffer[k]);
      if (!built) return built.status();
      members.emplace_back(weights[k], std::move(*built));
      size += target[k];
    }
    auto blended = blend_datasets(std::move(members), size);
    if (!blended) return blended.status();
    out[s] = std::move(*blended);
  }
  return DataSplits{std::move(out[0]), std::move(out[1]), std::move(out[2])};
}

Result<DataSplits> build_gpt_splits(const std::vector<std::pair<double, std::string>>& blend,
                                    const std::string& split, int64_t train_samples,
                                    int64_t valid_samples, int64_t test_samples,
                                    const GptDatasetOptions& options) {
  if (blend.empty()) return Status::invalid_argument("--data-path: no dataset given");
  std::vector<std::shared_ptr<const IndexedDataset>> datasets;
  std::vector<std::vector<size_t>> bounds;  // per prefix: [0, a, b, n] over its sequences
  for (const auto& [weight, prefix] : blend) {
    auto opened = IndexedDataset::open(prefix);
    if (!opened) return opened.status();
    auto split_bounds = split_boundaries(split, (*opened)->num_sequences());
    if (!split_bounds) return split_bounds.status();
    bounds.push_back(std::move(*split_bounds));
    datasets.emplace_back(std::move(*opened));
  }
  return build_blended_splits(blend, split, {train_samples, valid_samples, test_samples}, bounds,
                              [&](size_t k, size_t s, int64_t n) {
                                return build_gpt_dataset(datasets[k], bounds[k][s],
                                                         bounds[k][s + 1], n, kSplitNames[s],
                                                         options);
                              });
}

}  // namespace lattice
