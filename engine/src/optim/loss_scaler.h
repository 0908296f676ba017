// Megatron's loss scaling for fp16 training (megatron/core/optimizer/grad_scaler.py): the loss
// is multiplied by scale() before backward, gradients are divided by it before the step, and
// a step whose gradients hold an inf or NaN is skipped. The dynamic scaler halves the scale
// after `hysteresis` such steps and doubles it after `growth_interval` clean steps in a row.
// Pure bookkeeping (the inf check is the global norm being non-finite), so it is tested on
// the CPU. bf16 and fp32 training use no scaler (scale 1). Not thread-safe (one per rank).
#pragma once

#include <cstdint>

namespace lattice {

struct LossScalerOptions {
  double initial_scale = 4294967296.0;  // --initial-loss-scale (2^32)
  double min_scale = 1.0;               // --min-loss-scale
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 1000;  // --loss-scale-window
  int hysteresis = 2;          // --hysteresis
  double static_scale = 0.0;   // --loss-scale: > 0 fixes the scale (no updates)
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});

  double scale() const { return scale_; }
  double inverse_scale() const { return 1.0 / scale_; }
  // After backward: found_inf = the (unscaled) gradients hold an inf or NaN on any rank.
  // Returns true when the optimizer step must be skipped (found_inf), and updates the scale.
  bool update(bool found_inf);
  uint64_t skipped_steps() const { return skipped_; }
  // Checkpointed state (Megatron's DynamicGradScaler.state_dict).
  struct State {
    double scale;
    int growth_tracker, hysteresis_tracker;
  };
  State state() const { return {scale_, growth_tracker_, hysteresis_tracker_}; }
  void restore(const State& s) {  // a static --loss-scale stays as given
    if (options_.static_scale > 0) return;
    scale_ = s.scale;
    growth_tracker_ = s.growth_tracker;
    hysteresis_tracker_ = s.hysteresis_tracker;
  }

 private:
  LossScalerOptions options_;
  double scale_;
  int growth_tracker_ = 0;
  int hysteresis_tracker_;
  uint64_t skipped_ = 0;
};

}  // namespace lattice
