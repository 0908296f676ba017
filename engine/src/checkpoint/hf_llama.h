// Import and export of Hugging Face Llama-family weights (LlamaForCausalLM, Qwen2ForCausalLM,
// MistralForCausalLM without a window) to and from Lattice's flat parameter arena. HF names:
// model.embed_tokens.weight; model.layers.N.{input_layernorm, post_attention_layernorm}.weight;
// model.layers.N.self_attn.{q,k,v,o}_proj.{weight,bias}; model.layers.N.mlp.{gate,up,down}_proj
// .{weight,bias}; model.norm.weight; lm_head.weight (absent when tied). Biases as the model has
// them (ModelConfig). Export writes the weights and config.json (hf_llama_config.h); no tokenizer,
// no optimizer state. The row mapping is in hf_llama.cpp.
#pragma once

#include <string>

#include "checkpoint/hf_files.h"
#include "checkpoint/hf_tensors.h"
#include "lattice/model_config.h"
#include "lattice/status.h"
#include "model/param_layout.h"

namespace lattice {

// Reads the Llama-family model at `path` (a safetensors file or a directory, sharded or not:
// HfWeights::open) into `params` (layout.total_numel() floats, laid out by `layout`:
// ParamLayout(config) of a model with hf_llama_unsupported(config) empty, or any shard of it,
// a rank's chunk, which gets its slices; the gaps between tensors are not written). F32, F16 and
// BF16 are accepted; rotary_emb.inv_freq buffers are ignored; a tied model's lm_head.weight, when a
// file holds one, must equal model.embed_tokens.weight. The embedding's (and an untied head's)
// padding rows up to the padded vocabulary are set to the mean of the real rows (Note
// [vocabulary padding rows] in hf_tensors.cpp). Every mismatch (missing, unexpected,
// wrong shape or dtype, layer count) is reported at once in one invalid_argument message naming
// the file, the tensor and the flags that fix the expected shape. On error `params` is left
// untouched.
Status import_hf_llama(const std::string& path, const ModelConfig& config,
                       const ParamLayout& layout, float* params);

// Writes `params` as a Llama-family model at `path` (hf_target: a directory, sharded above
// options.max_shard_bytes, or one file), q/k/v_proj regrouped from Megatron's grouped
// linear_qkv rows into HF's head-major rows, gate_proj and up_proj the two halves of linear_fc1,
// the vocabulary tables without their padding rows; then config.json (write_hf_llama_config).
// Every tensor of HF's LlamaForCausalLM (or MixtralForCausalLM) in the order of our arena, the
// word embedding first; and how its files are named (LLaVA's language model reuses both:
// hf_llava.h).
std::vector<HfTensor> hf_llama_tensors(const ModelConfig& config, const ParamLayout& layout);
HfNaming hf_llama_naming(const ModelConfig& config);

Status export_hf_llama(const std::string& path, const ModelConfig& config,
                       const ParamLayout& layout, const float* params,
                       const HfWriteOptions& options = {});

}  // namespace lattice
