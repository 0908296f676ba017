// Runs one rank's pipeline schedule (pipeline/schedule.h) over its model chunks (the one model,
// model/gpt.h, on the CPU device): loads the micro-batches the first and last virtual
// stages need, receives activations and gradients from the neighbouring stages, runs forward
// and backward, and sends results on. Sends are non-blocking (the buffer is kept until the send
// completes) and receives block only when their data is needed, so the schedule's order alone
// decides progress: no rank waits on a send (docs/design-notes.md#pipeline-schedules). The sends
// in flight are requests of a side stream of the device (Note [CPU stream order] in
// device/cpu_device.h), so the model's Device::progress() between layers moves them.
#pragma once

#include <cassert>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "device/device.h"
#include "lattice/comm.h"
#include "lattice/train.h"
#include "model/gpt.h"

namespace lattice {

struct PipelineTimes {
  double forward = 0, backward = 0, wait = 0;  // seconds; wait = blocked on receives
};

// The boxes one rank ran in one recorded iteration (docs/design-notes.md#pipeline-timeline).
// Off until begin(); callers test on() before add(), so an iteration that is not recorded costs
// a branch per op and allocates nothing. begin() reserves room for every box the iteration can
// have, so recording allocates once per iteration, not per op. Not thread-safe.
class IterationTimeline {
 public:
  using Clock = std::chrono::steady_clock;
  // Forward, backward and at most one receive wait per chunk and micro-batch, the final send
  // drain, the data-parallel waits and the optimizer step.
  static size_t capacity(int chunks, int micro_batches) {
    return 4 * static_cast<size_t>(chunks) * micro_batches + 8;
  }
  // Starts recording; times are seconds from `origin` (the iteration's start).
  void begin(Clock::time_point origin, size_t capacity) {
    origin_ = origin;
    boxes_.clear();
    boxes_.reserve(capacity);
    on_ = true;
  }
  void end() { on_ = false; }
  bool on() const { return on_; }
  Clock::time_point origin() const { return origin_; }
  void add(TimelineBox::Kind kind, int stage, int micro_batch, Clock::time_point t0,
           Clock::time_point t1) {
    assert(boxes_.size() < boxes_.capacity() && "IterationTimeline::capacity() too small");
    boxes_.push_back({kind, stage, micro_batch, seconds_from_origin(t0), seconds_from_origin(t1)});
  }
  // A box already in seconds from the origin (a device's marks).
  void add_seconds(TimelineBox::Kind kind, int stage, int micro_batch, double start, double end) {
    assert(boxes_.size() < boxes_.capacity() && "IterationTimeline::capacity() too small");
    boxes_.push_back({kind, stage, micro_batch, start, end});
  }
  const std::vector<TimelineBox>& boxes() const { return boxes_; }

 private:
  double seconds_from_origin(Clock::time_point t) const {
    return std::chrono::duration<double>(t - origin_).count();
  }
  bool on_ = false;
  Clock::time_point origin_;
  std::vector<TimelineBox> boxes_;
};

template <typename T>
class PipelineExecutor {
 public:
  // Fills micro-batch `micro_batch`'s tokens and targets (B*T each).
  using Loader = std::function<Status(int micro_batch, int32_t* tokens, int32_t* targets)>;

  using Model = GptModel<T>;
  using Activations = GptActivations<T>;

  // chunks[c] holds virtual stage c * stages + stage, on `device` (a CPU device: the sends ride
  // its side stream's request queue). pp may be null when stages == 1. Errors: a device
  // without host side streams.
  static Result<std::unique_ptr<PipelineExecutor>> create(std::vector<Model*> chunks,
                                                          Device& device, Comm* pp, int stages,
                                                          int stage);

  // One training iteration: every micro-batch forward and backward in schedule order,
  // gradients accumulated into each chunk's arena (scaled by grad_scale per token).
  // dropout_seed(mb) keys micro-batch mb's masks. Returns the sum of the micro-batches' mean
  // losses on the last virtual stage's rank, 0 elsewhere.
  Result<double> train(int micro_batches, const Loader& load,
                       const std::function<uint64_t(int)>& dropout_seed, float grad_scale);
  // Forward only, no dropout: the sum of the micro-batches' mean losses (last stage), else 0.
  // Its forward passes and waits are not added to times() (training phases only, as
  // Megatron's timers; docs/design-notes.md#phase-times).
  Result<double> evaluate(int micro_batches, const Loader& load);

  // Boxes of forward, backward and receive waits go to `timeline` while it is on (may be null).
  void set_timeline(IterationTimeline* timeline) { timeline_ = timeline; }
  const PipelineTimes& times() const { return times_; }  // training iterations, summed
  void reset_times() { times_ = PipelineTimes{}; }
  // Bytes of the send buffers (the activations, in the device's categories, are not counted).
  size_t buffer_bytes() const;

 private:
  PipelineExecutor(std::vector<Model*> chunks, Device& device, Stream& sends, Comm* pp, int stages,
                   int stage);
  // A chunk's activations, made by its model as micro-batches in flight need them.
  struct Pool {
    std::vector<std::unique_ptr<Activations>> all;
    std::vector<Activations*> free;
  };
  // A send's copy of its data, reusable once `sent` has completed.
  struct Outgoing {
    std::vector<T> data;
    Event sent;
  };
  bool first_virtual(int chunk) const { return chunk == 0 && stage_ == 0; }
  bool last_virtual(int chunk) const {
    return chunk == static_cast<int>(chunks_.size()) - 1 && stage_ == stages_ - 1;
  }
  int tag(int virtual_stage, int micro_batch, int direction) const;
  Result<Activations*> acquire(int chunk);
  void release(int chunk, Activations* acts);
  Status send(const T* data, size_t count, int peer, int tag);
  // Blocks for (virtual_stage, micro_batch)'s activation or gradient from `peer`.
  Status receive(T* data, size_t count, int peer, int virtual_stage, int micro_batch,
                 int direction);
  bool recording() const { return timeline_ && timeline_->on(); }
  Status drain_sends();
  Status forward_one(int chunk, int micro_batch, const Loader& load, uint64_t seed,
                     float grad_scale, double& loss_sum, Activations* acts);
  // The mean of a post chunk's token losses (N, in accum_t<T>), read from the device.
  Result<double> mean_loss(const Activations& acts);
  // Adds the chunks' op marks to their profilers (the device has run every op: the CPU's).
  void collect_op_times();

  std::vector<Model*> chunks_;
  Device& device_;
  Stream& sends_;  // a side stream of device_ whose queue holds the sends in flight
  Comm* pp_;
  int stages_, stage_;
  std::vector<Pool> pools_;
  std::vector<std::vector<Activations*>> in_flight_;  // [chunk][micro_batch]
  std::vector<std::unique_ptr<Outgoing>> outgoing_;
  std::vector<int32_t> tokens_, targets_;  // (B, T)
  std::vector<accum_t<T>> losses_;         // (B, T)
  PipelineTimes times_;
  IterationTimeline* timeline_ = nullptr;
};

}  // namespace lattice
