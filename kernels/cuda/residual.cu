// Residual add with hidden dropout and its backward, drawing kernels.h's counter-based mask
// (lattice/dropout_hash.h, shared with the CPU op) so both backends drop the same elements.
// Element-wise in fp32 whatever the storage type (16-bit activations are rounded once, on
// store).
#include "common.cuh"
#include "lattice/dropout_hash.h"

namespace lattice::kernels::cuda {
namespace {

// out (n) = residual (n, may be null) + dropout(x (n))
template <typename T>
__global__ void residual_dropout_kernel(T* out, const T* residual, const T* x, size_t n,
                                        uint32_t threshold, float keep_scale, uint64_t key,
                                        size_t index_offset, bool dropout) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float kept = to_float(x[i]);
    if (dropout) kept = dropout_keep(key, index_offset + i, threshold) ? kept * keep_scale : 0.0f;
    out[i] = from_float<T>((residual ? to_float(residual[i]) : 0.0f) + kept);
  }
}

// dx (n) = mask * dout / (1 - p)
template <typename T>
__global__ void dropout_backward_kernel(T* dx, const T* dout, size_t n, uint32_t threshold,
                                        float keep_scale, uint64_t key, size_t index_offset) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dx[i] = from_float<T>(
        dropout_keep(key, index_offset + i, threshold) ? to_float(dout[i]) * keep_scale : 0.0f);
}

template <typename T>
void forward(Context& ctx, T* out, const T* residual, const T* x, size_t n, float p, uint64_t key,
             size_t index_offset) {
  const float keep_scale = p > 0.0f ? static_cast<float>(1.0 / (1.0 - p)) : 1.0f;
  residual_dropout_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
      dev(out), dev(residual), dev(x), n, dropout_threshold(p), keep_scale, key, index_offset,
      p > 0.0f);
  check_launch(ctx, "residual_dropout_forward");
}

template <typename T>
void backward(Context& ctx, T* dx, const T* dout, size_t n, float p, uint64_t key,
              size_t index_offset) {
  if (p == 0.0f) {
    if (dx != dout)
      cudaMemcpyAsync(dx, dout, n * sizeof(T), cudaMemcpyDeviceToDevice, stream_of(ctx));
    check_launch(ctx, "dropout_backward");
    return;
  }
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
  dropout_backward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
      dev(dx), dev(dout), n, dropout_threshold(p), keep_scale, key, index_offset);
  check_launch(ctx, "dropout_backward");
}

}  // namespace

void residual_dropout_forward(Context& ctx, float* out, const float* residual, const float* x,
                              size_t n, float p, uint64_t key, size_t index_offset) {
  forward(ctx, out, residual, x, n, p, key, index_offset);
}
void residual_dropout_forward(Context& ctx, bf16* out, const bf16* residual, const bf16* x,
                              size_t n, float p, uint64_t key, size_t index_offset) {
  forward(ctx, out, residual, x, n, p, key, index_offset);
}
void residual_dropout_forward(Context& ctx, fp16* out, const fp16* residual, const fp16* x,
                              size_t n, float p, uint64_t key, size_t index_offset) {
  forward(ctx, out, residual, x, n, p, key, index_offset);
}
void dropout_backward(Context& ctx, float* dx, const float* dout, size_t n, float p, uint64_t key,
                      size_t index_offset) {
  backward(ctx, dx, dout, n, p, key, index_offset);
}
void dropout_backward(Context& ctx, bf16* dx, const bf16* dout, size_t n, float p, uint64_t key,
                      size_t index_offset) {
  backward(ctx, dx, dout, n, p, key, index_offset);
}
void dropout_backward(Context& ctx, fp16* dx, const fp16* dout, size_t n, float p, uint64_t key,
                      size_t index_offset) {
  backward(ctx, dx, dout, n, p, key, index_offset);
}

}  // namespace lattice::kernels::cuda
