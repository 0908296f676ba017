// AdamW over a model chunk's flat arena with Megatron's parameter groups (no weight decay on
// biases and norms), the learning-rate schedule, and global-norm clipping. With the
// distributed optimizer an AdamW owns only this data-parallel rank's ranges of the arena
// (optim/grad_buckets.h hands them out) and keeps moments for those alone.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "lattice/train_options.h"
#include "model/param_layout.h"

namespace lattice {

// Megatron's OptimizerParamScheduler, counted in optimizer steps already taken: iteration i
// (1-based) trains with learning_rate(config, i - 1, ...). Linear warm-up from 0 to lr over
// lr_warmup_iters (so with warm-up the first iteration's lr is 0, as in Megatron), then decay
// to min_lr at decay_iters, min_lr after.
double learning_rate(const OptimizerConfig& config, int steps_taken, int decay_iters);

// Megatron's clip_grad_norm: the factor gradients are scaled by (1 when no clipping applies).
double clip_coefficient(double norm, float clip_grad);

using ArenaRange = std::pair<size_t, size_t>;  // [begin, end) in elements

template <typename T>
class AdamW {
 public:
  // owned: the arena ranges this optimizer updates; empty means the whole arena.
  AdamW(const ParamLayout& layout, const OptimizerConfig& config,
        const std::vector<ArenaRange>& owned = {});

  // Sum of squared gradients over the owned elements that count in the global norm (each
  // parameter once over the model-parallel group; ParamTensor::counts_in_norm).
  double sum_squares(const T* grads) const;
  // One AdamW step on the owned elements with the gradients scaled by clip_coeff (when < 1) on
  // the way in; the gradients themselves are not written.
  void update(T* params, T* grads, double lr, double clip_coeff);
  // One process holding everything: norm, clip, step. Returns the norm before clipping; a
  // non-finite norm (inf/NaN gradients) skips the step: nothing changes.
  double step(T* params, T* grads, double lr);

  int steps_taken() const { return step_; }
  void set_steps_taken(int steps) { step_ = steps; }  // restoring a checkpoint
  // The owned part of each tensor: arena [offset, offset + numel) and its moments, for
  // checkpoints. Segments never span two tensors.
  struct StateView {
    size_t offset, numel;
    T* exp_avg;     // (numel)
    T* exp_avg_sq;  // (numel)
  };
  std::vector<StateView> state_views();
  size_t bytes() const { return (m_.size() + v_.size()) * sizeof(T); }
  const std::vector<T>& exp_avg() const { return m_; }
  const std::vector<T>& exp_avg_sq() const { return v_; }

 private:
  struct Segment {
    size_t offset, numel;  // in the arena
    size_t state;          // offset into m_ / v_
    bool decay, counts_in_norm;
  };
  std::vector<Segment> segments_;
  OptimizerConfig config_;
  std::vector<T> m_, v_;  // first and second moments of the owned elements
  int step_ = 0;
};

}  // namespace lattice
