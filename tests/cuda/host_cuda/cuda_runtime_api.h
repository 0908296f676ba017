// A stand-in for the CUDA runtime header, for test_gpu_model_on_host and
// test_gpu_optimizer_on_host only: engine/src/gpu/ files compiled on the CPU against
// gpu_ops_on_host.cpp. "Device" memory is host memory, every asynchronous copy happens at once
// and every event has completed when recorded (nothing is queued). Just the calls those files
// make.
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

// Events (grad_reducer.cpp): the work before a record has always run already.
struct CUevent_st {};
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaEventDisableTiming = 2;
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) {
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
