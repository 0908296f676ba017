// The categories memory is accounted by, on the host (core/host_memory.h) and on a device
// (device/caching_allocator.h), as the memory report (train.h) and the run store show them.
#pragma once

#include <cstddef>

namespace lattice {

enum class MemoryCategory { kWeights, kGrads, kOptimizer, kActivations, kWorkspace, kCommBuffers };
inline constexpr int kMemoryCategories = 6;
// "weights", "grads", "optimizer state", "activations", "workspace", "comm buffers".
const char* memory_category_name(MemoryCategory category);

// One category's bytes in use now and at most so far (requested bytes, not rounded).
struct CategoryUsage {
  size_t current = 0, peak = 0;
};

}  // namespace lattice
