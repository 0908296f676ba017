// What a Hugging Face GPT-2 weights file says about its model, so that --load-hf and
// `lattice ckpt import-hf` need no model flags: the tensors' shapes give the layers, hidden
// size, MLP size, vocabulary and positions; the attention heads are in no shape, so they come
// from the config.json that Hugging Face keeps beside the weights. Reading the weights
// themselves is hf_gpt2.h's.
#pragma once

#include <string>

#include "checkpoint/safetensors.h"
#include "lattice/model_config.h"
#include "lattice/status.h"

namespace lattice {

struct HfGpt2Shape {
  int num_layers = 0;           // h.0 ... h.{N-1}
  int hidden_size = 0;          // wte.weight (V, C): C
  int vocab_size = 0;           // wte.weight (V, C): V
  int max_positions = 0;        // wpe.weight (P, C): P
  int ffn_hidden_size = 0;      // h.0.mlp.c_fc.weight (C, F): F
  int num_attention_heads = 0;  // config.json's n_head; 0 without one
  std::string config_path;      // the config.json read; empty when there is none
};

// The shape of the GPT-2 model at `path` (a safetensors file or a directory: HfWeights::open;
// names with or without "transformer."). A size whose tensor the file lacks stays 0
// (import_hf_gpt2 names what is missing). Its config.json (HfWeights::config_path) is read and must
// agree with the tensors on every key it has of n_layer, n_embd, n_positions, vocab_size and
// n_inner (null: 4 * n_embd); its layer_norm_epsilon must be the 1e-5 that Lattice's LayerNorm
// uses, its model_type "gpt2" and its activation_function GELU's tanh form. Errors name the file,
// the key and both values; the files themselves fail as HfWeights::open does.
Result<HfGpt2Shape> read_hf_gpt2_shape(const std::string& path);

// Writes the config.json that Hugging Face's GPT2LMHeadModel reads for `config` to
// `config_path` (atomically, replacing one already there), so that the exported directory loads
// with transformers' from_pretrained and back into Lattice with no model flags. `vocab_rows`:
// the rows of the exported wte.weight; `dtype`: the weights' (torch_dtype).
Status write_hf_gpt2_config(const std::string& config_path, const ModelConfig& config,
                            int64_t vocab_rows, safetensors::Dtype dtype);

}  // namespace lattice
