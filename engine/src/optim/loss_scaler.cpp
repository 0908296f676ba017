// LossScaler (loss_scaler.h): Megatron's DynamicGradScaler.update, step for step.
#include "optim/loss_scaler.h"

#include <algorithm>

namespace lattice {

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options),
      scale_(options.static_scale > 0 ? options.static_scale : options.initial_scale),
      hysteresis_tracker_(options.hysteresis) {}

bool LossScaler::update(bool found_inf) {
  if (found_inf) skipped_++;
  if (options_.static_scale > 0) return found_inf;
  if (found_inf) {
    growth_tracker_ = 0;
    hysteresis_tracker_--;
    if (hysteresis_tracker_ <= 0)
      scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    return true;
  }
  growth_tracker_++;
  if (growth_tracker_ == options_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = options_.hysteresis;
    scale_ *= options_.growth_factor;
  }
  return false;
}

}  // namespace lattice
