// Megatron's initialisation of one parameter tensor, shared by the CPU model
// (GptModel::init_weights) and the device model (GpuGpt::init_weights), so both start from the
// same bits: weights ~ N(0, std), output projections (linear_proj, linear_fc2) ~
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

}  // namespace lattice
