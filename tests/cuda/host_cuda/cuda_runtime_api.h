// A stand-in for the CUDA runtime header, for test_gpu_optimizer_on_host only: engine/src/gpu/
// files (gpu_adamw.cpp, grad_reducer.cpp) compiled on the CPU against gpu_ops_on_host.cpp.
// "Device" memory is host memory and every asynchronous copy or kernel happens at once, on the
// calling thread (the Context's stream is null), so an event recorded there has completed when
// recorded. (The GPU model and pipeline run on the CPU device instead since step 6 of
// docs/one-engine.md; the pending-send stream below served their messages and goes with this
// header in step 8.) Just the calls those files make.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "lattice/comm.h"

struct CUstream_st {
  std::unique_ptr<lattice::CommRequest> pending;  // the send in flight, if any
  uint64_t issued = 0;                            // operations queued so far
  uint64_t pending_seq = 0;                       // which of them `pending` is
  void complete() {
    if (pending) (void)pending->wait();  // a failed MPI operation ends the job itself
    pending.reset();
  }
};
struct CUevent_st {
  CUstream_st* stream = nullptr;  // where it was last recorded (null: the compute stream)
  uint64_t seq = 0;               // the operations queued there before it
};
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
enum cudaError_t { cudaSuccess = 0 };
constexpr unsigned cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2;

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new CUstream_st;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream) stream->complete();
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  cudaStreamSynchronize(stream);
  delete stream;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr) {
  event->stream = stream;
  event->seq = stream ? stream->issued : 0;
  return cudaSuccess;
}
// The waiting stream runs on the calling thread, so waiting is completing the event's work.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned = 0) {
  CUstream_st* s = event->stream;
  if (s && s->pending && s->pending_seq <= event->seq) s->complete();
  return cudaSuccess;
}
// The host waits likewise (grad_reducer.cpp: events on the compute stream, complete at once).
inline cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return cudaStreamWaitEvent(nullptr, event);
}
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
