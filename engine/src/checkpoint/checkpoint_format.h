// Pieces of the checkpoint format shared by the writer (checkpoint.cpp) and the reader
// (checkpoint_reader.cpp): file checksums and the map from a tensor slice to the global tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/status.h"

namespace lattice::checkpoint_format {

// CRC-32C of the whole file at `path`; *bytes receives its size.
Result<uint32_t> file_crc(const std::string& path, int64_t* bytes);
std::string hex(uint32_t v);  // "0a1b2c3d"

// A tensor split along split_dim (see ParamTensor): element i of the slice, row-major, is
// element global_index(i) of the global tensor.
struct SliceMap {
  std::vector<int64_t> global_shape;
  int split_dim;
  int64_t split_begin, split_size;
  size_t slice_numel() const {
    size_t n = 1;
    for (size_t d = 0; d < global_shape.size(); d++)
      n *= static_cast<size_t>(static_cast<int>(d) == split_dim ? split_size : global_shape[d]);
    return n;
  }
  // Global index of element i of the slice (row-major).
  size_t global_index(size_t i) const {
    if (split_dim < 0) return i;
    if (split_dim == 0) {
      size_t row = 1;
      for (size_t d = 1; d < global_shape.size(); d++) row *= global_shape[d];
      return split_begin * row + i;
    }
    const size_t width = split_size, cols = global_shape[1];
    return (i / width) * cols + split_begin + i % width;
  }
};

}  // namespace lattice::checkpoint_format
