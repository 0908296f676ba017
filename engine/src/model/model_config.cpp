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
  for (std::string& e : size_errors()) errors.push_back(std::move(e));
  probability("--attention-dropout", attention_dropout);
  probability("--hidden-dropout", hidden_dropout);
  if (!(init_method_std > 0.0f))
    errors.push_back("--init-method-std must be positive, got " + std::to_string(init_method_std));
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
  // In long double: the count itself may not fit 64 bits.
  const long double c = C, f = F,
                    per_layer =
                        4 * c + (3 * c * c + 3 * c) + (c * c + c) + (f * c + f) + (c * f + c);
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

double flops_per_iteration(const ModelConfig& m, int64_t global_batch) {
  const double B = static_cast<double>(global_batch), s = m.seq_length, L = m.num_layers,
               h = m.hidden_size, F = m.ffn(), V = m.padded_vocab_size();
  // forward per token and layer: QKV 6h^2 + proj 2h^2 + MLP 4hF + causal attention 2sh;
  // backward is twice the forward; the LM head adds 2hV per token forward.
  const double per_token_forward = L * (8 * h * h + 4 * h * F + 2 * s * h) + 2 * h * V;
  return 3.0 * B * s * per_token_forward;
}

}  // namespace lattice
