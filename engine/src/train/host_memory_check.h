// The pre-flight memory check of a run on a device whose memory is host memory (the CPU;
// docs/design-notes.md#out-of-memory): the planner's estimate of what each rank needs
// (lattice/plan.h), summed over the ranks that share a machine,
// against what that machine can give now. A run that cannot fit is refused before anything is
// allocated, instead of swapping or meeting the kernel's OOM killer halfway through. Non-goals:
// the estimate's own non-goals (the libraries' and the allocator's memory), and GPU memory.
#pragma once

#include <string>

#include "lattice/comm.h"
#include "lattice/layout.h"
#include "lattice/status.h"
#include "lattice/train_options.h"

namespace lattice {

struct HostMemory {
  bool known = false;  // false: neither source could be read (then nothing is refused)
  double bytes = 0;
  std::string source;  // "MemAvailable + SwapFree in /proc/meminfo" or the cgroup file
};
// What this machine can give a new allocation now: MemAvailable + SwapFree from
// /proc/meminfo, or the room left under this process's cgroup v2 memory.max when less.
HostMemory available_host_memory();

// This machine's name as a number a double holds exactly (FNV-1a of the host name, 52 bits):
// ranks that report the same one share a machine, and a steady clock
// (docs/design-notes.md#pipeline-timeline).
double host_id();

// The CPU kernels' threads one rank of the job on `world` takes: --threads, else this process's
// cores shared among the ranks on its node.
int threads_per_rank(const TrainOptions& options, const Comm& world);

// Collective over `world` (every rank calls it). Requires a valid layout for `options` and a
// known vocabulary. Refuses, in one sentence naming both figures, when the ranks on some
// machine need more than it has available; ok otherwise, or when the memory is unknown.
Status check_host_memory(const TrainOptions& options, const ParallelLayout& layout, Comm& world);

// The sentence for `ranks` ranks on one machine needing `need` bytes in all (the largest of them
// `largest`: weights, grads, optimizer state, activations, workspace and communication
// buffers) against `available` from `source`;
// one_machine: the job has no other machine ("this machine", else "that machine").
std::string host_memory_refusal(int ranks, double need, const double largest[5], double available,
                                const std::string& source, bool one_machine);

}  // namespace lattice
