// The HF Llama <-> Megatron-core name and row mapping. One table (hf_tensors) lists every HF
// tensor with its shape, our tensor and which of our rows each of its rows is; import and export
// both walk it (hf_tensors.h). No RoPE permutation: Lattice and transformers both rotate the two
// halves of each head (rotate_half), so q and k rows keep their order within a head.
// Mixtral (an MoE model, Note [MoE layout]) has Llama's attention and norms; its MLP is
// block_sparse_moe: gate (the router, (E, C)) and experts.e.{w1, w3, w2}, each expert's gate,
// up and down projections, w1 and w3 the two halves of that expert's linear_fc1 as gate_proj and
// up_proj are of the dense one's.
#include "checkpoint/hf_llama.h"

#include <vector>

#include "checkpoint/hf_llama_config.h"
#include "checkpoint/hf_tensors.h"

namespace lattice {

namespace {

int llama_layer_of(const std::string& name) {
  return hf_layer_of(name, "model.layers.");
}

}  // namespace

std::vector<HfTensor> hf_llama_tensors(const ModelConfig& c, const ParamLayout& layout) {
  const int64_t C = c.hidden_size, F = c.ffn(), V = c.vocab_size, NH = c.num_attention_heads;
  const int64_t G = c.kv_heads(), HS = c.head_size(), Q = NH / G;
  const std::string hidden = "--hidden-size " + std::to_string(C);
  const std::string heads = hidden + " --num-attention-heads " + std::to_string(NH);
  const std::string groups = heads + " --num-query-groups " + std::to_string(G);
  const std::string ffn = hidden + " --ffn-hidden-size " + std::to_string(F);
  const std::string vocab = "--vocab-size " + std::to_string(V) + " " + hidden;
  // HF's q_proj row h*HS + d is query head h; ours are grouped: group g = h / Q holds its Q
  // query heads' rows, then its key head's HS rows, then its value head's (Megatron's layout).
  auto q_row = [Q, HS](int64_t r) {
    const int64_t h = r / HS, d = r % HS;
    return (h / Q) * (Q + 2) * HS + (h % Q) * HS + d;
  };
  // k_proj / v_proj row g*HS + d: group g's key (part Q) or value (part Q + 1) head.
  auto kv_row = [Q, HS](int64_t part) {
    return [Q, HS, part](int64_t r) { return (r / HS) * (Q + 2) * HS + part * HS + r % HS; };
  };
  auto up_row = [F](int64_t r) { return F + r; };  // linear_fc1 (2, F, C) = [gate; up]
  const int64_t E = c.num_experts, Fm = c.moe_ffn();
  auto expert_up_row = [Fm](int64_t r) { return Fm + r; };  // an expert's linear_fc1 likewise
  const std::string experts = hidden + " --num-experts " + std::to_string(E);
  const std::string expert_ffn = hidden + " --moe-ffn-hidden-size " + std::to_string(Fm);
  std::vector<HfTensor> out;
  auto add = [&](std::string hf_name, std::vector<int64_t> shape, const std::string& our_name,
                 std::string flags, std::function<int64_t(int64_t)> row_of = nullptr) {
    out.push_back(hf_tensor(layout, std::move(hf_name), std::move(shape), our_name,
                            std::move(flags), std::move(row_of)));
  };
  add("model.embed_tokens.weight", {V, C}, "embedding.word_embeddings.weight", vocab);
  for (int l = 0; l < c.num_layers; l++) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    const std::string d = "decoder.layers." + std::to_string(l) + ".";
    const std::string qkv = d + "self_attention.linear_qkv.";
    add(h + "input_layernorm.weight", {C}, d + "input_layernorm.weight", hidden);
    add(h + "self_attn.q_proj.weight", {NH * HS, C}, qkv + "weight", heads, q_row);
    add(h + "self_attn.k_proj.weight", {G * HS, C}, qkv + "weight", groups, kv_row(Q));
    add(h + "self_attn.v_proj.weight", {G * HS, C}, qkv + "weight", groups, kv_row(Q + 1));
    if (c.qkv_bias()) {
      add(h + "self_attn.q_proj.bias", {NH * HS}, qkv + "bias", heads, q_row);
      add(h + "self_attn.k_proj.bias", {G * HS}, qkv + "bias", groups, kv_row(Q));
      add(h + "self_attn.v_proj.bias", {G * HS}, qkv + "bias", groups, kv_row(Q + 1));
    }
    add(h + "self_attn.o_proj.weight", {C, C}, d + "self_attention.linear_proj.weight", hidden);
    if (c.linear_bias())
      add(h + "self_attn.o_proj.bias", {C}, d + "self_attention.linear_proj.bias", hidden);
    add(h + "post_attention_layernorm.weight", {C}, d + "pre_mlp_layernorm.weight", hidden);
    if (c.is_moe_layer(l)) {  // no biases: hf_llama_unsupported
      const std::string moe = h + "block_sparse_moe.";
      add(moe + "gate.weight", {E, C}, d + "mlp.router.weight", experts);
      for (int64_t e = 0; e < E; e++) {
        const std::string theirs = moe + "experts." + std::to_string(e) + ".";
        const std::string ours = d + "mlp.experts.local_experts." + std::to_string(e) + ".";
        add(theirs + "w1.weight", {Fm, C}, ours + "linear_fc1.weight", expert_ffn);
        add(theirs + "w2.weight", {C, Fm}, ours + "linear_fc2.weight", expert_ffn);
        add(theirs + "w3.weight", {Fm, C}, ours + "linear_fc1.weight", expert_ffn, expert_up_row);
      }
      continue;
    }
    add(h + "mlp.gate_proj.weight", {F, C}, d + "mlp.linear_fc1.weight", ffn);
    add(h + "mlp.up_proj.weight", {F, C}, d + "mlp.linear_fc1.weight", ffn, up_row);
    add(h + "mlp.down_proj.weight", {C, F}, d + "mlp.linear_fc2.weight", ffn);
    if (c.linear_bias()) {
      add(h + "mlp.gate_proj.bias", {F}, d + "mlp.linear_fc1.bias", ffn);
      add(h + "mlp.up_proj.bias", {F}, d + "mlp.linear_fc1.bias", ffn, up_row);
      add(h + "mlp.down_proj.bias", {C}, d + "mlp.linear_fc2.bias", hidden);
    }
  }
  add("model.norm.weight", {C}, "decoder.final_layernorm.weight", hidden);
  if (!c.tied_output()) {
    add("lm_head.weight", {V, C}, "output_layer.weight",
        vocab + " --untie-embeddings-and-output-weights");
  }
  return out;
}

HfNaming hf_llama_naming(const ModelConfig& c) {
  HfNaming n;
  n.architecture = c.moe() ? "Mixtral" : "Llama";
  n.canonical = [](const std::string& name) -> std::string {
    // Older transformers saved RoPE's inverse frequencies as a buffer of every layer.
    const std::string buffer = ".self_attn.rotary_emb.inv_freq";
    if (llama_layer_of(name) >= 0 && name.size() > buffer.size() &&
        name.compare(name.size() - buffer.size(), buffer.size(), buffer) == 0)
      return "";
    return name;
  };
  n.layer_of = llama_layer_of;
  n.layer_prefix = "model.layers.";
  n.num_layers = c.num_layers;
  if (c.tied_output()) n.tied_copy = "lm_head.weight";
  return n;
}

Status import_hf_llama(const std::string& path, const ModelConfig& config,
                       const ParamLayout& layout, float* params) {
  const ParamLayout whole(config);
  return import_hf_tensors(path, hf_llama_tensors(config, whole), hf_llama_naming(config), layout,
                           params);
}

Status export_hf_llama(const std::string& path, const ModelConfig& config,
                       const ParamLayout& layout, const float* params,
                       const HfWriteOptions& options) {
  const std::vector<HfTensor> table = hf_llama_tensors(config, layout);
  const HfTarget target = hf_target(path);
  if (Status s = write_hf_weights(target, hf_tensor_sources(table, params), options); !s) return s;
  return write_hf_llama_config(target.config_path(), config, table.front().shape[0], options.dtype);
}

}  // namespace lattice
