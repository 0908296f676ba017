// init_tensor and init_arena (init_weights.h): one global tensor drawn in T, its slice copied
// out; every tensor of a layout into its arena.
#include "model/init_weights.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/host_memory.h"
#include "lattice/dropout_hash.h"

namespace lattice {

namespace {
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}
}  // namespace

template <typename T>
size_t init_tensor(const ModelConfig& config, const ParamTensor& t, uint64_t seed, T* out) {
  // LoRA (Note [LoRA] in param_layout.h), as Megatron-Bridge: B zero, so the adapted model
  // starts as the base; A xavier-uniform over its global (r, in): U(-a, a), a = sqrt(6 / (in + r)).
  const bool lora_b = t.name.find(".adapter.linear_out.") != std::string::npos;
  const bool lora_a = t.name.find(".adapter.linear_in.") != std::string::npos;
  if (lora_b) {
    std::fill(out, out + t.numel, T(0));
    return 0;
  }
  // Megatron's "layernorm" names, HF CLIP's "layer_norm1" and "pre_layrnorm" (the vision tower).
  const bool is_norm = t.name.find("layernorm") != std::string::npos ||
                       t.name.find("layer_norm") != std::string::npos ||
                       t.name.find("layrnorm") != std::string::npos;
  const bool is_bias = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
  if (is_bias) {
    std::fill(out, out + t.numel, T(0));
    return 0;
  }
  if (is_norm) {
    std::fill(out, out + t.numel, T(1));
    return 0;
  }
  const double out_std = config.init_method_std / std::sqrt(2.0 * config.num_layers);
  const bool is_output = t.name.find("linear_proj.weight") != std::string::npos ||
                         t.name.find("linear_fc2.weight") != std::string::npos;
  std::mt19937_64 rng(kernels::dropout_hash(seed, fnv1a(t.name)));
  std::normal_distribution<double> normal(0.0, is_output ? out_std : config.init_method_std);
  size_t global_numel = 1;
  for (int64_t dim : t.global_shape) global_numel *= static_cast<size_t>(dim);
  std::vector<T> global;
  try {
    global.resize(global_numel);
  } catch (const std::exception&) {  // bad_alloc, length_error
    return bytes_of<T>(global_numel);
  }
  if (lora_a) {
    const double bound =
        std::sqrt(6.0 / static_cast<double>(t.global_shape[0] + t.global_shape[1]));
    std::uniform_real_distribution<double> uniform(-bound, bound);
    for (size_t i = 0; i < global_numel; i++) global[i] = static_cast<T>(uniform(rng));
  } else {
    for (size_t i = 0; i < global_numel; i++) global[i] = static_cast<T>(normal(rng));
  }
  slice_from_global(t, global.data(), out);
  return 0;
}

template <typename T>
size_t init_arena(const ModelConfig& config, const ParamLayout& layout, uint64_t seed, T* arena) {
  const std::vector<ParamTensor>& tensors = layout.tensors();
  std::fill(arena, arena + layout.total_numel(), T(0));
  size_t failed_bytes = 0;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t index = 0; index < tensors.size(); index++) {
    const ParamTensor& t = tensors[index];
    const size_t failed = init_tensor(config, t, seed, arena + t.offset);
    if (failed > 0) {
#pragma omp critical(lattice_init_arena_failure)
      failed_bytes = std::max(failed_bytes, failed);
    }
  }
  return failed_bytes;
}

template size_t init_tensor(const ModelConfig&, const ParamTensor&, uint64_t, float*);
template size_t init_tensor(const ModelConfig&, const ParamTensor&, uint64_t, double*);
template size_t init_arena(const ModelConfig&, const ParamLayout&, uint64_t, float*);
template size_t init_arena(const ModelConfig&, const ParamLayout&, uint64_t, double*);

}  // namespace lattice
