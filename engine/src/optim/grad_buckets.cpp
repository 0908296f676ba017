#include "optim/grad_buckets.h"

#include <algorithm>

namespace lattice {

std::vector<BucketSpan> split_buckets(const ParamLayout& layout, size_t bucket_elems) {
  const auto& tensors = layout.tensors();
  const int n = static_cast<int>(tensors.size());
  std::vector<BucketSpan> out;
  // From the last tensor down: a bucket closes once it holds bucket_elems.
  int last = n;
  size_t elems = 0;
  for (int i = n - 1; i >= 0; i--) {
    elems += tensors[i].numel;
    // A bucket holds experts of expert parallelism alone or none of them: the two are summed
    // over different groups (GradReducer). It holds trained tensors alone or frozen ones alone
    // (Note [LoRA] in model/param_layout.h): the reducer skips a bucket of frozen tensors, so no
    // collective moves a frozen tensor's zero gradient.
    if (elems >= bucket_elems || i == 0 ||
        tensors[i - 1].expert_parallel != tensors[i].expert_parallel ||
        tensors[i - 1].frozen != tensors[i].frozen) {
      // The top bucket ends at the arena's end; lower ones are tiled below.
      out.push_back({tensors[i].offset, layout.total_numel(), i, last});
      last = i;
      elems = 0;
    }
  }
  // Buckets tile [first tensor's offset, total): the gap before a tensor (alignment) belongs
  // to the bucket below it, so ranges meet exactly.
  for (size_t k = 0; k + 1 < out.size(); k++) out[k + 1].end = out[k].begin;
  if (!out.empty()) out.back().begin = 0;
  return out;
}

std::vector<size_t> shard_counts(size_t len, int world) {
  std::vector<size_t> counts(world);
  for (int r = 0; r < world; r++)
    counts[r] = len / world + (static_cast<size_t>(r) < len % world ? 1 : 0);
  return counts;
}

size_t ddp_bucket_elems(const ParallelOptions& options, int dp) {
  return options.ddp_bucket_size > 0
             ? static_cast<size_t>(options.ddp_bucket_size)
             : std::max<size_t>(40000000, 1000000 * static_cast<size_t>(dp));
}

}  // namespace lattice
