// Hugging Face interchange for whichever architecture the model is: GPT-2 (learned positions
// and LayerNorm: hf_gpt2.h) or the Llama family (RoPE, RMSNorm, SwiGLU: hf_llama.h), whose MoE
// form is Mixtral. --load-hf,
// --save-hf, `lattice ckpt import-hf | export-hf` and generation go through here, so that a
// model neither architecture expresses is an error before any file is read or written.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/hf_files.h"
#include "lattice/model_config.h"
#include "lattice/status.h"
#include "model/param_layout.h"

namespace lattice {

// kMixtral is the Llama family with MoE layers (hf_llama.h reads and writes both); kLlava a
// vision-language model, a CLIP tower and projector before a Llama-family LM (hf_llava.h).
enum class HfArchitecture { kGpt2, kLlama, kMixtral, kLlava };

// "GPT-2", "Llama", "Mixtral" or "LLaVA".
const char* hf_architecture_name(HfArchitecture architecture);

// The architecture `config` is written as: LLaVA for a vision-language model; GPT-2 for learned
// positions with LayerNorm, else the Llama family: Mixtral with --num-experts, Llama without.
HfArchitecture hf_architecture_of(const ModelConfig& config);

// Why `config` has no Hugging Face form, one sentence each naming the flag (a GPT-2 with
// --swiglu, a RoPE model with LayerNorm, ...); empty when it has one.
std::vector<std::string> hf_unsupported(const ModelConfig& config);

// What the model at `path` (HfWeights::open) is: its config.json's model_type ("gpt2";
// "llama", "qwen2", "mistral"; "mixtral"; "llava"), else its tensor names (Mixtral with
// model.layers.0.block_sparse_moe.gate.weight; LLaVA with multi_modal_projector.linear_1.weight;
// Llama with model.embed_tokens.weight; else GPT-2).
// invalid_argument naming the config.json for another model_type.
Result<HfArchitecture> hf_file_architecture(const std::string& path);

// import_hf_gpt2, import_hf_llama (Llama or Mixtral) or import_hf_llava by
// hf_architecture_of(config), after
// hf_unsupported:
// `layout` is ParamLayout(config) or a rank's chunk of it (--load-hf), which gets its slices.
Status import_hf(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                 float* params);

// export_hf_gpt2, export_hf_llama (Llama or Mixtral) or export_hf_llava by
// hf_architecture_of(config), after
// hf_unsupported.
Status export_hf(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                 const float* params, const HfWriteOptions& options = {});

// --hf-dtype: "fp32" or "bf16"; invalid_argument naming the flag otherwise.
Result<safetensors::Dtype> parse_hf_dtype(const std::string& text);

}  // namespace lattice
