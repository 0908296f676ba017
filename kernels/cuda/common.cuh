// Private helpers of the CUDA kernels: the Context's internals, error recording, bf16 and
// fp16 loads and stores; the reductions are in reduce.cuh. Included by .cu files only.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "lattice/cuda_kernels.h"
#include "reduce.cuh"

namespace lattice::kernels::cuda {

struct Context::Impl {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;  // (kLtWorkspaceBytes) for cuBLASLt's split-K and friends
  double* scratch = nullptr;     // (kScratchDoubles) partial sums of two-pass reductions
  int sm_count = 0;
};
inline constexpr size_t kLtWorkspaceBytes = 32u << 20;  // NVIDIA's advice for Hopper
inline constexpr int kScratchDoubles = 1 << 16;

inline cudaStream_t stream_of(Context& ctx) {
  return ctx.impl().stream;
}

// Records the launch error of the kernel just issued (if any) in ctx, naming the op.
inline void check_launch(Context& ctx, const char* op) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) ctx.record_error(std::string(op) + ": " + cudaGetErrorString(rc));
}

inline unsigned blocks_for(size_t n, unsigned threads) {
  const size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535u * 32u ? b : 65535u * 32u);
}

// Element type of the device code for a header type: bf16 -> __nv_bfloat16, fp16 -> __half.
template <typename T>
struct Device {
  using type = T;
};
template <>
struct Device<bf16> {
  using type = __nv_bfloat16;
};
template <>
struct Device<fp16> {
  using type = __half;
};
template <typename T>
auto* dev(T* p) {
  return reinterpret_cast<typename Device<T>::type*>(p);
}
template <typename T>
const auto* dev(const T* p) {
  return reinterpret_cast<const typename Device<T>::type*>(p);
}

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
// Round to nearest even; beyond 65504 (from 65520) the result is inf, never a saturated
// 65504, so an overflowing activation gradient stays visible to the loss scaler (docs/gpu.md).
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

}  // namespace lattice::kernels::cuda
