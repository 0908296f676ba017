// The GPU trainer's checkpoints through the CPU engine's checkpoint code (gpu_checkpoint.h).
// The host structures exist only while a load or save runs: the rank's fp32 shard (HostChunk)
// and its two moments.
#include "gpu/gpu_checkpoint.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_gpt2.h"
#include "core/host_memory.h"
#include "lattice/layout.h"
#include "model/init_weights.h"
#include "parallel/model_chunks.h"

namespace lattice::gpu {

namespace {

using Clock = std::chrono::steady_clock;

// Every rank learns whether any rank failed before a collective that would otherwise wait for
// the failed one: `s` on the rank that failed, a message naming `what` on the others.
Status agree(Comm& world, Status s, const std::string& what) {
  int bad = s ? 0 : 1;
  if (world.size() > 1)
    if (Status c = world.all_reduce(&bad, 1, DType::kInt32, ReduceOp::kMax); !c) return c;
  if (!s) return s;
  return bad ? Status::internal(what + ": another rank failed") : Status::ok();
}

Status upload_moments(const std::vector<MomentSpan>& spans, DeviceState& device) {
  for (const MomentSpan& m : spans)
    if (Status s = device.upload_moments(m.offset, m.numel, m.exp_avg, m.exp_avg_sq); !s) return s;
  return Status::ok();
}

// The rank's shard of the weights on the host (HostChunk throws OutOfMemory).
std::unique_ptr<HostChunk> host_shard(const ModelConfig& model, const ModelShard& shard) {
  return std::make_unique<HostChunk>(model, shard);
}

// The host AdamW of the rank's optimizer shard: its owned ranges, or the whole arena.
std::unique_ptr<AdamW<float>> host_optimizer(const TrainOptions& o, const OptimizerShard& shard,
                                             const ParamLayout& layout) {
  return std::make_unique<AdamW<float>>(
      layout, o.optim, shard.distributed ? shard.owned : std::vector<ArenaRange>{});
}

// The device's moments into `optimizer` (the rank's optimizer shard), and its weights into
// `host` when `weights`.
Status download_state(DeviceState& device, const OptimizerShard& shard, HostChunk& host,
                      AdamW<float>& optimizer, bool weights) {
  if (weights)
    if (Status s = device.download_params(host.params.data()); !s) return s;
  Result<std::vector<MomentSpan>> spans = moment_spans(shard, optimizer);
  if (!spans) return spans.status();
  for (const MomentSpan& m : *spans)
    if (Status s = device.download_moments(m.offset, m.numel, m.exp_avg, m.exp_avg_sq); !s)
      return s;
  return Status::ok();
}

// "loaded DIR/iter_N (X MB in S s, R MB/s); continuing after iteration N", as the CPU trainer
// reports a --load (train/trainer.cpp).
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

}  // namespace

Result<std::vector<MomentSpan>> moment_spans(const OptimizerShard& shard, AdamW<float>& host) {
  const std::vector<AdamW<float>::StateView> views = host.state_views();
  const std::vector<OptimizerPiece>& pieces = shard.pieces;
  if (views.size() != pieces.size())
    return Status::internal("the host optimizer holds " + std::to_string(views.size()) +
                            " moment segments for the " + std::to_string(pieces.size()) +
                            " pieces of the device's optimizer shard");
  std::vector<MomentSpan> spans;
  spans.reserve(views.size());
  for (size_t i = 0; i < views.size(); i++) {
    const OptimizerPiece& p = pieces[i];
    if (views[i].offset != p.offset || views[i].numel != p.numel)
      return Status::internal("the host optimizer's segment " + std::to_string(i) + " covers [" +
                              std::to_string(views[i].offset) + ", +" +
                              std::to_string(views[i].numel) + "), the device's piece is [" +
                              std::to_string(p.offset) + ", +" + std::to_string(p.numel) + ")");
    spans.push_back({p.offset, p.numel, views[i].exp_avg, views[i].exp_avg_sq});
  }
  return spans;
}

Result<GpuRankShard> gpu_rank_shard(const TrainOptions& o, int world_size, int rank) {
  Result<ParallelLayout> layout = make_layout(o, world_size);
  if (!layout) return layout.status();
  GpuRankShard r;
  r.layout = *layout;
  r.coord = layout->coord(rank);
  // Without sequence parallelism: it changes no tensor's place or slice (only which gradients
  // are summed over TP), so the checkpoint layout is the same either way, as on the CPU.
  for (int c = 0; c < r.layout.vpp; c++) r.shards.push_back(shard_of(r.layout, r.coord, c, false));
  r.shard = r.shards[0];
  return r;
}

Result<TrainState> restore_gpu_state(const TrainOptions& o, const ModelConfig& model, Comm& world,
                                     const std::vector<DeviceState*>& devices, MetricsSink& sink) {
  const bool rank0 = world.rank() == 0;
  Result<GpuRankShard> me = gpu_rank_shard(o, world.size(), world.rank());
  if (!me) return me.status();
  if (devices.size() != me->shards.size())
    return Status::internal("restore_gpu_state: " + std::to_string(devices.size()) +
                            " device states for " + std::to_string(me->shards.size()) + " chunks");
  std::vector<std::unique_ptr<HostChunk>> hosts;
  for (const ModelShard& shard : me->shards) hosts.push_back(host_shard(model, shard));
  TrainState state;
  for (auto& host : hosts) {
    if (!o.load_hf.empty()) {
      if (Status s = import_hf_gpt2_chunk(o.load_hf, model, host->layout, host->params.data()); !s)
        return Status::invalid_argument("--load-hf: " + s.message());
    } else if (o.load.empty()) {
      if (size_t failed = init_arena(model, host->layout, o.seed, host->params.data()))
        return Status::resource_exhausted(OutOfMemory(MemoryCategory::kWeights, failed).what());
    }
  }
  if (!o.load_hf.empty() && rank0) sink.on_message("loaded GPT-2 weights from " + o.load_hf);
  if (o.load.empty()) {
    for (size_t c = 0; c < hosts.size(); c++)
      if (Status s = devices[c]->upload_params(hosts[c]->params.data()); !s) return s;
    return state;
  }
  // --load (which excludes --load-hf) writes every tensor, so nothing is drawn first. Rank 0
  // removes the directory's interrupted saves (save_lock.h) before any rank looks into it.
  std::vector<std::string> cleaned;
  if (rank0) cleaned = remove_interrupted_saves(o.load).messages();
  world.barrier();
  Result<CheckpointRef> ref = find_checkpoint(o.load, o.ckpt_step);
  if (!ref) return ref.status();
  const auto t0 = Clock::now();
  // Each chunk's optimizer shard, as the trainer's (optimizer_shard per chunk layout).
  std::vector<OptimizerShard> shards;
  std::vector<std::unique_ptr<AdamW<float>>> optimizers;
  RankParts parts;
  parts.layout = &me->layout;
  parts.distributed_optimizer = o.parallel.use_distributed_optimizer;
  parts.sequence_parallel = o.parallel.sequence_parallel;  // recorded as the CPU trainer does
  for (auto& host : hosts) {
    shards.push_back(optimizer_shard(o, host->layout, me->layout.dp, me->coord.dp));
    optimizers.push_back(host_optimizer(o, shards.back(), host->layout));
    parts.chunks.push_back({&host->layout, host->params.data()});
    parts.moments.push_back(moment_pieces(*optimizers.back()));
  }
  auto load = [&]() -> Status {
    if (Status s = load_checkpoint(*ref, parts, o.finetune, &state); !s) return s;
    for (size_t c = 0; c < hosts.size(); c++) {
      if (Status s = devices[c]->upload_params(hosts[c]->params.data()); !s) return s;
      if (o.finetune) continue;  // the device's moments stay zero
      Result<std::vector<MomentSpan>> spans = moment_spans(shards[c], *optimizers[c]);
      if (!spans) return spans.status();
      if (Status s = upload_moments(*spans, *devices[c]); !s) return s;
    }
    return Status::ok();
  };
  // Every rank has its state once the slowest has (the figure is the job's load time), and
  // a rank that failed does not leave the others waiting.
  if (Status s = agree(world, load(), "--load " + ref->path); !s) return s;
  if (o.finetune) state = TrainState{};
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (rank0) {
    for (const std::string& note : cleaned) sink.on_message("--load " + o.load + ": " + note);
    sink.on_message(loaded_message(*ref, seconds, o.finetune, state.iteration));
  }
  return state;
}

Result<SavedCheckpoint> save_gpu_checkpoint(const TrainOptions& o, const ModelConfig& model,
                                            Comm& world, const TrainState& state,
                                            const std::vector<DeviceState*>& devices) {
  Result<GpuRankShard> me = gpu_rank_shard(o, world.size(), world.rank());
  if (!me) return me.status();
  if (devices.size() != me->shards.size())
    return Status::internal("save_gpu_checkpoint: " + std::to_string(devices.size()) +
                            " device states for " + std::to_string(me->shards.size()) + " chunks");
  RankParts parts;
  parts.layout = &me->layout;
  parts.distributed_optimizer = o.parallel.use_distributed_optimizer;
  parts.sequence_parallel = o.parallel.sequence_parallel;  // recorded as the CPU trainer does
  std::vector<std::unique_ptr<HostChunk>> hosts;
  std::vector<std::unique_ptr<AdamW<float>>> optimizers;
  Status downloaded = Status::ok();
  // What write_shard stores: the weights of data-parallel rank 0, the moments of every rank
  // that owns some (all of them with the distributed optimizer, each its shards' ranges), for
  // every chunk.
  const bool distributed = o.parallel.use_distributed_optimizer && me->layout.dp > 1;
  if (me->coord.dp == 0 || distributed) {
    for (size_t c = 0; c < devices.size() && downloaded; c++) {
      hosts.push_back(host_shard(model, me->shards[c]));
      const OptimizerShard shard =
          optimizer_shard(o, hosts.back()->layout, me->layout.dp, me->coord.dp);
      optimizers.push_back(host_optimizer(o, shard, hosts.back()->layout));
      downloaded =
          download_state(*devices[c], shard, *hosts.back(), *optimizers.back(), me->coord.dp == 0);
      parts.chunks.push_back({&hosts.back()->layout, hosts.back()->params.data()});
      parts.moments.push_back(moment_pieces(*optimizers.back()));
    }
  }
  if (Status s =
          agree(world, downloaded, "checkpoint of iteration " + std::to_string(state.iteration));
      !s)
    return s;
  return save_checkpoint(world, o.save, state, model, train_options_json(o), parts, o.save_retain);
}

Status save_gpu_hf(const TrainOptions& o, const ModelConfig& model, Comm& world,
                   const std::vector<DeviceState*>& devices, MetricsSink& sink) {
  Result<GpuRankShard> me = gpu_rank_shard(o, world.size(), world.rank());
  if (!me) return me.status();
  if (devices.size() != me->shards.size())
    return Status::internal("save_gpu_hf: " + std::to_string(devices.size()) +
                            " device states for " + std::to_string(me->shards.size()) + " chunks");
  std::vector<std::unique_ptr<HostChunk>> hosts;
  Status downloaded = Status::ok();
  if (me->coord.dp == 0) {  // the shards gather_full_params reads
    for (size_t c = 0; c < devices.size() && downloaded; c++) {
      hosts.push_back(host_shard(model, me->shards[c]));
      downloaded = devices[c]->download_params(hosts.back()->params.data());
    }
  }
  if (Status s = agree(world, downloaded, "--save-hf"); !s) return s;
  std::vector<const float*> chunks;
  for (const auto& host : hosts) chunks.push_back(host->params.data());
  Result<std::vector<float>> full =
      gather_full_params<float>(world, me->layout, model, false, chunks);
  if (!full) return full.status();
  if (world.rank() != 0) return Status::ok();
  if (Status s = export_hf_gpt2(o.save_hf, model, ParamLayout(model), full->data()); !s)
    return Status::io_error("--save-hf: " + s.message());
  sink.on_message("saved GPT-2 weights to " + o.save_hf);
  return Status::ok();
}

}  // namespace lattice::gpu
