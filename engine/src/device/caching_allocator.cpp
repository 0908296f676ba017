// CachingAllocator (caching_allocator.h): size-class bins over a DeviceMemoryBackend, with
// the per-category accounting the memory report needs.
#include "device/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace lattice {

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kWeights:
      return "weights";
    case MemoryCategory::kGrads:
      return "grads";
    case MemoryCategory::kOptimizer:
      return "optimizer state";
    case MemoryCategory::kActivations:
      return "activations";
    case MemoryCategory::kWorkspace:
      return "workspace";
    case MemoryCategory::kCommBuffers:
      return "comm buffers";
  }
  return "unknown";
}

size_t CachingAllocator::size_class(size_t bytes) {
  constexpr size_t kSmallStep = 512, kSmallLimit = size_t{1} << 20;
  if (bytes <= kSmallLimit)
    return std::max(kSmallStep, (bytes + kSmallStep - 1) / kSmallStep * kSmallStep);
  const size_t power = std::bit_floor(bytes);  // 2^k <= bytes < 2^(k+1)
  const size_t quarter = power / 4;
  return (bytes + quarter - 1) / quarter * quarter;  // 2^k * {1, 1.25, 1.5, 1.75, 2}
}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemoryBackend> backend)
    : backend_(std::move(backend)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
  for (auto& [ptr, live] : live_) backend_->release(ptr, live.class_bytes);
}

void* CachingAllocator::allocate(size_t bytes, MemoryCategory category) {
  const size_t class_bytes = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  if (auto bin = bins_.find(class_bytes); bin != bins_.end() && !bin->second.empty()) {
    ptr = bin->second.back();
    bin->second.pop_back();
    stats_.cache_hits++;
  } else {
    ptr = backend_->allocate(class_bytes);
    if (!ptr) {  // out of memory: give the cached blocks back and try once more
      stats_.cache_flushes++;
      release_cached_locked();
      ptr = backend_->allocate(class_bytes);
      if (!ptr) return nullptr;
    }
    stats_.backend_allocations++;
    stats_.reserved += class_bytes;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  }
  live_.emplace(ptr, Live{bytes, class_bytes, category});
  stats_.allocations++;
  stats_.in_use += bytes;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  CategoryUsage& usage = stats_.categories[static_cast<int>(category)];
  usage.current += bytes;
  usage.peak = std::max(usage.peak, usage.current);
  return ptr;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(ptr);
  assert(it != live_.end() && "CachingAllocator::free of a pointer it did not allocate");
  if (it == live_.end()) return;
  const Live live = it->second;
  live_.erase(it);
  stats_.in_use -= live.bytes;
  stats_.categories[static_cast<int>(live.category)].current -= live.bytes;
  bins_[live.class_bytes].push_back(ptr);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

MemoryReport memory_report_of(const AllocatorStats& stats) {
  MemoryReport report;
  report.weights = stats.of(MemoryCategory::kWeights).current;
  report.grads = stats.of(MemoryCategory::kGrads).current;
  report.optimizer = stats.of(MemoryCategory::kOptimizer).current;
  report.activations = stats.of(MemoryCategory::kActivations).current;
  report.workspace = stats.of(MemoryCategory::kWorkspace).current;
  report.comm_buffers = stats.of(MemoryCategory::kCommBuffers).current;
  report.peak_rss = stats.peak_reserved;
  report.fragmentation = stats.fragmentation();
  return report;
}

void CachingAllocator::release_cached_locked() {
  for (auto& [class_bytes, blocks] : bins_) {
    for (void* ptr : blocks) backend_->release(ptr, class_bytes);
    stats_.reserved -= class_bytes * blocks.size();
    blocks.clear();
  }
}

}  // namespace lattice
