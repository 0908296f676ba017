// Published model sizes for the Plan view's preset list: GPT-2 (Radford et al. 2019, the
// Hugging Face configs), GPT-3 (Brown et al. 2020, table 2.1, with the head counts and the
// 5120 hidden size Megatron-LM's examples use), the demo model of `lattice demo`, and the
// Llama family (issue 23) from their Hugging Face config.json files: Llama 3 8B / 70B,
// Llama 3.1 405B, Qwen2.5 7B, Mistral 7B v0.1.
#pragma once

#include <QString>
#include <string>
#include <vector>

#include "lattice/train_options.h"

namespace lattice::ui {

struct ModelPreset {
  QString name;
  int num_layers = 0, hidden_size = 0, num_attention_heads = 0, seq_length = 0;
  int vocab_size = 0;  // --vocab-size of a NullTokenizer: the model has one more id (EOD)
  int micro_batch_size = 1, global_batch_size = 1;
  // The architecture flags; the defaults are GPT-2's (4 x hidden GELU MLP, one key/value head
  // per query head, learned positions, LayerNorm, biases, LM head tied to the embedding).
  int ffn_hidden_size = 0;   // 0: 4 x hidden
  int num_query_groups = 0;  // key/value heads with --group-query-attention; 0: MHA
  std::string position_embedding_type = "learned_absolute";
  float rotary_base = 10000.0f;
  std::string normalization = "LayerNorm";
  float norm_epsilon = 1e-5f;
  bool swiglu = false;
  bool untie_embeddings_and_output_weights = false;
  bool disable_bias_linear = false;
  bool add_qkv_bias = false;
};

// Demo model first, then GPT-2 124M ... GPT-3 175B, then the Llama family.
const std::vector<ModelPreset>& modelPresets();
// Sets the architecture (every field of the preset; --rotary-percent 1 and the
// position-table length 0, i.e. the sequence length), sequence length, vocabulary and batch
// sizes; keeps parallelism, precision, data and optimizer settings.
void applyPreset(TrainOptions& options, const ModelPreset& preset);
// Index into modelPresets() of the preset whose architecture `options` has, or -1 ("Custom").
// Every field applyPreset sets is compared, except those the model then ignores: the RoPE
// fields without --position-embedding-type rope, --num-query-groups without
// --group-query-attention.
int presetIndexOf(const TrainOptions& options);

// The embedded demo configuration (resources/configs/demo.json, the one `lattice demo`
// trains) with a NullTokenizer of the demo corpus's vocabulary (4096 ids).
TrainOptions demoOptions();

}  // namespace lattice::ui
