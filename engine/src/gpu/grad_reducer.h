// Data-parallel gradient reduction overlapped with backward, for the GPU trainer.
//
// Note [gradient reduction overlap]. Backward of the last micro-batch finishes the gradients
// of one layer after another (GpuGpt::set_grads_ready). For each such range the compute
// thread records a CUDA event on the compute stream and queues (event, range); this reducer's
// own thread waits for the event (the range's gradients are then complete on the device) and
// all-reduces the range over the data-parallel NcclComm, which runs on NCCL's stream. So layer
// l's reduction runs while layers l-1 ... 0 are still in backward on the compute stream; the
// compute thread never blocks until finish(), before the optimizer. Sums, not means: the loss
// gradient already carries 1 / (tokens of the global batch).
// With the distributed optimizer (optimizer_shard.h) the unit is a bucket of the CPU engine's
// split instead of a layer: once backward has finished all of a bucket's tensors it is
// reduce-scattered in place, so this rank's shard of it holds the sum (the rest of the bucket
// keeps this rank's own partial gradients, which nothing reads), and gather_params() all-gathers
// the updated weights after the step. Buckets rather than layers because the shards must be the
// same on every rank and over the whole run (the moments live there).
// Several arenas (the model chunks of an interleaved pipeline rank) share one reducer, one
// thread and one communicator, so every data-parallel rank reduces the ranges in the order its
// schedule finishes them; each arena has its own shard (the CPU engine's GradBuckets per
// chunk), so its buckets and checkpointed moments line up with the CPU's.
// Thread safety: ready(), finish() and gather_params() from the compute thread only; the Comm is
// used by the reducer's thread alone between the first ready() and finish().
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "lattice/comm.h"
#include "lattice/cuda_kernels.h"
#include "model/param_layout.h"
#include "optim/optimizer_shard.h"

namespace lattice::gpu {

// One gradient arena the reducer serves: grads, the fp32 arena of `layout` on the device;
// shard: the distributed optimizer's (shard->distributed) or null to all-reduce every
// gradient. layout and shard must outlive the reducer.
struct ReducedArena {
  float* grads = nullptr;
  const ParamLayout* layout = nullptr;
  const OptimizerShard* shard = nullptr;
};

class GradReducer {
 public:
  // arenas on `device` (at least one); dp: the NcclComm of the data-parallel group (size > 1).
  GradReducer(Comm& dp, kernels::cuda::Context& ctx, int device, std::vector<ReducedArena> arenas);
  // One arena.
  GradReducer(Comm& dp, kernels::cuda::Context& ctx, int device, float* grads,
              const ParamLayout& layout, const OptimizerShard* shard = nullptr)
      : GradReducer(dp, ctx, device, {ReducedArena{grads, &layout, shard}}) {}
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Tensors [first, last) of arena 0's layout are complete once the work queued on ctx so far
  // has run.
  void ready(int first, int last) { ready(0, first, last); }
  // The same for arena `arena`.
  void ready(int arena, int first, int last);
  // Waits until every queued range is reduced; the first failure, if any. Resets for the next
  // iteration.
  Status finish();
  // Distributed optimizer, after finish() and a step queued on ctx: waits for ctx, then
  // all-gathers every bucket's shards of `master` (arena `arena`'s parameters, on the device)
  // over the data-parallel group, and queues the refresh of the 16-bit compute copy (none for
  // fp32 compute) from the whole arena on ctx. A no-op for an arena without a shard. Every
  // data-parallel rank gathers the arenas in the same order.
  Status gather_params(int arena, float* master, kernels::cuda::ComputeCopy copy);
  Status gather_params(float* master, kernels::cuda::ComputeCopy copy) {
    return gather_params(0, master, copy);
  }
  // Compute thread blocked in finish() and gather_params(); the latter's share alone.
  double seconds_waiting() const { return waited_; }
  double seconds_gathering() const { return gathered_; }

 private:
  struct Item {
    void* event;  // cudaEvent_t
    int arena;
    size_t offset, count;
    int bucket;  // of the arena's shard (reduce-scatter), or -1 (all-reduce [offset, +count))
  };
  // An arena and, distributed, its buckets' bookkeeping.
  struct Arena {
    float* grads;
    const ParamLayout* layout;
    const OptimizerShard* shard;        // null: all-reduce
    std::vector<int> bucket_of_tensor;  // distributed: tensor -> bucket
    std::vector<int> pending;           // distributed: per bucket, tensors not yet ready
  };
  void run();
  void enqueue(int arena, size_t offset, size_t count, int bucket);

  Comm& dp_;
  kernels::cuda::Context& ctx_;
  int device_;
  std::vector<Arena> arenas_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  int in_flight_ = 0;  // queued + being reduced
  bool stop_ = false;
  Status error_ = Status::ok();
  double waited_ = 0, gathered_ = 0;
  std::thread thread_;
};

}  // namespace lattice::gpu
