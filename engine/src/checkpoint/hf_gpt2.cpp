// The HF GPT-2 <-> Megatron-core name and layout mapping. One table (hf_tensors) lists every
// HF tensor with its shape, our tensor and how the elements correspond; import and export
// both walk it, so the two directions cannot disagree.
#include "checkpoint/hf_gpt2.h"

#include <vector>

#include "checkpoint/hf_gpt2_config.h"
#include "checkpoint/hf_tensors.h"

namespace lattice {

int hf_gpt2_layer_of(const std::string& name) {
  return hf_layer_of(name, "h.");
}

std::vector<HfTensor> hf_gpt2_tensors(const ModelConfig& c, const ParamLayout& layout) {
  const int64_t C = c.hidden_size, F = c.ffn(), V = c.vocab_size, P = c.max_positions();
  const int64_t HS = c.head_size();
  const std::string hidden = "--hidden-size " + std::to_string(C);
  const std::string ffn = hidden + " --ffn-hidden-size " + std::to_string(F);
  const std::string positions =
      c.max_position_embeddings > 0
          ? "--max-position-embeddings " + std::to_string(c.max_position_embeddings)
          : "--seq-length " + std::to_string(c.seq_length) + "; no --max-position-embeddings";
  // GPT-2's c_attn column j = s*C + h*HS + d (s = 0, 1, 2 for q, k, v: [Q | K | V] blocks) is
  // our per-head row h*3*HS + s*HS + d.
  auto qkv_row = [C, HS](int64_t j) {
    const int64_t s = j / C, h = (j % C) / HS, d = j % HS;
    return h * 3 * HS + s * HS + d;
  };
  std::vector<HfTensor> out;
  // `transposed`: a Conv1D weight (in, out) of our linear (out, in).
  auto add = [&](std::string hf_name, std::vector<int64_t> shape, const std::string& our_name,
                 std::string flags, bool transposed = false,
                 std::function<int64_t(int64_t)> row_of = nullptr) {
    out.push_back(hf_tensor(layout, std::move(hf_name), std::move(shape), our_name,
                            std::move(flags), std::move(row_of)));
    out.back().transposed = transposed;
  };
  add("wte.weight", {V, C}, "embedding.word_embeddings.weight",
      "--vocab-size " + std::to_string(V) + " " + hidden);
  add("wpe.weight", {P, C}, "embedding.position_embeddings.weight", hidden + " " + positions);
  out.back().shape_note = " (the position table must match exactly)";
  for (int l = 0; l < c.num_layers; l++) {
    const std::string h = "h." + std::to_string(l) + ".";
    const std::string d = "decoder.layers." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, d + "input_layernorm.weight", hidden);
    add(h + "ln_1.bias", {C}, d + "input_layernorm.bias", hidden);
    add(h + "attn.c_attn.weight", {C, 3 * C}, d + "self_attention.linear_qkv.weight", hidden, true,
        qkv_row);
    add(h + "attn.c_attn.bias", {3 * C}, d + "self_attention.linear_qkv.bias", hidden, false,
        qkv_row);
    add(h + "attn.c_proj.weight", {C, C}, d + "self_attention.linear_proj.weight", hidden, true);
    add(h + "attn.c_proj.bias", {C}, d + "self_attention.linear_proj.bias", hidden);
    add(h + "ln_2.weight", {C}, d + "pre_mlp_layernorm.weight", hidden);
    add(h + "ln_2.bias", {C}, d + "pre_mlp_layernorm.bias", hidden);
    add(h + "mlp.c_fc.weight", {C, F}, d + "mlp.linear_fc1.weight", ffn, true);
    add(h + "mlp.c_fc.bias", {F}, d + "mlp.linear_fc1.bias", ffn);
    add(h + "mlp.c_proj.weight", {F, C}, d + "mlp.linear_fc2.weight", ffn, true);
    add(h + "mlp.c_proj.bias", {C}, d + "mlp.linear_fc2.bias", hidden);
  }
  add("ln_f.weight", {C}, "decoder.final_layernorm.weight", hidden);
  add("ln_f.bias", {C}, "decoder.final_layernorm.bias", hidden);
  return out;
}

HfNaming hf_gpt2_naming(const ModelConfig& c) {
  HfNaming n;
  n.architecture = "GPT-2";
  n.canonical = [](const std::string& file_name) -> std::string {
    const std::string prefix = "transformer.";
    const std::string name =
        file_name.rfind(prefix, 0) == 0 ? file_name.substr(prefix.size()) : file_name;
    // h.N.attn.bias and h.N.attn.masked_bias are HF's causal-mask buffers, not parameters.
    if (hf_gpt2_layer_of(name) >= 0) {
      const std::string rest = name.substr(name.find('.', 2));
      if (rest == ".attn.bias" || rest == ".attn.masked_bias") return "";
    }
    return name;
  };
  n.layer_of = hf_gpt2_layer_of;
  n.layer_prefix = "h.";
  n.num_layers = c.num_layers;
  n.tied_copy = "lm_head.weight";
  return n;
}

Status import_hf_gpt2(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                      float* params) {
  const ParamLayout whole(config);
  return import_hf_tensors(path, hf_gpt2_tensors(config, whole), hf_gpt2_naming(config), layout,
                           params);
}

Status export_hf_gpt2(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                      const float* params, const HfWriteOptions& options) {
  const std::vector<HfTensor> table = hf_gpt2_tensors(config, layout);
  const HfTarget target = hf_target(path);
  if (Status s = write_hf_weights(target, hf_tensor_sources(table, params), options); !s) return s;
  return write_hf_gpt2_config(target.config_path(), config, table.front().shape[0], options.dtype);
}

}  // namespace lattice
