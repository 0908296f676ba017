// AdamW for the GPU trainer over one model's fp32 arena (gpu_model.h): one multi-tensor launch
// per step, Megatron's parameter groups (no decay on biases and norms), fp32 moments for the
// arena part the rank owns (optimizer_shard.h: the whole arena, moments indexed like it; or,
// with the distributed optimizer, its data-parallel shard, moments packed), and the 16-bit
// compute copy written from the updated master weights. Also the owned part's share of the
// global gradient norm (each parameter counted once over the model-parallel group:
// counts_in_norm; once over the data-parallel group when distributed).
#pragma once

#include <vector>

#include "device/caching_allocator.h"
#include "gpu/gpu_model.h"
#include "gpu/optimizer_shard.h"
#include "lattice/cuda_kernels.h"
#include "lattice/train_options.h"

namespace lattice::gpu {

class GpuAdamW {
 public:
  // master, grads (numel of the layout) and copy (none for fp32 compute) belong to the
  // model; `shard` says which of their elements this optimizer updates. The moments
  // (shard.state_numel each) come from `memory` (kOptimizer); ok() is false when it is out of
  // memory.
  GpuAdamW(OptimizerShard shard, float* master, const float* grads, cu::ComputeCopy copy,
           CachingAllocator& memory);
  ~GpuAdamW();
  GpuAdamW(const GpuAdamW&) = delete;
  GpuAdamW& operator=(const GpuAdamW&) = delete;

  bool ok() const { return m_ && v_ && norm_; }
  const OptimizerShard& shard() const { return shard_; }
  float* exp_avg() { return m_; }     // (state_numel)
  float* exp_avg_sq() { return v_; }  // (state_numel)
  void zero_state(cu::Context& ctx);
  // Sum of this rank's squared owned gradients that count in the global norm. Waits for the
  // stream.
  double sum_squares(cu::Context& ctx);
  // One AdamW step on the owned elements (step counts from 1); every gradient is multiplied
  // by grad_scale first (loss-scale unscaling and clipping in one).
  void step(cu::Context& ctx, const OptimizerConfig& c, double lr, int step, float grad_scale);

 private:
  OptimizerShard shard_;
  CachingAllocator& memory_;
  float* m_ = nullptr;                    // (state_numel)
  float* v_ = nullptr;                    // (state_numel)
  double* norm_ = nullptr;                // (1)
  std::vector<cu::AdamWTensor> tensors_;  // one per piece of the shard
  std::vector<const float*> norm_spans_;  // gradients counted in the global norm
  std::vector<size_t> norm_sizes_;
};

}  // namespace lattice::gpu
