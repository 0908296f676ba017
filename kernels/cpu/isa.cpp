// Choosing the instruction set the dispatched kernels run (lattice/cpu_isa.h): cpuid through
// the compiler's __builtin_cpu_supports (which also checks, with XGETBV, that the operating
// system saves the vector registers), LATTICE_CPU_ISA, and set_cpu_isa.
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "lattice/cpu_isa.h"

namespace lattice::kernels {

namespace {

constexpr const char* kEnvVar = "LATTICE_CPU_ISA";

bool detect(CpuIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::generic:
      return true;
    case CpuIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::avx512:
      return detect(CpuIsa::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
}

std::string supported_list() {
  std::string list;
  for (CpuIsa isa : kAllCpuIsas) {
    if (!cpu_isa_supported(isa)) continue;
    if (!list.empty()) list += ", ";
    list += cpu_isa_name(isa);
  }
  return list;
}

// Why `value` (from `source`, a flag or the variable) cannot be used, or "".
std::string check_request(const std::string& source, const std::string& value,
                          std::optional<CpuIsa>& isa) {
  isa = parse_cpu_isa(value);
  const std::string named = source == kEnvVar ? source + "=" + value : source + " " + value;
  if (!isa) return named + " is not an instruction set: use auto, generic, avx2 or avx512";
  if (!cpu_isa_supported(*isa))
    return named + ": this CPU has no " + cpu_isa_label(*isa) + " (it runs " + supported_list() +
           ")";
  return "";
}

// The ISA used until someone sets one: LATTICE_CPU_ISA when usable, else the best.
CpuIsa initial_isa() {
  static const CpuIsa chosen = [] {
    const char* env = std::getenv(kEnvVar);
    if (!env || !*env || std::string_view(env) == "auto") return best_cpu_isa();
    std::optional<CpuIsa> isa;
    const std::string error = check_request(kEnvVar, env, isa);
    if (error.empty()) return *isa;
    std::fprintf(stderr, "lattice: %s; running %s\n", error.c_str(), cpu_isa_name(best_cpu_isa()));
    return best_cpu_isa();
  }();
  return chosen;
}

std::atomic<int> g_selected{-1};  // a CpuIsa once set, else -1

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::generic:
      return "generic";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
  }
  return "?";
}

const char* cpu_isa_label(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::generic:
      return "x86-64";
    case CpuIsa::avx2:
      return "AVX2";
    case CpuIsa::avx512:
      return "AVX-512";
  }
  return "?";
}

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) {
  for (CpuIsa isa : kAllCpuIsas)
    if (name == cpu_isa_name(isa)) return isa;
  return std::nullopt;
}

bool cpu_isa_supported(CpuIsa isa) {
  static const bool supported[] = {detect(CpuIsa::generic), detect(CpuIsa::avx2),
                                   detect(CpuIsa::avx512)};
  return supported[static_cast<int>(isa)];
}

CpuIsa best_cpu_isa() {
  CpuIsa best = CpuIsa::generic;
  for (CpuIsa isa : kAllCpuIsas)
    if (cpu_isa_supported(isa)) best = isa;
  return best;
}

CpuIsa cpu_isa() {
  const int selected = g_selected.load(std::memory_order_relaxed);
  return selected >= 0 ? static_cast<CpuIsa>(selected) : initial_isa();
}

bool set_cpu_isa(CpuIsa isa) {
  if (!cpu_isa_supported(isa)) return false;
  g_selected.store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

std::string select_cpu_isa(const std::string& request, const std::string& flag) {
  std::string source = flag, value = request;
  if (value.empty() || value == "auto") {
    const char* env = std::getenv(kEnvVar);
    if (!env || !*env || std::string_view(env) == "auto") {
      set_cpu_isa(best_cpu_isa());
      return "";
    }
    source = kEnvVar, value = env;
  }
  std::optional<CpuIsa> isa;
  std::string error = check_request(source, value, isa);
  if (error.empty()) set_cpu_isa(*isa);
  return error;
}

}  // namespace lattice::kernels
