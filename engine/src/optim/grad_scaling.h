// The loss-scaling part of a training step (train/trainer.cpp, every device): Megatron's
// MixedPrecisionOptimizer.step around the LossScaler (loss_scaler.h). The loss gradient is
// multiplied by loss_scale() before backward;
// once the gradients are final (reduced over data-parallel ranks) each rank unscales its own
// and reports whether any element is inf or NaN; agree() takes the maximum of those flags over
// the whole world, so that every rank (every tensor-, pipeline- and data-parallel peer) skips
// the same optimizer steps, then updates the scaler. docs/gpu.md#loss-scaling.
// Not thread-safe (one per rank).
#pragma once

#include <cstddef>

#include "lattice/comm.h"
#include "lattice/status.h"
#include "lattice/train_options.h"
#include "optim/loss_scaler.h"

namespace lattice {

// The scaler a run's options ask for: --fp16 (dynamic unless --loss-scale fixes it), or --bf16
// with --loss-scale (Megatron's ConstantGradScaler). Disabled otherwise: scale 1, no check.
class GradScaling {
 public:
  explicit GradScaling(const TrainOptions& o);
  GradScaling(bool enabled, const LossScalerOptions& options);

  bool enabled() const { return enabled_; }
  // The factor backward's loss gradient carries this iteration (1 when disabled).
  double loss_scale() const { return enabled_ ? scaler_.scale() : 1.0; }
  // After unscaling: `local_found_inf` = this rank's unscaled gradients hold an inf or NaN.
  // All-reduces the flag (max) over `world`, updates the scaler and returns true when every
  // rank must skip the optimizer step. A failed collective comes back as its Status.
  Result<bool> agree(bool local_found_inf, Comm& world);
  uint64_t skipped_steps() const { return scaler_.skipped_steps(); }
  // For checkpoints: the scaler's state (scale 0 when disabled), and restoring it on --load
  // (ignored when disabled or when the checkpoint had none).
  LossScaler::State state() const {
    return enabled_ ? scaler_.state() : LossScaler::State{0, 0, 0};
  }
  void restore(const LossScaler::State& s) {
    if (enabled_ && s.scale > 0) scaler_.restore(s);
  }

 private:
  bool enabled_;
  LossScaler scaler_;
};

LossScalerOptions loss_scaler_options(const TrainOptions& o);

// grads (n) *= inv_scale; returns true when any element is (or becomes) inf or NaN.
template <typename T>
bool unscale_and_check(T* grads, size_t n, double inv_scale);

}  // namespace lattice
