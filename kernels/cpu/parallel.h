// When an element-wise loop is worth an OpenMP region; private to the CPU kernels.
// A region wakes every thread and ends in a barrier (microseconds on an idle machine,
// milliseconds where another process holds a core): loops over fewer elements than this run on
// the calling thread, as PyTorch's at::parallel_for grain size (32768). Training tensors are far
// larger; a decoding step at a small batch is below it (docs/inference.md, "Threads").
#pragma once

#include <algorithm>
#include <cstddef>

#include "isa_region.h"

namespace lattice::kernels::cpu {

inline constexpr size_t kMinParallelWork = size_t{1} << 15;

}  // namespace lattice::kernels::cpu

LATTICE_ISA_BEGIN

// f(begin, end) over [0, n) in blocks of kBlock elements, spread over the threads when n is
// at least kMinParallelWork. Each element's result does not depend on the thread count.
inline constexpr size_t kBlock = 4096;
template <typename F>
void for_blocks(size_t n, F f) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t b = 0; b < blocks; b++) f(b * kBlock, std::min(n, (b + 1) * kBlock));
}

LATTICE_ISA_END
