// Which part of the fp32 arena a GPU rank's AdamW owns (docs/gpu.md#distributed-optimizer).
// Without the distributed optimizer: the whole arena, moments indexed like it. With it
// (Megatron's distributed optimizer, ZeRO-1): the CPU engine's bucket split
// (optim/grad_buckets.h split_buckets / shard_counts), each bucket cut into one contiguous
// shard per data-parallel rank; a rank reduce-scatters its buckets' gradients into its shards,
// keeps moments for its shards alone (packed as the CPU AdamW packs them) and all-gathers the
// updated weights. Host code only, so the arithmetic is tested in every build.
#pragma once

#include <cstddef>
#include <vector>

#include "lattice/train_options.h"
#include "model/param_layout.h"
#include "optim/adamw.h"

namespace lattice::gpu {

// One tensor's owned part: arena [offset, offset + numel), moments [state, state + numel).
struct OptimizerPiece {
  int tensor = 0;  // index in the layout
  size_t offset = 0, numel = 0, state = 0;
  bool decay = true, counts_in_norm = true;  // the tensor's
  int range = 0;                             // index in OptimizerShard::owned
};

// A bucket of the distributed optimizer: arena [begin, end), tensors [first, last), the
// data-parallel ranks' shard sizes (in rank order from begin) and this rank's shard start.
struct ShardBucket {
  size_t begin = 0, end = 0;
  int first_tensor = 0, last_tensor = 0;
  std::vector<size_t> counts;  // (DP)
  size_t shard_begin = 0;
};

struct OptimizerShard {
  bool distributed = false;
  std::vector<ShardBucket> buckets;    // distributed only, backward order (last layers first)
  std::vector<ArenaRange> owned;       // sorted; {0, total_numel} when not distributed
  std::vector<OptimizerPiece> pieces;  // each tensor's part in each owned range, tensor order
  size_t state_numel = 0;              // elements of each moment array
  std::vector<ArenaRange> norm_spans;  // owned gradients that count in the global norm
  // The moment index of arena elements [offset, offset + n), which must lie in one piece;
  // npos otherwise.
  static constexpr size_t npos = static_cast<size_t>(-1);
  size_t state_of(size_t offset, size_t n) const;
};

// The whole arena: one piece per tensor, moments at the arena's offsets (the alignment gaps
// between tensors unused), norm spans as runs of counted tensors.
OptimizerShard whole_arena_shard(const ParamLayout& layout);
// Data-parallel rank `rank` of `dp` (dp > 1): its shard of every bucket of bucket_elems
// (split_buckets), pieces cut at the shard boundaries (each keeps its tensor's decay flag),
// moments packed piece after piece without gaps, as AdamW<float>(layout, config, owned) packs
// them.
OptimizerShard distributed_shard(const ParamLayout& layout, size_t bucket_elems, int dp, int rank);
// What a run of `o` uses on data-parallel rank `rank` of `dp`: distributed_shard with
// --use-distributed-optimizer and dp > 1 (--ddp-bucket-size, ddp_bucket_elems), else the
// whole arena.
OptimizerShard optimizer_shard(const TrainOptions& o, const ParamLayout& layout, int dp, int rank);

}  // namespace lattice::gpu
