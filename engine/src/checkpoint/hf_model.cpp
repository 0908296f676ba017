// The choice between the GPT-2, the Llama (or Mixtral) and the LLaVA interchange (hf_model.h).
#include "checkpoint/hf_model.h"

#include <nlohmann/json.hpp>

#include "checkpoint/hf_gpt2.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/hf_llama_config.h"
#include "checkpoint/hf_llava.h"

namespace lattice {

namespace {

std::vector<std::string> gpt2_unsupported(const ModelConfig& c) {
  std::vector<std::string> out;
  if (c.swiglu) out.push_back("--swiglu: GPT-2's MLP is GELU");
  if (c.kv_heads() != c.num_attention_heads)
    out.push_back("--num-query-groups " + std::to_string(c.kv_heads()) +
                  ": GPT-2 has a key and value head per query head");
  if (!c.tied_output())
    out.push_back(
        "--untie-embeddings-and-output-weights: GPT-2 ties its output layer to the word "
        "embeddings");
  if (!c.linear_bias() || !c.qkv_bias())
    out.push_back("--disable-bias-linear: GPT-2 has a bias on every linear layer");
  if (c.moe())
    out.push_back(
        "--num-experts: GPT-2 has no MoE form (Mixtral, with --position-embedding-type rope "
        "--normalization RMSNorm --swiglu, has)");
  return out;
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : "; ") + p;
  return s;
}

Status supported(const ModelConfig& config) {
  const std::vector<std::string> problems = hf_unsupported(config);
  if (problems.empty()) return Status::ok();
  return Status::invalid_argument(std::string("the model has no Hugging Face ") +
                                  hf_architecture_name(hf_architecture_of(config)) +
                                  " form: " + join(problems));
}

}  // namespace

const char* hf_architecture_name(HfArchitecture architecture) {
  return architecture == HfArchitecture::kGpt2      ? "GPT-2"
         : architecture == HfArchitecture::kMixtral ? "Mixtral"
         : architecture == HfArchitecture::kLlava   ? "LLaVA"
                                                    : "Llama";
}

HfArchitecture hf_architecture_of(const ModelConfig& config) {
  if (config.has_vision()) return HfArchitecture::kLlava;
  if (config.learned_positions() && !config.rms_norm()) return HfArchitecture::kGpt2;
  return config.moe() ? HfArchitecture::kMixtral : HfArchitecture::kLlama;
}

std::vector<std::string> hf_unsupported(const ModelConfig& config) {
  // A vision-language model's language model is GPT-2 or the Llama family as a text model's.
  std::vector<std::string> problems = config.learned_positions() && !config.rms_norm()
                                          ? gpt2_unsupported(config)
                                          : hf_llama_unsupported(config);
  if (config.has_vision())
    for (std::string& p : hf_llava_unsupported(config)) problems.push_back(std::move(p));
  return problems;
}

Result<HfArchitecture> hf_file_architecture(const std::string& path) {
  Result<HfWeights> weights = HfWeights::open(path);
  if (!weights) return weights.status();
  if (!weights->config_path().empty()) {
    Result<nlohmann::json> config = read_hf_config(weights->config_path());
    if (!config) return config.status();
    if (config->contains("model_type")) {
      const nlohmann::json& type = (*config)["model_type"];
      if (type.is_string() && type.get<std::string>() == "gpt2") return HfArchitecture::kGpt2;
      if (type == "mixtral") return HfArchitecture::kMixtral;
      if (type == "llava") return HfArchitecture::kLlava;
      if (is_hf_llama_type(*config)) return HfArchitecture::kLlama;
      return Status::invalid_argument(weights->config_path() + " gives model_type " +
                                      (*config)["model_type"].dump() +
                                      "; Lattice imports \"gpt2\", \"llama\", \"qwen2\", "
                                      "\"mistral\", \"mixtral\" and \"llava\"");
    }
  }
  if (weights->find("model.layers.0.block_sparse_moe.gate.weight")) return HfArchitecture::kMixtral;
  if (weights->find("multi_modal_projector.linear_1.weight") ||
      weights->find("model.multi_modal_projector.linear_1.weight"))
    return HfArchitecture::kLlava;
  return weights->find("model.embed_tokens.weight") ? HfArchitecture::kLlama
                                                    : HfArchitecture::kGpt2;
}

Status import_hf(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                 float* params) {
  if (Status s = supported(config); !s) return s;
  switch (hf_architecture_of(config)) {
    case HfArchitecture::kGpt2:
      return import_hf_gpt2(path, config, layout, params);
    case HfArchitecture::kLlava:
      return import_hf_llava(path, config, layout, params);
    default:
      return import_hf_llama(path, config, layout, params);
  }
}

Status export_hf(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                 const float* params, const HfWriteOptions& options) {
  if (Status s = supported(config); !s) return s;
  switch (hf_architecture_of(config)) {
    case HfArchitecture::kGpt2:
      return export_hf_gpt2(path, config, layout, params, options);
    case HfArchitecture::kLlava:
      return export_hf_llava(path, config, layout, params, options);
    default:
      return export_hf_llama(path, config, layout, params, options);
  }
}

Result<safetensors::Dtype> parse_hf_dtype(const std::string& text) {
  if (text == "fp32") return safetensors::Dtype::kF32;
  if (text == "bf16") return safetensors::Dtype::kBF16;
  return Status::invalid_argument("--hf-dtype must be fp32 or bf16, got '" + text + "'");
}

}  // namespace lattice
