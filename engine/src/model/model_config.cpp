// Derived sizes and validation of ModelConfig.
#include "lattice/model_config.h"

#include <string>

namespace lattice {

int ModelConfig::padded_vocab_size() const {
  const int64_t multiple =
      static_cast<int64_t>(make_vocab_size_divisible_by) * tensor_model_parallel_size;
  if (multiple <= 0) return vocab_size;
  return static_cast<int>((vocab_size + multiple - 1) / multiple * multiple);
}

int64_t ModelConfig::num_parameters() const {
  const int64_t C = hidden_size, F = ffn(), L = num_layers;
  const int64_t per_layer =
      2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (F * C + F) + (C * F + C);
  return static_cast<int64_t>(padded_vocab_size()) * C + max_positions() * C + L * per_layer +
         2 * C;
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
  if (max_position_embeddings > 0 && max_position_embeddings < seq_length)
    errors.push_back("--max-position-embeddings " + std::to_string(max_position_embeddings) +
                     " is smaller than --seq-length " + std::to_string(seq_length));
  auto probability = [&](const char* flag, float p) {
    if (!(p >= 0.0f && p < 1.0f))
      errors.push_back(std::string(flag) + " must lie in [0, 1), got " + std::to_string(p));
  };
  probability("--attention-dropout", attention_dropout);
  probability("--hidden-dropout", hidden_dropout);
  if (!(init_method_std > 0.0f))
    errors.push_back("--init-method-std must be positive, got " + std::to_string(init_method_std));
  return errors;
}

double flops_per_iteration(const ModelConfig& m, int64_t global_batch) {
  const double B = static_cast<double>(global_batch), s = m.seq_length, L = m.num_layers,
               h = m.hidden_size, F = m.ffn(), V = m.padded_vocab_size();
  // forward per token and layer: QKV 6h^2 + proj 2h^2 + MLP 4hF + causal attention 2sh;
  // backward is twice the forward; the LM head adds 2hV per token forward.
  const double per_token_forward = L * (8 * h * h + 4 * h * F + 2 * s * h) + 2 * h * V;
  return 3.0 * B * s * per_token_forward;
}

}  // namespace lattice
