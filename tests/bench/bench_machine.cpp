// this_machine() from /proc/cpuinfo's model name, cpuid (x86-64) and the process's CPU
// affinity (bench_machine.h).
#include "bench_machine.h"

#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace lattice::bench {

namespace {

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(' ') - first + 1);
}

// The value of /proc/cpuinfo's first line whose key (before the tabs and the colon) is `key`;
// empty where there is none.
std::string cpuinfo_value(const std::string& key) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);  // all of it when it is only blanks
    if (name == key) return trimmed(line.substr(colon + 1));
  }
  return {};
}

// The kernel's name for the CPU, as lscpu and the docs give it; cpuid's brand string where
// /proc/cpuinfo has none.
std::string cpu_model() {
  if (std::string model = cpuinfo_value("model name"); !model.empty()) return model;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned leaf = 0; leaf < 3; leaf++) {
      __get_cpuid(0x80000002u + leaf, &a, &b, &c, &d);
      const unsigned regs[4] = {a, b, c, d};
      std::memcpy(brand + 16 * leaf, regs, 16);
    }
    if (std::string model = trimmed(brand); !model.empty()) return model;
  }
#endif
  return "unknown CPU";
}

// __builtin_cpu_supports also asks the OS (XCR0) whether the wide registers are saved, as the
// kernel does before it lists a flag in /proc/cpuinfo.
std::string widest_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "AVX-512";
  if (__builtin_cpu_supports("avx2")) return "AVX2";
  if (__builtin_cpu_supports("avx")) return "AVX";
  if (__builtin_cpu_supports("sse4.2")) return "SSE4.2";
  return "SSE2";
#elif defined(__aarch64__)
  return "NEON";
#else
  return "unknown ISA";
#endif
}

std::string cpu_family() {
  const std::string family = cpuinfo_value("cpu family"), model = cpuinfo_value("model");
  if (family.empty() || model.empty()) return {};
  return "family " + family + " model " + model;
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

Machine this_machine() {
  return {cpu_model(), cpu_family(), widest_isa(), usable_cores()};
}

std::string machine_line() {
  const Machine m = this_machine();
  const std::string family = m.family.empty() ? "" : " (" + m.family + ")";
  return "machine: " + m.cpu + family + ", " + m.isa + ", " + std::to_string(m.cores) +
         (m.cores == 1 ? " core" : " cores");
}

}  // namespace lattice::bench
