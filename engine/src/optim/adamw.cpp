#include "optim/adamw.h"

#include <cmath>

#include "lattice/kernels.h"

namespace lattice {

double learning_rate(const OptimizerConfig& c, int steps_taken, int decay_iters) {
  const double max_lr = c.lr, min_lr = c.min_lr;
  if (c.lr_warmup_iters > 0 && steps_taken <= c.lr_warmup_iters)
    return max_lr * steps_taken / c.lr_warmup_iters;
  if (c.lr_decay_style == "constant") return max_lr;
  if (steps_taken > decay_iters) return min_lr;
  const double span = decay_iters - c.lr_warmup_iters;
  const double ratio = span > 0 ? (steps_taken - c.lr_warmup_iters) / span : 1.0;
  double coeff = 0;
  if (c.lr_decay_style == "linear")
    coeff = 1.0 - ratio;
  else if (c.lr_decay_style == "cosine")
    coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (max_lr - min_lr);
}

template <typename T>
AdamW<T>::AdamW(const ParamLayout& layout, const OptimizerConfig& config)
    : config_(config), m_(layout.total_numel(), T(0)), v_(layout.total_numel(), T(0)) {
  for (const ParamTensor& t : layout.tensors()) {
    if (!groups_.empty() && groups_.back().decay == t.decay &&
        groups_.back().offset + groups_.back().numel <= t.offset) {
      groups_.back().numel = t.offset + t.numel - groups_.back().offset;
    } else {
      groups_.push_back({t.offset, t.numel, t.decay});
    }
  }
}

template <typename T>
double AdamW<T>::step(T* params, T* grads, double lr) {
  const size_t n = m_.size();
  const double norm = std::sqrt(kernels::sum_squares(grads, n));
  if (!std::isfinite(norm)) return norm;  // inf/NaN gradients: skip the update entirely
  if (config_.clip_grad > 0.0f) {
    const double coeff = config_.clip_grad / (norm + 1e-6);  // Megatron's clip_grad_norm
    if (coeff < 1.0) kernels::scale(grads, n, static_cast<T>(coeff));
  }
  step_++;
  kernels::AdamWParams p;
  p.lr = static_cast<float>(lr);
  p.beta1 = config_.adam_beta1;
  p.beta2 = config_.adam_beta2;
  p.eps = config_.adam_eps;
  p.step = step_;
  for (const Group& g : groups_) {
    p.weight_decay = g.decay ? config_.weight_decay : 0.0f;
    kernels::adamw_update(params + g.offset, grads + g.offset, m_.data() + g.offset,
                          v_.data() + g.offset, g.numel, p);
  }
  return norm;
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace lattice
