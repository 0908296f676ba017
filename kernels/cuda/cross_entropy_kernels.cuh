// Cross-entropy kernels (launchers in cross_entropy.cu), kept apart so that tests/kernels/cuda/
// test_kernels_emulated.cpp also runs them on the CPU under host_emulation.h.
#pragma once

#ifdef __CUDACC__
#include "common.cuh"
#endif
#include "reduce.cuh"

namespace lattice::kernels::cuda {
namespace {

constexpr int kThreads = 512;

// A row whose target is negative (kernels.h's kIgnoreIndex) carries no loss and no gradient:
// loss 0 and, when dlogits is wanted, a zero row. Every thread of the row's block calls it.
__device__ void ignore_row(float* losses, float* dlogits, size_t row, int V) {
  if (threadIdx.x == 0) losses[row] = 0.0f;
  if (!dlogits) return;
  float* d = dlogits + row * V;
  for (int i = threadIdx.x; i < V; i += blockDim.x) d[i] = 0.0f;
}

// losses (N); dlogits (N, V) or null; logits (N, V); one block per row.
__global__ void softmax_cross_entropy_kernel(float* losses, float* dlogits, const float* logits,
                                             const int32_t* targets, int V, float grad_scale) {
  const size_t row = blockIdx.x;
  const float* x = logits + row * V;
  const int target = targets[row];
  if (target < 0) {  // uniform over the block: no thread reaches the reductions below
    ignore_row(losses, dlogits, row, V);
    return;
  }
  const float target_logit = x[target];
  float maxv = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) maxv = fmaxf(maxv, x[i]);
  maxv = block_max(maxv);
  double sum = 0.0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(x[i] - maxv);
  sum = block_sum(sum);
  if (threadIdx.x == 0)
    losses[row] = static_cast<float>(log(sum) - static_cast<double>(target_logit - maxv));
  if (!dlogits) return;
  float* d = dlogits + row * V;
  const float g = static_cast<float>(grad_scale / sum);
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    d[i] = expf(x[i] - maxv) * g - (i == target ? grad_scale : 0.0f);
}

// row_max (N) = max over this rank's columns.
__global__ void shard_max_kernel(float* row_max, const float* logits, int V) {
  const float* x = logits + static_cast<size_t>(blockIdx.x) * V;
  float maxv = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) maxv = fmaxf(maxv, x[i]);
  maxv = block_max(maxv);
  if (threadIdx.x == 0) row_max[blockIdx.x] = maxv;
}

// sum_exp (N) = sum exp(x - row_max); target_logit (N) = x[target] when held here, else 0
// (so 0 for an ignored row's negative target).
__global__ void shard_sums_kernel(double* sum_exp, float* target_logit, const float* logits,
                                  const float* row_max, const int32_t* targets, int vocab_begin,
                                  int V) {
  const float* x = logits + static_cast<size_t>(blockIdx.x) * V;
  const float maxv = row_max[blockIdx.x];
  double sum = 0.0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(x[i] - maxv);
  sum = block_sum(sum);
  if (threadIdx.x == 0) {
    sum_exp[blockIdx.x] = sum;
    const int local = targets[blockIdx.x] - vocab_begin;
    target_logit[blockIdx.x] = local >= 0 && local < V ? x[local] : 0.0f;
  }
}

// losses (N) = log(sum_exp) - (target_logit - row_max); dlogits (N, V) = (softmax - onehot) g.
__global__ void shard_finish_kernel(float* losses, float* dlogits, const float* logits,
                                    const float* row_max, const double* sum_exp,
                                    const float* target_logit, const int32_t* targets,
                                    int vocab_begin, int V, float grad_scale) {
  const size_t row = blockIdx.x;
  if (targets[row] < 0) {
    ignore_row(losses, dlogits, row, V);
    return;
  }
  const float maxv = row_max[row];
  if (threadIdx.x == 0)
    losses[row] =
        static_cast<float>(log(sum_exp[row]) - static_cast<double>(target_logit[row] - maxv));
  if (!dlogits) return;
  const float* x = logits + row * V;
  float* d = dlogits + row * V;
  const float g = static_cast<float>(grad_scale / sum_exp[row]);
  const int local = targets[row] - vocab_begin;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    d[i] = expf(x[i] - maxv) * g - (i == local ? grad_scale : 0.0f);
}

}  // namespace
}  // namespace lattice::kernels::cuda
