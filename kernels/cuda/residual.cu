// Residual add with hidden dropout and its backward, drawing kernels.h's counter-based mask
// (lattice/dropout_hash.h, shared with the CPU op) so both backends drop the same elements.
#include "common.cuh"
#include "lattice/dropout_hash.h"

namespace lattice::kernels::cuda {
namespace {

// out (n) = residual (n, may be null) + dropout(x (n))
__global__ void residual_dropout_kernel(float* out, const float* residual, const float* x, size_t n,
                                        uint32_t threshold, float keep_scale, uint64_t key,
                                        size_t index_offset, bool dropout) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float kept = x[i];
    if (dropout) kept = dropout_keep(key, index_offset + i, threshold) ? kept * keep_scale : 0.0f;
    out[i] = (residual ? residual[i] : 0.0f) + kept;
  }
}

// dx (n) = mask * dout / (1 - p)
__global__ void dropout_backward_kernel(float* dx, const float* dout, size_t n, uint32_t threshold,
                                        float keep_scale, uint64_t key, size_t index_offset) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dx[i] = dropout_keep(key, index_offset + i, threshold) ? dout[i] * keep_scale : 0.0f;
}

}  // namespace

void residual_dropout_forward(Context& ctx, float* out, const float* residual, const float* x,
                              size_t n, float p, uint64_t key, size_t index_offset) {
  const float keep_scale = p > 0.0f ? static_cast<float>(1.0 / (1.0 - p)) : 1.0f;
  residual_dropout_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
      out, residual, x, n, dropout_threshold(p), keep_scale, key, index_offset, p > 0.0f);
  check_launch(ctx, "residual_dropout_forward");
}

void dropout_backward(Context& ctx, float* dx, const float* dout, size_t n, float p, uint64_t key,
                      size_t index_offset) {
  if (p == 0.0f) {
    if (dx != dout)
      cudaMemcpyAsync(dx, dout, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_of(ctx));
    check_launch(ctx, "dropout_backward");
    return;
  }
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
  dropout_backward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
      dx, dout, n, dropout_threshold(p), keep_scale, key, index_offset);
  check_launch(ctx, "dropout_backward");
}

}  // namespace lattice::kernels::cuda
