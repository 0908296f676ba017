// Which part of a model chunk's arena a rank's AdamW (adamw.h) owns, on every device
// (docs/gpu.md#distributed-optimizer). Without the distributed optimizer: the whole arena.
// With it (Megatron's distributed optimizer, ZeRO-1): the bucket split of grad_buckets.h
// (split_buckets / shard_counts), each bucket cut into one contiguous shard per data-parallel
// rank; a rank reduce-scatters its buckets' gradients into its shards, keeps moments for its
// shards alone and all-gathers the updated weights. Either way the moments are packed piece
// after piece without the arena's alignment gaps: the layout every checkpoint of the
// optimizer's state has held (distributed-optimizer pieces are flat ranges of these packs).
// Host arithmetic only, tested in every build.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "lattice/train_options.h"
#include "model/param_layout.h"

namespace lattice {

using ArenaRange = std::pair<size_t, size_t>;  // [begin, end) in elements

// One tensor's owned part: arena [offset, offset + numel), its gradient at grad_offset in the
// gradient arena (Note [LoRA] in model/param_layout.h), moments [state, state + numel).
struct OptimizerPiece {
  int tensor = 0;  // index in the layout
  size_t offset = 0, numel = 0, state = 0;
  size_t grad_offset = 0;
  bool decay = true, counts_in_norm = true;  // the tensor's
  bool expert_parallel = false;              // the tensor's (ParamTensor::expert_parallel)
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
  size_t state_numel = 0;              // elements of each moment array (the pieces' sum)
  // The moment index of arena elements [offset, offset + n), which must lie in one piece;
  // npos otherwise.
  static constexpr size_t npos = static_cast<size_t>(-1);
  size_t state_of(size_t offset, size_t n) const;
};

// The arena ranges `owned` (sorted, not overlapping; empty: the whole arena), no buckets:
// every tensor cut by every range (tensor order, then range order), moments packed.
OptimizerShard owned_shard(const ParamLayout& layout, const std::vector<ArenaRange>& owned);
// The whole arena: one piece per tensor (owned_shard of {0, total_numel}).
OptimizerShard whole_arena_shard(const ParamLayout& layout);
// Data-parallel rank `rank` of `dp` (dp > 1): its shard of every bucket of bucket_elems
// (split_buckets), pieces cut at the shard boundaries (each keeps its tensor's decay flag),
// moments packed as owned_shard packs them. The buckets of expert-parallel experts
// (ParamTensor::expert_parallel) are shards over the expert-data group instead: rank edp_rank
// of edp (GradReducer reduce-scatters them there).
OptimizerShard distributed_shard(const ParamLayout& layout, size_t bucket_elems, int dp, int rank,
                                 int edp = 1, int edp_rank = 0);
// What a run of `o` uses on data-parallel rank `rank` of `dp` (expert-data rank edp_rank of
// edp): distributed_shard with --use-distributed-optimizer and dp > 1 (--ddp-bucket-size,
// ddp_bucket_elems), else the whole arena.
OptimizerShard optimizer_shard(const TrainOptions& o, const ParamLayout& layout, int dp, int rank,
                               int edp = 1, int edp_rank = 0);

}  // namespace lattice
