// `lattice runs show`'s system metrics (docs/studio.md "System metrics"): per rank, the mean
// CPU use over the logged intervals, the last and peak resident set, and the GPU's mean
// utilisation and power, peak memory and temperature where NVML recorded them.
#include <algorithm>
#include <cstdio>
#include <limits>

#include "lattice/system_metrics.h"
#include "runs_subcommands.h"

namespace lattice::cli::runs {

namespace {

struct Summary {
  bool found = false;
  double mean = 0, last = 0, peak = 0;
};

Summary summarize(storage::RunStore& store, int64_t run, int rank, const char* key) {
  Summary s;
  Result<std::vector<storage::StepValue>> points = store.series(
      run, "rank " + std::to_string(rank) + " " + key, 0, std::numeric_limits<int64_t>::max());
  if (!points || points->empty()) return s;
  s.found = true;
  double sum = 0;
  s.peak = points->front().value;
  for (const storage::StepValue& p : *points) {
    sum += p.value;
    s.peak = std::max(s.peak, p.value);
  }
  s.mean = sum / static_cast<double>(points->size());
  s.last = points->back().value;
  return s;
}

}  // namespace

void print_system(storage::RunStore& store, const storage::RunInfo& run) {
  constexpr double kMiB = 1024.0 * 1024.0;
  bool header = false;
  for (int rank = 0; rank < run.world_size; rank++) {
    const Summary cpu = summarize(store, run.id, rank, kCpuPercentKey);
    const Summary cores = summarize(store, run.id, rank, kCpuCoresKey);
    const Summary rss = summarize(store, run.id, rank, kRssKey);
    const Summary peak = summarize(store, run.id, rank, kPeakRssKey);
    if (!cpu.found && !rss.found) continue;
    if (!header) {
      std::printf(
          "  system (per rank, docs/studio.md \"System metrics\"):\n"
          "    rank  cpu mean (one core = 100 %%)    rss last   rss peak\n");
      header = true;
    }
    std::printf("    %4d %7.1f %% (%5.1f %% of %2.0f cores) %6.1f MiB %6.1f MiB\n", rank, cpu.mean,
                cores.last > 0 ? cpu.mean / cores.last : 0.0, cores.last, rss.last / kMiB,
                std::max(rss.peak, peak.peak) / kMiB);
    const Summary util = summarize(store, run.id, rank, kGpuUtilizationKey);
    if (!util.found) continue;
    const Summary memory = summarize(store, run.id, rank, kGpuMemoryKey);
    const Summary power = summarize(store, run.id, rank, kGpuPowerKey);
    const Summary temperature = summarize(store, run.id, rank, kGpuTemperatureKey);
    std::printf(
        "         gpu: utilization mean %.0f %%, memory peak %.2f GiB, power mean %.0f W, "
        "temperature peak %.0f C\n",
        util.mean, memory.peak / (1024 * kMiB), power.mean, temperature.peak);
  }
  if (!header) std::printf("  system: no CPU or memory readings recorded\n");
}

}  // namespace lattice::cli::runs
