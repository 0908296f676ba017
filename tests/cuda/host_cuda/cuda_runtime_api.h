// A stand-in for the CUDA runtime header, for test_gpu_model_on_host only: engine/src/gpu/
// gpu_model.cpp compiled on the CPU against gpu_ops_on_host.cpp. "Device" memory is host
// memory and every asynchronous copy happens at once. Just the calls gpu_model.cpp makes.
#pragma once

#include <cstddef>
#include <cstring>

struct CUstream_st;
using cudaStream_t = CUstream_st*;
enum cudaError_t { cudaSuccess = 0 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice
};

inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t = nullptr) {
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                                   cudaStream_t = nullptr) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
