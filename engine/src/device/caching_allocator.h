// A caching device-memory allocator: freed blocks go back to a bin of their size class and
// are reused without another cudaMalloc (which synchronises the device and costs ~1 ms).
// Memory is accounted by the categories of the CPU MemoryReport (train.h), with current and
// peak bytes, and the fragmentation figure reserved - in use (rounding to size classes plus
// cached free blocks). The device calls sit behind DeviceMemoryBackend, so the bookkeeping
// is tested on the CPU with a fake backend (tests/device/test_device_memory.cpp).
//
// Thread safety: every member of CachingAllocator may be called from any thread; one mutex
// guards the bins and the statistics. The backend is only called with that mutex held.
// Non-goals: splitting cached blocks (a block serves only its own size class), per-stream
// pools (the engine runs one compute stream per device; a block freed while a kernel on
// another stream still reads it must be freed after that stream is synchronised).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/memory_category.h"
#include "lattice/train.h"

namespace lattice {

// Where the bytes come from: cudaMalloc / cudaFree on a device (make_cuda_memory_backend),
// a fake in tests.
class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  // nullptr when the device is out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr, size_t bytes) = 0;
};

struct AllocatorStats {
  std::array<CategoryUsage, kMemoryCategories> categories{};
  size_t in_use = 0, peak_in_use = 0;      // requested bytes of live blocks
  size_t reserved = 0, peak_reserved = 0;  // bytes held from the backend (live + cached)
  uint64_t allocations = 0;                // allocate() calls that returned a block
  uint64_t cache_hits = 0;                 // ... served from a bin
  uint64_t backend_allocations = 0;        // backend allocate() calls that succeeded
  uint64_t cache_flushes = 0;              // out-of-memory retries after emptying the cache
  size_t fragmentation() const { return reserved - in_use; }
  const CategoryUsage& of(MemoryCategory c) const { return categories[static_cast<int>(c)]; }
};

class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<DeviceMemoryBackend> backend);
  // Returns every block, cached or live, to the backend: live blocks must no longer be used.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (size_class(bytes) reserved). On a backend failure the cache
  // is emptied and the allocation retried once; nullptr when that fails too.
  void* allocate(size_t bytes, MemoryCategory category);
  // Returns a block from allocate() to its bin; nullptr is ignored. Freeing a pointer this
  // allocator did not hand out is a programmer error (assert).
  void free(void* ptr);
  // Releases every cached (free) block to the backend.
  void empty_cache();
  AllocatorStats stats() const;

  // Size classes: multiples of 512 bytes up to 1 MiB, above that the next of 2^k * {1, 1.25,
  // 1.5, 1.75}: at most 25 % (1 MiB region: 512 bytes) rounding per block, and few bins.
  static size_t size_class(size_t bytes);

 private:
  struct Live {
    size_t bytes, class_bytes;
    MemoryCategory category;
  };
  void release_cached_locked();

  mutable std::mutex mutex_;
  std::unique_ptr<DeviceMemoryBackend> backend_;
  std::unordered_map<size_t, std::vector<void*>> bins_;  // class bytes -> cached blocks
  std::unordered_map<void*, Live> live_;
  AllocatorStats stats_;
};

// The allocator's figures in the memory report's shape (lattice/train.h), so a GPU rank
// reports the same categories as a CPU rank; peak_rss carries the peak reserved bytes.
MemoryReport memory_report_of(const AllocatorStats& stats);

// cudaMalloc / cudaFree on the current device (engine/src/device/cuda_memory_backend.cpp,
// built only with CUDA).
std::unique_ptr<DeviceMemoryBackend> make_cuda_memory_backend();

}  // namespace lattice
