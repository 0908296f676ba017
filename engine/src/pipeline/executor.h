// Runs one rank's pipeline schedule (pipeline/schedule.h) over its GptModel chunks on a device
// (device/device.h), for every device: loads the micro-batches the first and last virtual
// stages need, runs forward and backward, and moves activations and their gradients between
// stages as the channels' stream-ordered sends and receives (comm.h), without copies. On CUDA
// the host only queues work and never waits for the device inside an iteration; on the CPU
// device it waits where CUDA's streams would (Note [CPU stream order], device/cpu_device.h).
// Micro-batch m's forward gets dropout_seed(m), kept in its activations for its backward. The
// executor owns the activations: a pool per chunk, one slot per micro-batch the schedule keeps
// in flight in that chunk (chunk_peaks, pipeline/schedule.h).
// Phase times (forward, backward, receive waits, the final wait for the channels) and the
// timeline's boxes come from marks on the compute stream, read once the host has synchronised
// it (collect_times). docs/design-notes.md#pipeline-schedules.
//
// Note [pipeline streams]. Besides the compute stream, boundary tensors travel on channels,
// each a communicator over the pipeline group (Device::make_comm) with a side stream of its own:
// "activations" (forward: stage r to r+1), "gradients" (backward: r+1 to r), and with
// interleaving two wrap-around channels (the last stage's chunk c to the first stage's chunk
// c+1 in forward, the reverse in backward). The device's events order them against compute: a
// receive is waited for by the compute stream before the chunk reads it, a send waits for the
// compute that wrote its buffer, and compute rewrites a buffer only after the send that reads
// it. On CUDA the host never waits inside an iteration. On the CPU device (Note [CPU stream
// order], cpu_device.h) a send and a receive start when queued and the host completes them at
// the event waits; what the CPU does not keep, two operations of one side stream over one
// buffer, never happens here: every channel operation first waits for compute, and a buffer a
// receive wrote is sent on only after compute has read it (a different buffer, residual[L] or
// input_grad, written after compute waited for the receive).
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
// On the CPU device the host blocks in a wait where CUDA's compute stream would, and nothing
// queued after that wait could have started earlier on CUDA either (every channel operation
// waits for compute first), so the argument carries over. tests/model/test_gpt_layouts runs
// this on the CPU device with messages above MPI's eager limit, so a send there too completes
// only when received: either mistake hangs it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "device/device.h"
#include "lattice/comm.h"
#include "lattice/status.h"
#include "model/gpt.h"
#include "pipeline/timeline.h"

namespace lattice {

// The channels' communicators: each its own communicator over the pipeline group for the
// device's buffers (Device::make_comm), one per channel (Note [pipeline streams]); the
// wrap-around ones only with several chunks.
struct PipelineComms {
  Comm* activations = nullptr;
  Comm* gradients = nullptr;
  Comm* activations_wrap = nullptr;
  Comm* gradients_wrap = nullptr;
};

template <typename A>
class PipelineExecutor {
 public:
  // Queues micro-batch `micro_batch`'s inputs into the device buffers (B, T) on the device's
  // compute stream (on a host-addressable device: writes them). Called for the first and the
  // last virtual stage with tokens and targets; with set_packed_sequences(true) also for
  // every other chunk with tokens = targets = null, and always with positions non-null, to
  // receive each token's position in its packed document (Note [packed sequences] in
  // model/gpt_layer.cpp: attention runs on every stage, so each needs them). Without packing
  // positions is null and only the first and last virtual stages load, as before. first: the
  // first virtual stage's activations on that stage's load (null on every other), where a
  // vision-language model's images go (GptModel::load_images, after the tokens).
  using Loader = std::function<Status(int micro_batch, int32_t* tokens, int32_t* targets,
                                      int32_t* positions, GptActivations<A>* first)>;

  // chunks[c] holds virtual stage c * stages + stage, all on `device`, which makes a side
  // stream per channel; chunk c gets slots[c] micro-batches' activations
  // (GptModel::new_activations; at least one): chunk_peaks(stages, stage, chunks, M) for the
  // micro-batch count M the caller will pass (with several chunks, a multiple of stages), so
  // the memory is the planner's. comms: outliving this; none when stages == 1. Errors: a
  // missing communicator, a stream the device could not make, the device's out-of-memory
  // sentence for the activations.
  static Result<std::unique_ptr<PipelineExecutor>> create(std::vector<GptModel<A>*> chunks,
                                                          Device& device,
                                                          const PipelineComms& comms, int stages,
                                                          int stage, const std::vector<int>& slots);
  ~PipelineExecutor();
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // One iteration: every micro-batch's forward and backward in schedule order, gradients
  // accumulated into each chunk's arena (scaled by grad_scale per token); dropout_seed(mb)
  // keys micro-batch mb's masks. On the rank of the last virtual stage, losses (M, N) (device
  // memory) receives micro-batch m's token losses at row m; elsewhere it is not touched.
  // Returns once everything is queued; the compute stream waits for every channel's stream at
  // the end, so synchronising the compute stream covers the whole iteration. Errors are those
  // of queueing (a failed kernel or transfer is recorded on the device).
  Status train(int micro_batches, const Loader& load,
               const std::function<uint64_t(int)>& dropout_seed, float grad_scale,
               accum_t<A>* losses);
  // Forward only (grad_scale 0, no dropout), micro-batch by micro-batch; losses as train().
  // Not timed (validation is not a training phase, as Megatron's timers;
  // docs/design-notes.md#phase-times).
  Status evaluate(int micro_batches, const Loader& load, accum_t<A>* losses);

  // Once the compute stream has been synchronised after train(), and before
  // Device::reset_marks(): adds the iteration's forward, backward and wait seconds to times()
  // and, while `timeline` is on (may be null), its boxes, placed on the timeline's host clock
  // by the host time at which train() took its first mark.
  void collect_times(IterationTimeline* timeline);
  // Whether the micro-batches pack several documents per sequence (SFT), so that every chunk
  // loads positions and runs the masked attention; off (the default): pretraining's plain
  // causal attention, no positions loaded.
  void set_packed_sequences(bool packed) { packed_ = packed; }
  const PipelineTimes& times() const { return times_; }  // training iterations, summed

 private:
  // A communicator and its side stream (the device's).
  struct Channel {
    Comm* comm = nullptr;
    Stream* stream = nullptr;
  };
  PipelineExecutor(std::vector<GptModel<A>*> chunks, Device& device, const PipelineComms& comms,
                   int stages, int stage);
  Status make_streams();
  Status make_slots(const std::vector<int>& slots);
  bool first_virtual(int c) const { return c == 0 && stage_ == 0; }
  bool last_virtual(int c) const {
    return c == static_cast<int>(chunks_.size()) - 1 && stage_ == stages_ - 1;
  }
  int acquire(int c);
  int virtual_stage(int c) const { return c * stages_ + stage_; }
  int slot_count(int c) const { return static_cast<int>(slots_[c].size()); }
  // `waiter` waits for the work queued on `stream` so far.
  void follow(Stream& waiter, Stream& stream) { device_.wait(waiter, device_.record(stream)); }
  Status forward_one(int c, int mb, int s, const Loader& load, uint64_t dropout_seed,
                     float grad_scale, accum_t<A>* losses);
  Status backward_one(int c, int mb, int s, int micro_batches);
  // The compute stream waits for every channel's stream (timed as a pipeline wait of
  // micro-batch -1 when timing).
  void join();
  // A phase of kind `kind` between two compute-stream marks, kept for collect_times().
  void add_phase(TimelineBox::Kind kind, int stage, int micro_batch, const Mark& from) {
    if (timing_)
      phases_.push_back({kind, stage, micro_batch, from, device_.mark(device_.compute())});
  }
  Mark mark_if_timing() { return timing_ ? device_.mark(device_.compute()) : Mark{}; }

  std::vector<GptModel<A>*> chunks_;
  Device& device_;
  // Which channel carries chunk c's input, output, output gradient and input gradient.
  Channel& input_channel(int c) { return stage_ == 0 && c > 0 ? activations_wrap_ : activations_; }
  Channel& output_channel() { return stage_ == stages_ - 1 ? activations_wrap_ : activations_; }
  Channel& output_grad_channel() { return stage_ == stages_ - 1 ? gradients_wrap_ : gradients_; }
  Channel& input_grad_channel() { return stage_ == 0 ? gradients_wrap_ : gradients_; }
  int stages_, stage_;
  Channel activations_, gradients_, activations_wrap_, gradients_wrap_;
  // [chunk][slot]: the activations of the micro-batch in the slot.
  std::vector<std::vector<std::unique_ptr<GptActivations<A>>>> slots_;
  // [chunk][slot]: the last send from the slot's output / input_grad (compute rewrites them
  // only after it); a default Event (no send yet) is complete.
  std::vector<std::vector<Event>> output_sent_, input_grad_sent_;
  std::vector<std::vector<int>> free_slots_;  // [chunk]
  std::vector<std::vector<int>> in_flight_;   // [chunk][micro_batch]: slot or -1
  // The marks of the iteration being run (train(); none in evaluate()), read by collect_times.
  struct TimedPhase {
    TimelineBox::Kind kind;
    int stage, micro_batch;
    Mark from, to;
  };
  bool packed_ = false;  // set_packed_sequences
  bool timing_ = false;
  Mark origin_;                                        // train()'s first mark
  std::chrono::steady_clock::time_point host_origin_;  // the host clock when it was taken
  std::vector<TimedPhase> phases_;
  PipelineTimes times_;
};

}  // namespace lattice
