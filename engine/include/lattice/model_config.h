// The architecture hyper-parameters (Megatron's flag names in comments) and the derived sizes
// every module agrees on. The defaults are GPT-2's (learned positions, LayerNorm, GELU MLP,
// biases, one key/value head per query head, LM head tied to the word embedding); the Llama
// family sets rope, RMSNorm, SwiGLU, query groups, an untied head and no biases (issue 23,
// docs/models.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/vision_config.h"

namespace lattice {

struct ModelConfig {
  int num_layers = 2;                      // --num-layers
  int hidden_size = 64;                    // --hidden-size (C)
  int ffn_hidden_size = 0;                 // --ffn-hidden-size (F); 0 means 4 * hidden
  int num_attention_heads = 4;             // --num-attention-heads (NH)
  int seq_length = 64;                     // --seq-length (T)
  int max_position_embeddings = 0;         // --max-position-embeddings; 0 means seq-length
  int vocab_size = 512;                    // --vocab-size (tokenizer's vocabulary)
  int make_vocab_size_divisible_by = 128;  // --make-vocab-size-divisible-by
  int tensor_model_parallel_size = 1;      // padding rule uses it (ARCHITECTURE.md)
  float attention_dropout = 0.1f;          // --attention-dropout
  float hidden_dropout = 0.1f;             // --hidden-dropout
  float init_method_std = 0.02f;           // --init-method-std
  // "learned_absolute" | "rope" | "none"      --position-embedding-type
  std::string position_embedding_type = "learned_absolute";
  float rotary_base = 10000.0f;  // --rotary-base (RoPE's theta)
  float rotary_percent = 1.0f;   // --rotary-percent: the share of each head's dims rotated
  std::string normalization = "LayerNorm";           // "LayerNorm" | "RMSNorm"   --normalization
  float norm_epsilon = 1e-5f;                        // --norm-epsilon
  bool swiglu = false;                               // --swiglu: MLP down(silu(gate(x)) * up(x))
  bool group_query_attention = false;                // --group-query-attention
  int num_query_groups = 1;                          // --num-query-groups (G, with the flag above)
  bool untie_embeddings_and_output_weights = false;  // --untie-embeddings-and-output-weights
  bool disable_bias_linear = false;                  // --disable-bias-linear
  bool add_qkv_bias = false;  // --add-qkv-bias: QKV bias even with --disable-bias-linear (Qwen2)
  // --use-rope-scaling: Llama 3.1's RoPE frequency scaling (kernels::rope_tables; low and high
  // frequency factors 1 and 4 over 8192 original positions, as Megatron fixes them), by
  // --rope-scaling-factor.
  bool use_rope_scaling = false;
  float rope_scaling_factor = 8.0f;
  // LoRA (docs/lora.md; Megatron-Bridge's LoRA): rank 0 is off. With a rank every
  // target linear gains W x + (alpha / rank) B A dropout(x), only the adapters train and the
  // base weights are frozen (ParamTensor::frozen).
  int lora_rank = 0;       // --lora-rank (Megatron-Bridge's dim)
  float lora_alpha = 32;   // --lora-alpha: the adapter's output scaled by alpha / rank
  float lora_dropout = 0;  // --lora-dropout: on the adapter's input
  // --lora-target-modules: a comma list of linear_qkv, linear_proj, linear_fc1, linear_fc2
  // (Megatron-Bridge's default: all four).
  std::string lora_target_modules = "linear_qkv,linear_proj,linear_fc1,linear_fc2";
  // Mixture of experts (docs/models.md#mixture-of-experts, Megatron's flags): num_experts 0 is a
  // dense model. An MoE layer's MLP is a router (C -> E, no bias) and E experts of the dense
  // MLP's kind (GELU or SwiGLU, biases as the dense MLP's) of width moe_ffn(); each token goes
  // to its moe_router_topk experts, weighted by the router's softmax renormalised over them.
  int num_experts = 0;           // --num-experts (E)
  int moe_router_topk = 2;       // --moe-router-topk (k)
  int moe_ffn_hidden_size = 0;   // --moe-ffn-hidden-size; 0 means ffn()
  float moe_aux_loss_coeff = 0;  // --moe-aux-loss-coeff: the load-balancing loss's weight
  // --moe-router-load-balancing-type: "aux_loss" (Switch's load-balancing loss) | "none"
  std::string moe_router_load_balancing_type = "aux_loss";
  // --moe-expert-capacity-factor: > 0 caps each expert at ceil(N k / E x factor) tokens of a
  // micro-batch's N, dropping the lowest-weighted (Megatron's "probs" policy); 0 drops none.
  float moe_expert_capacity_factor = 0;
  bool moe_token_dropping = false;  // --moe-token-dropping: older Megatron's switch for the above
  int moe_layer_freq = 1;           // --moe-layer-freq N: layers 0, N, 2N, ... are MoE
  // A vision-language model (LLaVA style, docs/vision.md): --vision-model-type "clip" puts a
  // vision tower (`vision`, the --vision-* flags) on the first pipeline stage, its projected
  // patches in place of the image placeholder's rows; "" is a text model. --freeze-LM and
  // --freeze-ViT (Megatron's) freeze the language model and the vision encoder (LLaVA's
  // projector-only pre-training sets both); the projector always trains.
  std::string vision_model_type;
  VisionConfig vision;  // TrainOptions::vision_config(): lm_hidden_size is hidden_size
  bool freeze_lm = false;
  bool freeze_vision = false;

  // --ffn-hidden-size, else Megatron's default: 4 x hidden, or with --swiglu two thirds of it
  // rounded down to a multiple of 64 (the same parameter count over three matrices).
  int ffn() const;
  // Key/value heads (query groups): G with --group-query-attention, else one per query head.
  int kv_heads() const { return group_query_attention ? num_query_groups : num_attention_heads; }
  // Rows of the fused QKV weight: (NH + 2 G) x head size.
  int64_t qkv_width() const {
    return static_cast<int64_t>(num_attention_heads + 2 * kv_heads()) * head_size();
  }
  bool rope() const { return position_embedding_type == "rope"; }
  // The factor rope_tables scales by: --rope-scaling-factor with --use-rope-scaling, else 0.
  float llama3_rope_factor() const { return rope() && use_rope_scaling ? rope_scaling_factor : 0; }
  bool learned_positions() const { return position_embedding_type == "learned_absolute"; }
  bool rms_norm() const { return normalization == "RMSNorm"; }
  // The leading dimensions of each head that RoPE rotates: head size x --rotary-percent.
  int rotary_dim() const { return static_cast<int>(head_size() * rotary_percent); }
  bool linear_bias() const { return !disable_bias_linear; }
  bool qkv_bias() const { return !disable_bias_linear || add_qkv_bias; }
  bool tied_output() const { return !untie_embeddings_and_output_weights; }
  bool lora() const { return lora_rank > 0; }
  // With LoRA: whether `linear` (linear_qkv, linear_proj, linear_fc1, linear_fc2) has an adapter.
  bool lora_targets(const std::string& linear) const;
  float lora_scale() const { return lora_rank > 0 ? lora_alpha / lora_rank : 0.0f; }
  // The adapters' parameters (every layer), 0 without LoRA.
  int64_t lora_parameters() const;
  bool moe() const { return num_experts > 0; }
  bool has_vision() const { return !vision_model_type.empty(); }
  // Whether some tensor is frozen (ParamLayout's rule, Note [LoRA] in model/param_layout.h):
  // LoRA's base, --freeze-LM's language model, --freeze-ViT's encoder.
  bool freezes_any() const { return lora() || freeze_lm || (has_vision() && freeze_vision); }
  // The image placeholder's token id (Note [image-text tokens] in data/image_text_dataset.h):
  // one past the tokenizer's vocabulary.
  int32_t image_token_id() const { return vocab_size; }
  // Whether global layer l is an MoE layer (Megatron's --moe-layer-freq: l % N == 0).
  bool is_moe_layer(int l) const { return moe() && moe_layer_freq > 0 && l % moe_layer_freq == 0; }
  // An expert's MLP width: --moe-ffn-hidden-size, else ffn().
  int moe_ffn() const { return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : ffn(); }
  // The load-balancing loss's coefficient in effect: 0 unless the type is aux_loss.
  double aux_loss_coeff() const {
    return moe() && moe_router_load_balancing_type == "aux_loss" ? moe_aux_loss_coeff : 0.0;
  }
  // The rules on the MoE flags validate() includes.
  std::vector<std::string> moe_errors() const;
  // Every tensor of one dense transformer layer, summed.
  int64_t layer_parameters() const;
  // Every tensor of global layer l: layer_parameters(), or with an MoE MLP (router and experts)
  // in place of the dense one.
  int64_t layer_parameters(int l) const;
  int max_positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  int head_size() const { return hidden_size / num_attention_heads; }
  // Megatron: ceil(V / (divisible_by * TP)) * divisible_by * TP.
  int padded_vocab_size() const;
  // Every tensor's element count summed (a tied LM head counted once).
  int64_t num_parameters() const;
  // Every violated rule, one sentence each naming the flag; empty when valid.
  std::vector<std::string> validate() const;
  // The size rules validate() includes: every dimension fits the engine's 32-bit ints (the
  // default FFN's 4 x hidden, the fused QKV's 3 x hidden, the padded vocabulary) and the
  // parameter count stays below kMaxParameters, so that counts formed in 64 bits never wrap.
  std::vector<std::string> size_errors() const;
  // The rules on the architecture flags validate() includes (position embedding, norm, query
  // groups, RoPE's share, SwiGLU's width).
  std::vector<std::string> architecture_errors() const;

  static constexpr int64_t kMaxDimension = 2147483647;  // INT32_MAX
  // 2^58: 32 bytes of fp64 training state per parameter still fit a signed 64-bit count.
  static constexpr int64_t kMaxParameters = int64_t{1} << 58;
};

// Forward FLOPs per token as Megatron counts them (2 per multiply-add): one layer's GEMMs and
// causal attention, 2 h W + 2 h^2 + 2 m h F + 2 s h (W = qkv_width, m = 3 for SwiGLU else 2);
// of that the attention's score and value products alone, 2 s h (causal: half of 4 s h; what
// selective recomputation repeats); and the LM head, 2 h V. With MoE layers the MLP term is,
// there, the router's 2 h E plus k experts' 2 m h Fm, and `layer` the mean over the layers.
// flops_per_iteration and the
// planner's per-stage step time (plan/step_estimate.cpp) both count from these.
struct TokenFlops {
  double layer = 0, attention = 0, head = 0;
};
TokenFlops forward_flops_per_token(const ModelConfig& model);

// One layer's LoRA adapters (docs/lora.md) per token on one rank of a tensor-parallel group of
// `tp`: the forward FLOPs of their A products (dropout(x) A^T, 2 r in each) and of their B
// products (h B^T, 2 r out each) over the targets. A column-parallel target (linear_qkv,
// linear_fc1) runs its A product whole on every rank and its B product on out / tp rows; a
// row-parallel one (linear_proj, linear_fc2) its A product on in / tp columns and its B product
// whole. tp 1: the model's own, 2 r (in + out) a target. Both 0 without LoRA.
struct LoraFlops {
  double a = 0, b = 0;
};
LoraFlops lora_forward_flops_per_token(const ModelConfig& model, int tp = 1);

// Training FLOPs of one iteration (forward + backward) as Megatron counts them, with B the
// global batch: 72 B s L h^2 (1 + s / (12 h) + V / (12 L h)) for GPT-2's 4h MLP; in general
// 3 B s (L (2 h W + 2 h^2 + 2 m h F + 2 s h) + 2 h V), W = qkv_width, m = 3 for SwiGLU else 2
// (forward per token: the GEMMs, causal attention counted half, the LM head; backward twice).
double flops_per_iteration(const ModelConfig& model, int64_t global_batch);

}  // namespace lattice
