// Where GPT-2 drops activations, and the mask key of each site (model/gpt_layer.cpp), so that
// for one micro-batch seed every device and layout drops the same elements (the kernels draw
// kernels.h's counter-based mask from the key and each element's global index).
#pragma once

#include <cstdint>

#include "lattice/dropout_hash.h"

namespace lattice {

enum class DropoutSite {
  kEmbedding = 0,   // word + position embedding output (hidden dropout)
  kAttention = 1,   // attention probabilities (attention dropout)
  kProjection = 2,  // attention projection output, before the residual add (hidden dropout)
  kFc2 = 3,         // MLP output, before the residual add (hidden dropout)
};

// seed: the micro-batch's dropout seed; layer: the global layer index (-1 for the embedding).
inline uint64_t dropout_site_key(uint64_t seed, int layer, DropoutSite site) {
  return kernels::dropout_hash(seed,
                               static_cast<uint64_t>(layer + 1) * 4 + static_cast<uint64_t>(site));
}

// LoRA's dropout on the input of layer `layer`'s adapter on `linear` (0 qkv, 1 proj, 2 fc1,
// 3 fc2; Note [LoRA] in param_layout.h): a key of its own, derived from the layer's.
inline uint64_t lora_dropout_key(uint64_t seed, int layer, int linear) {
  return kernels::dropout_hash(dropout_site_key(seed, layer, DropoutSite::kAttention),
                               0x4c6f5241ull + static_cast<uint64_t>(linear));
}

}  // namespace lattice
