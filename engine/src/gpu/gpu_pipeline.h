// Runs one rank's pipeline schedule (pipeline/schedule.h) over its GpuGpt chunks on the device:
// the GPU counterpart of pipeline/executor.h. Activations and their gradients stay on the
// device and move between stages over NCCL (send_on_stream / recv_on_stream); the host only
// queues work and never waits for the device inside an iteration. Dropout as the CPU executor:
// micro-batch m's forward gets dropout_seed(m), kept in its slot for its backward. Non-goals:
// timing boxes (the CPU executor's IterationTimeline), host buffers.
//
// Note [GPU pipeline streams]. Besides the compute stream (the Context's), boundary tensors
// travel on channels, each an NcclComm over the pipeline group with a stream of its own:
// "activations" (forward: stage r to r+1), "gradients" (backward: r+1 to r), and with
// interleaving two wrap-around channels (the last stage's chunk c to the first stage's chunk
// c+1 in forward, the reverse in backward). CUDA events order them against compute: a receive
// is waited for by the compute stream before the chunk reads it, a send waits for the compute
// that wrote its buffer, and compute rewrites a buffer only after the send that reads it. The
// host never waits inside an iteration.
// Why this cannot deadlock: NCCL matches a pair's point-to-point operations on one
// communicator in issue order, each stream runs its operations in issue order, and a send
// completes only once its receive is posted. Every rank runs its forwards in one order,
// independent of the rank (pipeline_schedule: micro-batch order with one chunk, Megatron's
// virtual micro-batch order k with several), and its backwards likewise. On the activation
// channel rank r queues, for its k-th forward, "receive k from r-1, send k to r+1" (no
// receive on the first stage, no send on the last: the wrap-around is not on this channel).
// Give the message of (r, k) the key (k + r, -r): rank r's operations come in increasing key
// order (receive (r-1, k) = (k+r-1, 1-r) < send (r, k) = (k+r, -r) < receive (r-1, k+1) =
// (k+r, 1-r)), and each message has one key on both ends, so one total order serves every
// rank: no cycle of waiting sends and receives. The gradient channel is the mirror image. On
// a wrap-around channel one rank only sends and the other only receives, both in the same
// order (chunk c's k-th message is chunk c+1's, stages forwards later). The compute stream's
// waits are the schedule's own dependencies, which the CPU executor runs, and a send waits
// only for compute queued before it; compute waits for a send before rewriting its buffer only
// when the slot comes round again, by which time the peer's matching receive depends on
// nothing this rank has still to do (earlier micro-batches only). Were the wrap-around on the
// activation channel, the messages would form a ring and the key order would close into a cycle
// (every rank sending before its next receive); were forward and backward on one channel, "send
// forward, then receive backward" on two neighbours would deadlock (Megatron groups them instead).
// The host harness (test_gpu_model_on_host) sends messages above MPI's eager limit, so a send there
// too completes only when received: either mistake hangs it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "gpu/gpu_model.h"
#include "lattice/comm.h"
#include "lattice/status.h"

namespace lattice::gpu {

// The channels' communicators: NcclComms over the pipeline group (make_nccl_comm), one per
// channel (Note [GPU pipeline streams]); the wrap-around ones only with several chunks.
struct PipelineComms {
  Comm* activations = nullptr;
  Comm* gradients = nullptr;
  Comm* activations_wrap = nullptr;
  Comm* gradients_wrap = nullptr;
};

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

  // chunks[c] holds virtual stage c * stages + stage, with pipeline_slots(...) slots for the
  // micro-batch counts the caller will pass (with several chunks, a multiple of stages).
  // comms: outliving this; none when stages == 1. Errors: a missing communicator, a stream or
  // event that CUDA could not create.
  static Result<std::unique_ptr<GpuPipeline>> create(std::vector<GpuGpt<A>*> chunks,
                                                     cu::Context& ctx, const PipelineComms& comms,
                                                     int stages, int stage);
  ~GpuPipeline();
  GpuPipeline(const GpuPipeline&) = delete;
  GpuPipeline& operator=(const GpuPipeline&) = delete;

  // One iteration: every micro-batch's forward and backward in schedule order, gradients
  // accumulated into each chunk's arena; dropout_seed(mb) keys micro-batch mb's masks (as the
  // CPU executor's train()). On the rank of the last virtual stage, losses (M, N)
  // (device) receives micro-batch m's token losses at row m; elsewhere it is not touched.
  // Returns once everything is queued; the compute stream waits for both communication
  // streams at the end, so ctx.synchronize() covers the whole iteration. Errors are those of
  // queueing (a failed kernel is recorded in the Context).
  Status train(int micro_batches, const Loader& load,
               const std::function<uint64_t(int)>& dropout_seed, float grad_scale, float* losses);
  // Forward only (grad_scale 0), micro-batch by micro-batch; losses as train().
  Status evaluate(int micro_batches, const Loader& load, float* losses);

 private:
  // A communicator and its stream (cudaStream_t).
  struct Channel {
    Comm* comm = nullptr;
    void* stream = nullptr;
  };
  GpuPipeline(std::vector<GpuGpt<A>*> chunks, cu::Context& ctx, const PipelineComms& comms,
              int stages, int stage);
  Status make_streams();
  bool first_virtual(int c) const { return c == 0 && stage_ == 0; }
  bool last_virtual(int c) const {
    return c == static_cast<int>(chunks_.size()) - 1 && stage_ == stages_ - 1;
  }
  int acquire(int c);
  // `waiter` waits for the work queued on `stream` so far (through the scratch event).
  void follow(void* waiter, void* stream);
  Status forward_one(int c, int mb, int s, const Loader& load, uint64_t dropout_seed,
                     float grad_scale, float* losses);
  Status backward_one(int c, int mb, int s, int micro_batches);
  Status join();  // the compute stream waits for both communication streams

  std::vector<GpuGpt<A>*> chunks_;
  cu::Context& ctx_;
  // Which channel carries chunk c's input, output, output gradient and input gradient.
  Channel& input_channel(int c) { return stage_ == 0 && c > 0 ? activations_wrap_ : activations_; }
  Channel& output_channel() { return stage_ == stages_ - 1 ? activations_wrap_ : activations_; }
  Channel& output_grad_channel() { return stage_ == stages_ - 1 ? gradients_wrap_ : gradients_; }
  Channel& input_grad_channel() { return stage_ == 0 ? gradients_wrap_ : gradients_; }
  int stages_, stage_;
  Channel activations_, gradients_, activations_wrap_, gradients_wrap_;
  void* scratch_event_ = nullptr;  // cudaEvent_t, recorded and waited for at once
  // [chunk][slot]: the last send from the slot's output / input_grad (compute rewrites them
  // only after it).
  std::vector<std::vector<void*>> output_sent_, input_grad_sent_;
  std::vector<std::vector<int>> free_slots_;  // [chunk]
  std::vector<std::vector<int>> in_flight_;   // [chunk][micro_batch]: slot or -1
};

}  // namespace lattice::gpu
