// Data-parallel gradient reduction in buckets (ARCHITECTURE.md "Optimizer"). A chunk's arena is
// cut at tensor boundaries into buckets of about bucket_elems, in backward order (the last
// layers' gradients are final first). A bucket's collective starts as soon as backward has
// marked all of its tensors ready, so communication overlaps the rest of backward
// (docs/design-notes.md#data-parallel-overlap). Without the distributed optimizer a bucket is
// all-reduced; with it (ZeRO-1) reduce-scattered, so each data-parallel rank holds the summed
// gradients of its own shard of every bucket, steps that shard, and all-gathers parameters.
#pragma once

#include <memory>
#include <vector>

#include "lattice/comm.h"
#include "model/param_layout.h"
#include "optim/adamw.h"

namespace lattice {

// The bucket split itself, shared with the GPU trainer's distributed optimizer
// (optim/optimizer_shard.h) so that both engines cut the arena the same way.
struct BucketSpan {
  size_t begin, end;              // arena range; the buckets tile [0, total_numel)
  int first_tensor, last_tensor;  // tensors [first, last)
};
// Buckets in backward order (the last tensors' bucket first), cut at tensor boundaries once a
// bucket holds bucket_elems; the alignment gap before a tensor belongs to the bucket below it.
std::vector<BucketSpan> split_buckets(const ParamLayout& layout, size_t bucket_elems);
// Elements of each of `world` data-parallel ranks' shards of a bucket of `len` elements: equal
// shares, the first len % world ranks one more. Shards follow each other in rank order.
std::vector<size_t> shard_counts(size_t len, int world);
// --ddp-bucket-size in elements, or Megatron's default max(40M, 1M * DP).
size_t ddp_bucket_elems(const ParallelOptions& options, int dp);

struct BucketStats {
  double wait_seconds = 0;  // blocked in finish() and gather_params()
  size_t buffer_bytes = 0;  // reduce-scatter receive buffers
};

template <typename T>
class GradBuckets {
 public:
  // dp may be null or of size 1 (nothing to reduce). grads and params are the chunk's arenas.
  GradBuckets(const ParamLayout& layout, Comm* dp, bool distributed, size_t bucket_elems, T* grads,
              T* params);

  void start_iteration();
  // Tensors [first, last) of the layout have final gradients; starts every bucket that is
  // now complete. Must be called in the same order on every data-parallel rank.
  Status mark_ready(int first, int last);
  // Starts what is left and waits for every bucket; afterwards the owned ranges hold the
  // summed gradients.
  Status finish();
  // The arena ranges this rank's optimizer updates: its shard of every bucket (distributed),
  // else the whole arena.
  std::vector<ArenaRange> owned_ranges() const;
  // Distributed optimizer: every rank's updated shards gathered into params.
  Status gather_params();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  const BucketStats& stats() const { return stats_; }

 private:
  struct Bucket {
    size_t begin, end;              // arena range
    int first_tensor, last_tensor;  // tensors [first, last)
    int pending;                    // tensors not yet ready this iteration
    std::vector<size_t> counts;     // per data-parallel rank (distributed)
    size_t shard_begin;             // this rank's shard start in the arena
    std::vector<T> shard;           // reduce-scatter receive buffer
    std::unique_ptr<CommRequest> request;
  };
  Status launch(Bucket& b);

  Comm* dp_;
  bool distributed_;
  T* grads_;
  T* params_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_tensor_;
  std::vector<char> ready_;
  BucketStats stats_;
};

}  // namespace lattice
