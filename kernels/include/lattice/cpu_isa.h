// Which instruction set the CPU kernels run: every element-wise op of kernels.h is compiled
// once per set below and chosen at run time (Note [CPU dispatch], kernels/cpu/README.md), so one
// binary built for plain x86-64 (-DLATTICE_NATIVE=OFF, the .deb) runs AVX2 or AVX-512 code
// where the CPU has it. The GEMMs are OpenBLAS's, which chooses its own kernel.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace lattice::kernels {

enum class CpuIsa {
  generic,  // x86-64 baseline: SSE2, 4 floats per vector
  avx2,     // AVX2 + FMA: 8 floats per vector
  avx512,   // AVX-512 F, BW, DQ, VL (+ AVX2, FMA): 16 floats per vector
};
inline constexpr CpuIsa kAllCpuIsas[] = {CpuIsa::generic, CpuIsa::avx2, CpuIsa::avx512};

// "generic", "avx2", "avx512": what LATTICE_CPU_ISA and --cpu-isa take.
const char* cpu_isa_name(CpuIsa isa);
// "x86-64", "AVX2", "AVX-512": how a run's description names it.
const char* cpu_isa_label(CpuIsa isa);
// The ISA named `name` (as cpu_isa_name spells it), or nothing.
std::optional<CpuIsa> parse_cpu_isa(std::string_view name);

// Whether this CPU and its operating system can run the ISA's code (cpuid, and XGETBV for the
// register state the OS saves). generic always can.
bool cpu_isa_supported(CpuIsa isa);
// The widest supported ISA.
CpuIsa best_cpu_isa();

// The ISA the kernels run. Until set_cpu_isa or select_cpu_isa is called: LATTICE_CPU_ISA
// when it names a supported ISA, else the best (an unusable LATTICE_CPU_ISA is reported once on
// stderr).
CpuIsa cpu_isa();
// Makes the kernels run `isa`; false (and nothing changes) when the CPU lacks it. Not to be
// called while kernels run on other threads.
bool set_cpu_isa(CpuIsa isa);
// Applies a request as --cpu-isa takes it: "auto" (or empty) means LATTICE_CPU_ISA when it is
// set, else the best ISA; otherwise an ISA name. Returns an empty string on success, else a
// sentence naming `flag` (or LATTICE_CPU_ISA), the value and what this CPU supports.
std::string select_cpu_isa(const std::string& request, const std::string& flag = "--cpu-isa");

// The vector width, in bytes, that the running copy of the kernels was compiled for: 16
// (generic), 32 (avx2), 64 (avx512). Tests use it to see which copy the dispatcher calls.
int cpu_isa_vector_bytes();

}  // namespace lattice::kernels
