// adamw.h's AdamW: the shard's pieces as multi-tensor descriptors of the device's op list.
#include "optim/adamw.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "core/host_memory.h"
#include "device/cpu_device.h"
#include "device/device.h"

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

template <typename A>
AdamW<A>::AdamW(std::unique_ptr<Device> own, Device* device, OptimizerShard shard,
                const OptimizerConfig& config, bool holds_master)
    : own_device_(std::move(own)),
      device_(device ? *device : *own_device_),
      ops_(device_.ops<A>()),
      shard_(std::move(shard)),
      config_(config),
      holds_master_(holds_master && !std::is_same_v<A, G>) {
  const size_t n = shard_.state_numel;
  m_ = static_cast<G*>(device_.allocate(bytes_of<G>(n), MemoryCategory::kOptimizer));
  v_ = static_cast<G*>(device_.allocate(bytes_of<G>(n), MemoryCategory::kOptimizer));
  if (holds_master_)
    master_ = static_cast<G*>(device_.allocate(bytes_of<G>(n), MemoryCategory::kOptimizer));
  norm_ = static_cast<double*>(device_.allocate(sizeof(double), MemoryCategory::kWorkspace));
  if (!allocated()) return;
  device_.zero(m_, n * sizeof(G), device_.compute());
  device_.zero(v_, n * sizeof(G), device_.compute());
  spans_.resize(shard_.pieces.size());
}

template <typename A>
Result<std::unique_ptr<AdamW<A>>> AdamW<A>::create(Device& device, OptimizerShard shard,
                                                   const OptimizerConfig& config,
                                                   bool holds_master) {
  if (!device.ops<A>())
    return Status::invalid_argument("AdamW: " + device.describe() +
                                    " has no op list for the run's compute type");
  const size_t bytes = bytes_of<G>(shard.state_numel);
  std::unique_ptr<AdamW> adam(new AdamW(nullptr, &device, std::move(shard), config, holds_master));
  if (!adam->allocated())
    return device.out_of_memory(MemoryCategory::kOptimizer, (adam->holds_master_ ? 3 : 2) * bytes);
  return adam;
}

template <typename A>
AdamW<A>::AdamW(const ParamLayout& layout, const OptimizerConfig& config,
                const std::vector<ArenaRange>& owned)
    : AdamW(std::make_unique<CpuDevice>(), nullptr, owned_shard(layout, owned), config, false) {
  if (!allocated()) throw OutOfMemory(MemoryCategory::kOptimizer, bytes_of<G>(shard_.state_numel));
}

template <typename A>
AdamW<A>::~AdamW() {
  device_.free(m_);
  device_.free(v_);
  device_.free(master_);
  device_.free(norm_);
}

template <typename A>
Status AdamW<A>::load_master(const G* values, size_t offset, size_t n) {
  assert(master_);
  for (const OptimizerPiece& p : shard_.pieces) {
    const size_t begin = std::max(p.offset, offset), end = std::min(p.offset + p.numel, offset + n);
    if (begin < end)
      device_.copy(master_ + p.state + (begin - p.offset), values + (begin - offset),
                   (end - begin) * sizeof(G), CopyKind::kHostToDevice, device_.compute());
  }
  return device_.synchronize(device_.compute());
}

template <typename A>
double AdamW<A>::sum_squares(const G* grads, NormPart part) {
  norm_tensors_.clear();
  norm_sizes_.clear();
  for (const OptimizerPiece& p : shard_.pieces) {
    if (!p.counts_in_norm) continue;
    if (part != NormPart::kAll && p.expert_parallel != (part == NormPart::kExperts)) continue;
    norm_tensors_.push_back(grads + p.grad_offset);
    norm_sizes_.push_back(p.numel);
  }
  if (norm_sizes_.empty()) return 0;
  ops_->sum_squares(norm_, norm_tensors_.data(), norm_sizes_.data(),
                    static_cast<int>(norm_sizes_.size()));
  double host = 0;
  device_.copy(&host, norm_, sizeof host, CopyKind::kDeviceToHost, device_.compute());
  (void)device_.synchronize(device_.compute());  // an error stays the device's
  return host;
}

template <typename A>
void AdamW<A>::update(G* params, const G* grads, double lr, double clip_coeff, A* compute_copy) {
  step_++;
  kernels::AdamWParams p;
  p.lr = static_cast<float>(lr);
  p.beta1 = config_.adam_beta1;
  p.beta2 = config_.adam_beta2;
  p.eps = config_.adam_eps;
  p.step = step_;
  p.weight_decay = config_.weight_decay;
  for (size_t i = 0; i < shard_.pieces.size(); i++) {
    const OptimizerPiece& piece = shard_.pieces[i];
    AdamWSpan<A>& s = spans_[i];
    s.param = master_ ? master_ + piece.state : params + piece.offset;
    s.grad = grads + piece.grad_offset;
    s.m = m_ + piece.state;
    s.v = v_ + piece.state;
    s.param_copy = compute_copy ? compute_copy + piece.offset : nullptr;
    s.n = piece.numel;
    s.decay = piece.decay;
  }
  // Clipping scales each gradient on its way into the step (the grads are left as they are).
  ops_->adamw_update(spans_.data(), static_cast<int>(spans_.size()), p,
                     static_cast<G>(clip_coeff < 1.0 ? clip_coeff : 1.0));
}

template <typename A>
double AdamW<A>::step(G* params, const G* grads, double lr) {
  const double norm = std::sqrt(sum_squares(grads));
  if (!std::isfinite(norm)) return norm;  // inf/NaN gradients: skip the update entirely
  update(params, grads, lr, clip_coefficient(norm, config_.clip_grad));
  return norm;
}

template <typename A>
std::vector<typename AdamW<A>::StateView> AdamW<A>::state_views() {
  std::vector<StateView> out;
  out.reserve(shard_.pieces.size());
  for (const OptimizerPiece& p : shard_.pieces)
    out.push_back({p.offset, p.numel, m_ + p.state, v_ + p.state});
  return out;
}

template class AdamW<float>;
template class AdamW<double>;
template class AdamW<bf16>;
template class AdamW<fp16>;

}  // namespace lattice
