// apply_hf_model (train_options.h): the model flags of a Hugging Face model (GPT-2 from its
// tensors and config.json, the Llama family, Mixtral and LLaVA from its config.json), so that
// --load-hf and `lattice ckpt import-hf` need none, and the ones given are checked against it.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/hf_gpt2_config.h"
#include "checkpoint/hf_llama_config.h"
#include "checkpoint/hf_llava.h"
#include "checkpoint/hf_model.h"
#include "lattice/train_options.h"

namespace lattice {

namespace {

// Takes each model flag from the file unless given; a given one must equal the file's.
struct FlagTaker {
  TrainOptions& o;
  std::string source;  // the file named in messages
  std::vector<std::string> errors;

  void mismatch(const std::string& flag, const std::string& ours, const std::string& theirs) {
    errors.push_back("--" + flag + " " + ours + " disagrees with " + source + ", which " + theirs);
  }
  // `theirs` says where the file's value comes from ("has 3 layers", "gives n_head 6").
  template <typename T>
  void take(const std::string& flag, T& target, T value, const std::string& theirs) {
    if (!o.given(flag))
      target = value;
    else if (target != value)
      mismatch(flag, text(target), theirs);
  }
  static std::string text(int v) { return std::to_string(v); }
  static std::string text(bool v) { return v ? "true" : "false"; }
  static std::string text(const std::string& v) { return v; }
  static std::string text(float v) {
    char s[32];
    std::snprintf(s, sizeof s, "%g", v);
    return s;
  }

  // With NullTokenizer the model has --vocab-size + 1 ids (EOD = --vocab-size, as Megatron);
  // another tokenizer brings its own vocabulary, which the import checks against the file.
  void vocabulary(int rows, const std::string& where) {
    if (o.tokenizer.type != "NullTokenizer" || rows <= 0) return;
    if (!o.given("vocab-size")) {
      o.tokenizer.vocab_size = rows - 1;
      o.model.vocab_size = rows;
    } else if (o.tokenizer.vocab_size + 1 != rows) {
      errors.push_back(
          "--vocab-size " + std::to_string(o.tokenizer.vocab_size) +
          " gives NullTokenizer's model " + std::to_string(o.tokenizer.vocab_size + 1) +
          " ids (EOD = --vocab-size) but " + source + " has " + std::to_string(rows) + " (" +
          where + "): pass --vocab-size " + std::to_string(rows - 1) + " or leave it out");
    }
  }

  // The architecture flags that make the model `name`'s, with the file's values.
  void architecture(const std::string& name, const std::string& positions, const std::string& norm,
                    bool swiglu) {
    ModelConfig& m = o.model;
    take("position-embedding-type", m.position_embedding_type, positions,
         "is a " + name + " model (" + positions + ")");
    take("normalization", m.normalization, norm, "is a " + name + " model (" + norm + ")");
    take("swiglu", m.swiglu, swiglu,
         "is a " + name + " model (" + (swiglu ? "SwiGLU" : "GELU") + " MLP)");
  }

  // GPT-2's: learned positions, LayerNorm, a GELU MLP, biases, a key and value head per query
  // head, the output layer tied to the word embeddings.
  void gpt2_architecture() {
    ModelConfig& m = o.model;
    architecture("GPT-2", "learned_absolute", "LayerNorm", false);
    take("group-query-attention", m.group_query_attention, false,
         "is a GPT-2 model (a key and value head per query head)");
    take("untie-embeddings-and-output-weights", m.untie_embeddings_and_output_weights, false,
         "is a GPT-2 model (output layer tied to the word embeddings)");
    take("disable-bias-linear", m.disable_bias_linear, false,
         "is a GPT-2 model (biases on every linear layer)");
  }

  Status status() const {
    if (errors.empty()) return Status::ok();
    std::string message;
    for (const std::string& e : errors) message += (message.empty() ? "" : "\n") + e;
    return Status::invalid_argument(message);
  }
};

Status apply_gpt2(const std::string& path, TrainOptions& o) {
  Result<HfGpt2Shape> read = read_hf_gpt2_shape(path);
  if (!read) return read.status();
  const HfGpt2Shape& file = *read;
  ModelConfig& m = o.model;
  FlagTaker f{o, path, {}};
  f.gpt2_architecture();
  // A size is 0 when the file lacks its tensor (import_hf_gpt2 then names it).
  auto take_size = [&](const std::string& flag, int& target, int value, const std::string& what) {
    if (value > 0) f.take(flag, target, value, "has " + std::to_string(value) + " " + what);
  };
  take_size("num-layers", m.num_layers, file.num_layers, "layers");
  take_size("hidden-size", m.hidden_size, file.hidden_size,
            "as hidden size (wte.weight's columns)");
  take_size("max-position-embeddings", m.max_position_embeddings, file.max_positions,
            "positions (wpe.weight's rows)");
  if (!o.given("seq-length") && file.max_positions > 0) m.seq_length = file.max_positions;

  // --ffn-hidden-size 0 means 4 * --hidden-size; the effective size is what must agree.
  if (file.ffn_hidden_size > 0) {
    if (!o.given("ffn-hidden-size"))
      m.ffn_hidden_size = file.ffn_hidden_size == 4 * m.hidden_size ? 0 : file.ffn_hidden_size;
    else if (m.ffn() != file.ffn_hidden_size)
      f.mismatch("ffn-hidden-size", std::to_string(m.ffn()),
                 "has MLP size " + std::to_string(file.ffn_hidden_size) +
                     " (h.0.mlp.c_fc.weight's columns)");
  }
  f.vocabulary(file.vocab_size, "wte.weight's rows");

  if (file.num_attention_heads > 0) {
    f.source = file.config_path;
    f.take("num-attention-heads", m.num_attention_heads, file.num_attention_heads,
           "gives n_head " + std::to_string(file.num_attention_heads));
  } else if (!o.given("num-attention-heads")) {
    f.errors.push_back(
        path + " does not say how many attention heads the model has (no tensor shape does): " +
        (file.config_path.empty() ? "put its Hugging Face config.json (with n_head) beside it"
                                  : file.config_path + " has no n_head; add it") +
        ", or pass --num-attention-heads");
  }
  return f.status();
}

Status apply_llama_config(const HfLlamaConfig& c, TrainOptions& o);

Status apply_llama(const std::string& path, TrainOptions& o) {
  Result<HfWeights> weights = HfWeights::open(path);
  if (!weights) return weights.status();
  if (weights->config_path().empty())
    return Status::invalid_argument(
        path +
        " has no config.json beside it: a Llama-family model's heads, query groups, "
        "RoPE base and norm epsilon are in no tensor shape (put the model's Hugging Face "
        "config.json there)");
  Result<HfLlamaConfig> read = read_hf_llama_config(weights->config_path());
  if (!read) return read.status();
  return apply_llama_config(*read, o);
}

// A LLaVA model's GPT-2 text_config (GPT2Config's defaults for absent keys): no tensor shape
// is read, the keys give every size.
Status apply_gpt2_text_config(const nlohmann::json& c, const std::string& source, TrainOptions& o) {
  ModelConfig& m = o.model;
  FlagTaker f{o, source, {}};
  auto size = [&](const char* key, int fallback) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    if (!c[key].is_number_integer() || c[key].get<int64_t>() <= 0 ||
        c[key].get<int64_t>() > ModelConfig::kMaxDimension) {
      f.errors.push_back(source + ": " + key + " is " + c[key].dump() + ", not a positive integer");
      return fallback;
    }
    return c[key].get<int>();
  };
  auto gives = [](const char* key, int v) {
    return "gives " + std::string(key) + " " + std::to_string(v);
  };
  f.gpt2_architecture();
  const int layers = size("n_layer", 12), hidden = size("n_embd", 768), heads = size("n_head", 12);
  const int positions = size("n_positions", 1024), ffn = size("n_inner", 4 * hidden);
  f.take("num-layers", m.num_layers, layers, gives("n_layer", layers));
  f.take("hidden-size", m.hidden_size, hidden, gives("n_embd", hidden));
  f.take("num-attention-heads", m.num_attention_heads, heads, gives("n_head", heads));
  f.take("max-position-embeddings", m.max_position_embeddings, positions,
         gives("n_positions", positions));
  if (!o.given("seq-length")) m.seq_length = positions;
  if (!o.given("ffn-hidden-size"))
    m.ffn_hidden_size = ffn == 4 * m.hidden_size ? 0 : ffn;
  else if (m.ffn() != ffn)
    f.mismatch("ffn-hidden-size", std::to_string(m.ffn()), gives("n_inner", ffn));
  f.vocabulary(size("vocab_size", 50257), "vocab_size");
  if (c.contains("layer_norm_epsilon") && c["layer_norm_epsilon"] != nlohmann::json(1e-5))
    f.errors.push_back(source + ": layer_norm_epsilon is " + c["layer_norm_epsilon"].dump() +
                       "; Lattice's LayerNorm uses 1e-5");
  if (c.value("activation_function", nlohmann::json("gelu_new")) != "gelu_new")
    f.errors.push_back(source + ": activation_function is " + c["activation_function"].dump() +
                       "; Lattice's GPT-2 MLP uses GELU's tanh form (gelu_new)");
  return f.status();
}

// LLaVA (model_type llava): the language model's flags from text_config (as apply_llama's), the
// tower's from vision_config and the top-level keys (hf_llava.h).
Status apply_llava(const std::string& path, TrainOptions& o) {
  Result<HfWeights> weights = HfWeights::open(path);
  if (!weights) return weights.status();
  if (weights->config_path().empty())
    return Status::invalid_argument(path +
                                    " has no config.json beside it: a LLaVA model's tower and "
                                    "language model are in it (put the model's config.json there)");
  Result<nlohmann::json> json = read_hf_config(weights->config_path());
  if (!json) return json.status();
  const std::string source = weights->config_path();
  const nlohmann::json text_config = hf_llava_text_config(*json);
  Result<VisionConfig> vision = parse_hf_llava_vision(*json, source);
  if (!vision) return vision.status();
  Status lm = Status::ok();
  if (text_config.value("model_type", nlohmann::json()) == "gpt2") {
    lm = apply_gpt2_text_config(text_config, source + " (text_config)", o);
  } else {
    Result<HfLlamaConfig> text = parse_hf_llama_config(text_config, source + " (text_config)");
    if (!text) return text.status();
    lm = apply_llama_config(*text, o);
  }
  FlagTaker f{o, source, {}};
  if (!lm) f.errors.push_back(lm.message());
  const VisionConfig& v = *vision;
  VisionConfig& ours = o.vision;
  auto gives = [](const std::string& key, int value) {
    return "gives " + key + " " + std::to_string(value);
  };
  f.take("vision-model-type", o.vision_model_type, std::string("clip"),
         "is a LLaVA model (a CLIP tower)");
  f.take("vision-num-layers", ours.num_layers, v.num_layers,
         gives("vision_config.num_hidden_layers", v.num_layers));
  f.take("vision-hidden-size", ours.hidden_size, v.hidden_size,
         gives("vision_config.hidden_size", v.hidden_size));
  if (!o.given("vision-ffn-hidden-size"))
    ours.ffn_hidden_size = v.ffn_hidden_size;
  else if (ours.ffn() != v.ffn_hidden_size)
    f.mismatch("vision-ffn-hidden-size", std::to_string(ours.ffn()),
               gives("vision_config.intermediate_size", v.ffn_hidden_size));
  f.take("vision-num-attention-heads", ours.num_attention_heads, v.num_attention_heads,
         gives("vision_config.num_attention_heads", v.num_attention_heads));
  f.take("patch-dim", ours.patch_dim, v.patch_dim, gives("vision_config.patch_size", v.patch_dim));
  f.take("img-h", ours.img_h, v.img_h, gives("vision_config.image_size", v.img_h));
  f.take("img-w", ours.img_w, v.img_w, gives("vision_config.image_size", v.img_w));
  f.take("num-channels", ours.num_channels, v.num_channels,
         gives("vision_config.num_channels", v.num_channels));
  f.take("vision-select-layer", ours.select_layer, v.select_layer,
         gives("vision_feature_layer", v.select_layer));
  f.take("disable-vision-class-token", o.disable_vision_class_token, false,
         "is a LLaVA model (CLIP's tower has a class token)");
  f.take("vision-patch-bias", ours.patch_bias, false,
         "is a LLaVA model (CLIP's patch embedding has no bias)");
  // The images' normalisation: preprocessor_config.json beside config.json, else CLIP's,
  // assumed (as the checkpoint reader does for a checkpoint that predates it). A training run
  // then trains on, and records, its data's (docs/vision.md "HF interchange").
  Result<HfImageNorm> norm =
      read_hf_llava_image_norm(std::filesystem::path(source).parent_path().string());
  if (!norm) return norm.status();
  ours.image_mean = norm->mean;
  ours.image_std = norm->std;
  ours.image_norm_assumed = !norm->found;
  // parse_unchecked copied the tower into the model before the file was read.
  o.model.vision_model_type = o.vision_model_type;
  o.model.vision = o.vision_config();
  return f.status();
}

Status apply_llama_config(const HfLlamaConfig& c, TrainOptions& o) {
  ModelConfig& m = o.model;
  FlagTaker f{o, c.path, {}};
  auto gives = [](const char* key, const std::string& value) {
    return "gives " + std::string(key) + " " + value;
  };
  auto num = [](int v) { return std::to_string(v); };
  f.architecture("Llama-family", "rope", "RMSNorm", true);
  f.take("num-layers", m.num_layers, c.num_layers, gives("num_hidden_layers", num(c.num_layers)));
  f.take("hidden-size", m.hidden_size, c.hidden_size, gives("hidden_size", num(c.hidden_size)));
  const bool mixtral = c.num_experts > 0;
  if (!mixtral) {
    if (!o.given("ffn-hidden-size"))
      m.ffn_hidden_size = c.ffn_hidden_size;
    else if (m.ffn() != c.ffn_hidden_size)
      f.mismatch("ffn-hidden-size", num(m.ffn()),
                 gives("intermediate_size", num(c.ffn_hidden_size)));
  } else if (!o.given("ffn-hidden-size") && !o.given("moe-ffn-hidden-size")) {
    m.ffn_hidden_size = c.ffn_hidden_size;  // Mixtral's every MLP is experts of this width
  } else if (m.moe_ffn() != c.ffn_hidden_size) {
    const bool moe_given = o.given("moe-ffn-hidden-size");
    f.mismatch(moe_given ? "moe-ffn-hidden-size" : "ffn-hidden-size",
               num(moe_given ? m.moe_ffn_hidden_size : m.ffn()),
               gives("intermediate_size", num(c.ffn_hidden_size)) + " (an expert's width)");
  }
  f.take("num-experts", m.num_experts, c.num_experts,
         mixtral ? gives("num_local_experts", num(c.num_experts))
                 : "is a dense model (model_type " + c.model_type + ")");
  if (mixtral) {
    f.take("moe-router-topk", m.moe_router_topk, c.moe_router_topk,
           gives("num_experts_per_tok", num(c.moe_router_topk)));
    f.take("moe-layer-freq", m.moe_layer_freq, 1, "is a Mixtral model (experts in every layer)");
    // The load-balancing loss's weight is training's choice: the file's unless given.
    if (!o.given("moe-aux-loss-coeff"))
      m.moe_aux_loss_coeff = static_cast<float>(c.moe_aux_loss_coeff);
  }
  f.take("num-attention-heads", m.num_attention_heads, c.num_attention_heads,
         gives("num_attention_heads", num(c.num_attention_heads)));
  // One key/value head per query head needs no --group-query-attention; the effective number
  // of groups is what must agree.
  if (!o.given("group-query-attention") && !o.given("num-query-groups")) {
    m.group_query_attention = c.num_query_groups != c.num_attention_heads;
    m.num_query_groups = c.num_query_groups;
  } else if (m.kv_heads() != c.num_query_groups) {
    f.mismatch(m.group_query_attention ? "num-query-groups" : "group-query-attention",
               m.group_query_attention ? num(m.num_query_groups) : "not given (one per head)",
               gives("num_key_value_heads", num(c.num_query_groups)));
  }
  f.take("max-position-embeddings", m.max_position_embeddings, c.max_position_embeddings,
         gives("max_position_embeddings", num(c.max_position_embeddings)));
  if (!o.given("seq-length")) m.seq_length = c.max_position_embeddings;
  // Mixtral's attention looks back sliding_window tokens; Lattice's fully causal attention is
  // the same on sequences no longer than that.
  if (c.sliding_window > 0 && c.sliding_window < m.seq_length)
    f.errors.push_back(c.path + ": sliding_window is " + num(c.sliding_window) +
                       ", shorter than --seq-length " + num(m.seq_length) +
                       ": Lattice's attention is fully causal, not windowed (pass --seq-length " +
                       num(c.sliding_window) + " or less)");
  f.take("norm-epsilon", m.norm_epsilon, static_cast<float>(c.norm_epsilon),
         gives("rms_norm_eps", FlagTaker::text(static_cast<float>(c.norm_epsilon))));
  f.take("rotary-base", m.rotary_base, static_cast<float>(c.rotary_base),
         gives("rope_theta", FlagTaker::text(static_cast<float>(c.rotary_base))));
  f.take("rotary-percent", m.rotary_percent, static_cast<float>(c.rotary_percent),
         gives("partial_rotary_factor", FlagTaker::text(static_cast<float>(c.rotary_percent))));
  const bool scaled = c.rope_scaling_factor > 0;
  f.take("use-rope-scaling", m.use_rope_scaling, scaled,
         scaled ? "gives rope_scaling \"llama3\"" : "gives no rope_scaling");
  if (scaled)
    f.take("rope-scaling-factor", m.rope_scaling_factor, static_cast<float>(c.rope_scaling_factor),
           "gives rope_scaling's factor " +
               FlagTaker::text(static_cast<float>(c.rope_scaling_factor)));
  f.take("untie-embeddings-and-output-weights", m.untie_embeddings_and_output_weights, !c.tied,
         gives("tie_word_embeddings", c.tied ? "true" : "false"));
  const std::string biases = c.linear_bias ? "biases on every linear layer"
                             : c.qkv_bias  ? "biases on q, k and v only (" + c.model_type + ")"
                                           : "no biases";
  f.take("disable-bias-linear", m.disable_bias_linear, !c.linear_bias, "has " + biases);
  if (!o.given("add-qkv-bias"))
    m.add_qkv_bias = c.qkv_bias && !c.linear_bias;
  else if (m.qkv_bias() != c.qkv_bias)
    f.mismatch("add-qkv-bias", FlagTaker::text(m.add_qkv_bias), "has " + biases);
  f.vocabulary(c.vocab_size, "vocab_size");
  // Dropout is training's choice, not the architecture's: the file's unless given.
  if (!o.given("attention-dropout")) m.attention_dropout = static_cast<float>(c.attention_dropout);
  if (!o.given("hidden-dropout")) m.hidden_dropout = 0.0f;  // the Llama family has none
  return f.status();
}

}  // namespace

Status apply_hf_model(const std::string& path, TrainOptions& o) {
  Result<HfArchitecture> architecture = hf_file_architecture(path);
  if (!architecture) return architecture.status();
  if (*architecture == HfArchitecture::kLlava) return apply_llava(path, o);
  return *architecture == HfArchitecture::kGpt2 ? apply_gpt2(path, o) : apply_llama(path, o);
}

}  // namespace lattice
