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
  // Global index of element i of the slice (row-major): the slice is `outer` runs of
  // split_size x inner elements (inner: the dimensions after split_dim), run o starting at
  // (o * global_shape[split_dim] + split_begin) * inner (SwiGLU's (2, F, C) FC1 splits dim 1).
  size_t global_index(size_t i) const {
    if (split_dim < 0) return i;
    size_t inner = 1;
    for (size_t d = split_dim + 1; d < global_shape.size(); d++) inner *= global_shape[d];
    const size_t run = static_cast<size_t>(split_size) * inner;
    const size_t o = i / run, within = i % run;
    return (o * static_cast<size_t>(global_shape[split_dim]) + split_begin) * inner + within;
  }
};

}  // namespace lattice::checkpoint_format
