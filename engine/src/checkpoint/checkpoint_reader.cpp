// CheckpointReader (checkpoint.h): metadata.json parsed and checked, every piece indexed by
// its global tensor, files mapped and checksummed on first use. Kept apart from the writer so
// that the fuzz target can build it alone.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/crc32c.h"
#include "core/mapped_file.h"

namespace lattice {

using json = nlohmann::json;
using checkpoint_format::file_crc;
using checkpoint_format::hex;
using checkpoint_format::SliceMap;

namespace {

// Why a piece's description cannot be right, or "" (so that reading never leaves its tensor).
std::string check_piece(const CheckpointPiece& p) {
  const int rank = static_cast<int>(p.global_shape.size());
  int64_t numel = 1;
  for (int64_t d : p.global_shape) {
    if (d < 0 || (d > 0 && numel > (int64_t{1} << 40) / d)) return "impossible global shape";
    numel *= d;
  }
  if (p.split_dim < -1 || p.split_dim >= rank)
    return "split dimension " + std::to_string(p.split_dim) + " of a rank-" + std::to_string(rank) +
           " tensor";
  int64_t slice = numel;
  if (p.split_dim >= 0) {
    const int64_t dim = p.global_shape[p.split_dim];
    if (p.split_begin < 0 || p.split_size < 0 || p.split_begin > dim - p.split_size)
      return "slice [" + std::to_string(p.split_begin) + ", +" + std::to_string(p.split_size) +
             ") outside dimension " + std::to_string(dim);
    slice = dim > 0 ? numel / dim * p.split_size : 0;
  }
  if (p.flat_begin < 0 || p.flat_begin > p.flat_end || p.flat_end > slice)
    return "range [" + std::to_string(p.flat_begin) + ", " + std::to_string(p.flat_end) +
           ") outside the slice's " + std::to_string(slice) + " elements";
  return "";
}

}  // namespace

namespace checkpoint_format {

Result<uint32_t> file_crc(const std::string& path, int64_t* bytes) {
  Result<MappedFile> map = MappedFile::open(path);
  if (!map) return map.status();
  *bytes = static_cast<int64_t>(map->size());
  return crc32c(0, map->bytes().data(), map->size());
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

}  // namespace checkpoint_format

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::open(const std::string& path) {
  auto r = std::unique_ptr<CheckpointReader>(new CheckpointReader());
  r->path_ = path;
  const std::string meta_path = path + "/metadata.json";
  std::ifstream in(meta_path, std::ios::binary);
  if (!in) return Status::io_error(meta_path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  r->metadata_text_ = ss.str();
  const json j = json::parse(r->metadata_text_, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "lattice-checkpoint")
    return Status::corrupt(meta_path + ": not a Lattice checkpoint's metadata");
  try {
    const json& m = j.at("model");
    r->model_.num_layers = m.at("num_layers");
    r->model_.hidden_size = m.at("hidden_size");
    r->model_.ffn_hidden_size = m.at("ffn_hidden_size");
    r->model_.num_attention_heads = m.at("num_attention_heads");
    r->model_.seq_length = m.at("seq_length");
    r->model_.max_position_embeddings = m.at("max_position_embeddings");
    r->model_.vocab_size = m.at("vocab_size");
    // The architecture (absent before the Llama family: GPT-2's defaults).
    ModelConfig& c = r->model_;
    c.position_embedding_type = m.value("position_embedding_type", c.position_embedding_type);
    c.rotary_base = m.value("rotary_base", c.rotary_base);
    c.rotary_percent = m.value("rotary_percent", c.rotary_percent);
    c.use_rope_scaling = m.value("rope_scaling_factor", 0.0f) > 0;
    if (c.use_rope_scaling) c.rope_scaling_factor = m.value("rope_scaling_factor", 0.0f);
    c.normalization = m.value("normalization", c.normalization);
    c.norm_epsilon = m.value("norm_epsilon", c.norm_epsilon);
    c.swiglu = m.value("swiglu", c.swiglu);
    c.num_query_groups = m.value("num_query_groups", c.num_attention_heads);
    c.group_query_attention = c.num_query_groups != c.num_attention_heads;
    c.untie_embeddings_and_output_weights =
        m.value("untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights);
    c.disable_bias_linear = m.value("disable_bias_linear", c.disable_bias_linear);
    c.add_qkv_bias = m.value("add_qkv_bias", c.add_qkv_bias);
    // A LoRA run's checkpoint (adapters alone); older checkpoints have none.
    c.lora_rank = m.value("lora_rank", 0);
    c.lora_alpha = m.value("lora_alpha", c.lora_alpha);
    c.lora_dropout = m.value("lora_dropout", c.lora_dropout);
    c.lora_target_modules = m.value("lora_target_modules", c.lora_target_modules);
    // An MoE model's (absent before MoE: dense).
    c.num_experts = m.value("num_experts", 0);
    c.moe_router_topk = m.value("moe_router_topk", c.moe_router_topk);
    if (c.num_experts > 0) c.moe_ffn_hidden_size = m.value("moe_ffn_hidden_size", 0);
    c.moe_layer_freq = m.value("moe_layer_freq", 1);
    if (c.num_experts > 0) c.moe_aux_loss_coeff = m.value("moe_aux_loss_coeff", 0.0f);
    // Older checkpoints lack them: the flags' defaults.
    c.attention_dropout = m.value("attention_dropout", c.attention_dropout);
    c.hidden_dropout = m.value("hidden_dropout", c.hidden_dropout);
    // A vision-language model's tower (absent or null: a text model).
    if (m.contains("vision") && m.at("vision").is_object()) {
      const json& v = m.at("vision");
      c.vision_model_type = v.at("model_type");
      c.vision.num_layers = v.at("num_layers");
      c.vision.hidden_size = v.at("hidden_size");
      c.vision.ffn_hidden_size = v.at("ffn_hidden_size");
      c.vision.num_attention_heads = v.at("num_attention_heads");
      c.vision.patch_dim = v.at("patch_dim");
      c.vision.img_h = v.at("img_h");
      c.vision.img_w = v.at("img_w");
      c.vision.num_channels = v.at("num_channels");
      c.vision.class_token = v.at("class_token");
      c.vision.patch_bias = v.at("patch_bias");
      c.vision.select_layer = v.at("select_layer");
      c.vision.projector_type = v.at("projector_type");
      // Checkpoints from before the normalisation was recorded: CLIP's, assumed.
      c.vision.image_norm_assumed = !v.contains("image_mean") || !v.contains("image_std");
      if (!c.vision.image_norm_assumed) {
        c.vision.image_mean = v.at("image_mean").get<std::array<float, 3>>();
        c.vision.image_std = v.at("image_std").get<std::array<float, 3>>();
      }
      c.vision.lm_hidden_size = c.hidden_size;
    }
    r->state_.iteration = j.at("iteration");
    r->state_.consumed_samples = j.at("consumed_samples");
    r->state_.valid_consumed = j.at("valid_consumed_samples");
    r->state_.steps_taken = j.at("steps_taken");
    r->state_.skipped_iterations = j.at("skipped_iterations");
    r->state_.nan_iterations = j.at("nan_iterations");
    if (j.contains("grad_scaler")) {  // written by --fp16 runs
      const json& g = j.at("grad_scaler");
      r->state_.loss_scale = g.at("scale");
      r->state_.loss_scale_growth_tracker = g.at("growth_tracker");
      r->state_.loss_scale_hysteresis_tracker = g.at("hysteresis_tracker");
    }
    const json& l = j.at("layout");
    r->tp_ = l.at("tp"), r->pp_ = l.at("pp"), r->dp_ = l.at("dp"), r->vpp_ = l.at("vpp");
    r->cp_ = l.value("cp", 1);
    r->ep_ = l.value("ep", 1), r->etp_ = l.value("etp", r->tp_);
    r->distributed_ = l.at("distributed_optimizer");
    r->has_optimizer_ = j.at("optimizer_state");
    for (const json& f : j.at("files"))
      r->files_.push_back(
          {f.at("name"), f.at("bytes"),
           static_cast<uint32_t>(std::stoul(f.at("crc32c").get<std::string>(), nullptr, 16))});
    for (const json& p : j.at("pieces")) {
      CheckpointPiece c;
      c.file = p.at("file"), c.key = p.at("key"), c.kind = p.at("kind"), c.name = p.at("name");
      c.global_shape = p.at("global_shape").get<std::vector<int64_t>>();
      c.split_dim = p.at("split_dim"), c.split_begin = p.at("split_begin");
      c.split_size = p.at("split_size");
      c.flat_begin = p.at("flat_begin"), c.flat_end = p.at("flat_end");
      if (std::string why = check_piece(c); !why.empty())
        return Status::corrupt(meta_path + ": piece " + c.key + " of " + c.file + ": " + why);
      auto& same = r->by_tensor_[c.kind + "/" + c.name];
      if (!same.empty() && r->pieces_[same.front()].global_shape != c.global_shape)
        return Status::corrupt(meta_path + ": the pieces of " + c.name +
                               " disagree on its global shape");
      same.push_back(r->pieces_.size());
      r->pieces_.push_back(std::move(c));
    }
  } catch (const json::exception& e) {
    return Status::corrupt(meta_path + ": malformed metadata (" + e.what() + ")");
  }
  return r;
}

std::string CheckpointReader::layout_summary() const {
  const bool expert_grid = model_.num_experts > 0 && (ep_ > 1 || etp_ != tp_);
  return "TP " + std::to_string(tp_) + ", PP " + std::to_string(pp_) +
         (vpp_ > 1 ? " x " + std::to_string(vpp_) + " virtual" : "") +
         (cp_ > 1 ? ", CP " + std::to_string(cp_) : "") + ", DP " + std::to_string(dp_) +
         (expert_grid ? ", EP " + std::to_string(ep_) + ", expert TP " + std::to_string(etp_)
                      : "") +
         (distributed_ ? ", distributed optimizer" : "");
}

Result<const safetensors::File*> CheckpointReader::file(const std::string& name) {
  if (auto it = open_.find(name); it != open_.end()) return it->second.get();
  const auto info =
      std::find_if(files_.begin(), files_.end(), [&](const FileInfo& f) { return f.name == name; });
  const std::string path = path_ + "/" + name;
  if (info == files_.end()) return Status::corrupt(path + ": not listed in metadata.json");
  int64_t bytes = 0;
  Result<uint32_t> crc = file_crc(path, &bytes);
  if (!crc)
    return Status::corrupt(path + ": missing or unreadable (" + crc.status().message() + ")");
  if (bytes != info->bytes)
    return Status::corrupt(path + ": " + std::to_string(bytes) + " bytes, metadata.json says " +
                           std::to_string(info->bytes) + " (truncated?)");
  if (*crc != info->crc32c)
    return Status::corrupt(path + ": checksum " + hex(*crc) + " differs from metadata.json's " +
                           hex(info->crc32c) + " (the file is corrupt)");
  Result<safetensors::File> f = safetensors::File::open(path);
  if (!f) return f.status();
  auto owned = std::make_unique<safetensors::File>(std::move(*f));
  const safetensors::File* raw = owned.get();
  open_[name] = std::move(owned);
  return raw;
}

Status CheckpointReader::verify_all() {
  for (const FileInfo& f : files_)
    if (Result<const safetensors::File*> r = file(f.name); !r) return r.status();
  return Status::ok();
}

Status CheckpointReader::read_global(const std::string& kind, const std::string& name,
                                     std::vector<int64_t>& shape, std::vector<float>& out) {
  const auto it = by_tensor_.find(kind + "/" + name);
  if (it == by_tensor_.end())
    return Status::corrupt(path_ + ": holds no " + kind + " of tensor " + name);
  const CheckpointPiece& first = pieces_[it->second.front()];
  shape = first.global_shape;
  size_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<size_t>(d);
  out.assign(numel, 0.0f);
  size_t covered = 0;
  std::vector<float> data;
  for (size_t index : it->second) {
    const CheckpointPiece& p = pieces_[index];
    Result<const safetensors::File*> f = file(p.file);
    if (!f) return Status::corrupt(f.status().message() + " (reading tensor " + name + ")");
    const safetensors::TensorInfo* info = (*f)->find(p.key);
    const size_t n = static_cast<size_t>(p.flat_end - p.flat_begin);
    if (!info || info->numel != n)
      return Status::corrupt(path_ + "/" + p.file + ": entry " + p.key +
                             " is missing or has the "
                             "wrong size");
    data.resize(n);
    if (Status s = (*f)->read_float(*info, data.data()); !s) return s;
    const SliceMap map{p.global_shape, p.split_dim, p.split_begin, p.split_size};
    for (size_t i = 0; i < n; i++) out[map.global_index(p.flat_begin + i)] = data[i];
    covered += n;
  }
  if (covered != numel)
    return Status::corrupt(path_ + ": the pieces of " + kind + " " + name + " cover " +
                           std::to_string(covered) + " of its " + std::to_string(numel) +
                           " elements");
  return Status::ok();
}

}  // namespace lattice
