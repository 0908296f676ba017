// The devices a run trains on (docs/one-engine.md step 12). The CPU device is in every build;
// another backend (CUDA, in lattice_engine_gpu) is linked only into lattice-gpu, which registers
// it at start-up (the CPU `lattice` execs lattice-gpu for --device cuda|auto runs:
// docs/gpu.md#how-lattice-train-reaches-the-gpu). train() sends a --device cuda run to the
// registered backend, and a --device auto run when unavailable() is "" and the options pass its
// capability checks; everything else trains on the CPU. Tests register a CPU device with host
// addressing off to run the staging paths.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/system_sampler.h"
#include "device/capabilities.h"
#include "device/device.h"

namespace lattice {

struct DeviceBackend {
  Capabilities (*capabilities)() = nullptr;
  // "" when this process sees a device of the backend, else why not ("no CUDA device visible
  // to this process").
  std::string (*unavailable)() = nullptr;
  // This rank's device (CUDA: local rank % devices, made current). Errors: the backend's.
  Result<std::unique_ptr<Device>> (*make)() = nullptr;
  // Per-device utilisation, memory, power and temperature for the rank reports (NVML); null
  // where the backend has none. An empty probe sets `why`.
  SystemSampler::GpuProbe (*probe)(std::string* why) = nullptr;
};

// Why `o` does not train on `world_size` ranks of a device with capabilities `c`, one sentence
// each: the layout and recomputation rules every device shares (layout_errors, what the trainer
// does not run yet (trainer_layout_refusals: CP, expert TP), ParallelOptions::recompute_errors), then
// the backend's limits (capability_errors).
std::vector<std::string> refusals(const TrainOptions& o, int world_size, const Capabilities& c);
// "" when a --device auto run of `o` trains on `backend` here, else why not: the refusals
// joined with "; ", then a missing device.
std::string unavailable(const DeviceBackend& backend, const TrainOptions& o, int world_size);

// The pointer must outlive every train(); null unregisters.
void register_device_backend(const DeviceBackend* backend);
const DeviceBackend* device_backend();  // null in the CPU-only `lattice`

// The CUDA backend (device/cuda_backend.cpp, lattice_engine_gpu only).
void register_cuda_backend();

}  // namespace lattice
