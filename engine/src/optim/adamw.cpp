#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/host_memory.h"
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

double clip_coefficient(double norm, float clip_grad) {
  if (clip_grad <= 0.0f) return 1.0;
  return std::min(1.0, clip_grad / (norm + 1e-6));
}

template <typename T>
AdamW<T>::AdamW(const ParamLayout& layout, const OptimizerConfig& config,
                const std::vector<ArenaRange>& owned)
    : config_(config) {
  std::vector<ArenaRange> ranges = owned;
  if (ranges.empty()) ranges.push_back({0, layout.total_numel()});
  size_t state = 0;
  for (const ParamTensor& t : layout.tensors())
    for (const ArenaRange& r : ranges) {
      const size_t begin = std::max(r.first, t.offset),
                   end = std::min(r.second, t.offset + t.numel);
      if (begin >= end) continue;
      segments_.push_back({begin, end - begin, state, t.decay, t.counts_in_norm});
      state += end - begin;
    }
  host_assign(m_, state, MemoryCategory::kOptimizer);
  host_assign(v_, state, MemoryCategory::kOptimizer);
}

template <typename T>
double AdamW<T>::sum_squares(const T* grads) const {
  std::vector<const T*> tensors;
  std::vector<size_t> sizes;
  for (const Segment& s : segments_)
    if (s.counts_in_norm) {
      tensors.push_back(grads + s.offset);
      sizes.push_back(s.numel);
    }
  return kernels::sum_squares(tensors.data(), sizes.data(), static_cast<int>(tensors.size()));
}

template <typename T>
void AdamW<T>::update(T* params, T* grads, double lr, double clip_coeff) {
  step_++;
  kernels::AdamWParams p;
  p.lr = static_cast<float>(lr);
  p.beta1 = config_.adam_beta1;
  p.beta2 = config_.adam_beta2;
  p.eps = config_.adam_eps;
  p.step = step_;
  p.weight_decay = config_.weight_decay;
  std::vector<kernels::AdamWTensor<T>> tensors;
  tensors.reserve(segments_.size());
  for (const Segment& s : segments_)
    tensors.push_back({params + s.offset, grads + s.offset, m_.data() + s.state,
                       v_.data() + s.state, s.numel, s.decay});
  // Clipping scales each gradient on its way into the step (the grads are left as they are).
  kernels::adamw_update(tensors.data(), static_cast<int>(tensors.size()), p,
                        static_cast<T>(clip_coeff < 1.0 ? clip_coeff : 1.0));
}

template <typename T>
double AdamW<T>::step(T* params, T* grads, double lr) {
  const double norm = std::sqrt(sum_squares(grads));
  if (!std::isfinite(norm)) return norm;  // inf/NaN gradients: skip the update entirely
  update(params, grads, lr, clip_coefficient(norm, config_.clip_grad));
  return norm;
}

template <typename T>
std::vector<typename AdamW<T>::StateView> AdamW<T>::state_views() {
  std::vector<StateView> out;
  for (const Segment& s : segments_)
    out.push_back({s.offset, s.numel, m_.data() + s.state, v_.data() + s.state});
  return out;
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace lattice
