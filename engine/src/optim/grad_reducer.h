// Data-parallel gradient reduction in buckets, on both devices (ARCHITECTURE.md "Optimizer";
// docs/one-engine.md 3.7). A chunk's arena is cut at tensor boundaries into buckets of about
// bucket_elems, in backward order (split_buckets, grad_buckets.h: the last layers' gradients are
// final first). A bucket's collective is queued on the data-parallel side stream as soon as
// backward has marked all of its tensors ready, so communication overlaps the rest of backward
// (docs/design-notes.md#data-parallel-overlap). Without the distributed optimizer a bucket is
// all-reduced; with it (ZeRO-1) reduce-scattered, so each data-parallel rank holds the summed
// gradients of its own shard of every bucket, steps that shard, and all-gathers parameters.
// Sums, not means: the loss gradient already carries 1 / (tokens of the global batch).
//
// Note [one reducer on two devices]. The collectives are the data-parallel communicator's
// stream-ordered calls (comm.h) on a side stream of the device. On the CPU device (Note [CPU
// stream order], cpu_device.h) each is started when it is queued (MPI_Iallreduce,
// MPI_Ireduce_scatter ...) and waited for in finish(): the MPI calls, their order and the
// bucket cut of the GradBuckets class this replaces, so runs stay bit for bit. On CUDA each is
// an NCCL call on the side stream after an event wait on compute (the bucket's gradients are
// final there), with no thread of its own: the reducer thread and its per-layer ranges of
// gpu/grad_reducer.cpp are gone (buckets on both devices: docs/one-engine.md open question 4).
// Receive buffers: a host-addressable device reduce-scatters into a buffer of its own per
// bucket and copies it into the arena in finish() (MPI would otherwise stage the whole bucket
// in place); other devices reduce-scatter in place (this rank's block of the bucket as the
// receive buffer, which NCCL allows), as the GPU did. Several chunks (an interleaved pipeline
// rank) each have a reducer over one shared side stream and one communicator: every
// data-parallel rank queues the buckets in the order its schedule finishes them.
#pragma once

#include <memory>
#include <vector>

#include "device/device.h"
#include "lattice/comm.h"
#include "model/param_layout.h"
#include "optim/grad_buckets.h"
#include "optim/optimizer_shard.h"

namespace lattice {

struct BucketStats {
  double wait_seconds = 0;    // blocked in finish() and gather_params()
  double gather_seconds = 0;  // the gather_params() part of it
  size_t buffer_bytes = 0;    // reduce-scatter receive buffers
};

template <typename T>
class GradReducer {
 public:
  // grads: the chunk's gradient arena of `layout` on `device`; weights (of weights_type): the
  // arena the distributed optimizer's all-gather fills, the weights the kernels read (a 16-bit
  // run's compute copy, whose master is its optimizer's: Note [master weights in the optimizer]
  // in adamw.h; an fp32 or fp64 run's master); dp_stream: a side stream of
  // `device` (shared by a rank's reducers); dp: the data-parallel communicator made for that
  // device, or null / of size 1 (nothing to reduce). Errors: out of memory for the receive
  // buffers (the device's sentence).
  // edp: the expert-data communicator (device), which sums the buckets of expert-parallel
  // experts (ParamTensor::expert_parallel; null or of size 1: nothing to reduce) and with the
  // distributed optimizer shards them (distributed_shard's edp and edp_rank).
  static Result<std::unique_ptr<GradReducer>> create(Device& device, Stream& dp_stream,
                                                     const ParamLayout& layout, Comm* dp,
                                                     bool distributed, size_t bucket_elems,
                                                     T* grads, void* weights, DType weights_type,
                                                     Comm* edp = nullptr);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  void start_iteration();
  // Tensors [first, last) of the layout have final gradients (once the work queued on compute
  // so far has run); queues every bucket that is now complete. Must be called in the same order
  // on every data-parallel rank.
  Status mark_ready(int first, int last);
  // Queues what is left, makes compute wait for the data-parallel stream and waits for it
  // (watched); afterwards the owned ranges hold the summed gradients.
  Status finish();
  // The arena ranges this rank's optimizer updates: its shard of every bucket (distributed),
  // else empty (the whole arena).
  std::vector<ArenaRange> owned_ranges() const;
  // Distributed optimizer, after a step queued on compute: every rank's updated shards of
  // the weights arena gathered into it, and compute made to wait for them. A no-op otherwise.
  Status gather_params();
  // Note [master weights in the optimizer] (adamw.h): the fp32 master of the whole arena from every
  // rank's optimizer pieces (shard: this rank's AdamW::shard(), master: its AdamW::master()),
  // bucket by bucket through a device buffer of the largest bucket (kWorkspace), into `out`
  // (host memory, arena numel; the alignment gaps zero, the buckets of frozen tensors left as
  // they are) or nowhere (null: a rank that saves no weights still sends its pieces). Without
  // the distributed optimizer the pieces are this rank's whole arena: nothing moves between
  // ranks. A collective over the reducer's groups: every rank of them calls it. Waits. Errors:
  // out of memory for the buffer, the communicator's.
  Status gather_master(const OptimizerShard& shard, const T* master, T* out);

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  const BucketStats& stats() const { return stats_; }

 private:
  struct Bucket {
    size_t begin, end;              // arena range
    int first_tensor, last_tensor;  // tensors [first, last)
    int pending;                    // tensors not yet ready this iteration
    std::vector<size_t> counts;     // per data-parallel rank (distributed)
    size_t shard_begin;             // this rank's shard start in the arena
    T* shard = nullptr;             // reduce-scatter receive buffer (host-addressable device)
    bool frozen = false;            // only frozen tensors (LoRA's base): nothing to reduce
    bool expert = false;            // expert-parallel experts: summed over edp_
    // Its gradients: grads_ + grad_shift + [begin, end) (Note [LoRA] in param_layout.h: a
    // trained bucket's range shifted into the gradient arena; 0 when nothing is frozen).
    ptrdiff_t grad_shift = 0;
  };
  GradReducer(Device& device, Stream& dp_stream, const ParamLayout& layout, Comm* dp,
              bool distributed, size_t bucket_elems, T* grads, void* weights, DType weights_type,
              Comm* edp);
  bool allocated() const;
  Status launch(Bucket& b);
  // The communicator that reduces bucket b (null: nothing to reduce), its size and this rank's
  // place in it.
  Comm* comm_of(const Bucket& b) const { return b.expert ? edp_ : dp_; }
  int ranks_of(const Bucket& b) const { return comm_of(b) ? comm_of(b)->size() : 1; }
  int rank_of(const Bucket& b) const { return comm_of(b) ? comm_of(b)->rank() : 0; }

  Device& device_;
  Stream* stream_ = nullptr;  // the data-parallel side stream (null: nothing to reduce)
  Comm* dp_;
  Comm* edp_;  // null when of size 1
  bool distributed_;
  T* grads_;
  char* weights_;  // (arena numel) of weights_type_
  DType weights_type_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_tensor_;
  std::vector<char> ready_;
  BucketStats stats_;
};

}  // namespace lattice
