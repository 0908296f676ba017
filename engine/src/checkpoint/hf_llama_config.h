// The config.json of a Hugging Face Llama-family model (model_type llama, qwen2, mistral, and
// mixtral: Llama's attention with a mixture-of-experts MLP in every layer) in Lattice's terms, so
// that --load-hf and `lattice ckpt import-hf` need no model flags; and the config.json that
// export writes beside the weights (LlamaForCausalLM, Qwen2ForCausalLM for a QKV-only bias,
// MixtralForCausalLM for an MoE model). What Lattice cannot express (RoPE scaling other than
// Llama 3.1's, a sliding window in use, another activation, a head size other than hidden /
// heads, biases on attention but not the MLP) is an error naming the file and the key, never
// silently different weights.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "lattice/model_config.h"
#include "lattice/status.h"

namespace lattice {

struct HfLlamaConfig {
  std::string path;                 // the config.json
  std::string model_type;           // "llama", "qwen2", "mistral" or "mixtral"
  int num_layers = 0;               // num_hidden_layers           --num-layers
  int hidden_size = 0;              // hidden_size                 --hidden-size
  int ffn_hidden_size = 0;          // intermediate_size           --ffn-hidden-size (an
                                    //   expert's width for mixtral)
  int num_attention_heads = 0;      // num_attention_heads         --num-attention-heads
  int num_query_groups = 0;         // num_key_value_heads         --num-query-groups
  int vocab_size = 0;               // vocab_size (embedding rows)
  int max_position_embeddings = 0;  // max_position_embeddings     --max-position-embeddings
  double norm_epsilon = 1e-6;       // rms_norm_eps                --norm-epsilon
  double rotary_base = 10000;       // rope_theta                  --rotary-base
  double rotary_percent = 1;        // partial_rotary_factor       --rotary-percent
  double rope_scaling_factor = 0;   // rope_scaling "llama3" factor --rope-scaling-factor; 0: none
  bool tied = false;                // tie_word_embeddings         no --untie-embeddings-...
  bool qkv_bias = false;            // q/k/v_proj.bias             --add-qkv-bias
  bool linear_bias = false;         // o_proj and MLP biases too   no --disable-bias-linear
  double attention_dropout = 0;     // attention_dropout           --attention-dropout
  // Mixtral's (model_type mixtral; 0 for the others). Its MoE layers route as Lattice's do
  // (Note [MoE layer]): softmax over all experts, the top k renormalised.
  int num_experts = 0;            // num_local_experts           --num-experts
  int moe_router_topk = 0;        // num_experts_per_tok         --moe-router-topk
  double moe_aux_loss_coeff = 0;  // router_aux_loss_coef        --moe-aux-loss-coeff
  // sliding_window of a mixtral file; 0 when null. Attention within a window equals Lattice's
  // fully causal attention only for sequences no longer than it, which apply_hf_model checks
  // against --seq-length (mistral's is checked here against max_position_embeddings).
  int sliding_window = 0;
};

// Reads `json` (the text of the config.json at `path`) with transformers' defaults for absent
// optional keys (num_key_value_heads: the heads for llama, 32 for qwen2, 8 for mistral and
// mixtral; rms_norm_eps 1e-6 (mixtral 1e-5); rope_theta 10000 (mixtral 1e6);
// tie_word_embeddings, attention_bias, mlp_bias false; mixtral's num_local_experts 8,
// num_experts_per_tok 2, router_aux_loss_coef 0.001).
// The sizes must be present. invalid_argument with one sentence per problem, each naming `path`
// and the key.
Result<HfLlamaConfig> parse_hf_llama_config(const nlohmann::json& json, const std::string& path);
Result<HfLlamaConfig> read_hf_llama_config(const std::string& path);

// Is config.json's model_type one of the Llama family's (llama, qwen2, mistral, mixtral)?
bool is_hf_llama_type(const nlohmann::json& config);

// Why `config` cannot be written as a Hugging Face Llama-family model, one sentence each naming
// the flag (RoPE, RMSNorm and SwiGLU are required; an MoE model, Mixtral, needs an MoE MLP in
// every layer and no biases); empty when it can.
std::vector<std::string> hf_llama_unsupported(const ModelConfig& config);

// Writes the config.json of `config` (hf_llama_unsupported empty) to `config_path` atomically:
// LlamaForCausalLM, Qwen2ForCausalLM when only QKV has a bias, MixtralForCausalLM with experts.
// `vocab_rows`: the exported embedding's rows; `dtype`: the weights' (torch_dtype).
Status write_hf_llama_config(const std::string& config_path, const ModelConfig& config,
                             int64_t vocab_rows, safetensors::Dtype dtype);

}  // namespace lattice
