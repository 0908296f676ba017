// SystemSampler (core/system_sampler.h) and the wire form of SystemMetrics.
#include "core/system_sampler.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace lattice {

namespace {

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

int allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return CPU_COUNT(&set);
}

}  // namespace

double resident_bytes() {
  // statm: size resident shared text lib data dt, in pages.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int read = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (read != 2) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

double peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

SystemSampler::SystemSampler()
    : wall_(std::chrono::steady_clock::now()), cpu_seconds_(process_cpu_seconds()) {}

SystemMetrics SystemSampler::sample() {
  SystemMetrics m;
  const auto now = std::chrono::steady_clock::now();
  const double cpu = process_cpu_seconds();
  const double wall = std::chrono::duration<double>(now - wall_).count();
  if (wall > 0) m.cpu_percent = 100.0 * (cpu - cpu_seconds_) / wall;
  wall_ = now;
  cpu_seconds_ = cpu;
  m.cpu_cores = allowed_cores();
  m.rss_bytes = resident_bytes();
  m.peak_rss_bytes = peak_resident_bytes();
  if (gpu_) m.has_gpu = gpu_(m);
  return m;
}

void pack_system_metrics(const SystemMetrics& m, double* out) {
  const double fields[kSystemMetricsFields] = {
      m.cpu_percent,         static_cast<double>(m.cpu_cores),
      m.rss_bytes,           m.peak_rss_bytes,
      m.has_gpu ? 1.0 : 0.0, m.gpu_utilization,
      m.gpu_memory_used,     m.gpu_power_watts,
      m.gpu_temperature_c};
  for (size_t i = 0; i < kSystemMetricsFields; i++) out[i] = fields[i];
}

SystemMetrics unpack_system_metrics(const double* in) {
  SystemMetrics m;
  m.cpu_percent = in[0];
  m.cpu_cores = static_cast<int>(in[1]);
  m.rss_bytes = in[2];
  m.peak_rss_bytes = in[3];
  m.has_gpu = in[4] != 0;
  m.gpu_utilization = in[5];
  m.gpu_memory_used = in[6];
  m.gpu_power_watts = in[7];
  m.gpu_temperature_c = in[8];
  return m;
}

}  // namespace lattice
