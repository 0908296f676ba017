// The GPU half of the system metrics (lattice/system_metrics.h): NVML, loaded at run time with
// dlopen("libnvidia-ml.so.1") so that no build links it and a machine without the driver's
// library still trains (the GPU metrics are then not recorded). GPU build only.
#pragma once

#include <string>

#include "core/system_sampler.h"

namespace lattice {

// A probe reading the current CUDA device (found in NVML by its PCI bus id, so that
// CUDA_VISIBLE_DEVICES and NVML's own ordering agree), or an empty one with `why` set to a
// sentence saying what failed (no library, nvmlInit_v2's code, no such device).
SystemSampler::GpuProbe nvml_probe(std::string* why);

}  // namespace lattice
