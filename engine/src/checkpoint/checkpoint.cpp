// Saving and loading distributed checkpoints (checkpoint.h). Saving: each rank writes its own
// pieces and a sidecar describing them; rank 0 merges the sidecars into metadata.json, renames
// the directory into place and moves the pointer. Loading: any rank assembles each global
// tensor it needs from the pieces and takes its slice.
#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint_format.h"
#include "core/atomic_file.h"
#include "core/host_memory.h"

namespace lattice {

HostChunk::HostChunk(const ModelConfig& config, const ModelShard& shard) : layout(config, shard) {
  host_assign(params, layout.total_numel(), MemoryCategory::kWeights);
}

namespace fs = std::filesystem;
using json = nlohmann::json;
using checkpoint_format::hex;
using checkpoint_format::SliceMap;

namespace {

constexpr const char* kPointer = "latest_checkpointed_iteration.txt";

std::string iteration_name(int iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07d", iteration);
  return buf;
}

std::string rank_file(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d", rank);
  return buf;
}

// The architecture, so that offline tools (ckpt inspect, export-hf, reshard, generate) rebuild
// the model without the run's flags. Checkpoints from before the Llama family lack the keys from
// position_embedding_type on; the reader takes GPT-2's values for them.
// A vision-language model's tower (docs/vision.md), null for a text model.
json vision_json(const ModelConfig& m) {
  if (!m.has_vision()) return nullptr;
  const VisionConfig& v = m.vision;
  return {{"model_type", m.vision_model_type},
          {"num_layers", v.num_layers},
          {"hidden_size", v.hidden_size},
          {"ffn_hidden_size", v.ffn()},
          {"num_attention_heads", v.num_attention_heads},
          {"patch_dim", v.patch_dim},
          {"img_h", v.img_h},
          {"img_w", v.img_w},
          {"num_channels", v.num_channels},
          {"class_token", v.class_token},
          {"patch_bias", v.patch_bias},
          {"select_layer", v.select_layer},
          {"projector_type", v.projector_type},
          // The training images' normalisation, what generation applies (absent before).
          {"image_mean", v.image_mean},
          {"image_std", v.image_std}};
}

json model_json(const ModelConfig& m) {
  return {{"num_layers", m.num_layers},
          {"hidden_size", m.hidden_size},
          {"ffn_hidden_size", m.ffn()},
          {"num_attention_heads", m.num_attention_heads},
          {"seq_length", m.seq_length},
          {"max_position_embeddings", m.max_positions()},
          {"vocab_size", m.vocab_size},
          {"padded_vocab_size", m.padded_vocab_size()},
          {"position_embedding_type", m.position_embedding_type},
          {"rotary_base", m.rotary_base},
          {"rotary_percent", m.rotary_percent},
          {"rope_scaling_factor", m.llama3_rope_factor()},
          {"normalization", m.normalization},
          {"norm_epsilon", m.norm_epsilon},
          {"swiglu", m.swiglu},
          {"num_query_groups", m.kv_heads()},
          {"untie_embeddings_and_output_weights", m.untie_embeddings_and_output_weights},
          {"disable_bias_linear", m.disable_bias_linear},
          {"add_qkv_bias", m.add_qkv_bias},
          {"lora_rank", m.lora_rank},
          {"lora_alpha", m.lora_alpha},
          {"lora_dropout", m.lora_dropout},
          {"lora_target_modules", m.lora_target_modules},
          {"num_experts", m.num_experts},
          {"moe_router_topk", m.moe_router_topk},
          {"moe_ffn_hidden_size", m.moe_ffn()},
          {"moe_layer_freq", m.moe_layer_freq},
          // Training's choices, not the architecture's (no --load agreement): recorded so that
          // `ckpt export-hf` writes the model's own in config.json (attention_dropout, Mixtral's
          // router_aux_loss_coef; GPT-2's attn_pdrop, resid_pdrop).
          {"attention_dropout", m.attention_dropout},
          {"hidden_dropout", m.hidden_dropout},
          {"moe_aux_loss_coeff", m.aux_loss_coeff()},
          {"vision", vision_json(m)}};
}

}  // namespace

Status check_architecture(const std::string& path, const ModelConfig& saved,
                          const ModelConfig& run) {
  std::vector<std::string> errors;
  auto agree = [&](const char* flag, const auto& had, const auto& want) {
    if (had == want) return;
    std::ostringstream text;
    text << "--" << flag << " " << want << " disagrees with " << had << " in " << path;
    errors.push_back(text.str());
  };
  agree("position-embedding-type", saved.position_embedding_type, run.position_embedding_type);
  agree("normalization", saved.normalization, run.normalization);
  agree("norm-epsilon", saved.norm_epsilon, run.norm_epsilon);
  agree("swiglu", saved.swiglu, run.swiglu);
  agree("num-query-groups (key/value heads)", saved.kv_heads(), run.kv_heads());
  agree("untie-embeddings-and-output-weights", saved.untie_embeddings_and_output_weights,
        run.untie_embeddings_and_output_weights);
  agree("disable-bias-linear", saved.disable_bias_linear, run.disable_bias_linear);
  agree("add-qkv-bias", saved.add_qkv_bias, run.add_qkv_bias);
  agree("num-experts", saved.num_experts, run.num_experts);
  agree("vision-model-type", saved.vision_model_type, run.vision_model_type);
  if (run.has_vision() && saved.has_vision()) {
    const VisionConfig &a = saved.vision, &b = run.vision;
    agree("vision-num-layers", a.num_layers, b.num_layers);
    agree("vision-hidden-size", a.hidden_size, b.hidden_size);
    agree("vision-ffn-hidden-size", a.ffn(), b.ffn());
    agree("vision-num-attention-heads", a.num_attention_heads, b.num_attention_heads);
    agree("patch-dim", a.patch_dim, b.patch_dim);
    agree("img-h", a.img_h, b.img_h);
    agree("img-w", a.img_w, b.img_w);
    agree("num-channels", a.num_channels, b.num_channels);
    agree("disable-vision-class-token", !a.class_token, !b.class_token);
    agree("vision-patch-bias", a.patch_bias, b.patch_bias);
    agree("vision-select-layer", a.select_layer, b.select_layer);
  }
  if (run.moe()) {
    agree("moe-ffn-hidden-size", saved.moe_ffn(), run.moe_ffn());
    agree("moe-layer-freq", saved.moe_layer_freq, run.moe_layer_freq);
  }
  if (run.rope()) {
    agree("rotary-base", saved.rotary_base, run.rotary_base);
    agree("rotary-percent", saved.rotary_percent, run.rotary_percent);
    agree("rope-scaling-factor (0: no --use-rope-scaling)", saved.llama3_rope_factor(),
          run.llama3_rope_factor());
  }
  if (errors.empty()) return Status::ok();
  std::string text;
  for (const std::string& e : errors) text += (text.empty() ? "" : "\n") + e;
  return Status::invalid_argument(text);
}

Status write_shard(const std::string& tmp_dir, int rank, const ParallelLayout::Coord& me,
                   const RankParts& parts) {
  // This rank's pieces: the model from data-parallel rank 0 (replicas are equal), optimizer
  // state from every rank that owns a shard of it; one copy of each slice (counts_in_norm).
  std::vector<safetensors::TensorSource> sources;
  json pieces = json::array();
  const std::string file = rank_file(rank) + ".safetensors";
  auto add = [&](const std::string& kind, const ParamTensor& t, const float* data, int64_t begin,
                 int64_t end) {
    const std::string key = kind + "/" + t.name;
    sources.push_back({key, {end - begin}, data, nullptr});
    pieces.push_back({{"file", file},
                      {"key", key},
                      {"kind", kind},
                      {"name", t.name},
                      {"global_shape", t.global_shape},
                      {"split_dim", t.split_dim},
                      {"split_begin", t.split_begin},
                      {"split_size", t.split_dim >= 0 ? t.shape[t.split_dim] : 0},
                      {"flat_begin", begin},
                      {"flat_end", end}});
  };
  for (size_t c = 0; c < parts.chunks.size(); c++) {
    const ChunkWeights& chunk = parts.chunks[c];
    const auto& tensors = chunk.layout->tensors();
    // The weights of data-parallel (and context-parallel) rank 0: the others hold copies. The
    // experts of an expert grid of their own (ParamTensor::expert_parallel: EP > 1 or expert TP
    // other than TP) from expert-data rank 0 of their EP (and expert TP) rank instead: each
    // expert once, under its global name, so any EP size and expert TP loads it.
    const bool first_replica = me.dp == 0 && me.cp == 0;
    const bool first_expert_replica =
        parts.layout && parts.layout->expert_grid() && parts.layout->expert_coord(rank).edp == 0;
    auto saves = [&](const ParamTensor& t) {
      return t.expert_parallel ? first_expert_replica : first_replica;
    };
    for (const ParamTensor& t : tensors)
      if (saves(t) && t.counts_in_norm && in_set(parts.tensors, t))
        add("model", t, chunk.params + t.offset, 0, static_cast<int64_t>(t.numel));
    if (c >= parts.moments.size()) continue;
    if (!parts.distributed_optimizer && !first_replica && !first_expert_replica) continue;
    for (const MomentPiece& view : parts.moments[c]) {
      const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const ParamTensor& t) {
        return view.offset >= t.offset && view.offset < t.offset + t.numel;
      });
      if (it == tensors.end() || !it->counts_in_norm) continue;
      if (!parts.distributed_optimizer && !saves(*it)) continue;
      const int64_t begin = static_cast<int64_t>(view.offset - it->offset);
      const int64_t end = begin + static_cast<int64_t>(view.numel);
      add("exp_avg", *it, view.exp_avg, begin, end);
      add("exp_avg_sq", *it, view.exp_avg_sq, begin, end);
    }
  }
  Status wrote = Status::ok();
  if (!sources.empty()) {
    // The checksum is taken while the file is written (safetensors::write), not re-read.
    safetensors::Written written;
    wrote = safetensors::write(tmp_dir + "/" + file, sources,
                               {{"format", "lattice-checkpoint-shard"}}, &written);
    if (wrote) {
      const json sidecar = {{"file", file},
                            {"bytes", written.bytes},
                            {"crc32c", hex(written.crc32c)},
                            {"pieces", pieces}};
      wrote = write_file_atomic(tmp_dir + "/" + rank_file(rank) + ".json", sidecar.dump());
    }
  }
  return wrote;
}

Status finalize_checkpoint(const std::string& dir, int iteration, int world_size,
                           const TrainState& state, const ModelConfig& model,
                           const std::string& config_json, const SavedLayout& saved, int retain,
                           int64_t* total_bytes) {
  const std::string final_dir = dir + "/" + iteration_name(iteration);
  const std::string tmp_dir = final_dir + ".tmp";
  const ParallelLayout& L = saved.layout;
  Status finished = Status::ok();
  *total_bytes = 0;
  {
    json files = json::array(), all_pieces = json::array();
    for (int r = 0; r < world_size && finished; r++) {
      const std::string sidecar = tmp_dir + "/" + rank_file(r) + ".json";
      if (!fs::exists(sidecar)) continue;  // a rank with nothing of its own
      std::ifstream in(sidecar);
      json j = json::parse(in, nullptr, false);
      if (j.is_discarded()) {
        finished = Status::corrupt(sidecar + ": unreadable piece list");
        break;
      }
      files.push_back({{"name", j["file"]}, {"bytes", j["bytes"]}, {"crc32c", j["crc32c"]}});
      *total_bytes += j["bytes"].get<int64_t>();
      for (auto& p : j["pieces"]) all_pieces.push_back(p);
      fs::remove(sidecar);
    }
    json config = json::parse(config_json, nullptr, false);
    json meta = {{"format", "lattice-checkpoint"},
                 {"format_version", 1},
                 {"iteration", state.iteration},
                 {"consumed_samples", state.consumed_samples},
                 {"valid_consumed_samples", state.valid_consumed},
                 {"steps_taken", state.steps_taken},
                 {"skipped_iterations", state.skipped_iterations},
                 {"nan_iterations", state.nan_iterations},
                 {"model", model_json(model)},
                 {"layout",
                  {{"world", L.world},
                   {"tp", L.tp},
                   {"pp", L.pp},
                   {"dp", L.dp},
                   {"cp", L.cp},
                   {"vpp", L.vpp},
                   {"ep", L.ep},
                   {"etp", L.etp},
                   {"sequence_parallel", saved.sequence_parallel},
                   {"distributed_optimizer", saved.distributed_optimizer}}},
                 {"optimizer_state", saved.optimizer_state},
                 {"config", config.is_discarded() ? json::object() : config},
                 {"files", files},
                 {"pieces", all_pieces}};
    if (state.loss_scale > 0)
      meta["grad_scaler"] = {{"scale", state.loss_scale},
                             {"growth_tracker", state.loss_scale_growth_tracker},
                             {"hysteresis_tracker", state.loss_scale_hysteresis_tracker}};
    if (finished) finished = write_file_atomic(tmp_dir + "/metadata.json", meta.dump(1));
    if (finished) finished = fsync_path(tmp_dir);
    if (finished) {
      std::error_code ec;
      fs::remove_all(final_dir, ec);  // an older save of the same iteration
      fs::rename(tmp_dir, final_dir, ec);
      if (ec)
        finished = Status::io_error(final_dir + ": cannot rename into place: " + ec.message());
    }
    if (finished) finished = fsync_path(dir);
    if (finished)
      finished = write_file_atomic(dir + "/" + kPointer, std::to_string(state.iteration) + "\n");
    if (finished && retain > 0) {
      std::vector<int> iterations;
      for (const auto& e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (n.size() == 12 && n.rfind("iter_", 0) == 0)
          iterations.push_back(std::stoi(n.substr(5)));
      }
      std::sort(iterations.rbegin(), iterations.rend());
      for (size_t i = static_cast<size_t>(retain); i < iterations.size(); i++) {
        std::error_code ec;
        fs::remove_all(dir + "/" + iteration_name(iterations[i]), ec);
      }
    }
  }
  return finished;
}

Result<SavedCheckpoint> save_checkpoint(Comm& world, const std::string& dir,
                                        const TrainState& state, const ModelConfig& model,
                                        const std::string& config_json, const RankParts& parts,
                                        int retain) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = world.rank();
  const ParallelLayout& L = *parts.layout;
  const ParallelLayout::Coord me = L.coord(rank);
  const std::string final_dir = dir + "/" + iteration_name(state.iteration);
  const std::string tmp_dir = final_dir + ".tmp";
  // Every rank must learn of a failure on any rank before going on.
  auto agree = [&](Status s) -> Status {
    int bad = s ? 0 : 1;
    if (world.size() > 1)
      if (Status c = world.all_reduce(&bad, 1, DType::kInt32, ReduceOp::kMax); !c) return c;
    if (!s) return s;
    return bad ? Status::io_error("checkpoint " + final_dir + ": another rank failed to save")
               : Status::ok();
  };
  // Rank 0 holds the save lock from before iter_N.tmp/ exists until it is renamed: the other
  // ranks write into it only between the two agreements below, while rank 0 waits for them.
  Status prepared = Status::ok();
  SavedCheckpoint saved;
  std::optional<SaveLock> lock;
  if (rank == 0) {
    Result<SaveLock> taken = begin_save(dir, state.iteration, &saved.notes);
    if (taken)
      lock.emplace(std::move(*taken));
    else
      prepared = Status::io_error("--save " + dir + ": " + taken.status().message());
  }
  if (Status s = agree(prepared); !s) return s;

  Status wrote = write_shard(tmp_dir, rank, me, parts);
  if (Status s = agree(wrote); !s) return s;
  // Fault injection for the crash and stop tests: LATTICE_CHECKPOINT_STALL_AT=N[:SECONDS] holds
  // the save of iteration N (`*`: every save) between the shards and the metadata, where a kill
  // leaves iter_N.tmp, for SECONDS (default 60).
  if (const char* at = std::getenv("LATTICE_CHECKPOINT_STALL_AT")) {
    const std::string spec = at;
    const size_t colon = spec.find(':');
    const std::string which = spec.substr(0, colon);
    if (which == "*" || std::atoi(which.c_str()) == state.iteration) {
      const int seconds = colon == std::string::npos ? 60 : std::atoi(spec.c_str() + colon + 1);
      std::this_thread::sleep_for(std::chrono::seconds(seconds));
    }
  }

  saved.path = final_dir;
  Status finished = Status::ok();
  if (rank == 0) {
    finished = finalize_checkpoint(
        dir, state.iteration, world.size(), state, model, config_json,
        {L, parts.sequence_parallel, parts.distributed_optimizer, !parts.moments.empty()}, retain,
        &saved.bytes);
    lock->release();
  }
  if (Status s = agree(finished); !s) return s;
  saved.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return saved;
}

std::string checkpoint_directory_name(int iteration) {
  return iteration_name(iteration);
}

Result<SaveLock> begin_save(const std::string& dir, int iteration,
                            std::vector<std::string>* notes) {
  const std::string tmp_dir = dir + "/" + iteration_name(iteration) + ".tmp";
  std::error_code ec;
  fs::create_directories(dir, ec);
  Result<SaveLock> lock = SaveLock::acquire(tmp_dir);
  if (!lock) return lock.status();
  // Also this iteration's own .tmp, left by an earlier save of it that was killed.
  for (std::string& line : remove_interrupted_saves(dir, &*lock).messages())
    notes->push_back(std::move(line));
  if (!fs::create_directories(tmp_dir, ec))
    return Status::io_error("cannot create " + tmp_dir +
                            (ec ? ": " + ec.message() : std::string(": it could not be removed")));
  return lock;
}

int previous_checkpoint(const std::string& dir, int iteration) {
  int best = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() != 12 || n.rfind("iter_", 0) != 0) continue;
    const int it = std::atoi(n.c_str() + 5);
    if (it < iteration && it > best && fs::exists(e.path() / "metadata.json")) best = it;
  }
  return best;
}

Result<CheckpointRef> resolve_checkpoint(const std::string& path, int step) {
  std::error_code ec;
  if (fs::exists(path + "/metadata.json", ec)) {
    CheckpointRef ref;
    ref.path = path;
    ref.dir = fs::path(path).parent_path().string();
    return ref;
  }
  return find_checkpoint(path, step);
}

Result<CheckpointRef> find_checkpoint(const std::string& dir, int step) {
  CheckpointRef ref;
  ref.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::invalid_argument("--load " + dir + ": no such directory");
  if (step > 0) {
    ref.iteration = step;
  } else {
    std::ifstream in(dir + "/" + kPointer);
    if (!(in >> ref.iteration))
      return Status::invalid_argument("--load " + dir + ": no " + kPointer +
                                      " (not a checkpoint directory, or nothing saved yet)");
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0 && n.rfind("iter_", 0) == 0)
      ref.notes.push_back("skipped " + n +
                          (save_in_progress(e.path().string())
                               ? ", a save in progress"
                               : ", a save that was interrupted before it completed"));
  }
  ref.path = dir + "/" + iteration_name(ref.iteration);
  if (!fs::exists(ref.path + "/metadata.json")) {
    const int previous = previous_checkpoint(dir, ref.iteration);
    return Status::invalid_argument(
        "--load " + dir + ": checkpoint " + iteration_name(ref.iteration) +
        " is missing or "
        "incomplete" +
        (previous > 0 ? "; the previous complete one is " + iteration_name(previous) +
                            " (--ckpt-step " + std::to_string(previous) + ")"
                      : ""));
  }
  return ref;
}

Status take_slice(const ParamTensor& t, const std::vector<int64_t>& saved_shape,
                  const std::vector<float>& global, size_t begin, size_t end, int64_t real_rows,
                  float* out, const std::string& where) {
  std::vector<int64_t> shape = saved_shape;
  const bool vocabulary = is_vocabulary_table(t.name) && shape.size() == 2 &&
                          t.global_shape.size() == 2 && shape[1] == t.global_shape[1];
  if (vocabulary) shape[0] = t.global_shape[0];
  if (shape != t.global_shape)
    return Status::invalid_argument(
        where + " holds " + t.name + " with shape " + safetensors::shape_to_string(saved_shape) +
        "; this model's is " + safetensors::shape_to_string(t.global_shape));
  // The rows beyond the saved ones: the mean of the saved real rows, summed in double.
  std::vector<float> new_row;
  if (vocabulary && t.global_shape[0] > saved_shape[0]) {
    const int64_t cols = saved_shape[1], real = std::min(real_rows, saved_shape[0]);
    new_row.assign(static_cast<size_t>(cols), 0.0f);
    if (real > 0) {
      std::vector<double> sum(static_cast<size_t>(cols), 0.0);
      for (int64_t r = 0; r < real; r++)
        for (int64_t c = 0; c < cols; c++) sum[c] += global[r * cols + c];
      for (int64_t c = 0; c < cols; c++) new_row[c] = static_cast<float>(sum[c] / real);
    }
  }
  const checkpoint_format::SliceMap map{t.global_shape, t.split_dim, t.split_begin,
                                        t.split_dim >= 0 ? t.shape[t.split_dim] : 0};
  const size_t saved_numel = global.size();
  for (size_t i = begin; i < end; i++) {
    const size_t g = map.global_index(i);
    out[i - begin] = g < saved_numel     ? global[g]
                     : new_row.empty() ? 0.0f
                                       : new_row[g % new_row.size()];
  }
  return Status::ok();
}

Status load_checkpoint(const CheckpointRef& ref, const RankParts& parts, bool weights_only,
                       TrainState* state) {
  Result<std::unique_ptr<CheckpointReader>> opened = CheckpointReader::open(ref.path);
  if (!opened) return opened.status();
  CheckpointReader& reader = **opened;
  if (!weights_only && !reader.has_optimizer_state())
    return Status::invalid_argument(ref.path +
                                    " holds weights only (no optimizer state); load "
                                    "it with --finetune");
  const int previous = previous_checkpoint(ref.dir, ref.iteration);
  auto explain = [&](const Status& s) {
    if (s) return s;
    return Status::corrupt(s.message() + (previous > 0
                                              ? "; the previous complete checkpoint is " +
                                                    iteration_name(previous) + " (--ckpt-step " +
                                                    std::to_string(previous) + ")"
                                              : ""));
  };
  std::vector<int64_t> shape;
  std::vector<float> global;
  std::string cached;
  auto fetch = [&](const std::string& kind, const std::string& name) -> Status {
    if (cached == kind + "/" + name) return Status::ok();
    cached.clear();
    if (Status s = reader.read_global(kind, name, shape, global); !s) return s;
    cached = kind + "/" + name;
    return Status::ok();
  };
  for (size_t c = 0; c < parts.chunks.size(); c++) {
    const ChunkWeights& chunk = parts.chunks[c];
    const auto& tensors = chunk.layout->tensors();
    for (const ParamTensor& t : tensors) {
      if (!in_set(parts.tensors, t)) continue;
      if (Status s = fetch("model", t.name); !s) return explain(s);
      if (Status s = take_slice(t, shape, global, 0, t.numel, reader.model().vocab_size,
                                chunk.params + t.offset, ref.path);
          !s)
        return s;
    }
    if (weights_only || c >= parts.moments.size()) continue;
    for (const MomentPiece& view : parts.moments[c]) {
      const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const ParamTensor& t) {
        return view.offset >= t.offset && view.offset < t.offset + t.numel;
      });
      if (it == tensors.end()) continue;
      const size_t begin = view.offset - it->offset, end = begin + view.numel;
      if (Status s = fetch("exp_avg", it->name); !s) return explain(s);
      if (Status s = take_slice(*it, shape, global, begin, end, 0, view.exp_avg, ref.path); !s)
        return s;
      if (Status s = fetch("exp_avg_sq", it->name); !s) return explain(s);
      if (Status s = take_slice(*it, shape, global, begin, end, 0, view.exp_avg_sq, ref.path); !s)
        return s;
    }
  }
  if (state) *state = reader.state();
  return Status::ok();
}

}  // namespace lattice
