// The CachingAllocator's device backend: cudaMalloc / cudaFree through the CUDA kernels'
// runtime API (lattice/cuda_kernels.h), so no CUDA header is needed here. Built only with CUDA.
#include "device/caching_allocator.h"
#include "lattice/cuda_kernels.h"

namespace lattice {
namespace {

class CudaMemoryBackend final : public DeviceMemoryBackend {
 public:
  void* allocate(size_t bytes) override { return kernels::cuda::device_malloc(bytes); }
  void release(void* ptr, size_t /*bytes*/) override { kernels::cuda::device_free(ptr); }
};

}  // namespace

std::unique_ptr<DeviceMemoryBackend> make_cuda_memory_backend() {
  return std::make_unique<CudaMemoryBackend>();
}

}  // namespace lattice
