// Blocks of one device's memory taken together and freed together: a model's arenas and
// scratch, one micro-batch's activations (with the few host buffers that stage what the host
// reads of them: take_host). A failed allocation gives nullptr and is remembered, so a whole
// set can be taken and checked once (status()). Move-only; not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "device/device.h"
#include "lattice/status.h"

namespace lattice {

class DeviceBlocks {
 public:
  explicit DeviceBlocks(Device& device) : device_(&device) {}
  ~DeviceBlocks() { release(); }
  DeviceBlocks(DeviceBlocks&& other) noexcept { *this = std::move(other); }
  DeviceBlocks& operator=(DeviceBlocks&& other) noexcept {
    if (this == &other) return *this;
    release();
    device_ = other.device_;
    blocks_ = std::move(other.blocks_);
    other.blocks_.clear();
    host_ = std::move(other.host_);
    failed_bytes_ = other.failed_bytes_;
    failed_category_ = other.failed_category_;
    return *this;
  }
  DeviceBlocks(const DeviceBlocks&) = delete;
  DeviceBlocks& operator=(const DeviceBlocks&) = delete;

  // n elements of X under `category`; nullptr when the device is out of memory (the first
  // such failure is what status() reports).
  template <typename X>
  X* take(size_t n, MemoryCategory category) {
    const size_t bytes = n * sizeof(X);
    void* p = device_->allocate(bytes, category);
    if (!p) {
      if (failed_bytes_ == 0) {
        failed_bytes_ = bytes;
        failed_category_ = category;
      }
      return nullptr;
    }
    blocks_.push_back(p);
    return static_cast<X*>(p);
  }
  // n zeroed elements of host memory (a trivial X), freed with the blocks: where the host reads
  // a device buffer through a copy (Capabilities::host_addressable off), the copy's home.
  template <typename X>
  X* take_host(size_t n) {
    host_.push_back(std::make_unique<X[]>(n));
    return static_cast<X*>(host_.back().get());
  }
  // ok, or the device's out-of-memory sentence for the first allocation that failed.
  Status status() const {
    return failed_bytes_ > 0 ? device_->out_of_memory(failed_category_, failed_bytes_)
                             : Status::ok();
  }
  Device& device() const { return *device_; }

 private:
  void release() {
    for (void* p : blocks_) device_->free(p);
    blocks_.clear();
  }

  Device* device_ = nullptr;
  std::vector<void*> blocks_;
  std::vector<std::shared_ptr<void>> host_;  // take_host's, each deleted as its X[]
  size_t failed_bytes_ = 0;
  MemoryCategory failed_category_ = MemoryCategory::kWeights;
};

}  // namespace lattice
