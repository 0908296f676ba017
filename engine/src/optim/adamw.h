// AdamW over the flat arena with Megatron's parameter groups (no weight decay on biases and
// norms), global-norm gradient clipping, and the learning-rate schedule.
#pragma once

#include <string>
#include <vector>

#include "lattice/train_options.h"
#include "model/param_layout.h"

namespace lattice {

// Megatron's OptimizerParamScheduler, counted in optimizer steps already taken: iteration i
// (1-based) trains with learning_rate(config, i - 1, ...). Linear warm-up from 0 to lr over
// lr_warmup_iters (so with warm-up the first iteration's lr is 0, as in Megatron), then decay
// to min_lr at decay_iters, min_lr after.
double learning_rate(const OptimizerConfig& config, int steps_taken, int decay_iters);

template <typename T>
class AdamW {
 public:
  AdamW(const ParamLayout& layout, const OptimizerConfig& config);

  // Clips grads (n = arena size) to clip_grad by global L2 norm, steps, and returns the norm
  // measured before clipping. A non-finite norm (inf/NaN gradients) skips the step: params
  // and moments stay as they were and steps_taken() does not advance.
  double step(T* params, T* grads, double lr);
  int steps_taken() const { return step_; }
  size_t bytes() const { return (m_.size() + v_.size()) * sizeof(T); }
  const std::vector<T>& exp_avg() const { return m_; }
  const std::vector<T>& exp_avg_sq() const { return v_; }

 private:
  struct Group {
    size_t offset, numel;
    bool decay;
  };
  std::vector<Group> groups_;  // contiguous runs of tensors sharing the decay flag
  OptimizerConfig config_;
  std::vector<T> m_, v_;  // (arena) first and second moments
  int step_ = 0;
};

}  // namespace lattice
