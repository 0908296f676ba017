// The data-parallel bucket cut (ARCHITECTURE.md "Optimizer"): a chunk's arena cut at tensor
// boundaries into buckets of about bucket_elems, in backward order (the last layers' gradients
// are final first), and each data-parallel rank's shard of a bucket. The reducer that runs the
// buckets' collectives is optim/grad_reducer.h; the distributed optimizer's pieces are
// optim/optimizer_shard.h.
#pragma once

#include <memory>
#include <vector>

#include "lattice/comm.h"
#include "model/param_layout.h"
#include "optim/adamw.h"

namespace lattice {

// The bucket split, shared by GradReducer and the distributed optimizer's shard
// (optim/optimizer_shard.h) so that both cut the arena the same way.
struct BucketSpan {
  size_t begin, end;              // arena range; the buckets tile [0, total_numel)
  int first_tensor, last_tensor;  // tensors [first, last)
};
// Buckets in backward order (the last tensors' bucket first), cut at tensor boundaries once a
// bucket holds bucket_elems, and wherever expert-parallel tensors meet others or frozen tensors
// meet trained ones; the alignment gap before a tensor belongs to the bucket below it.
std::vector<BucketSpan> split_buckets(const ParamLayout& layout, size_t bucket_elems);
// Elements of each of `world` data-parallel ranks' shards of a bucket of `len` elements: equal
// shares, the first len % world ranks one more. Shards follow each other in rank order.
std::vector<size_t> shard_counts(size_t len, int world);
// --ddp-bucket-size in elements, or Megatron's default max(40M, 1M * DP).
size_t ddp_bucket_elems(const ParallelOptions& options, int dp);

}  // namespace lattice
