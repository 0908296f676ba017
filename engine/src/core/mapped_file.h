// A whole regular file mapped read-only: the one way the engine memory-maps its inputs
// (safetensors, indexed datasets). Move-only; the bytes stay valid while it lives. An empty
// file maps to an empty span (mmap refuses length 0).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "lattice/status.h"

namespace lattice {

class MappedFile {
 public:
  // io_error naming the path when it cannot be opened, is not a regular file, or cannot be
  // mapped.
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(map_), size_}; }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lattice
