// Device runtime for tests, benchmarks and the engine's device layer: device queries, plain
// memory, the Context (stream, cuBLASLt handle, workspaces) and a stream timer.
// Non-goal: caching allocation (engine/src/device/caching_allocator.h).
#include <cstdio>

#include "common.cuh"

namespace lattice::kernels::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "unknown device";
  return prop.name;
}

std::string set_device(int device) {
  const cudaError_t rc = cudaSetDevice(device);
  if (rc == cudaSuccess) return "";
  return "cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(rc);
}

void* device_malloc(size_t bytes) {
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes == 0 ? 1 : bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return ptr;
}

void device_free(void* ptr) {
  if (ptr) cudaFree(ptr);
}

// These run on the legacy default stream, which the Contexts' non-blocking streams do not
// wait for, and a pageable cudaMemcpy / cudaMemset may return before the device has the
// data: hence the device-wide synchronisation, which makes them complete on return.
void copy_to_device(void* dst, const void* host_src, size_t bytes) {
  cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice);
  cudaDeviceSynchronize();
}

void copy_to_host(void* host_dst, const void* src, size_t bytes) {
  cudaDeviceSynchronize();
  cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost);
}

void fill_nan(void* ptr, size_t bytes) {
  cudaMemset(ptr, 0xff, bytes);
  cudaDeviceSynchronize();
}

void memory_info(size_t* free_bytes, size_t* total_bytes) {
  if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) *free_bytes = *total_bytes = 0;
}

std::unique_ptr<Context> Context::create(std::string* error) {
  auto impl = std::make_unique<Impl>();
  auto fail = [&](const char* what, const std::string& why) {
    if (error) *error = std::string(what) + ": " + why;
    if (impl->scratch) cudaFree(impl->scratch);
    if (impl->lt_workspace) cudaFree(impl->lt_workspace);
    if (impl->lt) cublasLtDestroy(impl->lt);
    if (impl->stream) cudaStreamDestroy(impl->stream);
    return std::unique_ptr<Context>();
  };
  int device = 0;
  if (cudaError_t rc = cudaGetDevice(&device); rc != cudaSuccess)
    return fail("cudaGetDevice", cudaGetErrorString(rc));
  cudaDeviceGetAttribute(&impl->sm_count, cudaDevAttrMultiProcessorCount, device);
  if (cudaError_t rc = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
      rc != cudaSuccess)
    return fail("cudaStreamCreate", cudaGetErrorString(rc));
  if (cublasStatus_t rc = cublasLtCreate(&impl->lt); rc != CUBLAS_STATUS_SUCCESS)
    return fail("cublasLtCreate", cublasLtGetStatusString(rc));
  if (cudaError_t rc = cudaMalloc(&impl->lt_workspace, kLtWorkspaceBytes); rc != cudaSuccess)
    return fail("cudaMalloc (cuBLASLt workspace)", cudaGetErrorString(rc));
  if (cudaError_t rc = cudaMalloc(&impl->scratch, kScratchDoubles * sizeof(double));
      rc != cudaSuccess)
    return fail("cudaMalloc (reduction scratch)", cudaGetErrorString(rc));
  return std::unique_ptr<Context>(new Context(std::move(impl)));
}

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Context::~Context() {
  cudaStreamSynchronize(impl_->stream);
  cudaFree(impl_->scratch);
  cudaFree(impl_->lt_workspace);
  cublasLtDestroy(impl_->lt);
  cudaStreamDestroy(impl_->stream);
}

Stream Context::stream() const {
  return impl_->stream;
}

std::string Context::synchronize() {
  const cudaError_t rc = cudaStreamSynchronize(impl_->stream);
  if (rc != cudaSuccess)
    record_error(std::string("cudaStreamSynchronize: ") + cudaGetErrorString(rc));
  return error_;
}

StreamTimer::StreamTimer(Context& ctx) : ctx_(ctx) {
  cudaEventCreate(reinterpret_cast<cudaEvent_t*>(&start_));
  cudaEventCreate(reinterpret_cast<cudaEvent_t*>(&stop_));
}

StreamTimer::~StreamTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void StreamTimer::start() {
  cudaEventRecord(static_cast<cudaEvent_t>(start_), stream_of(ctx_));
}

float StreamTimer::stop_ms() {
  cudaEventRecord(static_cast<cudaEvent_t>(stop_), stream_of(ctx_));
  cudaEventSynchronize(static_cast<cudaEvent_t>(stop_));
  float ms = 0;
  cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_));
  return ms;
}

}  // namespace lattice::kernels::cuda
