// AdamW for the GPU trainer over one model's fp32 arena (gpu_model.h): one multi-tensor launch
// per step, Megatron's parameter groups (no decay on biases and norms), fp32 moments indexed
// like the parameter arena (the alignment gaps between tensors unused), and the 16-bit compute
// copy written from the updated master weights. Also the arena's share of the global gradient
// norm (each parameter counted once over the model-parallel group: counts_in_norm).
#pragma once

#include <vector>

#include "device/caching_allocator.h"
#include "gpu/gpu_model.h"
#include "lattice/cuda_kernels.h"
#include "lattice/train_options.h"
#include "model/param_layout.h"

namespace lattice::gpu {

class GpuAdamW {
 public:
  // master, grads (numel of layout) and copy (none for fp32 compute) belong to the model.
  // The moments come from `memory` (kOptimizer); ok() is false when it is out of memory.
  GpuAdamW(const ParamLayout& layout, float* master, const float* grads, cu::ComputeCopy copy,
           CachingAllocator& memory);
  ~GpuAdamW();
  GpuAdamW(const GpuAdamW&) = delete;
  GpuAdamW& operator=(const GpuAdamW&) = delete;

  bool ok() const { return m_ && v_ && norm_; }
  float* exp_avg() { return m_; }     // (numel)
  float* exp_avg_sq() { return v_; }  // (numel)
  void zero_state(cu::Context& ctx);
  // Sum of this rank's squared gradients that count in the global norm. Waits for the stream.
  double sum_squares(cu::Context& ctx);
  // One AdamW step (step counts from 1); every gradient is multiplied by grad_scale first
  // (loss-scale unscaling and clipping in one).
  void step(cu::Context& ctx, const OptimizerConfig& c, double lr, int step, float grad_scale);

 private:
  CachingAllocator& memory_;
  float* m_ = nullptr;      // (numel)
  float* v_ = nullptr;      // (numel)
  double* norm_ = nullptr;  // (1)
  size_t numel_ = 0;
  std::vector<cu::AdamWTensor> tensors_;
  std::vector<const float*> norm_spans_;  // gradients counted in the global norm
  std::vector<size_t> norm_sizes_;
};

}  // namespace lattice::gpu
