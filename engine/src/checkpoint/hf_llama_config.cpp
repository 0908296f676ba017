// config.json of the Llama family, read and written (hf_llama_config.h).
#include "checkpoint/hf_llama_config.h"

#include <cmath>

#include "checkpoint/hf_files.h"
#include "core/atomic_file.h"

namespace lattice {

namespace {

// Reads config.json's keys one by one, collecting one sentence per problem.
struct Reader {
  const nlohmann::json& json;
  const std::string& path;
  std::vector<std::string> problems;

  bool has(const char* key) const { return json.contains(key) && !json[key].is_null(); }
  void fail(const std::string& key, const std::string& why) {
    problems.push_back(path + ": " + key + " " + why);
  }
  // A required positive integer.
  int size(const char* key) {
    if (!has(key)) {
      fail(key, "is missing; a Llama-family config.json gives it");
      return 0;
    }
    return positive(key, 0);
  }
  int positive(const char* key, int fallback) {
    if (!has(key)) return fallback;
    if (!json[key].is_number_integer() || json[key].get<int64_t>() <= 0 ||
        json[key].get<int64_t>() > ModelConfig::kMaxDimension) {
      fail(key, "is " + json[key].dump() + ", not a positive integer");
      return fallback;
    }
    return json[key].get<int>();
  }
  double number(const char* key, double fallback) {
    if (!has(key)) return fallback;
    if (!json[key].is_number() || !(json[key].get<double>() > 0)) {
      fail(key, "is " + json[key].dump() + ", not a positive number");
      return fallback;
    }
    return json[key].get<double>();
  }
  bool flag(const char* key, bool fallback) {
    if (!has(key)) return fallback;
    if (!json[key].is_boolean()) {
      fail(key, "is " + json[key].dump() + ", not true or false");
      return fallback;
    }
    return json[key].get<bool>();
  }
};

// transformers' default num_key_value_heads when the key is absent.
int default_kv_heads(const std::string& model_type, int heads) {
  return model_type == "qwen2"                                ? 32
         : model_type == "mistral" || model_type == "mixtral" ? 8
                                                              : heads;
}

void check_unsupported(Reader& r, HfLlamaConfig& c) {
  const nlohmann::json& j = r.json;
  if (r.has("hidden_act") && j["hidden_act"] != "silu")
    r.fail("hidden_act", "is " + j["hidden_act"].dump() +
                             "; Lattice's --swiglu MLP is silu(gate) * up (\"silu\")");
  if (r.has("rope_scaling")) {
    const nlohmann::json& s = j["rope_scaling"];
    const nlohmann::json type = !s.is_object()            ? s
                                : s.contains("rope_type") ? s["rope_type"]
                                                          : s.value("type", nlohmann::json());
    // Llama 3.1's, with the constants Megatron's --use-rope-scaling fixes.
    const bool llama3 = type == "llama3" && s.value("factor", nlohmann::json()).is_number() &&
                        s["factor"].get<double>() >= 1 &&
                        s.value("low_freq_factor", nlohmann::json()) == 1 &&
                        s.value("high_freq_factor", nlohmann::json()) == 4 &&
                        s.value("original_max_position_embeddings", nlohmann::json()) == 8192;
    if (llama3)
      c.rope_scaling_factor = s["factor"].get<double>();
    else if (type != "default")
      r.fail("rope_scaling",
             "is " + s.dump() +
                 ": Lattice's RoPE scales only as Llama 3.1 does (rope_type \"llama3\" with "
                 "low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192 "
                 "and any factor >= 1); null and \"default\" mean no scaling");
  }
  // Mistral attends within a window of the last sliding_window tokens; Lattice's attention is
  // fully causal, which is the same only when no sequence is longer than the window.
  if (c.model_type == "mistral" && r.has("sliding_window") && j["sliding_window"].is_number() &&
      j["sliding_window"].get<int64_t>() < c.max_position_embeddings)
    r.fail("sliding_window", "is " + j["sliding_window"].dump() +
                                 ", shorter than max_position_embeddings " +
                                 std::to_string(c.max_position_embeddings) +
                                 ": Lattice's attention is fully causal, not windowed");
  if (c.model_type == "qwen2" && r.flag("use_sliding_window", false))
    r.fail("use_sliding_window",
           "is true: Lattice's attention is fully causal, not windowed (sliding_window " +
               j.value("sliding_window", nlohmann::json()).dump() + ")");
  if (r.has("head_dim") && c.num_attention_heads > 0 &&
      j["head_dim"] != nlohmann::json(c.hidden_size / c.num_attention_heads))
    r.fail("head_dim", "is " + j["head_dim"].dump() +
                           ", but Lattice's head size is hidden_size / num_attention_heads = " +
                           std::to_string(c.hidden_size / c.num_attention_heads));
  // transformers' Llama: attention_bias puts a bias on q, k, v and o_proj, mlp_bias on gate,
  // up and down; Lattice has all of them, none, or q, k, v only (Qwen2's). Mixtral has none
  // (its config has neither key).
  if (c.model_type == "mixtral") {
    c.qkv_bias = c.linear_bias = false;
  } else if (c.model_type != "qwen2") {
    const bool attention = r.flag("attention_bias", false), mlp = r.flag("mlp_bias", false);
    if (attention != mlp)
      r.fail(attention ? "attention_bias" : "mlp_bias",
             std::string("is true but ") + (attention ? "mlp_bias" : "attention_bias") +
                 " is not: Lattice has biases on every linear layer or on none (or on q, k, v "
                 "only: Qwen2)");
    c.qkv_bias = c.linear_bias = attention && mlp;
  } else {
    c.qkv_bias = true;
  }
}

}  // namespace

bool is_hf_llama_type(const nlohmann::json& config) {
  const nlohmann::json type = config.value("model_type", nlohmann::json());
  return type == "llama" || type == "qwen2" || type == "mistral" || type == "mixtral";
}

Result<HfLlamaConfig> parse_hf_llama_config(const nlohmann::json& json, const std::string& path) {
  if (!is_hf_llama_type(json))
    return Status::invalid_argument(
        path + ": model_type is " + json.value("model_type", nlohmann::json()).dump() +
        "; the Llama family's are \"llama\", \"qwen2\", \"mistral\" and \"mixtral\"");
  Reader r{json, path, {}};
  HfLlamaConfig c;
  c.path = path;
  c.model_type = json["model_type"].get<std::string>();
  c.num_layers = r.size("num_hidden_layers");
  c.hidden_size = r.size("hidden_size");
  c.ffn_hidden_size = r.size("intermediate_size");
  c.num_attention_heads = r.size("num_attention_heads");
  c.vocab_size = r.size("vocab_size");
  c.max_position_embeddings = r.size("max_position_embeddings");
  c.num_query_groups =
      r.positive("num_key_value_heads", default_kv_heads(c.model_type, c.num_attention_heads));
  const bool mixtral = c.model_type == "mixtral";
  c.norm_epsilon = r.number("rms_norm_eps", mixtral ? 1e-5 : 1e-6);
  c.rotary_base = r.number("rope_theta", mixtral ? 1e6 : 10000);
  c.rotary_percent = r.number("partial_rotary_factor", 1.0);
  c.tied = r.flag("tie_word_embeddings", false);
  c.attention_dropout = json.contains("attention_dropout") && json["attention_dropout"].is_number()
                            ? json["attention_dropout"].get<double>()
                            : 0.0;
  if (c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads != 0)
    r.fail("hidden_size", std::to_string(c.hidden_size) + " is not a multiple of " +
                              "num_attention_heads " + std::to_string(c.num_attention_heads));
  if (c.num_query_groups > 0 && c.num_attention_heads % c.num_query_groups != 0)
    r.fail("num_key_value_heads", std::to_string(c.num_query_groups) +
                                      " does not divide num_attention_heads " +
                                      std::to_string(c.num_attention_heads));
  if (c.rotary_percent > 1) r.fail("partial_rotary_factor", "is above 1");
  if (mixtral) {
    c.num_experts = r.positive("num_local_experts", 8);
    c.moe_router_topk = r.positive("num_experts_per_tok", 2);
    if (c.moe_router_topk > c.num_experts)
      r.fail("num_experts_per_tok", std::to_string(c.moe_router_topk) +
                                        " is more than num_local_experts " +
                                        std::to_string(c.num_experts));
    if (r.has("router_aux_loss_coef") && (!json["router_aux_loss_coef"].is_number() ||
                                          !(json["router_aux_loss_coef"].get<double>() >= 0)))
      r.fail("router_aux_loss_coef",
             "is " + json["router_aux_loss_coef"].dump() + ", not a number >= 0");
    else
      c.moe_aux_loss_coeff =
          r.has("router_aux_loss_coef") ? json["router_aux_loss_coef"].get<double>() : 0.001;
    c.sliding_window = r.positive("sliding_window", 0);
  }
  check_unsupported(r, c);
  if (r.problems.empty()) return c;
  std::string message;
  for (const std::string& p : r.problems) message += (message.empty() ? "" : "\n") + p;
  return Status::invalid_argument(message);
}

Result<HfLlamaConfig> read_hf_llama_config(const std::string& path) {
  Result<nlohmann::json> json = read_hf_config(path);
  if (!json) return json.status();
  return parse_hf_llama_config(*json, path);
}

std::vector<std::string> hf_llama_unsupported(const ModelConfig& c) {
  std::vector<std::string> out;
  if (!c.rope())
    out.push_back("--position-embedding-type " + c.position_embedding_type +
                  ": Hugging Face's Llama family uses rope");
  if (!c.rms_norm())
    out.push_back("--normalization " + c.normalization +
                  ": Hugging Face's Llama family uses RMSNorm");
  if (!c.swiglu) out.push_back("no --swiglu: Hugging Face's Llama family's MLP is SwiGLU");
  if (c.moe()) {
    // MixtralForCausalLM: every layer's MLP is a block_sparse_moe, and no linear has a bias.
    for (int l = 0; l < c.num_layers; l++)
      if (!c.is_moe_layer(l)) {
        out.push_back("--moe-layer-freq " + std::to_string(c.moe_layer_freq) +
                      ": Hugging Face's Mixtral has experts in every layer (1)");
        break;
      }
    if (c.linear_bias() || c.qkv_bias())
      out.push_back(std::string(c.linear_bias() ? "no --disable-bias-linear" : "--add-qkv-bias") +
                    ": Hugging Face's Mixtral has no biases");
  }
  return out;
}

Status write_hf_llama_config(const std::string& config_path, const ModelConfig& c,
                             int64_t vocab_rows, safetensors::Dtype dtype) {
  const bool mixtral = c.moe(), qwen2 = !mixtral && c.qkv_bias() && !c.linear_bias();
  nlohmann::ordered_json json = {
      {"architectures",
       {mixtral ? "MixtralForCausalLM"
        : qwen2 ? "Qwen2ForCausalLM"
                : "LlamaForCausalLM"}},
      {"model_type", mixtral ? "mixtral"
                     : qwen2 ? "qwen2"
                             : "llama"},
      {"num_hidden_layers", c.num_layers},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", mixtral ? c.moe_ffn() : c.ffn()},  // Mixtral's: an expert's
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.kv_heads()},
      {"head_dim", c.head_size()},
      {"hidden_act", "silu"},
      {"max_position_embeddings", c.max_positions()},
      {"vocab_size", vocab_rows},
      {"rms_norm_eps", hf_decimal(c.norm_epsilon)},
      {"rope_theta", hf_decimal(c.rotary_base)},
      {"rope_scaling", nullptr},  // below for Llama 3.1's
      {"tie_word_embeddings", c.tied_output()},
      {"attention_dropout", hf_decimal(c.attention_dropout)},
      {"initializer_range", hf_decimal(c.init_method_std)},
      {"use_cache", true},
      {"torch_dtype", hf_torch_dtype(dtype)},
  };
  if (c.use_rope_scaling)
    json["rope_scaling"] = {{"factor", hf_decimal(c.rope_scaling_factor)},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 8192},
                            {"rope_type", "llama3"}};
  if (mixtral) {
    // Lattice's routing is Mixtral's (Note [MoE layer]); its load-balancing loss's coefficient
    // is recorded as Megatron's converters map it. transformers adds that loss only with
    // output_router_logits, which it leaves off by default.
    json["num_local_experts"] = c.num_experts;
    json["num_experts_per_tok"] = c.moe_router_topk;
    json["router_aux_loss_coef"] = hf_decimal(static_cast<float>(c.aux_loss_coeff()));
    json["output_router_logits"] = false;
    json["router_jitter_noise"] = 0.0;
    json["sliding_window"] = nullptr;
  } else if (qwen2) {
    json["use_sliding_window"] = false;
    json["sliding_window"] = c.max_positions();
    json["max_window_layers"] = c.num_layers;
  } else {
    json["attention_bias"] = c.linear_bias();
    json["mlp_bias"] = c.linear_bias();
    json["pretraining_tp"] = 1;
  }
  // transformers' Llama rotates every dimension of a head; a partial rotary (GPT-NeoX's, as
  // Lattice applies --rotary-percent) is recorded so that Lattice reads it back.
  if (c.rotary_percent != 1.0f) json["partial_rotary_factor"] = hf_decimal(c.rotary_percent);
  return write_file_atomic(config_path, json.dump(2) + "\n");
}

}  // namespace lattice
