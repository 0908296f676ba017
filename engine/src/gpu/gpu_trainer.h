// The GPU trainer: what train() (lattice/train.h) runs for --device cuda in the lattice-gpu
// executable, which registers register_gpu_trainer() at start-up. docs/gpu.md.
#pragma once

#include <string>

#include "lattice/train.h"

namespace lattice::gpu {

// "" when this run can train on a GPU here, else why not, joined with "; ": the shared layout
// and recomputation rules these options break and the CUDA backend's limits
// (device/capabilities.h capability_errors), then a missing device.
std::string gpu_unavailable(const TrainOptions& options, int world_size);
// One rank's training on its GPU (device = local rank % devices). Supported: world =
// TP x DP x PP: tensor, data and pipeline parallelism (1F1B, interleaved, uneven stages) over
// NCCL (builds with MPI and NCCL), the distributed optimizer, hidden and attention dropout,
// fp32 / --bf16 / --fp16 (16-bit compute, fp32 master weights and gradients; --fp16 with the
// loss scaler), sequence parallelism, selective and full recomputation, checkpoints in the CPU
// engine's format (gpu_checkpoint.h). Anything else is refused with a message naming the flag.
Result<TrainSummary> train_on_gpu(const TrainOptions& options, const ModelConfig& model,
                                  Comm& world, MetricsSink& sink);
// set_gpu_trainer() with the two functions above.
void register_gpu_trainer();

}  // namespace lattice::gpu
