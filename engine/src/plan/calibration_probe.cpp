// A probe run's phase times read from the run store (lattice/calibration.h read_probe_run): the
// per-rank series the trainer's RunRecorder writes ("rank 3 forward time", ...) and the step
// time, after the first iteration. Non-goals: fitting (calibration.cpp).
#include <limits>

#include "lattice/calibration.h"
#include "lattice/storage/run_store.h"

namespace lattice {

namespace {

constexpr int64_t kLastStep = std::numeric_limits<int64_t>::max();

// The mean per iteration over the reports after iteration 1. Each report is the mean over the
// iterations since the previous one, so it weighs (step - previous step). -1 when no report
// after iteration 1 has the key.
double mean_after_first(storage::RunStore& store, int64_t run_id, const std::string& key) {
  Result<std::vector<storage::StepValue>> points = store.series(run_id, key, 0, kLastStep);
  if (!points) return -1;
  double sum = 0, weight = 0;
  int64_t previous = 0;
  for (const storage::StepValue& p : *points) {
    if (p.step > 1) {
      sum += p.value * static_cast<double>(p.step - previous);
      weight += static_cast<double>(p.step - previous);
    }
    previous = p.step;
  }
  return weight > 0 ? sum / weight : -1;
}

}  // namespace

Result<ProbeRun> read_probe_run(const std::string& db_path, const std::string& run) {
  storage::OpenOptions options;
  options.read_only = true;
  Result<std::unique_ptr<storage::RunStore>> store = storage::RunStore::open(db_path, options);
  if (!store) return store.status();
  Result<storage::RunInfo> info = (*store)->find_run(run);
  if (!info) return info.status();
  ProbeRun probe;
  probe.name = info->name;
  probe.config_json = info->config_json;
  probe.world_size = info->world_size;
  Result<std::vector<storage::StepValue>> steps =
      (*store)->series(info->id, "step time", 2, kLastStep);
  if (!steps || steps->empty())
    return Status::invalid_argument("run " + info->name +
                                    " recorded no step time after its first iteration: a probe "
                                    "needs at least 2 iterations");
  for (const storage::StepValue& s : *steps) probe.step_time_s += s.value;
  probe.timed_steps = static_cast<int64_t>(steps->size());
  probe.step_time_s /= static_cast<double>(steps->size());
  auto latest = [&](const char* key) {
    auto it = info->latest.find(key);
    return it == info->latest.end() ? 0.0 : it->second;
  };
  if (latest("MFU") > 0)
    probe.peak_flops_per_rank = latest("TFLOP/s per device") * 1e12 / latest("MFU");

  for (int rank = 0; rank < info->world_size; rank++) {
    const std::string p = "rank " + std::to_string(rank) + " ";
    ProbePhases r;
    r.rank = rank;
    r.forward = mean_after_first(**store, info->id, p + "forward time");
    r.backward = mean_after_first(**store, info->id, p + "backward time");
    if (r.forward < 0 || r.backward < 0)
      return Status::invalid_argument(
          "run " + info->name + " recorded no phase times for rank " + std::to_string(rank) +
          " after its first iteration: probe with at least 2 iterations and --log-interval 1");
    r.pipeline_wait = std::max(mean_after_first(**store, info->id, p + "pipeline wait time"), 0.0);
    r.dp_comm = std::max(mean_after_first(**store, info->id, p + "data-parallel comm time"), 0.0);
    r.embedding_comm =
        std::max(mean_after_first(**store, info->id, p + "embedding comm time"), 0.0);
    r.optimizer = std::max(mean_after_first(**store, info->id, p + "optimizer time"), 0.0);
    r.tp_comm = mean_after_first(**store, info->id, p + "tensor-parallel comm time");
    probe.ranks.push_back(r);
  }
  return probe;
}

}  // namespace lattice
