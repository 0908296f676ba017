// The GPT architecture hyper-parameters (Megatron's flag names in comments) and the
// derived sizes every module agrees on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int max_positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  int head_size() const { return hidden_size / num_attention_heads; }
  // Megatron: ceil(V / (divisible_by * TP)) * divisible_by * TP.
  int padded_vocab_size() const;
  // Every tensor's element count summed (the tied LM head counted once).
  int64_t num_parameters() const;
  // Every violated rule, one sentence each naming the flag; empty when valid.
  std::vector<std::string> validate() const;
  // The size rules validate() includes: every dimension fits the engine's 32-bit ints (the
  // default FFN's 4 x hidden, the fused QKV's 3 x hidden, the padded vocabulary) and the
  // parameter count stays below kMaxParameters, so that counts formed in 64 bits never wrap.
  std::vector<std::string> size_errors() const;

  static constexpr int64_t kMaxDimension = 2147483647;  // INT32_MAX
  // 2^58: 32 bytes of fp64 training state per parameter still fit a signed 64-bit count.
  static constexpr int64_t kMaxParameters = int64_t{1} << 58;
};

// Training FLOPs of one iteration (forward + backward) as Megatron counts them, with B the
// global batch: 72 B s L h^2 (1 + s / (12 h) + V / (12 L h)) for the 4h MLP.
double flops_per_iteration(const ModelConfig& model, int64_t global_batch);

}  // namespace lattice
