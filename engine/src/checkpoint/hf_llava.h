// Import and export of Hugging Face LLaVA weights (LlavaForConditionalGeneration, model_type
// "llava") for Lattice's vision-language models (docs/vision.md): the CLIP tower as
// CLIPVisionModel's names under vision_tower., the projector as multi_modal_projector.linear_1 /
// linear_2, and the language model under language_model. with LlamaForCausalLM's (or
// MixtralForCausalLM's, or GPT2LMHeadModel's: transformer.h.N...) names: the layout llava-hf's
// checkpoints on the Hub ship with (transformers before 4.52). Import also reads the names newer
// transformers save (model.vision_tower., model.multi_modal_projector., model.language_model.
// + the base model's names, lm_head.weight). Mapping and assumptions: Note [LLaVA layout] in
// hf_llava.cpp.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/hf_files.h"
#include "lattice/model_config.h"
#include "lattice/status.h"
#include "model/param_layout.h"

namespace lattice {

// Why the vision tower of `config` has no LLaVA form, one sentence each naming the flag (no
// class token, a patch bias, a non-square image); empty when it has one. The language model's
// own problems are hf_unsupported's (hf_model.h).
std::vector<std::string> hf_llava_unsupported(const ModelConfig& config);

// As import_hf_llama (hf_llama.h), for a LLaVA model: `layout` is ParamLayout(config) of a
// vision-language model with hf_llava_unsupported(config) empty, or a rank's chunk of it.
// vision_tower.vision_model.post_layernorm.* and embeddings.position_ids are skipped (LLaVA
// feeds the projector a hidden state, never the pooled, post-normed output).
Status import_hf_llava(const std::string& path, const ModelConfig& config,
                       const ParamLayout& layout, float* params);

// Writes `params` as a LLaVA model at `path` (hf_target), the tower's fused qkv_proj split into
// q_proj, k_proj and v_proj, post_layernorm as an identity LayerNorm (ones, zeros), then
// config.json (hf_llava_config_json) and preprocessor_config.json (the images' normalisation,
// config.vision.image_mean / image_std, as a CLIPImageProcessor's: Note [LLaVA preprocessor]).
Status export_hf_llava(const std::string& path, const ModelConfig& config,
                       const ParamLayout& layout, const float* params,
                       const HfWriteOptions& options = {});

// config.json's vision_config with CLIPVisionConfig's defaults for absent keys, in Lattice's
// terms (apply_hf_model takes the flags from it). Errors, one sentence each naming `path` and
// the key: another hidden_act than quick_gelu, a layer_norm_eps other than 1e-5, a
// vision_feature_select_strategy other than "default", a projector_hidden_act other than
// "gelu", multimodal_projector_bias false, a vision_feature_layer that is a list.
// The result has class_token true, patch_bias false, lm_hidden_size 0 (the language model's).
Result<VisionConfig> parse_hf_llava_vision(const nlohmann::json& config, const std::string& path);

// The images' normalisation of the LLaVA model whose config.json lies in `dir`: image_mean and
// image_std of its preprocessor_config.json (Note [LLaVA preprocessor]), found false and CLIP's
// values when there is none. invalid_argument, one sentence naming the file and the key: a
// file that is not a JSON object, an image_mean or image_std that is not a list of 3 numbers,
// an image_std not above 0.
struct HfImageNorm {
  std::array<float, 3> mean = kClipImageMean;
  std::array<float, 3> std = kClipImageStd;
  bool found = false;
  std::string path;  // dir/preprocessor_config.json
};
Result<HfImageNorm> read_hf_llava_image_norm(const std::string& dir);

// config.json's text_config with LlamaConfig's defaults filled in for the sizes a llava-hf file
// omits (hidden_size 4096, intermediate_size 11008, 32 layers and heads,
// max_position_embeddings 2048, vocab_size 32000); a text_config of another model_type as is.
nlohmann::json hf_llava_text_config(const nlohmann::json& config);

}  // namespace lattice
