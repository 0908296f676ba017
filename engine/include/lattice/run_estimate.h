// The planner's numbers beside what a recorded run measured (issue 26, items 1 and 4): each
// rank's memory by category (estimate_memory for the run's configuration and layout, the same
// function `lattice plan` and the Studio's Plan view call) against its memory samples, and each
// pipeline stage's wait in a recorded iteration against the analytic bubble (p - 1) / (v m).
// Shared by `lattice runs show` and the Studio's Dashboard; plain structs, no storage types.
// Non-goals: reading the run store (callers pass what they read), workspace (not estimated).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/status.h"
#include "lattice/train_options.h"

namespace lattice {

// ---- Memory: planned against measured ------------------------------------------------

// The planner's estimate for a recorded run.
struct RecordedRunPlan {
  TrainOptions options;
  ParallelLayout layout;
  MemoryEstimate memory;
};
// Reads the run's configuration (the run record's config JSON, `lattice train`'s flags as
// train_options_json wrote them) as `lattice train --config` would, resolves a file tokenizer's
// vocabulary from its files, and estimates memory for `world_size` ranks. An error says what the
// record lacks instead of guessing: no configuration, a configuration without a flag that
// shapes memory (each named), tokenizer or --load-hf files that cannot be read here, a layout
// the configuration no longer gives for the recorded world size.
Result<RecordedRunPlan> plan_recorded_run(const std::string& config_json, int world_size);

// The categories both the planner and the engine count, in the run store's order (its
// workspace is the engine's workspace and communication buffers together).
inline constexpr int kPlannedCategories = 5;
// "weights", "grads", "optimizer state", "activations", "workspace and buffers"
const char* planned_category_name(int category);

// One rank's memory sample (the run store's memory_samples row), bytes per category above.
struct MeasuredMemory {
  int rank = 0;
  int64_t step = 0;
  std::array<int64_t, kPlannedCategories> bytes{};
};

struct CategoryCheck {
  double planned = 0, measured = 0;  // bytes
  // (measured - planned) / planned; +inf when nothing was planned but something measured.
  double relative_gap() const;
  // The rule for naming a gap: it is more than kGapShare of the estimate and more than
  // kGapMinBytes. The share is the size of error that moves a layout across the planner's
  // 5 % headroom once two categories err the same way; the bytes keep allocator rounding and
  // page granularity of small models (a few MiB) from being reported as the planner's error.
  bool worth_saying() const;
  static constexpr double kGapShare = 0.10;
  static constexpr double kGapMinBytes = 4.0 * 1024 * 1024;
};

struct RankMemoryCheck {
  int rank = 0, pp = 0;
  int64_t step = 0;  // the measured sample's step
  std::array<CategoryCheck, kPlannedCategories> categories;
};

// One row per measured rank (in the order given): the planned bytes of the rank's pipeline
// stage beside the measured ones. Ranks outside the layout are skipped.
std::vector<RankMemoryCheck> check_memory(const RecordedRunPlan& plan,
                                          const std::vector<MeasuredMemory>& measured);

// The gaps worth saying, one sentence per pipeline stage and category (the rank of the stage
// with the largest gap named): "activations 18 % over the estimate on pp 0 (rank 0: 20.1 MiB
// measured, 17.0 MiB planned)". Empty when every category is within the rule.
std::vector<std::string> memory_gap_sentences(const std::vector<RankMemoryCheck>& checks);

// "17.0 MiB", "1.25 GiB", "512 KiB"
std::string binary_bytes_text(double bytes);

// ---- The bubble: measured wait against (p - 1) / (v m) -------------------------------

// One box of a recorded iteration's pipeline timeline (the run store's timeline events):
// kind "forward", "backward", "pipeline wait", ...; seconds on one axis per machine.
struct TimedBox {
  int rank = 0, stage = 0, micro_batch = -1;
  std::string kind;
  double start = 0, end = 0;
};

// Megatron's bubble fraction (Narayanan et al. 2021): the idle time of a stage over its ideal
// compute time, (p - 1) / (v m) for p stages, v model chunks per stage and m micro-batches per
// data-parallel rank. 0 without a pipeline.
double analytic_bubble(int pp, int vpp, int64_t micro_batches);

// Note [pipeline wait]: what "wait" means in the measured bubble. In one recorded iteration,
// take one pipeline (the ranks with tp 0 and dp 0, the lanes the timeline draws); its span
// runs from the earliest start of any forward, backward or pipeline-wait box of those ranks to
// the latest end of any of their forward or backward boxes. A stage's compute is the summed
// length of its rank's forward and backward boxes; its wait is the span less its compute:
// every moment of the span the stage is not computing (blocked on a receive or a send, idle
// after its last backward while the earlier stages finish theirs, the untimed moments between
// boxes). The measured bubble is wait / compute, the quantity (p - 1) / (v m) stands for: in the
// ideal schedule (equal stages, free transfers) every stage idles (p - 1)(t_f + t_b) / v and
// computes m (t_f + t_b) per iteration.
struct StageWait {
  int pp = 0, rank = 0;
  double compute_s = 0, wait_s = 0;
  double recorded_wait_s = 0;  // the rank's "pipeline wait" boxes alone (part of wait_s)
  double share() const { return compute_s > 0 ? wait_s / compute_s : 0; }
};
struct PipelineWait {
  int64_t step = 0;
  int pp = 1, vpp = 1;
  int64_t micro_batches = 0;  // distinct micro-batches of the first stage's forward boxes
  double span_s = 0;
  double analytic = 0;            // analytic_bubble(pp, vpp, micro_batches)
  std::vector<StageWait> stages;  // one per pipeline stage, in order
};
// The wait of every stage in one recorded iteration, for a layout of tp x pp x dp ranks.
// Without a pipeline (pp 1) or without forward boxes on every stage, `stages` is empty.
PipelineWait measure_pipeline_wait(int tp, int pp, int dp, int64_t step,
                                   const std::vector<TimedBox>& boxes);

}  // namespace lattice
