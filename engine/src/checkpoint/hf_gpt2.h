// Import and export of Hugging Face GPT-2 weights (`model.safetensors` of the `gpt2` family)
// to and from Lattice's flat parameter arena. Export writes the weights and the config.json
// beside them (hf_gpt2_config.h); no tokenizer, no optimizer state. The name mapping and layout
// changes are in hf_gpt2.cpp; files, directories and shards are hf_files.h's.
#pragma once

#include <string>

#include "checkpoint/hf_files.h"
#include "checkpoint/hf_tensors.h"
#include "lattice/model_config.h"
#include "lattice/status.h"
#include "model/param_layout.h"

namespace lattice {

// Reads the HF GPT-2 model at `path` (a safetensors file, or a directory: HfWeights::open) into
// `params` (layout.total_numel() floats, laid out by `layout`: ParamLayout(config), or any shard
// of it, a rank's chunk, which gets its slices; the gaps between tensors are not written). Names
// may carry the "transformer." prefix; F32, F16 and BF16 are accepted. The causal-mask buffers
// (h.N.attn.bias, h.N.attn.masked_bias) are ignored; lm_head.weight, when present, must equal
// wte.weight because Lattice ties the output layer to the word embeddings. The word
// embedding's padding rows [--vocab-size, padded vocab) are set to the mean of its real rows
// (Note [vocabulary padding rows] in hf_tensors.cpp).
// Every mismatch (missing, unexpected, wrong shape or dtype) is reported at once in one
// invalid_argument message naming the file, the tensor and the flags that fix the expected
// shape; corrupt/io_error come from the file itself. On error `params` is left untouched.
Status import_hf_gpt2(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                      float* params);

// The N of an HF tensor name "h.N.<...>" (without "transformer."), or -1.
int hf_gpt2_layer_of(const std::string& name);

// Every tensor of HF's GPT2Model in the order of our arena (names without "transformer.", the
// word embedding first), and how its files are named (LLaVA's language model reuses both:
// hf_llava.h).
std::vector<HfTensor> hf_gpt2_tensors(const ModelConfig& config, const ParamLayout& layout);
HfNaming hf_gpt2_naming(const ModelConfig& config);

// Writes `params` as an HF GPT-2 model at `path` (a file or a directory: hf_target; each file
// atomically, see safetensors::write): names without the "transformer." prefix, Conv1D weights
// transposed, c_attn in GPT-2's [Q | K | V] order, wte without the padding rows, and metadata
// {"format": "pt"} as transformers writes it; then its config.json (write_hf_gpt2_config).
Status export_hf_gpt2(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                      const float* params, const HfWriteOptions& options = {});

}  // namespace lattice
