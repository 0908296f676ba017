// The per-rank report of a training run, the same for every device (ARCHITECTURE.md "Metrics,
// memory, FLOPs"): each rank's phase times per iteration since the previous report, its
// memory, the bytes of each group's traffic, its system metrics and, on reported iterations,
// its pipeline timeline, packed into one fixed-size record of doubles and gathered to rank 0,
// where they are unpacked into RankReports in rank order (train/trainer.cpp gather_reports).
#pragma once

#include <cstddef>
#include <vector>

#include "core/profiler.h"
#include "lattice/comm.h"
#include "lattice/layout.h"
#include "lattice/train.h"
#include "pipeline/timeline.h"

namespace lattice {

// What one rank measured. `timeline` (the boxes of the iteration just run, or null) must be
// null on every rank or on none; `timeline_capacity` is then the same on every rank
// (IterationTimeline::capacity of the layout), so every record has the same size.
struct RankSample {
  MemoryReport memory;
  PhaseTimes times;
  double tp_bytes = 0, dp_bytes = 0, pp_bytes = 0, embedding_bytes = 0;
  SystemMetrics system;
  const IterationTimeline* timeline = nullptr;
  size_t timeline_capacity = 0;
};

// Every rank's sample at rank 0, with its place in `layout` (empty on the other ranks). Ranks
// of one machine share its steady clock, so their boxes are put on one axis from the earliest
// iteration start among them; each machine's lanes start at its own earliest start. Collective
// over world; a failed gather aborts the job (a rank cannot go on without the others).
std::vector<RankReport> gather_rank_reports(Comm& world, const ParallelLayout& layout,
                                            const RankSample& mine);

// Phase times per iteration between two totals (`now` - `before`) / iterations.
PhaseTimes per_iteration(const PhaseTimes& now, const PhaseTimes& before, int iterations);

// The bytes handed to a group's collectives and sends so far (0 without a communicator).
double traffic_bytes(const Comm* comm);

// Each op's totals over the chunks' profilers, in Op order, then the optimizer phase's
// ("optimizer (norm, clip, adamw)", no calls): what TrainSummary::timed_ops lists.
std::vector<OpTime> op_totals(const std::vector<const Profiler*>& chunks, double optimizer);

// Adds (now - before) of each op to `into` (same order): one timed iteration's ops.
void add_op_times(std::vector<OpTime>& into, const std::vector<OpTime>& now,
                  const std::vector<OpTime>& before);

}  // namespace lattice
