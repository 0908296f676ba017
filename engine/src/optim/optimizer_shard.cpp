// optimizer_shard.h's range arithmetic.
#include "optim/optimizer_shard.h"

#include <algorithm>

#include "optim/grad_buckets.h"

namespace lattice {

namespace {

// Pieces = every tensor cut by every owned range (tensor order, then range order), moments
// packed piece after piece.
void cut_pieces(const ParamLayout& layout, OptimizerShard& s) {
  const std::vector<ParamTensor>& tensors = layout.tensors();
  size_t state = 0;
  for (size_t i = 0; i < tensors.size(); i++) {
    const ParamTensor& t = tensors[i];
    if (t.frozen) continue;  // Note [LoRA] (param_layout.h): no moments, no update, no norm
    for (size_t r = 0; r < s.owned.size(); r++) {
      const size_t begin = std::max(s.owned[r].first, t.offset);
      const size_t end = std::min(s.owned[r].second, t.offset + t.numel);
      if (begin >= end) continue;
      OptimizerPiece p;
      p.tensor = static_cast<int>(i);
      p.offset = begin;
      p.grad_offset = t.grad_offset + (begin - t.offset);
      p.numel = end - begin;
      p.state = state;
      p.decay = t.decay;
      p.counts_in_norm = t.counts_in_norm;
      p.expert_parallel = t.expert_parallel;
      state += p.numel;
      s.pieces.push_back(p);
    }
  }
  s.state_numel = state;
}

}  // namespace

size_t OptimizerShard::state_of(size_t offset, size_t n) const {
  // A linear walk: a few pieces per tensor, and only checkpoint copies ask.
  for (const OptimizerPiece& p : pieces)
    if (offset >= p.offset && offset + n <= p.offset + p.numel)
      return p.state + (offset - p.offset);
  return npos;
}

OptimizerShard owned_shard(const ParamLayout& layout, const std::vector<ArenaRange>& owned) {
  OptimizerShard s;
  s.owned = owned;
  if (s.owned.empty()) s.owned.push_back({0, layout.total_numel()});
  cut_pieces(layout, s);
  return s;
}

OptimizerShard whole_arena_shard(const ParamLayout& layout) {
  return owned_shard(layout, {});
}

OptimizerShard distributed_shard(const ParamLayout& layout, size_t bucket_elems, int dp, int rank,
                                 int edp, int edp_rank) {
  OptimizerShard s;
  s.distributed = true;
  for (const BucketSpan& span : split_buckets(layout, bucket_elems)) {
    ShardBucket b;
    b.begin = span.begin;
    b.end = span.end;
    b.first_tensor = span.first_tensor;
    b.last_tensor = span.last_tensor;
    // A bucket of experts alone or of none (split_buckets); experts shard over expert-data.
    const bool expert = layout.tensors()[span.first_tensor].expert_parallel;
    const int ranks = expert ? edp : dp, me = expert ? edp_rank : rank;
    b.counts = shard_counts(b.end - b.begin, ranks);
    b.shard_begin = b.begin;
    for (int r = 0; r < me; r++) b.shard_begin += b.counts[r];
    if (b.counts[me] > 0) s.owned.push_back({b.shard_begin, b.shard_begin + b.counts[me]});
    s.buckets.push_back(std::move(b));
  }
  std::sort(s.owned.begin(), s.owned.end());
  cut_pieces(layout, s);
  return s;
}

OptimizerShard optimizer_shard(const TrainOptions& o, const ParamLayout& layout, int dp, int rank,
                               int edp, int edp_rank) {
  if (!o.parallel.use_distributed_optimizer || dp <= 1) return whole_arena_shard(layout);
  return distributed_shard(layout, ddp_bucket_elems(o.parallel, dp), dp, rank, edp, edp_rank);
}

}  // namespace lattice
