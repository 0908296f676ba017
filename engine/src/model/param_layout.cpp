#include "param_layout.h"

namespace lattice {

ParamLayout::ParamLayout(const ModelConfig& c) {
  const int64_t C = c.hidden_size, F = c.ffn();
  add("embedding.word_embeddings.weight", {c.padded_vocab_size(), C}, true);
  add("embedding.position_embeddings.weight", {c.max_positions(), C}, true);
  for (int l = 0; l < c.num_layers; l++) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C}, false);
    add(p + "input_layernorm.bias", {C}, false);
    add(p + "self_attention.linear_qkv.weight", {3 * C, C}, true);
    add(p + "self_attention.linear_qkv.bias", {3 * C}, false);
    add(p + "self_attention.linear_proj.weight", {C, C}, true);
    add(p + "self_attention.linear_proj.bias", {C}, false);
    add(p + "pre_mlp_layernorm.weight", {C}, false);
    add(p + "pre_mlp_layernorm.bias", {C}, false);
    add(p + "mlp.linear_fc1.weight", {F, C}, true);
    add(p + "mlp.linear_fc1.bias", {F}, false);
    add(p + "mlp.linear_fc2.weight", {C, F}, true);
    add(p + "mlp.linear_fc2.bias", {C}, false);
  }
  add("decoder.final_layernorm.weight", {C}, false);
  add("decoder.final_layernorm.bias", {C}, false);
}

void ParamLayout::add(std::string name, std::vector<int64_t> shape, bool decay) {
  size_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<size_t>(d);
  // Each tensor starts on a 16-element boundary (64 bytes for float) for aligned SIMD.
  total_ = (total_ + 15) / 16 * 16;
  tensors_.push_back({std::move(name), std::move(shape), total_, numel, decay});
  total_ += numel;
}

const ParamTensor* ParamLayout::find(const std::string& name) const {
  for (const ParamTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace lattice
