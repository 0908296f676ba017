// SystemSampler: one rank's SystemMetrics (lattice/system_metrics.h) read from the kernel
// (getrusage, /proc/self/statm, sched_getaffinity) and, where a GPU probe is set, from NVML.
// Linux only. Not thread-safe: the training thread samples at each log interval.
#pragma once

#include <chrono>
#include <functional>

#include "lattice/system_metrics.h"

namespace lattice {

class SystemSampler {
 public:
  // Fills the GPU fields of a reading; false when the device could not be read this time.
  using GpuProbe = std::function<bool(SystemMetrics&)>;

  SystemSampler();  // the first interval starts here
  void set_gpu_probe(GpuProbe probe) { gpu_ = std::move(probe); }
  // CPU use since the previous call (or construction), memory now; starts the next interval.
  SystemMetrics sample();

 private:
  std::chrono::steady_clock::time_point wall_;
  double cpu_seconds_ = 0;  // process user + system time at wall_
  GpuProbe gpu_;
};

// The resident set now and its high-water mark, in bytes.
double resident_bytes();
double peak_resident_bytes();

}  // namespace lattice
