// Warp and block reductions and the dynamic shared memory of the CUDA kernels. They use
// only CUDA's own primitives (__shfl_xor_sync, __syncthreads, __shared__), so the kernel
// headers (*_kernels.cuh) that include this file also compile as host code under
// tests/kernels/cuda/host_emulation.h, which supplies those primitives on the CPU.
#pragma once

#include <cmath>

namespace lattice::kernels::cuda {

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. Fixed tree order: deterministic. Contains __syncthreads().
template <typename T>
__device__ T block_sum(T x) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  x = lane < warps ? partial[lane] : T(0);
  return warp_sum(x);
}

__device__ inline float block_max(float x) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  x = lane < warps ? partial[lane] : -INFINITY;
  return warp_max(x);
}

// Deterministic column sums of (N, C) row-major terms, the weight and bias gradients of
// LayerNorm and of the linear layers: a stage-1 kernel (layernorm_backward_params_kernel,
// bias_grad_kernel) sums each of R row blocks per column, 32 columns x 8 row lanes per block
// (grid ceil(C / 32) x R), into partial[(t R + r) C + c] for term t; column_totals_kernel then
// adds the R partials of each column in row-block order to out_t. R is a function of N, C and
// the scratch size alone (column_split), so the summation order is the same on every run. With
// R == 1 and no scratch big enough the stage-1 kernel adds to out_t itself (partial null).
namespace {  // a kernel defined in a header: one copy per translation unit

inline int column_split(int N, int C, int terms, size_t scratch_floats) {
  const size_t fit = scratch_floats / (static_cast<size_t>(terms) * C);
  const int by_rows = (N + 63) / 64;  // at least 64 rows per block: 8 per row lane
  int r = by_rows < 64 ? by_rows : 64;
  if (static_cast<size_t>(r) > fit) r = static_cast<int>(fit);
  return r < 1 ? 1 : r;
}

// out0[c] += sum_r partial[r C + c]; out1 (may be null) likewise from the second term's rows.
__global__ void column_totals_kernel(float* out0, float* out1, const float* partial, int R, int C) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C) return;
  float t0 = 0.0f, t1 = 0.0f;
  for (int r = 0; r < R; r++) t0 += partial[static_cast<size_t>(r) * C + col];
  out0[col] += t0;
  if (!out1) return;
  for (int r = 0; r < R; r++) t1 += partial[static_cast<size_t>(R + r) * C + col];
  out1[col] += t1;
}

}  // namespace

#ifdef __CUDACC__  // host_emulation.h has its own
// The block's dynamic shared memory (the launch's third <<<>>> argument), as floats.
__device__ __forceinline__ float* dynamic_shared_floats() {
  extern __shared__ float lattice_dynamic_smem[];
  return lattice_dynamic_smem;
}
#endif

}  // namespace lattice::kernels::cuda
