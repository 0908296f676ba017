// One rank's training loop (trainer.cpp: Trainer<A>, over any device) and what is split from
// it: what the rank holds (RankModel) and its checkpoints (trainer_checkpoint.cpp). train()
// (train.cpp) picks the device and the compute type, then calls run_trainer. Internal to the
// engine; lattice/train.h is the public side.
#pragma once

#include <memory>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "device/device.h"
#include "lattice/train.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/grad_reducer.h"
#include "parallel/device_comms.h"
#include "parallel/groups.h"

namespace lattice {

struct DeviceBackend;

// Everything one rank holds: the device its chunks compute on, the device's communicators,
// its chunks and their reducers and optimizers (declared in the order they are made: each
// outlives what is made after it).
template <typename A>
struct RankModel {
  std::unique_ptr<Device> device;
  DeviceComms comms;  // the device's TP, DP, pipeline-channel and embedding communicators
  std::vector<std::unique_ptr<GptModel<A>>> chunks;
  std::vector<std::unique_ptr<GradReducer<accum_t<A>>>> buckets;
  std::vector<std::unique_ptr<AdamW<A>>> optimizers;
};

// The run of one rank on `device` (train() made it; backend: where it came from, null for the
// CPU) in compute type A: float, double, bf16 or fp16. Collective over groups.world.
template <typename A>
Result<TrainSummary> run_trainer(const TrainOptions& options, const ModelConfig& model,
                                 ProcessGroups& groups, MetricsSink& sink,
                                 std::unique_ptr<Device> device, const DeviceBackend* backend);

// --load: the checkpoint of any layout into the rank's chunks (every rank reads what it needs;
// staged through host copies where the device is not host-addressable), AdamW's step count
// set from it; `state` receives the progress (zero with --finetune). Rank 0 reports to `sink`.
// Collective over groups.world. fp64 state is refused (TrainOptions::validate first).
template <typename A>
Status load_rank_checkpoint(RankModel<A>& rank, const ProcessGroups& groups,
                            const TrainOptions& options, MetricsSink& sink, TrainState& state);
// --save: `state` and the rank's chunks in options.save (--save-retain). Collective.
template <typename A>
Result<SavedCheckpoint> save_rank_checkpoint(RankModel<A>& rank, const ProcessGroups& groups,
                                             const TrainOptions& options, const ModelConfig& model,
                                             const TrainState& state);
// --save-hf: the whole model's master weights gathered to rank 0, which writes the Hugging Face
// model (GPT-2 or Llama family, checkpoint/hf_model.h) and says so. Collective.
template <typename A>
Status save_rank_hf(RankModel<A>& rank, const ProcessGroups& groups, const TrainOptions& options,
                    const ModelConfig& model, MetricsSink& sink);
// The whole model's master weights in ParamLayout(model) order on rank 0 (empty elsewhere),
// from data-parallel rank 0's shards. Collective.
template <typename A>
Result<std::vector<accum_t<A>>> gather_rank_weights(RankModel<A>& rank, const ProcessGroups& groups,
                                                    const TrainOptions& options,
                                                    const ModelConfig& model);

}  // namespace lattice
