// When an element-wise loop is worth an OpenMP region; private to the CPU kernels.
// A region wakes every thread and ends in a barrier (microseconds on an idle machine,
// milliseconds where another process holds a core): loops over fewer elements than this run on
// the calling thread, as PyTorch's at::parallel_for grain size (32768). Training tensors are far
// larger; a decoding step at a small batch is below it (docs/inference.md, "Threads").
#pragma once

#include <cstddef>

namespace lattice::kernels::cpu {

inline constexpr size_t kMinParallelWork = size_t{1} << 15;

}  // namespace lattice::kernels::cpu
