// gpu_adamw.h's AdamW: the shard's pieces as multi-tensor AdamW descriptors.
#include "gpu/gpu_adamw.h"

#include <cuda_runtime_api.h>

#include <utility>

namespace lattice::gpu {

GpuAdamW::GpuAdamW(OptimizerShard shard, float* master, const float* grads, cu::ComputeCopy copy,
                   CachingAllocator& memory)
    : shard_(std::move(shard)), memory_(memory) {
  const size_t n = shard_.state_numel;
  m_ = static_cast<float*>(memory.allocate(n * sizeof(float), MemoryCategory::kOptimizer));
  v_ = static_cast<float*>(memory.allocate(n * sizeof(float), MemoryCategory::kOptimizer));
  norm_ = static_cast<double*>(memory.allocate(sizeof(double), MemoryCategory::kWorkspace));
  // The global norm counts each parameter once over the TP group (counts_in_norm: not the
  // replicas on tp_rank > 0), and with the distributed optimizer once over the DP group (each
  // rank its shard). TP 1 without it: one span, the whole arena.
  for (const ArenaRange& r : shard_.norm_spans) {
    norm_spans_.push_back(grads + r.first);
    norm_sizes_.push_back(r.second - r.first);
  }
  // A piece cut out of a tensor by a shard boundary keeps the tensor's decay flag.
  for (const OptimizerPiece& p : shard_.pieces) {
    cu::AdamWTensor a;
    a.param = master + p.offset;
    a.grad = grads + p.offset;
    a.m = m_ ? m_ + p.state : nullptr;
    a.v = v_ ? v_ + p.state : nullptr;
    a.param_copy = copy.at(p.offset);
    a.n = p.numel;
    a.decay = p.decay;
    tensors_.push_back(a);
  }
}

GpuAdamW::~GpuAdamW() {
  memory_.free(m_);
  memory_.free(v_);
  memory_.free(norm_);
}

void GpuAdamW::zero_state(cu::Context& ctx) {
  for (float* moment : {m_, v_})
    if (cudaMemsetAsync(moment, 0, shard_.state_numel * sizeof(float), ctx.stream()) != cudaSuccess)
      ctx.record_error("cudaMemsetAsync (AdamW moments) failed");
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
