// A rank's checkpoints and Hugging Face export (trainer.h) through checkpoint/chunk_state.h: the
// arenas themselves on a host-addressable device, host copies elsewhere.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "checkpoint/chunk_state.h"
#include "checkpoint/hf_model.h"
#include "parallel/model_chunks.h"
#include "train/trainer.h"

namespace lattice {

namespace {

template <typename A>
std::vector<ChunkState<A>> chunk_states(RankModel<A>& rank) {
  std::vector<ChunkState<A>> states;
  states.reserve(rank.chunks.size());
  for (size_t c = 0; c < rank.chunks.size(); c++)
    states.emplace_back(*rank.chunks[c], rank.optimizers[c].get(), rank.buckets[c].get());
  return states;
}

// The RankParts over the chunks' states. weights false: the weights are not read (a rank that
// saves none: data-parallel rank > 0), so a device that stages them copies nothing.
template <typename A>
RankParts parts(RankModel<A>& rank, std::vector<ChunkState<A>>& states, const ProcessGroups& g,
                const TrainOptions& o, bool weights) {
  RankParts p;
  p.layout = &g.layout;
  p.sequence_parallel = o.parallel.sequence_parallel;
  p.distributed_optimizer = o.parallel.use_distributed_optimizer;
  for (size_t c = 0; c < states.size(); c++) {
    p.chunks.push_back({&rank.chunks[c]->layout(), weights ? states[c].params() : nullptr});
    p.moments.push_back(states[c].moments());
  }
  return p;
}

// "loaded DIR/iter_N (X MB in S s, R MB/s); continuing after iteration N".
std::string loaded_message(const CheckpointRef& ref, double seconds, bool finetune, int iteration) {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(ref.path, ec))
    bytes += static_cast<int64_t>(e.file_size(ec));
  char rate[96];
  std::snprintf(rate, sizeof rate, " (%.1f MB in %.2f s, %.0f MB/s)", bytes / 1e6, seconds,
                seconds > 0 ? bytes / 1e6 / seconds : 0.0);
  return "loaded " + ref.path + rate + (finetune ? " (weights only: --finetune)" : "") +
         "; continuing after iteration " + std::to_string(iteration);
}

const char* const kNoFp64State =
    "--save and --load keep fp32 state; they do not combine with --fp64";

// One checkpoint's share of a load: its directory, which of the chunk's tensors it gives, and
// whether it is weights only (a base or --finetune) or the run's own state to resume.
struct LoadSource {
  std::string dir;
  TensorSet tensors = TensorSet::kAll;
  bool weights_only = true;
};

// The base a LoRA checkpoint was trained on: the --pretrained-checkpoint its run recorded, or
// empty (a base drawn from --seed, which this run's init_weights has drawn again).
std::string recorded_base(const std::string& path) {
  Result<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::open(path);
  if (!reader) return "";
  const nlohmann::json m = nlohmann::json::parse((*reader)->metadata_json(), nullptr, false);
  if (!m.is_object() || !m.contains("config") || !m["config"].is_object()) return "";
  return m["config"].value("pretrained-checkpoint", "");
}

// Where the weights come from (Note [LoRA] in model/param_layout.h): --pretrained-checkpoint
// and --load --finetune give weights only (with LoRA the frozen base alone); --load otherwise
// resumes the run (with LoRA its adapters and their optimizer state, the base coming from
// --pretrained-checkpoint or the one the LoRA checkpoint recorded).
std::vector<LoadSource> load_sources(const TrainOptions& o, bool lora,
                                     const std::string& load_path) {
  const TensorSet base = lora ? TensorSet::kFrozen : TensorSet::kAll;
  std::vector<LoadSource> sources;
  std::string base_dir = o.pretrained_checkpoint;
  if (lora && base_dir.empty() && !o.load.empty() && !o.finetune)
    base_dir = recorded_base(load_path);
  if (!base_dir.empty()) sources.push_back({base_dir, base, true});
  if (!o.load.empty())
    sources.push_back(
        o.finetune ? LoadSource{o.load, base, true}
                   : LoadSource{o.load, lora ? TensorSet::kTrainable : TensorSet::kAll, false});
  return sources;
}

}  // namespace

template <typename A>
Status load_rank_checkpoint(RankModel<A>& rank, const ProcessGroups& g, const TrainOptions& o,
                            MetricsSink& sink, TrainState& state) {
  if constexpr (!std::is_same_v<accum_t<A>, float>) {
    return Status::invalid_argument(kNoFp64State);
  } else {
    Comm& world = *g.world;
    // Rank 0 removes the interrupted saves of the directory (save_lock.h) before any rank
    // looks into it; its lines replace find_checkpoint's notes on them.
    std::vector<std::string> cleaned;
    if (world.rank() == 0 && !o.load.empty()) cleaned = remove_interrupted_saves(o.load).messages();
    world.barrier();
    const bool lora = o.model.lora();
    std::string load_path;
    if (!o.load.empty()) {
      Result<CheckpointRef> ref = find_checkpoint(o.load, o.ckpt_step);
      if (!ref) return ref.status();
      load_path = ref->path;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<ChunkState<A>> states = chunk_states(rank);
    std::vector<std::pair<std::string, const LoadSource*>> loaded;
    const std::vector<LoadSource> sources = load_sources(o, lora, load_path);
    bool resumed = false;
    for (const LoadSource& source : sources) {
      Result<CheckpointRef> ref =
          find_checkpoint(source.dir, source.dir == o.load ? o.ckpt_step : 0);
      if (!ref) return ref.status();
      {
        Result<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::open(ref->path);
        if (!reader) return reader.status();
        if (Status s = check_architecture(ref->path, (*reader)->model(), o.model); !s) return s;
      }
      RankParts p = parts(rank, states, g, o, true);
      p.tensors = source.tensors;
      if (source.tensors != TensorSet::kAll)  // the other tensors keep what the device holds
        for (ChunkState<A>& chunk : states)
          if (Status s = chunk.download(true, false); !s) return s;
      TrainState read;
      if (Status s = load_checkpoint(*ref, p, source.weights_only, &read); !s) return s;
      for (ChunkState<A>& chunk : states)
        if (Status s = chunk.upload(!source.weights_only); !s) return s;
      if (!source.weights_only) {
        state = read;
        resumed = true;
      }
      loaded.push_back({ref->path, &source});
    }
    // Every rank has its state once the slowest has: the figure is the job's load time.
    world.barrier();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!resumed) state = TrainState{};
    for (auto& adam : rank.optimizers) adam->set_steps_taken(state.steps_taken);
    if (world.rank() == 0) {
      for (const std::string& note : cleaned) sink.on_message("--load " + o.load + ": " + note);
      for (const auto& [path, source] : loaded) {
        CheckpointRef shown;
        shown.path = path;
        std::string line = loaded_message(shown, seconds, false, state.iteration);
        if (source->tensors == TensorSet::kFrozen)
          line += " (the frozen LoRA base)";
        else if (source->tensors == TensorSet::kTrainable)
          line += " (the LoRA adapters)";
        else if (source->weights_only)
          line += " (weights only)";
        sink.on_message(line);
      }
    }
    return Status::ok();
  }
}

template <typename A>
Result<SavedCheckpoint> save_rank_checkpoint(RankModel<A>& rank, const ProcessGroups& g,
                                             const TrainOptions& o, const ModelConfig& model,
                                             const TrainState& state) {
  if constexpr (!std::is_same_v<accum_t<A>, float>) {
    return Status::invalid_argument(kNoFp64State);
  } else {
    // What write_shard stores: the weights of data-parallel and context-parallel rank 0 (the
    // replicas are equal), the moments of every rank that owns some (the distributed optimizer
    // shards them over DP x CP).
    // Under expert parallelism expert-data rank 0 of each EP rank stores its experts too
    // (write_shard).
    const bool weights =
        (g.coord.dp == 0 && g.coord.cp == 0) || (g.layout.expert_grid() && g.expert_coord.edp == 0);
    const bool moments =
        weights || (o.parallel.use_distributed_optimizer && g.layout.dp * g.layout.cp > 1);
    std::vector<ChunkState<A>> states = chunk_states(rank);
    for (ChunkState<A>& chunk : states)
      if (Status s = chunk.download(weights, moments); !s) return s;
    // A LoRA run saves its adapters alone (Note [LoRA] in model/param_layout.h): the base is
    // the one its recorded --pretrained-checkpoint (or --seed) names.
    RankParts p = parts(rank, states, g, o, weights);
    if (model.lora()) p.tensors = TensorSet::kTrainable;
    return save_checkpoint(*g.world, o.save, state, model, train_options_json(o), p, o.save_retain);
  }
}

template <typename A>
Result<std::vector<accum_t<A>>> gather_rank_weights(RankModel<A>& rank, const ProcessGroups& g,
                                                    const TrainOptions& o,
                                                    const ModelConfig& model) {
  // The shards of data-parallel rank 0, and under EP of expert-data-parallel rank 0
  // (gather_full_params), in host memory.
  const bool sender = gather_sender(g.layout, g.world->rank());
  std::vector<ChunkState<A>> states = chunk_states(rank);
  std::vector<const accum_t<A>*> params;
  for (ChunkState<A>& chunk : states) {
    if (Status s = chunk.download(sender, false); !s) return s;
    params.push_back(sender ? chunk.params() : nullptr);
  }
  return gather_full_params(*g.world, g.layout, model, o.parallel.sequence_parallel, params);
}

template <typename A>
Status save_rank_hf(RankModel<A>& rank, const ProcessGroups& g, const TrainOptions& o,
                    const ModelConfig& model, MetricsSink& sink) {
  Result<std::vector<accum_t<A>>> full = gather_rank_weights(rank, g, o, model);
  if (!full) return full.status();
  if (g.world->rank() != 0) return Status::ok();
  // fp32 master weights are written as they are; an --fp64 run's are rounded to float first.
  std::vector<float> rounded;
  const float* weights = nullptr;
  if constexpr (std::is_same_v<accum_t<A>, float>) {
    weights = full->data();
  } else {
    rounded.assign(full->begin(), full->end());
    weights = rounded.data();
  }
  Result<safetensors::Dtype> dtype = parse_hf_dtype(o.hf_dtype);
  if (!dtype) return dtype.status();
  if (Status s = export_hf(o.save_hf, model, ParamLayout(model), weights, {*dtype}); !s)
    return Status::io_error("--save-hf: " + s.message());
  sink.on_message(std::string("saved ") + hf_architecture_name(hf_architecture_of(model)) +
                  " weights to " + o.save_hf);
  return Status::ok();
}

#define LATTICE_TRAINER_CHECKPOINTS(A)                                                           \
  template Status load_rank_checkpoint(RankModel<A>&, const ProcessGroups&, const TrainOptions&, \
                                       MetricsSink&, TrainState&);                               \
  template Result<SavedCheckpoint> save_rank_checkpoint(RankModel<A>&, const ProcessGroups&,     \
                                                        const TrainOptions&, const ModelConfig&, \
                                                        const TrainState&);                      \
  template Status save_rank_hf(RankModel<A>&, const ProcessGroups&, const TrainOptions&,         \
                               const ModelConfig&, MetricsSink&);                                \
  template Result<std::vector<accum_t<A>>> gather_rank_weights(                                  \
      RankModel<A>&, const ProcessGroups&, const TrainOptions&, const ModelConfig&);
LATTICE_TRAINER_CHECKPOINTS(float)
LATTICE_TRAINER_CHECKPOINTS(double)
LATTICE_TRAINER_CHECKPOINTS(bf16)
LATTICE_TRAINER_CHECKPOINTS(fp16)
#undef LATTICE_TRAINER_CHECKPOINTS

}  // namespace lattice
