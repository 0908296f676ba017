// Runs one rank's pipeline schedule (pipeline/schedule.h) over its GpuGpt chunks on the device:
// the GPU counterpart of pipeline/executor.h. Activations and their gradients stay on the
// device and move between stages over NCCL (send_on_stream / recv_on_stream); the host only
// queues work and never waits for the device inside an iteration. Non-goals: dropout, timing
// boxes (the CPU executor's IterationTimeline), host buffers.
//
// Note [GPU pipeline streams]. Three streams per rank: the compute stream (the Context's), an
// activation stream with its own NcclComm over the pipeline group (forward: receive the
// previous virtual stage's output, send ours to the next), and a gradient stream with another
// NcclComm (backward: receive our output's gradient from the next virtual stage, send our
// input's gradient to the previous one). CUDA events order them: a receive is waited for by
// the compute stream before the chunk reads it, a send waits for the compute that produced
// its buffer, and a buffer is rewritten by compute only after the send that reads it.
// Why this cannot deadlock (one chunk per rank, 1F1B): NCCL matches a pair's point-to-point
// operations on one communicator in issue order, each stream runs its operations in issue
// order, and a send completes only once its receive is posted. On the activation stream rank r
// queues, for each forward of micro-batch m in schedule order (m = 0, 1, ... on every rank),
// "receive m from r-1, send m to r+1". Give the message of (r, m) the key (m + r, -r): rank r's
// operations then come in increasing key order (receive (r-1, m) = (m+r-1, 1-r) < send (r, m)
// = (m+r, -r) < receive (r-1, m+1) = (m+r, 1-r)), and each message has one key on both ends,
// so one total order serves every rank: no cycle of waiting sends and receives. The gradient
// stream is the mirror image (backwards in micro-batch order, r+1 to r). The compute stream's
// waits are the schedule's own dependencies (a forward needs its input, a backward its output
// gradient), and a send waits only for compute queued before it, so forward and backward
// traffic never block each other: the deadlock of "send forward, then receive backward" on
// one queue, which Megatron avoids with grouped operations, cannot arise.
// Interleaving is not supported: the last stage's sends wrap around to the first stage, the
// activation messages then form a ring, and the key order above closes into a cycle (every
// rank sending before its next receive); it needs grouped send/receive or a separate
// wrap-around communicator, and the trainer refuses it (docs/gpu.md#not-done-yet).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "gpu/gpu_model.h"
#include "lattice/comm.h"
#include "lattice/status.h"

namespace lattice::gpu {

// The most micro-batches of one chunk in flight at once (forwarded, not yet backwarded) on
// pipeline rank `stage` under pipeline_schedule(stages, stage, chunks, micro_batches): the
// activation slots each chunk needs. 1F1B: min(stages - stage, micro_batches).
int pipeline_slots(int stages, int stage, int chunks, int micro_batches);

template <typename A>
class GpuPipeline {
 public:
  // Queues micro-batch `micro_batch`'s tokens and targets into the device buffers (B, T) on
  // the compute stream.
  using Loader = std::function<Status(int micro_batch, int32_t* tokens, int32_t* targets)>;

  // chunks: one GpuGpt, stage `stage` of `stages` (several chunks, interleaving, are refused:
  // Note [GPU pipeline streams]), with pipeline_slots(...) slots for the micro-batch counts
  // the caller will pass. forward_comm, backward_comm: two NcclComms over the pipeline group
  // (make_nccl_comm; null when stages == 1), outliving this. Errors: interleaving, a missing
  // communicator, a stream or event that CUDA could not create.
  static Result<std::unique_ptr<GpuPipeline>> create(std::vector<GpuGpt<A>*> chunks,
                                                     cu::Context& ctx, Comm* forward_comm,
                                                     Comm* backward_comm, int stages, int stage);
  ~GpuPipeline();
  GpuPipeline(const GpuPipeline&) = delete;
  GpuPipeline& operator=(const GpuPipeline&) = delete;

  // One iteration: every micro-batch's forward and backward in schedule order, gradients
  // accumulated into each chunk's arena. On the rank of the last virtual stage, losses (M, N)
  // (device) receives micro-batch m's token losses at row m; elsewhere it is not touched.
  // Returns once everything is queued; the compute stream waits for both communication
  // streams at the end, so ctx.synchronize() covers the whole iteration. Errors are those of
  // queueing (a failed kernel is recorded in the Context).
  Status train(int micro_batches, const Loader& load, float grad_scale, float* losses);
  // Forward only (grad_scale 0), micro-batch by micro-batch; losses as train().
  Status evaluate(int micro_batches, const Loader& load, float* losses);

 private:
  GpuPipeline(std::vector<GpuGpt<A>*> chunks, cu::Context& ctx, Comm* forward_comm,
              Comm* backward_comm, int stages, int stage);
  Status make_streams();
  bool first_virtual(int c) const { return c == 0 && stage_ == 0; }
  bool last_virtual(int c) const {
    return c == static_cast<int>(chunks_.size()) - 1 && stage_ == stages_ - 1;
  }
  int acquire(int c);
  // `waiter` waits for the work queued on `stream` so far (through the scratch event).
  void follow(void* waiter, void* stream);
  Status forward_one(int c, int mb, int s, const Loader& load, float grad_scale, float* losses);
  Status backward_one(int c, int mb, int s, int micro_batches);
  Status join();  // the compute stream waits for both communication streams

  std::vector<GpuGpt<A>*> chunks_;
  cu::Context& ctx_;
  Comm* forward_comm_;
  Comm* backward_comm_;
  int stages_, stage_;
  void* forward_stream_ = nullptr;   // cudaStream_t: activations
  void* backward_stream_ = nullptr;  // cudaStream_t: gradients
  void* scratch_event_ = nullptr;    // cudaEvent_t, recorded and waited for at once
  // [chunk][slot]: the last send from the slot's output / input_grad (compute rewrites them
  // only after it).
  std::vector<std::vector<void*>> output_sent_, input_grad_sent_;
  std::vector<std::vector<int>> free_slots_;  // [chunk]
  std::vector<std::vector<int>> in_flight_;   // [chunk][micro_batch]: slot or -1
};

}  // namespace lattice::gpu
