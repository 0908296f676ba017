// Per-op wall-clock accounting for one rank: where a training step's time goes.
// Cheap enough to stay on (two clock reads per op call); not thread-safe, one per model.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace lattice {

enum class Op : int {
  kEmbedding,
  kLayerNorm,
  kMatmulForward,
  kMatmulBackward,
  kAttentionForward,
  kAttentionBackward,
  kGelu,
  kResidualDropout,
  kLmHeadForward,
  kLmHeadBackward,
  kCrossEntropy,
  kOptimizer,
  kGradNorm,
  kTensorParallelComm,
  kData,
  kCount
};
const char* op_name(Op op);

class Profiler {
 public:
  void add(Op op, double seconds) {
    seconds_[static_cast<int>(op)] += seconds;
    calls_[static_cast<int>(op)]++;
  }
  double seconds(Op op) const { return seconds_[static_cast<int>(op)]; }
  int64_t calls(Op op) const { return calls_[static_cast<int>(op)]; }
  double total_seconds() const;
  void reset() { *this = Profiler(); }

 private:
  std::array<double, static_cast<int>(Op::kCount)> seconds_{};
  std::array<int64_t, static_cast<int>(Op::kCount)> calls_{};
};

// Adds the scope's duration to `profiler` (if any) under `op`.
class ScopedOp {
 public:
  ScopedOp(Profiler* profiler, Op op)
      : profiler_(profiler), op_(op), start_(std::chrono::steady_clock::now()) {}
  ~ScopedOp() {
    if (profiler_)
      profiler_->add(
          op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  ScopedOp(const ScopedOp&) = delete;
  ScopedOp& operator=(const ScopedOp&) = delete;

 private:
  Profiler* profiler_;
  Op op_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace lattice
