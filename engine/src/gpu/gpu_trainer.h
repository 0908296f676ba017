// The GPU trainer: what train() (lattice/train.h) runs for --device cuda in the lattice-gpu
// executable, which registers register_gpu_trainer() at start-up. docs/gpu.md.
#pragma once

#include <string>
#include <vector>

#include "lattice/train.h"

namespace lattice::gpu {

// "" when this run can train on a GPU here, else why not: the options it does not support
// (unsupported_on_gpu), then a missing device.
std::string gpu_unavailable(const TrainOptions& options, int world_size);
// One rank's training on its GPU (device = local rank % devices). Supported: world =
// TP x DP x PP: tensor, data and pipeline parallelism (1F1B, interleaved, uneven stages) over
// NCCL (builds with MPI and NCCL), the distributed optimizer, hidden and attention dropout,
// fp32 / --bf16 / --fp16 (16-bit compute, fp32 master weights and gradients; --fp16 with the
// loss scaler), checkpoints in the CPU engine's format (gpu_checkpoint.h); no sequence
// parallelism, no recomputation. Anything else is refused with a message naming the flag.
Result<TrainSummary> train_on_gpu(const TrainOptions& options, const ModelConfig& model,
                                  Comm& world, MetricsSink& sink);
// The problems with `options` for the GPU trainer, one sentence each (empty: supported).
std::vector<std::string> unsupported_on_gpu(const TrainOptions& options, int world_size);
// set_gpu_trainer() with the two functions above.
void register_gpu_trainer();

}  // namespace lattice::gpu
