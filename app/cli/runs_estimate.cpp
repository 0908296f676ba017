// `lattice runs show`'s two comparisons with the planner (lattice/run_estimate.h): each rank's
// planned memory per category against its measured peak, and each pipeline stage's measured
// wait against the analytic bubble (p - 1) / (v m). docs/studio.md explains both.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lattice/rank_health.h"
#include "lattice/run_estimate.h"
#include "runs_subcommands.h"

namespace lattice::cli::runs {

namespace {

std::string percent(double share) {
  if (std::isinf(share)) return "new";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f %%", share * 100);
  return buf;
}

void print_memory(storage::RunStore& store, const storage::RunInfo& run) {
  Result<std::vector<storage::StepMemory>> peaks = store.memory_peaks(run.id);
  if (!peaks || peaks->empty()) {
    std::printf("  memory against the estimate: no memory samples recorded\n");
    return;
  }
  Result<RecordedRunPlan> plan = plan_recorded_run(run.config_json, run.world_size);
  if (!plan) {
    std::printf("  memory against the estimate: no estimate, %s\n",
                plan.status().message().c_str());
    return;
  }
  std::vector<MeasuredMemory> measured;
  int64_t newest = 0;
  for (const storage::StepMemory& m : *peaks) {
    measured.push_back(
        {m.sample.rank,
         m.step,
         {m.sample.weights, m.sample.grads, m.sample.optimizer_state, m.sample.activations,
          m.sample.workspace}});
    newest = std::max(newest, m.step);
  }
  const std::vector<RankMemoryCheck> checks = check_memory(*plan, measured);
  std::printf(
      "  memory against the estimate (`lattice plan`; measured: the peak of each category "
      "over the samples up to step %lld):\n",
      static_cast<long long>(newest));
  std::printf("    %4s %3s  %-21s %12s %14s %8s\n", "rank", "pp", "category", "planned",
              "measured peak", "gap");
  for (const RankMemoryCheck& c : checks)
    for (int k = 0; k < kPlannedCategories; k++) {
      const CategoryCheck& g = c.categories[k];
      std::printf("    %4d %3d  %-21s %12s %14s %8s%s\n", c.rank, c.pp, planned_category_name(k),
                  binary_bytes_text(g.planned).c_str(), binary_bytes_text(g.measured).c_str(),
                  percent(g.relative_gap()).c_str(), g.worth_saying() ? "  <" : "");
    }
  const std::vector<std::string> gaps = memory_gap_sentences(checks);
  if (gaps.empty()) std::printf("    no category off the estimate by both 10 %% and 4 MiB\n");
  for (const std::string& g : gaps) std::printf("    %s\n", g.c_str());
}

void print_bubble(storage::RunStore& store, const storage::RunInfo& run) {
  if (run.layout.pp <= 1) return;
  Result<std::vector<std::int64_t>> steps = store.timeline_steps(run.id);
  if (!steps || steps->empty()) {
    std::printf("  pipeline bubble: no timeline recorded\n");
    return;
  }
  std::vector<PipelineWait> measured;
  for (std::int64_t step : *steps) {
    Result<std::vector<storage::TimelineEvent>> events = store.timeline(run.id, step);
    if (!events) continue;
    std::vector<TimedBox> boxes;
    for (const storage::TimelineEvent& e : *events)
      boxes.push_back({e.rank, e.stage, e.microbatch, e.kind, e.start_s, e.end_s});
    PipelineWait w =
        measure_pipeline_wait(run.layout.tp, run.layout.pp, run.layout.dp, step, boxes);
    if (!w.stages.empty()) measured.push_back(std::move(w));
  }
  if (measured.empty()) {
    std::printf("  pipeline bubble: the timeline has no iteration with every stage's boxes\n");
    return;
  }
  // The first recorded iteration (iteration 1) also pays for first-touch allocations: the
  // median and range leave it out when later ones exist.
  const size_t from = measured.size() > 1 ? 1 : 0;
  const PipelineWait& last = measured.back();
  std::printf(
      "  pipeline bubble (wait / compute per iteration, docs/studio.md \"The bubble, "
      "measured\"): analytic (p-1)/(v m) = %d/(%d x %lld) = %.1f %%\n",
      last.pp - 1, last.vpp, static_cast<long long>(last.micro_batches), last.analytic * 100);
  std::printf("    %3s %4s %10s %8s %8s %8s   (%zu iterations from step %lld)\n", "pp", "rank",
              "newest", "median", "min", "max", measured.size() - from,
              static_cast<long long>(measured[from].step));
  for (size_t p = 0; p < last.stages.size(); p++) {
    std::vector<double> shares;
    for (size_t i = from; i < measured.size(); i++)
      if (p < measured[i].stages.size()) shares.push_back(measured[i].stages[p].share());
    std::sort(shares.begin(), shares.end());
    const double median = shares.size() % 2
                              ? shares[shares.size() / 2]
                              : (shares[shares.size() / 2 - 1] + shares[shares.size() / 2]) / 2;
    std::printf("    %3d %4d %9.1f%% %7.1f%% %7.1f%% %7.1f%%\n", last.stages[p].pp,
                last.stages[p].rank, last.stages[p].share() * 100, median * 100,
                shares.front() * 100, shares.back() * 100);
  }
}

// Note [slow ranks] (lattice/rank_health.h): the latest logged phase times of every rank, and
// the ranks a failed run's error names as absent.
void print_rank_health(const storage::RunInfo& run) {
  const std::vector<RankPhaseTimes> ranks = rank_phase_times(run.latest);
  std::vector<RankFinding> found;
  if (ranks.size() > 1) found = find_slow_ranks(run.layout.tp, run.layout.pp, run.layout.dp, ranks);
  for (RankFinding& f : absent_ranks(run.error)) found.push_back(std::move(f));
  if (ranks.size() <= 1 && found.empty()) return;
  std::printf("  slow or absent ranks (the latest logged phase times, docs/studio.md \"Slow and "
              "stuck ranks\"):\n");
  if (found.empty()) std::printf("    none: every rank within %.1fx of its stage's peers\n", kSlowRatio);
  for (const RankFinding& f : found) std::printf("    %s\n", f.sentence.c_str());
}

}  // namespace

void print_estimates(storage::RunStore& store, const storage::RunInfo& run) {
  print_memory(store, run);
  print_bubble(store, run);
  print_rank_health(run);
}

}  // namespace lattice::cli::runs
