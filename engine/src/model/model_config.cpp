// Derived sizes and validation of ModelConfig.
#include "lattice/model_config.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace lattice {

int ModelConfig::padded_vocab_size() const {
  const int64_t multiple =
      static_cast<int64_t>(make_vocab_size_divisible_by) * tensor_model_parallel_size;
  if (multiple <= 0) return vocab_size;
  return static_cast<int>((vocab_size + multiple - 1) / multiple * multiple);
}

int ModelConfig::ffn() const {
  if (ffn_hidden_size > 0) return ffn_hidden_size;
  if (swiglu) return static_cast<int>(static_cast<int64_t>(8) * hidden_size / 3 / 64 * 64);
  return 4 * hidden_size;
}

int64_t ModelConfig::layer_parameters() const {
  const int64_t C = hidden_size, F = ffn(), W = qkv_width();
  const int64_t norm = rms_norm() ? C : 2 * C;  // weight (and LayerNorm's bias)
  const int64_t bias = linear_bias() ? 1 : 0;
  const int64_t up = swiglu ? 2 * F : F;  // FC1's rows: gate and up with SwiGLU
  return 2 * norm + (W * C + (qkv_bias() ? W : 0)) + (C * C + bias * C) + (up * C + bias * up) +
         (C * F + bias * C);
}

int64_t ModelConfig::layer_parameters(int l) const {
  if (!is_moe_layer(l)) return layer_parameters();
  const int64_t C = hidden_size, F = ffn(), Fm = moe_ffn(), E = num_experts;
  const int64_t bias = linear_bias() ? 1 : 0;
  const int64_t dense_mlp = (swiglu ? 2 * F : F) * (C + bias) + C * F + bias * C;
  const int64_t up = swiglu ? 2 * Fm : Fm;
  const int64_t expert = up * (C + bias) + C * Fm + bias * C;
  return layer_parameters() - dense_mlp + E * C + E * expert;  // the router (E, C), E experts
}

int64_t ModelConfig::num_parameters() const {
  const int64_t C = hidden_size, V = padded_vocab_size();
  const int64_t positions = learned_positions() ? int64_t{max_positions()} * C : 0;
  const int64_t head = tied_output() ? 0 : V * C;
  int64_t layers = 0;
  for (int l = 0; l < num_layers; l++) layers += layer_parameters(l);
  return V * C + positions + layers + (rms_norm() ? C : 2 * C) + head;
}

bool ModelConfig::lora_targets(const std::string& linear) const {
  if (lora_rank <= 0) return false;
  size_t start = 0;
  while (start <= lora_target_modules.size()) {
    size_t end = lora_target_modules.find(',', start);
    if (end == std::string::npos) end = lora_target_modules.size();
    if (lora_target_modules.compare(start, end - start, linear) == 0) return true;
    start = end + 1;
  }
  return false;
}

int64_t ModelConfig::lora_parameters() const {
  if (lora_rank <= 0) return 0;
  // A (r, in) and B (out, r) per target.
  const int64_t r = lora_rank, C = hidden_size, F = ffn(), W = qkv_width();
  const int64_t up = swiglu ? 2 * F : F;
  int64_t per_layer = 0;
  if (lora_targets("linear_qkv")) per_layer += r * C + W * r;
  if (lora_targets("linear_proj")) per_layer += r * C + C * r;
  if (lora_targets("linear_fc1")) per_layer += r * C + up * r;
  if (lora_targets("linear_fc2")) per_layer += r * F + C * r;
  return num_layers * per_layer;
}

std::vector<std::string> ModelConfig::validate() const {
  std::vector<std::string> errors;
  auto positive = [&](const char* flag, int64_t v) {
    if (v <= 0) errors.push_back(std::string(flag) + " must be positive, got " + std::to_string(v));
  };
  positive("--num-layers", num_layers);
  positive("--hidden-size", hidden_size);
  positive("--num-attention-heads", num_attention_heads);
  positive("--seq-length", seq_length);
  positive("--vocab-size", vocab_size);
  positive("--make-vocab-size-divisible-by", make_vocab_size_divisible_by);
  if (ffn_hidden_size < 0)
    errors.push_back("--ffn-hidden-size must be positive, got " + std::to_string(ffn_hidden_size));
  if (hidden_size > 0 && num_attention_heads > 0 && hidden_size % num_attention_heads != 0)
    errors.push_back("--num-attention-heads " + std::to_string(num_attention_heads) +
                     " does not divide --hidden-size " + std::to_string(hidden_size));
  for (std::string& e : architecture_errors()) errors.push_back(std::move(e));
  if (max_position_embeddings > 0 && max_position_embeddings < seq_length)
    errors.push_back("--max-position-embeddings " + std::to_string(max_position_embeddings) +
                     " is smaller than --seq-length " + std::to_string(seq_length));
  auto probability = [&](const char* flag, float p) {
    if (!(p >= 0.0f && p < 1.0f))
      errors.push_back(std::string(flag) + " must lie in [0, 1), got " + std::to_string(p));
  };
  for (std::string& e : size_errors()) errors.push_back(std::move(e));
  probability("--attention-dropout", attention_dropout);
  probability("--hidden-dropout", hidden_dropout);
  if (lora_rank < 0)
    errors.push_back("--lora-rank must be 0 (off) or positive, got " + std::to_string(lora_rank));
  if (lora_rank > 0) {
    probability("--lora-dropout", lora_dropout);
    if (!(lora_alpha > 0.0f))
      errors.push_back("--lora-alpha must be positive, got " + std::to_string(lora_alpha));
    size_t start = 0;
    int targets = 0;
    while (start <= lora_target_modules.size()) {
      size_t end = lora_target_modules.find(',', start);
      if (end == std::string::npos) end = lora_target_modules.size();
      const std::string name = lora_target_modules.substr(start, end - start);
      if (name != "linear_qkv" && name != "linear_proj" && name != "linear_fc1" &&
          name != "linear_fc2")
        errors.push_back("--lora-target-modules names \"" + name +
                         "\"; the linears are linear_qkv, linear_proj, linear_fc1, linear_fc2");
      else
        targets++;
      start = end + 1;
    }
    if (targets == 0) errors.push_back("--lora-target-modules names no linear layer");
  }
  if (!(init_method_std > 0.0f))
    errors.push_back("--init-method-std must be positive, got " + std::to_string(init_method_std));
  for (std::string& e : moe_errors()) errors.push_back(std::move(e));
  return errors;
}

std::vector<std::string> ModelConfig::moe_errors() const {
  std::vector<std::string> errors;
  auto str = [](auto v) { return std::to_string(v); };
  if (num_experts < 0)
    errors.push_back("--num-experts must be 0 (a dense model) or positive, got " +
                     str(num_experts));
  const bool moe_flags = moe_token_dropping || moe_expert_capacity_factor != 0 ||
                         moe_aux_loss_coeff != 0 || moe_ffn_hidden_size != 0;
  if (!moe()) {
    if (moe_flags)
      errors.push_back(
          "--moe-aux-loss-coeff, --moe-ffn-hidden-size, --moe-expert-capacity-factor and "
          "--moe-token-dropping apply to MoE layers: give --num-experts");
    return errors;
  }
  if (moe_router_topk < 1 || moe_router_topk > num_experts)
    errors.push_back("--moe-router-topk " + str(moe_router_topk) + " must lie in [1, " +
                     str(num_experts) + "] (--num-experts)");
  if (moe_ffn_hidden_size < 0)
    errors.push_back("--moe-ffn-hidden-size must be positive (0: --ffn-hidden-size), got " +
                     str(moe_ffn_hidden_size));
  if (!(moe_aux_loss_coeff >= 0))
    errors.push_back("--moe-aux-loss-coeff must not be negative, got " + str(moe_aux_loss_coeff));
  if (moe_router_load_balancing_type != "aux_loss" && moe_router_load_balancing_type != "none")
    errors.push_back("--moe-router-load-balancing-type must be aux_loss or none, got \"" +
                     moe_router_load_balancing_type + "\"");
  if (!(moe_expert_capacity_factor >= 0))
    errors.push_back("--moe-expert-capacity-factor must be positive (0: no token dropping), got " +
                     str(moe_expert_capacity_factor));
  if (moe_token_dropping && !(moe_expert_capacity_factor > 0))
    errors.push_back("--moe-token-dropping needs --moe-expert-capacity-factor (the capacity)");
  if (moe_layer_freq < 1)
    errors.push_back("--moe-layer-freq must be positive (1: every layer is MoE), got " +
                     str(moe_layer_freq));
  if (lora_rank > 0) errors.push_back("--lora-rank does not combine with --num-experts yet");
  return errors;
}

std::vector<std::string> ModelConfig::architecture_errors() const {
  std::vector<std::string> errors;
  auto str = [](auto v) { return std::to_string(v); };
  auto real = [](double v) {  // shortest form: 1e-06, 0.5, 500000
    char text[32];
    std::snprintf(text, sizeof text, "%g", v);
    return std::string(text);
  };
  if (position_embedding_type != "learned_absolute" && position_embedding_type != "rope" &&
      position_embedding_type != "none")
    errors.push_back("--position-embedding-type must be learned_absolute, rope or none, got \"" +
                     position_embedding_type + "\"");
  if (normalization != "LayerNorm" && normalization != "RMSNorm")
    errors.push_back("--normalization must be LayerNorm or RMSNorm, got \"" + normalization + "\"");
  if (!(norm_epsilon > 0.0f && norm_epsilon < 1.0f))
    errors.push_back("--norm-epsilon must lie in (0, 1), got " + real(norm_epsilon));
  else if (normalization == "LayerNorm" && norm_epsilon != 1e-5f)
    errors.push_back("--norm-epsilon " + real(norm_epsilon) +
                     " needs --normalization RMSNorm: Lattice's LayerNorm uses 1e-5 only");
  if (group_query_attention) {
    if (num_query_groups <= 0)
      errors.push_back("--num-query-groups must be positive, got " + str(num_query_groups));
    else if (num_attention_heads > 0 && num_attention_heads % num_query_groups != 0)
      errors.push_back("--num-query-groups " + str(num_query_groups) +
                       " does not divide --num-attention-heads " + str(num_attention_heads));
  }
  if (rope() && hidden_size > 0 && num_attention_heads > 0 &&
      hidden_size % num_attention_heads == 0) {
    if (!(rotary_percent > 0.0f && rotary_percent <= 1.0f))
      errors.push_back("--rotary-percent must lie in (0, 1], got " + real(rotary_percent));
    else if (rotary_dim() < 2 || rotary_dim() % 2 != 0)
      errors.push_back("--rotary-percent " + real(rotary_percent) + " of the head size " +
                       str(head_size()) + " rotates " + str(rotary_dim()) +
                       " dimensions; RoPE needs an even number, at least 2");
    if (!(rotary_base > 1.0f))
      errors.push_back("--rotary-base must be greater than 1, got " + real(rotary_base));
  }
  if (use_rope_scaling && !rope())
    errors.push_back("--use-rope-scaling needs --position-embedding-type rope");
  if (use_rope_scaling && !(rope_scaling_factor >= 1.0f))
    errors.push_back("--rope-scaling-factor must be at least 1, got " + str(rope_scaling_factor));
  if (swiglu && ffn_hidden_size == 0 && hidden_size > 0 && ffn() <= 0)
    errors.push_back("--swiglu with --hidden-size " + str(hidden_size) +
                     " makes an MLP width of 0 (8/3 x hidden rounded down to 64): give "
                     "--ffn-hidden-size");
  return errors;
}

std::vector<std::string> ModelConfig::size_errors() const {
  std::vector<std::string> errors;
  if (hidden_size <= 0 || num_layers <= 0 || vocab_size <= 0 || ffn_hidden_size < 0) return errors;
  auto str = [](auto v) { return std::to_string(v); };
  const int64_t C = hidden_size;
  const int64_t F = ffn_hidden_size > 0 ? ffn_hidden_size : 4 * C;
  if (3 * C > kMaxDimension)
    errors.push_back("--hidden-size " + str(C) + " is larger than " + str(kMaxDimension / 3) +
                     ", the most whose fused QKV weight (3 x hidden = " + str(3 * C) +
                     " rows) fits the largest dimension " + str(kMaxDimension));
  else if (ffn_hidden_size == 0 && F > kMaxDimension)
    errors.push_back("--hidden-size " + str(C) + " makes the default --ffn-hidden-size 4 x " +
                     str(C) + " = " + str(F) + ", more than the largest dimension " +
                     str(kMaxDimension) + " (give a smaller --hidden-size or --ffn-hidden-size)");
  const int64_t multiple = std::max<int64_t>(1, static_cast<int64_t>(make_vocab_size_divisible_by) *
                                                    std::max(1, tensor_model_parallel_size));
  const int64_t padded = (static_cast<int64_t>(vocab_size) + multiple - 1) / multiple * multiple;
  if (padded > kMaxDimension)
    errors.push_back("--vocab-size " + str(vocab_size) + " pads to " + str(padded) +
                     " rows (a multiple of --make-vocab-size-divisible-by x TP = " + str(multiple) +
                     "), more than the largest dimension " + str(kMaxDimension));
  // In long double: the count itself may not fit 64 bits (GPT-2's layer, the largest per
  // hidden and FFN size but for SwiGLU's third matrix).
  const long double c = C, f = F, up = swiglu ? 2 * f : f,
                    per_layer =
                        4 * c + (3 * c * c + 3 * c) + (c * c + c) + (up * c + up) + (c * f + c);
  const long double parameters = static_cast<long double>(padded) * c +
                                 static_cast<long double>(max_positions()) * c +
                                 num_layers * per_layer + 2 * c;
  if (errors.empty() && parameters > static_cast<long double>(kMaxParameters)) {
    char count[64];
    std::snprintf(count, sizeof count, "%.3Lg", parameters);
    errors.push_back("--num-layers " + str(num_layers) + ", --hidden-size " + str(C) +
                     ", --ffn-hidden-size " + str(F) + " and --vocab-size " + str(vocab_size) +
                     " make " + count + " parameters, more than " + str(kMaxParameters) +
                     " (their training state would not fit a 64-bit byte count)");
  }
  return errors;
}

TokenFlops forward_flops_per_token(const ModelConfig& m) {
  const double s = m.seq_length, h = m.hidden_size, F = m.ffn(), V = m.padded_vocab_size(),
               W = static_cast<double>(m.qkv_width()), mlp = m.swiglu ? 3 : 2;
  // QKV 2hW (6h^2 for GPT-2) + proj 2h^2 + MLP 2mhF + causal attention 2sh; the LM head 2hV.
  double mlp_flops = 2 * mlp * h * F;
  if (m.moe() && m.num_layers > 0) {
    // MoE layers (as Megatron counts them): the router 2hE and k experts of width Fm a token;
    // `layer` is the mean over the layers.
    int moe_layers = 0;
    for (int l = 0; l < m.num_layers; l++) moe_layers += m.is_moe_layer(l);
    const double share = static_cast<double>(moe_layers) / m.num_layers;
    const double moe = 2 * h * m.num_experts + m.moe_router_topk * 2 * mlp * h * m.moe_ffn();
    mlp_flops = (1 - share) * mlp_flops + share * moe;
  }
  return {2 * h * W + 2 * h * h + mlp_flops + 2 * s * h, 2 * s * h, 2 * h * V};
}

LoraFlops lora_forward_flops_per_token(const ModelConfig& m, int tp) {
  LoraFlops f;
  if (!m.lora()) return f;
  const double r = m.lora_rank, C = m.hidden_size, F = m.ffn(), t = tp;
  const double W = static_cast<double>(m.qkv_width()), up = m.swiglu ? 2 * F : F;
  auto column = [&](const char* name, double out) {
    if (!m.lora_targets(name)) return;
    f.a += 2 * r * C;
    f.b += 2 * r * out / t;
  };
  auto row = [&](const char* name, double in) {
    if (!m.lora_targets(name)) return;
    f.a += 2 * r * in / t;
    f.b += 2 * r * C;
  };
  column("linear_qkv", W);
  row("linear_proj", C);
  column("linear_fc1", up);
  row("linear_fc2", F);
  return f;
}

double flops_per_iteration(const ModelConfig& m, int64_t global_batch) {
  // Backward is twice the forward.
  const TokenFlops f = forward_flops_per_token(m);
  return 3.0 * static_cast<double>(global_batch) * m.seq_length * (m.num_layers * f.layer + f.head);
}

}  // namespace lattice
