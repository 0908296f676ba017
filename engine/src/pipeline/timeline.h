// What a rank's pipeline executor (pipeline/executor.h) measures of its iterations: the summed
// phase times and, on reported iterations, the boxes of the pipeline timeline
// (docs/design-notes.md#pipeline-timeline). The trainer adds its own boxes (optimizer,
// data-parallel and embedding communication) from the host clock.
#pragma once

#include <cassert>
#include <chrono>
#include <vector>

#include "lattice/train.h"

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

}  // namespace lattice
