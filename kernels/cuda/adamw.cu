// Multi-tensor AdamW (apex's multi_tensor_apply idea: many parameter tensors per launch, each
// block one chunk of one tensor), the global gradient norm's sum of squares, scaling, and the
// loss scaler's unscale-and-check (its kernel in adamw_kernels.cuh).
// The sum of squares is deterministic: a fixed grid writes per-block partials that one
// block adds in a fixed order. Non-goal: fusing the norm into the AdamW launch (the clip
// factor must be known before the step).
#include <cmath>

#include "adamw_kernels.cuh"
#include "common.cuh"

namespace lattice::kernels::cuda {
namespace {

constexpr int kMaxTensors = 24;     // per launch; the descriptors travel as a kernel argument
constexpr size_t kChunk = 1 << 16;  // elements per block
constexpr int kThreads = 256;
constexpr int kNormBlocks = 1024;  // partials of the sum of squares (<= kScratchDoubles)

struct AdamWBatch {
  float* param[kMaxTensors];
  const float* grad[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  void* param_copy[kMaxTensors];  // bf16 or fp16 (copy_fp16), or null
  bool copy_fp16[kMaxTensors];
  size_t n[kMaxTensors];
  float weight_decay[kMaxTensors];
  int first_block[kMaxTensors + 1];  // tensor t owns blocks [first_block[t], first_block[t+1])
  int count;
};

struct AdamWScalars {
  float lr, beta1, beta2, eps, c1, c2, grad_scale;
};

__global__ void adamw_kernel(AdamWBatch batch, AdamWScalars s) {
  int t = 0;
  while (t + 1 < batch.count && static_cast<int>(blockIdx.x) >= batch.first_block[t + 1]) t++;
  const size_t begin = (blockIdx.x - batch.first_block[t]) * kChunk;
  const size_t end = min(batch.n[t], begin + kChunk);
  float* param = batch.param[t];
  float* m = batch.m[t];
  float* v = batch.v[t];
  const float* grad = batch.grad[t];
  const float wd = batch.weight_decay[t];
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float g = grad[i] * s.grad_scale;
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = param[i] - s.lr * ((mi * s.c1) / (sqrtf(vi * s.c2) + s.eps) + wd * param[i]);
    param[i] = p;
    if (batch.param_copy[t]) {  // the same for the whole block: no divergence
      if (batch.copy_fp16[t])
        static_cast<__half*>(batch.param_copy[t])[i] = __float2half_rn(p);
      else
        static_cast<__nv_bfloat16*>(batch.param_copy[t])[i] = __float2bfloat16_rn(p);
    }
  }
}

// partial (kNormBlocks) (+)= per-block sums of x^2 over a grid-stride walk of x (n).
__global__ void sum_squares_partial_kernel(double* partial, const float* x, size_t n,
                                           bool accumulate) {
  double s = 0.0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    s += static_cast<double>(x[i]) * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = accumulate ? partial[blockIdx.x] + s : s;
}

// result (1) = sum of partial (count), one block.
__global__ void sum_partials_kernel(double* result, const double* partial, int count) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *result = s;
}

__global__ void scale_kernel(float* x, size_t n, float s) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] *= s;
}

}  // namespace

void adamw_update(Context& ctx, const AdamWTensor* tensors, int count, const AdamWParams& p,
                  float grad_scale) {
  AdamWScalars s{};
  s.lr = p.lr, s.beta1 = p.beta1, s.beta2 = p.beta2, s.eps = p.eps, s.grad_scale = grad_scale;
  s.c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), p.step)));
  s.c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), p.step)));
  AdamWBatch batch{};
  auto flush = [&] {
    if (batch.count == 0) return;
    const int blocks = batch.first_block[batch.count];
    if (blocks > 0) {
      adamw_kernel<<<blocks, kThreads, 0, stream_of(ctx)>>>(batch, s);
      check_launch(ctx, "adamw_update");
    }
    batch = AdamWBatch{};
  };
  for (int i = 0; i < count; i++) {
    const AdamWTensor& t = tensors[i];
    const size_t chunks = (t.n + kChunk - 1) / kChunk;
    // A tensor of more than INT_MAX / 2 chunks does not exist (2^46 elements).
    if (batch.count == kMaxTensors ||
        batch.first_block[batch.count] + chunks > static_cast<size_t>(1 << 30))
      flush();
    const int k = batch.count++;
    batch.param[k] = t.param;
    batch.grad[k] = t.grad;
    batch.m[k] = t.m;
    batch.v[k] = t.v;
    batch.param_copy[k] = t.param_copy.data;
    batch.copy_fp16[k] = t.param_copy.type == ComputeCopy::Type::kFp16;
    batch.n[k] = t.n;
    batch.weight_decay[k] = t.decay ? p.weight_decay : 0.0f;
    batch.first_block[k + 1] = batch.first_block[k] + static_cast<int>(chunks);
  }
  flush();
}

void sum_squares(Context& ctx, double* result, const float* const* tensors, const size_t* sizes,
                 int count) {
  double* partial = ctx.impl().scratch;
  cudaMemsetAsync(partial, 0, kNormBlocks * sizeof(double), stream_of(ctx));
  for (int i = 0; i < count; i++) {
    if (sizes[i] == 0) continue;
    sum_squares_partial_kernel<<<kNormBlocks, kThreads, 0, stream_of(ctx)>>>(partial, tensors[i],
                                                                             sizes[i], true);
    check_launch(ctx, "sum_squares");
  }
  sum_partials_kernel<<<1, 1024, 0, stream_of(ctx)>>>(result, partial, kNormBlocks);
  check_launch(ctx, "sum_squares (final)");
}

double sum_squares(Context& ctx, const float* x, size_t n) {
  double* result = ctx.impl().scratch + kNormBlocks;
  sum_squares(ctx, result, &x, &n, 1);
  double host = 0.0;
  cudaMemcpyAsync(&host, result, sizeof host, cudaMemcpyDeviceToHost, stream_of(ctx));
  ctx.synchronize();
  return host;
}

void scale(Context& ctx, float* x, size_t n, float s) {
  scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(x, n, s);
  check_launch(ctx, "scale");
}

void unscale_and_check(Context& ctx, float* x, size_t n, float inv_scale, float* found_inf) {
  if (n == 0) return;
  unscale_and_check_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(
      x, n, inv_scale, found_inf);
  check_launch(ctx, "unscale_and_check");
}

}  // namespace lattice::kernels::cuda
