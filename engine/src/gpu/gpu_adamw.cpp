// gpu_adamw.h's AdamW: the arena's tensors as multi-tensor AdamW descriptors.
#include "gpu/gpu_adamw.h"

#include <cuda_runtime_api.h>

namespace lattice::gpu {

GpuAdamW::GpuAdamW(const ParamLayout& layout, float* master, const float* grads,
                   cu::ComputeCopy copy, CachingAllocator& memory)
    : memory_(memory) {
  const size_t n = layout.total_numel();
  m_ = static_cast<float*>(memory.allocate(n * sizeof(float), MemoryCategory::kOptimizer));
  v_ = static_cast<float*>(memory.allocate(n * sizeof(float), MemoryCategory::kOptimizer));
  norm_ = static_cast<double*>(memory.allocate(sizeof(double), MemoryCategory::kWorkspace));
  // The global norm counts each parameter once over the TP group (counts_in_norm: not the
  // replicas on tp_rank > 0). A run of counted tensors is one span: the alignment gaps
  // inside it hold zero gradients. TP 1: one span, the whole arena.
  const std::vector<ParamTensor>& tensors = layout.tensors();
  for (size_t i = 0; i < tensors.size(); i++) {
    const ParamTensor& t = tensors[i];
    if (!t.counts_in_norm) continue;
    if (i > 0 && tensors[i - 1].counts_in_norm) {
      norm_sizes_.back() = t.offset + t.numel - static_cast<size_t>(norm_spans_.back() - grads);
    } else {
      norm_spans_.push_back(grads + t.offset);
      norm_sizes_.push_back(t.numel);
    }
  }
  for (const ParamTensor& t : layout.tensors()) {
    cu::AdamWTensor a;
    a.param = master + t.offset;
    a.grad = grads + t.offset;
    a.m = m_ ? m_ + t.offset : nullptr;
    a.v = v_ ? v_ + t.offset : nullptr;
    a.param_copy = copy.at(t.offset);
    a.n = t.numel;
    a.decay = t.decay;
    tensors_.push_back(a);
  }
  numel_ = n;
}

GpuAdamW::~GpuAdamW() {
  memory_.free(m_);
  memory_.free(v_);
  memory_.free(norm_);
}

void GpuAdamW::zero_state(cu::Context& ctx) {
  zero_async(ctx, m_, numel_ * sizeof(float));
  zero_async(ctx, v_, numel_ * sizeof(float));
}

double GpuAdamW::sum_squares(cu::Context& ctx) {
  if (norm_spans_.empty()) return 0;
  cu::sum_squares(ctx, norm_, norm_spans_.data(), norm_sizes_.data(),
                  static_cast<int>(norm_spans_.size()));
  double host = 0;
  if (cudaMemcpyAsync(&host, norm_, sizeof host, cudaMemcpyDeviceToHost, ctx.stream()) !=
      cudaSuccess)
    ctx.record_error("cudaMemcpyAsync (norm) failed");
  (void)ctx.synchronize();
  return host;
}

void GpuAdamW::step(cu::Context& ctx, const OptimizerConfig& c, double lr, int step,
                    float grad_scale) {
  kernels::AdamWParams p;
  p.lr = static_cast<float>(lr);
  p.beta1 = c.adam_beta1;
  p.beta2 = c.adam_beta2;
  p.eps = c.adam_eps;
  p.weight_decay = c.weight_decay;
  p.step = step;
  cu::adamw_update(ctx, tensors_.data(), static_cast<int>(tensors_.size()), p, grad_scale);
}

}  // namespace lattice::gpu
