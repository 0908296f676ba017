// The machine a benchmark runs on, printed at the head of everything a benchmark prints, so
// that every figure names its CPU: figures differ several-fold between machine kinds (the same
// config trains at 8,384 tokens/s on an AVX-512 EPYC and 2,414 on an AVX2 one,
// docs/benchmarks.md). The SIMD set is what the CPU and the OS run (cpuid), which the test
// compares with /proc/cpuinfo's flags; the model is the name the kernel gives (/proc/cpuinfo,
// as lscpu shows it: a VM's cpuid brand may differ, e.g. "Oxide Virtual Turin-like Processor"
// for the development VM's "AMD EPYC"). Not a description of the GPU (the GPU benchmarks
// print theirs).
#pragma once

#include <string>

namespace lattice::bench {

struct Machine {
  std::string cpu;  // the model: /proc/cpuinfo's "model name", else cpuid's brand string
  // "family 25 model 17" from /proc/cpuinfo (x86), empty where it has none: a VM's model name
  // may be only "AMD EPYC" for Zen 4 and Zen 5 alike, whose figures differ two-fold.
  std::string family;
  std::string isa;  // the widest SIMD set the CPU and the OS run: AVX-512, AVX2, AVX, SSE4.2, ...
  int cores = 0;    // logical CPUs this process may run on
};

Machine this_machine();

// "machine: AMD EPYC (family 25 model 17), AVX-512, 2 cores": the first line of every
// benchmark's output.
std::string machine_line();

}  // namespace lattice::bench
