// Warp and block reductions and the dynamic shared memory of the CUDA kernels. They use
// only CUDA's own primitives (__shfl_xor_sync, __syncthreads, __shared__), so the kernel
// headers (*_kernels.cuh) that include this file also compile as host code under
// tests/cuda/host_emulation.h, which supplies those primitives on the CPU.
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

#ifdef __CUDACC__  // host_emulation.h has its own
// The block's dynamic shared memory (the launch's third <<<>>> argument), as floats.
__device__ __forceinline__ float* dynamic_shared_floats() {
  extern __shared__ float lattice_dynamic_smem[];
  return lattice_dynamic_smem;
}
#endif

}  // namespace lattice::kernels::cuda
