// Checkpoints of the GPU trainer in the CPU engine's format (checkpoint/checkpoint.h), so that
// either engine resumes the other's run: the device's fp32 master weights and AdamW moments
// pass through host structures (a HostChunk of the rank's ModelShard, AdamW<float>), and the
// CPU checkpoint code saves or loads them as the run's
// TP t x PP p x DP d layout (the options' --tensor-model-parallel-size and
// --pipeline-model-parallel-size over the world): each rank holds its stage's tensor-parallel
// shard (the last stage's tied LM head a copy of the word embedding, as the CPU layout has
// it), and a checkpoint of any layout loads (resharding); --load-hf and --save-hf (gathered
// from every stage) likewise. Host code only (no CUDA header): the device is behind
// DeviceState, so tests run all of this on the CPU. Non-goals: asynchronous saves, bf16 or
// fp16 state. With the interleaved schedule a rank holds several chunks, each its own device
// state: the functions take one DeviceState per chunk (chunk c = shard_of(layout, coord, c)).
#pragma once

#include <cstddef>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "lattice/comm.h"
#include "lattice/layout.h"
#include "lattice/status.h"
#include "lattice/train.h"
#include "model/param_layout.h"
#include "optim/adamw.h"
#include "optim/optimizer_shard.h"

namespace lattice::gpu {

// The training state that lives on the device, seen from the host. The GPU trainer keeps the
// fp32 master weights in one arena laid out by ParamLayout(model, shard) (the rank's tensor-
// parallel shard, shard_of(layout, coord, 0)), as GptModel<float>::params() on any device
// (every tensor at its offset, the 16-element alignment gaps between tensors unused), and its
// AdamW (optim/adamw.h) keeps the two moments of the arena part it owns (optimizer_shard.h: the
// whole arena, or its --use-distributed-optimizer shard) packed piece after piece without the
// gaps, as the host AdamW<float> of the same pieces does; so moments move piece by piece
// (moment_spans), each named by its arena offsets. Every method waits for the device and
// returns its error.
class DeviceState {
 public:
  virtual ~DeviceState() = default;
  // The master weights, the whole arena (total_numel floats), to the host.
  virtual Status download_params(float* host) = 0;
  // The master weights from the host (the whole arena); the compute copy of a bf16 run is
  // refreshed from them.
  virtual Status upload_params(const float* host) = 0;
  // Both moments of the arena elements [offset, offset + n), to or from the host (n each).
  virtual Status download_moments(size_t offset, size_t n, float* exp_avg, float* exp_avg_sq) = 0;
  virtual Status upload_moments(size_t offset, size_t n, const float* exp_avg,
                                const float* exp_avg_sq) = 0;
};

// One piece's moments (a tensor, or its part in a distributed-optimizer shard): arena elements
// [offset, offset + numel) on the device, and where they live in the host optimizer's packed state
// (exp_avg, exp_avg_sq: numel each).
struct MomentSpan {
  size_t offset = 0, numel = 0;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};
// The spans of `host`, one per piece of `shard` in order. An error when `host` does not keep
// the moments of exactly those pieces (another shard, another model).
Result<std::vector<MomentSpan>> moment_spans(const OptimizerShard& shard, AdamW<float>& host);

// Where this rank sits: the run's layout (o's TP and PP over world_size ranks), the rank's
// coordinates and its model shards (one per chunk), whose ParamLayouts the device's arenas
// follow (the part of each arena its optimizer owns: optimizer_shard(o, chunk layout,
// layout.dp, coord.dp), one per chunk as the CPU trainer's GradReducer).
struct GpuRankShard {
  ParallelLayout layout;
  ParallelLayout::Coord coord;
  ModelShard shard;                // chunk 0
  std::vector<ModelShard> shards;  // every chunk (layout.vpp)
};
Result<GpuRankShard> gpu_rank_shard(const TrainOptions& o, int world_size, int rank);

// The state a run starts from, uploaded to `device`: GPT-2 weights (--load-hf) or Megatron's
// initialisation from --seed (init_arena, as GptModel::init_weights draws it), then with
// --load the checkpoint find_checkpoint names (--ckpt-step), weights only with --finetune.
// The device's moments must be zero on entry (they stay zero unless a checkpoint sets them).
// Every rank reads its own shard itself (--load-hf: the whole file, then its slices). Rank 0
// reports to `sink` as the CPU trainer does. Returns the progress to continue from (zero: a
// fresh run, --finetune). Collective over `world` with --load.
// chunks: one DeviceState per chunk of the rank (gpu_rank_shard's shards).
Result<TrainState> restore_gpu_state(const TrainOptions& o, const ModelConfig& model, Comm& world,
                                     const std::vector<DeviceState*>& chunks, MetricsSink& sink);
inline Result<TrainState> restore_gpu_state(const TrainOptions& o, const ModelConfig& model,
                                            Comm& world, DeviceState& device, MetricsSink& sink) {
  return restore_gpu_state(o, model, world, std::vector<DeviceState*>{&device}, sink);
}

// --save: a checkpoint of `state` in o.save (--save-retain), collective over `world`. The
// data-parallel rank 0 of each tensor-parallel rank of each stage downloads its shard's weights and
// moments and writes them, as on the CPU; the other ranks hold equal replicas and only take part in
// the agreement. With --use-distributed-optimizer every rank also writes the moments of its
// optimizer shard of every chunk (the CPU engine's distributed-optimizer pieces: flat ranges of
// tensors).
Result<SavedCheckpoint> save_gpu_checkpoint(const TrainOptions& o, const ModelConfig& model,
                                            Comm& world, const TrainState& state,
                                            const std::vector<DeviceState*>& chunks);
inline Result<SavedCheckpoint> save_gpu_checkpoint(const TrainOptions& o, const ModelConfig& model,
                                                   Comm& world, const TrainState& state,
                                                   DeviceState& device) {
  return save_gpu_checkpoint(o, model, world, state, std::vector<DeviceState*>{&device});
}

// --save-hf: the shards of data-parallel rank 0 gathered to rank 0 (gather_full_params), which
// writes the whole model's master weights as a GPT-2 safetensors file and says so. Collective
// over `world`.
Status save_gpu_hf(const TrainOptions& o, const ModelConfig& model, Comm& world,
                   const std::vector<DeviceState*>& chunks, MetricsSink& sink);
inline Status save_gpu_hf(const TrainOptions& o, const ModelConfig& model, Comm& world,
                          DeviceState& device, MetricsSink& sink) {
  return save_gpu_hf(o, model, world, std::vector<DeviceState*>{&device}, sink);
}

}  // namespace lattice::gpu
