// Host memory as the "device" of the caching allocator, for the tests that run the GPU
// trainer's code over the host op list (gpu_ops_on_host.cpp).
#pragma once

#include <cstdlib>

#include "device/caching_allocator.h"

namespace lattice::testing {

class HostMemory final : public DeviceMemoryBackend {
 public:
  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  void release(void* ptr, size_t) override { std::free(ptr); }
};

}  // namespace lattice::testing
