// The categories memory is accounted by, on the host (core/host_memory.h) and on a device
// (device/caching_allocator.h), as the memory report (train.h) and the run store show them.
#pragma once

namespace lattice {

enum class MemoryCategory { kWeights, kGrads, kOptimizer, kActivations, kWorkspace, kCommBuffers };
inline constexpr int kMemoryCategories = 6;
// "weights", "grads", "optimizer state", "activations", "workspace", "comm buffers".
const char* memory_category_name(MemoryCategory category);

}  // namespace lattice
