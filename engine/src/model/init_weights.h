// Megatron's initialisation of one parameter tensor, or of a whole arena, shared by the model
// (GptModel::init_weights), checkpoint tools and the generator's random model, so all start
// from the same bits: weights ~ N(0, std), output projections (linear_proj, linear_fc2) ~
// N(0, std / sqrt(2 L)), biases 0, norms weight 1 bias 0. Each global tensor draws from its own
// stream keyed by (seed, name) and a rank keeps its slice, so the model is the same whatever the
// layout. Non-goal: where the slice goes (the models' arenas, a device's staging buffer).
#pragma once

#include <cstddef>
#include <cstdint>

#include "lattice/model_config.h"
#include "model/param_layout.h"

namespace lattice {

// out (t.numel) = this rank's slice of tensor t, drawn for `seed`. Returns 0, or the bytes of
// the global tensor's host buffer that could not be allocated (out then unchanged). Thread-safe:
// tensors may be drawn in parallel.
template <typename T>
size_t init_tensor(const ModelConfig& config, const ParamTensor& t, uint64_t seed, T* out);

// arena (layout.total_numel(), host memory) = every tensor of `layout` drawn by init_tensor, the
// alignment gaps between tensors zero. Tensors are drawn in parallel (OpenMP): the bits do not
// depend on the thread count, and a 1.3B model takes seconds, not a minute. Returns 0, or the
// bytes of the largest global tensor whose host buffer could not be allocated (no exception
// leaves the parallel loop).
template <typename T>
size_t init_arena(const ModelConfig& config, const ParamLayout& layout, uint64_t seed, T* arena);

}  // namespace lattice
