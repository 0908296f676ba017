// The HF LLaVA <-> Lattice name and row mapping (hf_llava.h).
//
// Note [LLaVA layout]: one table (hf_tensors.h) of the language model's tensors (hf_llama.h's
// prefixed "language_model.", or hf_gpt2.h's prefixed "language_model.transformer."; the word
// embedding first so a tied head's copy is checked against it), then the tower's and the
// projector's. Lattice's tower tensors already carry HF CLIP's and LLaVA's names (Note [vision
// tensors] in model/param_layout.h), so each maps to "vision_tower." + its name, but for the fused
// self_attn.qkv_proj (3C, C): its rows are grouped per head (head h owns rows [3 HS h, 3 HS (h +
// 1)): query, key, value, HS rows each), and HF's q_proj / k_proj / v_proj row h HS + d is our row
// 3 HS h + s HS + d (s = 0, 1, 2), the bias likewise. What LLaVA computes and Lattice's tower agree
// on (docs/vision.md): the class token (CLIP always has one), no patch bias, quick_gelu, LayerNorm
// eps 1e-5, the hidden state vision_feature_layer (hidden_states[i], as --vision-select-layer) with
// the class row dropped
// ("default"), projector Linear - exact GELU - Linear with biases. CLIPVisionModel's
// post_layernorm only norms the pooled class row, which LLaVA never reads: export writes it as
// the identity, import skips it.
//
// Note [LLaVA preprocessor]: llava-hf's checkpoints carry the images' normalisation in
// preprocessor_config.json beside config.json, a CLIPImageProcessor's settings: resize the
// shortest edge to `size`, centre-crop to `crop_size`, rescale by 1/255, normalise with
// image_mean / image_std (RGB). Lattice's images are padded to a square first (LLaVA-1.5's
// expand2square, data/image_preprocess.h), after which HF's resize and crop of a square image to
// the tower's side agree with Lattice's resize; the mean and std are what must travel. Export
// writes them as the shortest decimals that read back to the same floats, so import gives
// them back bit for bit.
//
// The vocabulary's padding rows through HF: as for text models (Note [vocabulary padding rows] in
// hf_tensors.cpp), dropped on export, the mean of the real rows on import. The image placeholder
// (id V, ModelConfig::image_token_id) is never looked up (its rows read as id -1), so only the
// head's softmax changes; test_hf_llava pins the reloaded loss against an independent PyTorch
// forward with the padding columns, and a trained VLM with no padding validates at the same
// loss through --load and --load-hf.
#include "checkpoint/hf_llava.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/hf_gpt2.h"
#include "checkpoint/hf_gpt2_config.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/hf_llama_config.h"
#include "checkpoint/hf_tensors.h"
#include "core/atomic_file.h"

namespace lattice {

namespace {

const std::string kLm = "language_model.";
const std::string kTower = "vision_tower.";

bool gpt2_lm(const ModelConfig& c) {
  return c.learned_positions() && !c.rms_norm();
}

// Where the language model's table names sit in a LLaVA file: GPT2LMHeadModel keeps its
// GPT2Model under transformer. (hf_gpt2_tensors' names lack it), LlamaForCausalLM its names whole.
std::string lm_prefix(const ModelConfig& c) {
  return kLm + (gpt2_lm(c) ? "transformer." : "");
}

std::vector<HfTensor> hf_tensors(const ModelConfig& c, const ParamLayout& layout) {
  std::vector<HfTensor> out = gpt2_lm(c) ? hf_gpt2_tensors(c, layout) : hf_llama_tensors(c, layout);
  for (HfTensor& t : out) t.name = lm_prefix(c) + t.name;
  const VisionConfig& v = c.vision;
  const int64_t C = v.hidden_size, HS = C / v.num_attention_heads;
  const std::string heads = "--vision-hidden-size " + std::to_string(C) +
                            " --vision-num-attention-heads " +
                            std::to_string(v.num_attention_heads);
  auto part_row = [HS](int64_t s) {
    return [HS, s](int64_t r) { return (r / HS) * 3 * HS + s * HS + r % HS; };
  };
  const char* parts[] = {"q_proj", "k_proj", "v_proj"};
  for (const ParamTensor& p : layout.tensors()) {
    if (&p - layout.tensors().data() >= layout.vision_end_index()) break;
    const std::string flags = "--vision-model-type clip, " + heads;
    const size_t fused = p.name.find("self_attn.qkv_proj.");
    if (fused == std::string::npos) {
      const std::string hf =
          p.name.rfind("multi_modal_projector.", 0) == 0 ? p.name : kTower + p.name;
      out.push_back(hf_tensor(layout, hf, p.global_shape, p.name, flags));
      continue;
    }
    const std::string suffix = p.name.substr(fused + std::string("self_attn.qkv_proj.").size());
    for (int64_t s = 0; s < 3; s++) {
      std::vector<int64_t> shape = p.global_shape;
      shape[0] = C;
      out.push_back(hf_tensor(
          layout, kTower + p.name.substr(0, fused) + "self_attn." + parts[s] + "." + suffix, shape,
          p.name, flags, part_row(s)));
    }
  }
  return out;
}

// Newer transformers (4.52+) nest the parts under model. (the language model as its base
// model: LlamaModel's names without "model.", GPT2Model's without "transformer.") and keep
// lm_head at the top.
std::string canonical_prefix(const std::string& name, bool gpt2) {
  const std::pair<const char*, const char*> renames[] = {
      {"model.language_model.", gpt2 ? "language_model.transformer." : "language_model.model."},
      {"model.vision_tower.", "vision_tower."},
      {"model.multi_modal_projector.", "multi_modal_projector."},
      {"lm_head.", "language_model.lm_head."}};
  for (const auto& [from, to] : renames)
    if (name.rfind(from, 0) == 0) return to + name.substr(std::string(from).size());
  return name;
}

HfNaming llava_naming(const ModelConfig& c) {
  const bool gpt2 = gpt2_lm(c);
  const HfNaming lm = gpt2 ? hf_gpt2_naming(c) : hf_llama_naming(c);
  const std::string lm_names = lm_prefix(c);
  HfNaming n;
  n.architecture = "LLaVA";
  n.canonical = [lm_canonical = lm.canonical, gpt2,
                 lm_names](const std::string& file_name) -> std::string {
    const std::string name = canonical_prefix(file_name, gpt2);
    const std::string tower = kTower + "vision_model.";
    if (name.rfind(tower + "post_layernorm.", 0) == 0 || name == tower + "embeddings.position_ids")
      return "";
    // GPT-2's canonical names drop transformer. (and its lm_head has none): put it back.
    if (name.rfind(kLm, 0) == 0) {
      const std::string inner = lm_canonical(name.substr(kLm.size()));
      return inner.empty() ? "" : lm_names + inner;
    }
    return name;
  };
  n.layer_prefix = lm_names + lm.layer_prefix;
  n.layer_of = [prefix = n.layer_prefix](const std::string& name) {
    return hf_layer_of(name, prefix);
  };
  n.num_layers = c.num_layers;
  if (!lm.tied_copy.empty()) n.tied_copy = lm_names + lm.tied_copy;
  return n;
}

nlohmann::json vision_config_json(const VisionConfig& v) {
  return {{"model_type", "clip_vision_model"},
          {"hidden_size", v.hidden_size},
          {"intermediate_size", v.ffn()},
          {"num_hidden_layers", v.num_layers},
          {"num_attention_heads", v.num_attention_heads},
          {"image_size", v.img_h},
          {"patch_size", v.patch_dim},
          {"num_channels", v.num_channels},
          {"layer_norm_eps", 1e-5},
          {"hidden_act", "quick_gelu"},
          {"attention_dropout", 0.0}};
}

// The shortest decimal that reads back (strtod, then to float) as `x`: 0.48145466, not
// 0.4814546597003937 (hf_decimal's 7 digits do not always round-trip).
double shortest_decimal(float x) {
  char text[32];
  for (int digits = 6; digits <= 9; digits++) {
    std::snprintf(text, sizeof text, "%.*g", digits, x);
    if (static_cast<float>(std::strtod(text, nullptr)) == x) break;
  }
  return std::strtod(text, nullptr);
}

// CLIPImageProcessor's settings for images of the tower's side (Note [LLaVA preprocessor]).
nlohmann::json preprocessor_json(const VisionConfig& v) {
  auto channels = [](const std::array<float, 3>& x) {
    // CLIP's as OpenAI and llava-hf print them (the same floats as the shortest decimals).
    if (x == kClipImageMean) return nlohmann::json::array({0.48145466, 0.4578275, 0.40821073});
    if (x == kClipImageStd) return nlohmann::json::array({0.26862954, 0.26130258, 0.27577711});
    return nlohmann::json::array(
        {shortest_decimal(x[0]), shortest_decimal(x[1]), shortest_decimal(x[2])});
  };
  return {{"image_processor_type", "CLIPImageProcessor"},
          {"do_resize", true},
          {"size", {{"shortest_edge", v.img_h}}},
          {"resample", 3},  // PIL's BICUBIC
          {"do_center_crop", true},
          {"crop_size", {{"height", v.img_h}, {"width", v.img_w}}},
          {"do_rescale", true},
          {"rescale_factor", 1.0 / 255},
          {"do_normalize", true},
          {"image_mean", channels(v.image_mean)},
          {"image_std", channels(v.image_std)},
          {"do_convert_rgb", true}};
}

}  // namespace

std::vector<std::string> hf_llava_unsupported(const ModelConfig& c) {
  std::vector<std::string> out;
  const VisionConfig& v = c.vision;
  if (!v.class_token)
    out.push_back("--disable-vision-class-token: HF's CLIPVisionModel always has a class token");
  if (v.patch_bias) out.push_back("--vision-patch-bias: HF CLIP's patch embedding has no bias");
  if (v.img_h != v.img_w)
    out.push_back("--img-h " + std::to_string(v.img_h) + " --img-w " + std::to_string(v.img_w) +
                  ": HF CLIP's image_size is square");
  if (v.projector_type != "mlp")
    out.push_back("--vision-projector-type " + v.projector_type +
                  ": LLaVA's projector is the mlp (Linear - GELU - Linear)");
  return out;
}

Status import_hf_llava(const std::string& path, const ModelConfig& config,
                       const ParamLayout& layout, float* params) {
  const ParamLayout whole(config);
  return import_hf_tensors(path, hf_tensors(config, whole), llava_naming(config), layout, params);
}

Status export_hf_llava(const std::string& path, const ModelConfig& config,
                       const ParamLayout& layout, const float* params,
                       const HfWriteOptions& options) {
  const std::vector<HfTensor> table = hf_tensors(config, layout);
  std::vector<safetensors::TensorSource> sources = hf_tensor_sources(table, params);
  const int64_t C = config.vision.hidden_size;
  const std::string post = kTower + "vision_model.post_layernorm.";
  sources.push_back({post + "weight", {C}, nullptr, [C](float* x) { std::fill_n(x, C, 1.0f); }});
  sources.push_back({post + "bias", {C}, nullptr, [C](float* x) { std::fill_n(x, C, 0.0f); }});
  const HfTarget target = hf_target(path);
  if (Status s = write_hf_weights(target, std::move(sources), options); !s) return s;
  // The language model's config.json, as export_hf_gpt2 or export_hf_llama writes it, becomes
  // text_config.
  const int64_t vocab_rows = table.front().shape[0];
  if (Status s =
          gpt2_lm(config)
              ? write_hf_gpt2_config(target.config_path(), config, vocab_rows, options.dtype)
              : write_hf_llama_config(target.config_path(), config, vocab_rows, options.dtype);
      !s)
    return s;
  Result<nlohmann::json> text = read_hf_config(target.config_path());
  if (!text) return text.status();
  const VisionConfig& v = config.vision;
  nlohmann::json json = {{"architectures", {"LlavaForConditionalGeneration"}},
                         {"model_type", "llava"},
                         {"image_token_index", config.image_token_id()},
                         {"image_seq_length", v.patches()},
                         {"vision_feature_layer", v.select_layer},
                         {"vision_feature_select_strategy", "default"},
                         {"projector_hidden_act", "gelu"},
                         {"multimodal_projector_bias", true},
                         {"tie_word_embeddings", config.tied_output()},
                         {"torch_dtype", hf_torch_dtype(options.dtype)},
                         {"text_config", *text},
                         {"vision_config", vision_config_json(v)}};
  if (Status s = write_file_atomic(target.config_path(), json.dump(2) + "\n"); !s) return s;
  return write_file_atomic(target.weights_dir + "/preprocessor_config.json",
                           preprocessor_json(v).dump(2) + "\n");
}

Result<HfImageNorm> read_hf_llava_image_norm(const std::string& dir) {
  HfImageNorm norm;
  norm.path = dir + "/preprocessor_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(norm.path, ec)) return norm;
  Result<nlohmann::json> json = read_hf_config(norm.path);
  if (!json) return json.status();
  for (auto [key, out] : {std::pair{"image_mean", &norm.mean}, std::pair{"image_std", &norm.std}}) {
    if (!json->contains(key)) continue;  // CLIPImageProcessor's default: CLIP's
    const nlohmann::json& x = (*json)[key];
    bool fine = x.is_array() && x.size() == 3;
    for (size_t c = 0; fine && c < 3; c++)
      fine = x[c].is_number() && std::abs(x[c].get<double>()) < 1e30;  // a float's range
    if (!fine)
      return Status::invalid_argument(norm.path + ": " + key + " is " + x.dump() +
                                      ", not a list of 3 numbers (one per RGB channel)");
    for (size_t c = 0; c < 3; c++) (*out)[c] = static_cast<float>(x[c].get<double>());
    if (out == &norm.std && !(norm.std[0] > 0 && norm.std[1] > 0 && norm.std[2] > 0))
      return Status::invalid_argument(norm.path + ": " + key + " is " + x.dump() +
                                      "; every channel's std must be above 0");
  }
  norm.found = true;
  return norm;
}

Result<VisionConfig> parse_hf_llava_vision(const nlohmann::json& config, const std::string& path) {
  std::vector<std::string> problems;
  auto fail = [&](const std::string& key, const std::string& why) {
    problems.push_back(path + ": " + key + " " + why);
  };
  const nlohmann::json vision = config.value("vision_config", nlohmann::json::object());
  // CLIPVisionConfig's defaults for absent keys.
  auto size = [&](const char* key, int fallback) {
    if (!vision.contains(key) || vision[key].is_null()) return fallback;
    if (!vision[key].is_number_integer() || vision[key].get<int64_t>() <= 0 ||
        vision[key].get<int64_t>() > ModelConfig::kMaxDimension) {
      fail(std::string("vision_config.") + key,
           "is " + vision[key].dump() + ", not a positive integer");
      return fallback;
    }
    return vision[key].get<int>();
  };
  auto text = [&](const nlohmann::json& j, const char* key, const char* fallback) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>()
                                                 : std::string(fallback);
  };
  VisionConfig v;
  v.hidden_size = size("hidden_size", 768);
  v.ffn_hidden_size = size("intermediate_size", 3072);
  v.num_layers = size("num_hidden_layers", 12);
  v.num_attention_heads = size("num_attention_heads", 12);
  v.img_h = v.img_w = size("image_size", 224);
  v.patch_dim = size("patch_size", 32);
  v.num_channels = size("num_channels", 3);
  v.class_token = true;
  v.patch_bias = false;
  v.lm_hidden_size = 0;
  if (const std::string act = text(vision, "hidden_act", "quick_gelu"); act != "quick_gelu")
    fail("vision_config.hidden_act", "is \"" + act + "\"; Lattice's tower uses quick_gelu");
  if (vision.contains("layer_norm_eps") &&
      !(vision["layer_norm_eps"].is_number() && vision["layer_norm_eps"].get<double>() == 1e-5))
    fail("vision_config.layer_norm_eps",
         "is " + vision["layer_norm_eps"].dump() + "; Lattice's tower LayerNorm uses 1e-5");
  const nlohmann::json layer = config.value("vision_feature_layer", nlohmann::json(-2));
  if (!layer.is_number_integer())
    fail("vision_feature_layer",
         "is " + layer.dump() + "; Lattice feeds the projector one hidden state (an integer)");
  else
    v.select_layer = layer.get<int>();
  if (const std::string s = text(config, "vision_feature_select_strategy", "default");
      s != "default")
    fail("vision_feature_select_strategy",
         "is \"" + s + "\"; Lattice's tower drops the class token (\"default\")");
  if (const std::string act = text(config, "projector_hidden_act", "gelu"); act != "gelu")
    fail("projector_hidden_act", "is \"" + act + "\"; Lattice's projector uses exact GELU");
  if (config.value("multimodal_projector_bias", nlohmann::json(true)) != nlohmann::json(true))
    fail("multimodal_projector_bias", "is not true; Lattice's projector has biases");
  if (!problems.empty()) {
    std::string message;
    for (const std::string& p : problems) message += (message.empty() ? "" : "\n") + p;
    return Status::invalid_argument(message);
  }
  return v;
}

nlohmann::json hf_llava_text_config(const nlohmann::json& config) {
  nlohmann::json text = config.value("text_config", nlohmann::json::object());
  if (!text.contains("model_type")) text["model_type"] = "llama";  // LlavaConfig's default
  if (text["model_type"] != "llama") return text;
  const std::pair<const char*, int> defaults[] = {
      {"hidden_size", 4096},       {"intermediate_size", 11008},      {"num_hidden_layers", 32},
      {"num_attention_heads", 32}, {"max_position_embeddings", 2048}, {"vocab_size", 32000}};
  for (const auto& [key, value] : defaults)
    if (!text.contains(key) || text[key].is_null()) text[key] = value;
  return text;
}

}  // namespace lattice
