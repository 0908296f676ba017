// GradScaling (grad_scaling.h): the world-wide inf/NaN agreement around the LossScaler.
#include "optim/grad_scaling.h"

#include <cmath>

namespace lattice {

LossScalerOptions loss_scaler_options(const TrainOptions& o) {
  LossScalerOptions s;
  s.initial_scale = o.initial_loss_scale;
  s.min_scale = o.min_loss_scale;
  s.growth_interval = o.loss_scale_window;
  s.hysteresis = o.hysteresis;
  s.static_scale = o.loss_scale;
  return s;
}

GradScaling::GradScaling(const TrainOptions& o)
    : GradScaling(o.fp16 || (o.bf16 && o.loss_scale > 0), loss_scaler_options(o)) {}

GradScaling::GradScaling(bool enabled, const LossScalerOptions& options)
    : enabled_(enabled), scaler_(options) {}

Result<bool> GradScaling::agree(bool local_found_inf, Comm& world) {
  if (!enabled_) return local_found_inf;
  double found = local_found_inf ? 1.0 : 0.0;
  if (world.size() > 1)
    if (Status s = world.all_reduce(&found, 1, DType::kFloat64, ReduceOp::kMax); !s)
      return Status::internal("could not agree on skipping the step: " + s.message());
  return scaler_.update(found > 0);
}

template <typename T>
bool unscale_and_check(T* grads, size_t n, double inv_scale) {
  const T s = static_cast<T>(inv_scale);
  bool bad = false;
  // No early exit: every element must be unscaled anyway.
#pragma omp parallel for reduction(|| : bad) schedule(static)
  for (size_t i = 0; i < n; i++) {
    grads[i] *= s;
    bad = bad || !std::isfinite(grads[i]);
  }
  return bad;
}

template bool unscale_and_check<float>(float*, size_t, double);
template bool unscale_and_check<double>(double*, size_t, double);

}  // namespace lattice
