// The model shape of an HF GPT-2 file from its tensors and the config.json beside it
// (hf_gpt2_config.h).
#include "checkpoint/hf_gpt2_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoint/hf_files.h"
#include "checkpoint/hf_gpt2.h"
#include "core/atomic_file.h"
#include "lattice/kernels.h"

namespace lattice {

namespace {

// The shape of the tensor `name` (with or without "transformer."), or null.
const std::vector<int64_t>* shape_of(const HfWeights& weights, const std::string& name) {
  for (const HfEntry& t : weights.tensors())
    if (t.name() == name || t.name() == "transformer." + name) return &t.info->shape;
  return nullptr;
}

HfGpt2Shape shape_from_tensors(const HfWeights& file) {
  HfGpt2Shape s;
  for (const HfEntry& t : file.tensors()) {
    const std::string prefix = "transformer.";
    const std::string name =
        t.name().rfind(prefix, 0) == 0 ? t.name().substr(prefix.size()) : t.name();
    s.num_layers = std::max(s.num_layers, hf_gpt2_layer_of(name) + 1);
  }
  if (const auto* wte = shape_of(file, "wte.weight"); wte && wte->size() == 2) {
    s.vocab_size = static_cast<int>((*wte)[0]);
    s.hidden_size = static_cast<int>((*wte)[1]);
  }
  if (const auto* wpe = shape_of(file, "wpe.weight"); wpe && wpe->size() == 2)
    s.max_positions = static_cast<int>((*wpe)[0]);
  if (const auto* fc = shape_of(file, "h.0.mlp.c_fc.weight"); fc && fc->size() == 2)
    s.ffn_hidden_size = static_cast<int>((*fc)[1]);
  return s;
}

// Reads config.json's keys into `s` and checks them against the tensors' sizes; appends one
// sentence per problem.
void check_config(const nlohmann::json& config, const std::string& config_path,
                  const std::string& weights_path, HfGpt2Shape& s,
                  std::vector<std::string>& problems) {
  auto integer = [&](const char* key, int* out) {
    if (!config.contains(key) || config[key].is_null()) return false;
    if (!config[key].is_number_integer() || config[key].get<int64_t>() <= 0) {
      problems.push_back(config_path + ": " + key + " is " + config[key].dump() +
                         ", not a positive integer");
      return false;
    }
    *out = config[key].get<int>();
    return true;
  };
  // Each key against the size the tensors give (0: the tensor is missing, nothing to compare).
  auto agree = [&](const char* key, int tensors, const std::string& where) {
    int value = 0;
    if (integer(key, &value) && tensors > 0 && value != tensors)
      problems.push_back(config_path + " gives " + key + " " + std::to_string(value) + " but " +
                         weights_path + " has " + std::to_string(tensors) + " " + where);
  };
  integer("n_head", &s.num_attention_heads);
  agree("n_layer", s.num_layers, "layers (h.0 to h." + std::to_string(s.num_layers - 1) + ")");
  agree("n_embd", s.hidden_size, "as hidden size (wte.weight's columns)");
  agree("n_positions", s.max_positions, "positions (wpe.weight's rows)");
  agree("vocab_size", s.vocab_size, "vocabulary entries (wte.weight's rows)");
  int n_embd = s.hidden_size;
  integer("n_embd", &n_embd);
  int n_inner = 4 * n_embd;  // HF's n_inner null (or absent) means 4 * n_embd
  integer("n_inner", &n_inner);
  if (s.ffn_hidden_size > 0 && n_inner != s.ffn_hidden_size)
    problems.push_back(
        config_path + " gives n_inner " + std::to_string(n_inner) +
        (config.contains("n_inner") && !config["n_inner"].is_null() ? "" : " (null: 4 * n_embd)") +
        " but " + weights_path + " has MLP size " + std::to_string(s.ffn_hidden_size) +
        " (h.0.mlp.c_fc.weight's columns)");
  if (config.contains("layer_norm_epsilon")) {
    const nlohmann::json& eps = config["layer_norm_epsilon"];
    if (!eps.is_number() ||
        std::abs(eps.get<double>() - kernels::kLayerNormEps) > 1e-6 * kernels::kLayerNormEps)
      problems.push_back(config_path + " gives layer_norm_epsilon " + eps.dump() +
                         "; Lattice's LayerNorm uses 1e-05 (GPT-2's)");
  }
  if (config.contains("model_type") && config["model_type"] != "gpt2")
    problems.push_back(config_path + " gives model_type " + config["model_type"].dump() +
                       "; only GPT-2 (\"gpt2\") can be imported");
  if (config.contains("activation_function")) {
    const nlohmann::json& act = config["activation_function"];
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      problems.push_back(config_path + " gives activation_function " + act.dump() +
                         "; Lattice's MLP uses GELU's tanh form (\"gelu_new\", GPT-2's)");
  }
}

}  // namespace

Result<HfGpt2Shape> read_hf_gpt2_shape(const std::string& path) {
  Result<HfWeights> file = HfWeights::open(path);
  if (!file) return file.status();
  HfGpt2Shape s = shape_from_tensors(*file);
  s.config_path = file->config_path();
  if (s.config_path.empty()) return s;
  Result<nlohmann::json> config = read_hf_config(s.config_path);
  if (!config) return config.status();
  std::vector<std::string> problems;
  check_config(*config, s.config_path, path, s, problems);
  if (!problems.empty()) {
    std::string message;
    for (const std::string& p : problems) message += (message.empty() ? "" : "\n") + p;
    return Status::invalid_argument(message);
  }
  return s;
}

Status write_hf_gpt2_config(const std::string& config_path, const ModelConfig& config,
                            int64_t vocab_rows, safetensors::Dtype dtype) {
  const nlohmann::json json = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"n_layer", config.num_layers},
      {"n_embd", config.hidden_size},
      {"n_head", config.num_attention_heads},
      {"n_inner", config.ffn()},
      {"n_positions", config.max_positions()},
      {"n_ctx", config.max_positions()},
      {"vocab_size", vocab_rows},
      {"layer_norm_epsilon", kernels::kLayerNormEps},
      {"activation_function", "gelu_new"},
      {"initializer_range", hf_decimal(config.init_method_std)},
      {"resid_pdrop", hf_decimal(config.hidden_dropout)},
      {"embd_pdrop", hf_decimal(config.hidden_dropout)},
      {"attn_pdrop", hf_decimal(config.attention_dropout)},
      {"tie_word_embeddings", true},
      {"torch_dtype", hf_torch_dtype(dtype)},
  };
  return write_file_atomic(config_path, json.dump(2) + "\n");
}

}  // namespace lattice
