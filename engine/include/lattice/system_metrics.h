// One rank's system metrics at a log interval (issue 26, item 8; docs/studio.md "System
// metrics"): the process's CPU use and resident memory always, its GPU's utilisation, memory,
// power and temperature where NVML answers (the GPU build). Gathered to rank 0 in the per-rank
// report and recorded as "rank R <key>" metric keys. Not a profiler: one reading per interval.
#pragma once

#include <cstddef>

namespace lattice {

struct SystemMetrics {
  // Process CPU time (user + system, every thread) over wall time since the previous reading,
  // in % of one core: 200 is two cores busy. -1 before a first interval exists.
  double cpu_percent = -1;
  int cpu_cores = 0;           // the cores this process may run on (its affinity mask)
  double rss_bytes = 0;        // resident set now (/proc/self/statm)
  double peak_rss_bytes = 0;   // the process's high-water resident set (getrusage ru_maxrss)
  bool has_gpu = false;        // the fields below were read from NVML
  double gpu_utilization = 0;  // % of NVML's last sample period in which a kernel ran
  double gpu_memory_used = 0;  // bytes in use on the device, by every process
  double gpu_power_watts = 0;
  double gpu_temperature_c = 0;
};

// The report's wire form: a fixed count of doubles (the ranks' records are gathered as one
// array of doubles, every rank sending the same count).
inline constexpr size_t kSystemMetricsFields = 9;
void pack_system_metrics(const SystemMetrics& m, double* out);  // out[kSystemMetricsFields]
SystemMetrics unpack_system_metrics(const double* in);

// The run store's key suffixes (after "rank R "), one per recorded field.
inline constexpr const char* kCpuPercentKey = "cpu percent";
inline constexpr const char* kCpuCoresKey = "cpu cores";
inline constexpr const char* kRssKey = "rss";
inline constexpr const char* kPeakRssKey = "peak rss";
inline constexpr const char* kGpuUtilizationKey = "gpu utilization";
inline constexpr const char* kGpuMemoryKey = "gpu memory used";
inline constexpr const char* kGpuPowerKey = "gpu power";
inline constexpr const char* kGpuTemperatureKey = "gpu temperature";

}  // namespace lattice
