// The planner's estimate beside a recorded run's measurements: memory per rank and category,
// and the measured pipeline wait against the analytic bubble (lattice/run_estimate.h).
// Non-goals: reading the run store, drawing anything.
#include "lattice/run_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "lattice/tokenizer.h"

namespace lattice {

namespace {

// The flags estimate_memory reads that have no safe default: a record without one of them is
// not a `lattice train` configuration, and a default would be a guess.
constexpr const char* kShapingFlags[] = {"num-layers",
                                         "hidden-size",
                                         "num-attention-heads",
                                         "seq-length",
                                         "micro-batch-size",
                                         "global-batch-size",
                                         "tensor-model-parallel-size",
                                         "pipeline-model-parallel-size",
                                         "tokenizer-type"};

}  // namespace

Result<RecordedRunPlan> plan_recorded_run(const std::string& config_json, int world_size) {
  const nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
  if (!config.is_object() || config.empty())
    return Status::invalid_argument("the run record holds no configuration");
  std::string missing;
  for (const char* flag : kShapingFlags)
    if (!config.contains(flag)) missing += std::string(missing.empty() ? "" : ", ") + "--" + flag;
  if (!missing.empty())
    return Status::invalid_argument("the run's configuration does not record " + missing);
  Result<TrainOptions> parsed = parse_train_options_json(config_json, "the run's configuration");
  if (!parsed) return parsed.status();
  RecordedRunPlan plan;
  plan.options = std::move(*parsed);
  TrainOptions& o = plan.options;
  if (o.model.vocab_size <= 0) {
    Result<std::unique_ptr<Tokenizer>> tokenizer = make_tokenizer(o.tokenizer);
    if (!tokenizer)
      return Status::invalid_argument("the vocabulary is unknown: the run's " + o.tokenizer.type +
                                      " files cannot be read here (" +
                                      tokenizer.status().message() + ")");
    o.model.vocab_size = (*tokenizer)->vocab_size();
  }
  Result<ParallelLayout> layout = make_layout(o, world_size);
  if (!layout)
    return Status::invalid_argument("the run's configuration gives no layout for its " +
                                    std::to_string(world_size) +
                                    " ranks: " + layout.status().message());
  plan.layout = *layout;
  // A run that chose no --threads took its machine's cores shared among its ranks (the
  // trainer's threads_per_rank, taking every rank to be on this machine): the CPU attention's
  // workspace is per thread.
  if (o.threads <= 0) o.threads = shared_cpu_threads(world_size);
  plan.memory = estimate_memory(o, plan.layout);
  return plan;
}

const char* planned_category_name(int category) {
  static const char* const names[kPlannedCategories] = {
      "weights", "grads", "optimizer state", "activations", "workspace and buffers"};
  return category >= 0 && category < kPlannedCategories ? names[category] : "";
}

double CategoryCheck::relative_gap() const {
  if (planned > 0) return (measured - planned) / planned;
  return measured > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

bool CategoryCheck::worth_saying() const {
  return std::abs(measured - planned) > kGapMinBytes && std::abs(relative_gap()) > kGapShare;
}

std::vector<RankMemoryCheck> check_memory(const RecordedRunPlan& plan,
                                          const std::vector<MeasuredMemory>& measured) {
  std::vector<RankMemoryCheck> out;
  for (const MeasuredMemory& m : measured) {
    if (m.rank < 0 || m.rank >= plan.layout.world) continue;
    RankMemoryCheck c;
    c.rank = m.rank;
    c.pp = plan.layout.coord(m.rank).pp;
    c.step = m.step;
    const StageEstimate& s = plan.memory.stages.at(static_cast<size_t>(c.pp));
    const int per_stage = plan.layout.world / plan.layout.pp;
    const size_t comm = s.comm_buffer_bytes_of(static_cast<size_t>(m.rank % per_stage));
    const size_t planned[kPlannedCategories] = {s.weight_bytes, s.grad_bytes, s.optimizer_bytes,
                                                s.activation_bytes, s.all_workspace_bytes() + comm};
    for (int k = 0; k < kPlannedCategories; k++)
      c.categories[k] = {static_cast<double>(planned[k]), static_cast<double>(m.bytes[k])};
    out.push_back(c);
  }
  return out;
}

std::string binary_bytes_text(double bytes) {
  char buf[32];
  const double a = std::abs(bytes);
  if (a >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else if (a >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.0f KiB", bytes / 1024.0);
  return buf;
}

std::vector<std::string> memory_gap_sentences(const std::vector<RankMemoryCheck>& checks) {
  // (pp, category) -> the check with the largest absolute gap among the stage's ranks.
  std::map<std::pair<int, int>, const RankMemoryCheck*> worst;
  for (const RankMemoryCheck& c : checks)
    for (int k = 0; k < kPlannedCategories; k++) {
      if (!c.categories[k].worth_saying()) continue;
      const RankMemoryCheck*& w = worst[{c.pp, k}];
      auto gap = [k](const RankMemoryCheck* r) {
        return std::abs(r->categories[k].measured - r->categories[k].planned);
      };
      if (!w || gap(&c) > gap(w)) w = &c;
    }
  std::vector<std::string> out;
  for (const auto& [where, c] : worst) {
    const CategoryCheck& g = c->categories[where.second];
    const double rel = g.relative_gap();
    char share[48];
    if (std::isinf(rel))
      std::snprintf(share, sizeof share, "not in the estimate");
    else
      std::snprintf(share, sizeof share, "%.0f %% %s the estimate", std::abs(rel) * 100,
                    rel > 0 ? "over" : "under");
    out.push_back(std::string(planned_category_name(where.second)) + " " + share + " on pp " +
                  std::to_string(where.first) + " (rank " + std::to_string(c->rank) + ": " +
                  binary_bytes_text(g.measured) + " measured, " + binary_bytes_text(g.planned) +
                  " planned)");
  }
  return out;
}

double analytic_bubble(int pp, int vpp, int64_t micro_batches) {
  if (pp <= 1 || micro_batches <= 0) return 0;
  return static_cast<double>(pp - 1) / (static_cast<double>(std::max(vpp, 1)) * micro_batches);
}

PipelineWait measure_pipeline_wait(int tp, int pp, int dp, int64_t step,
                                   const std::vector<TimedBox>& boxes) {
  PipelineWait out;
  out.step = step;
  out.pp = pp;
  if (pp <= 1 || tp < 1 || dp < 1) return out;
  // The pipeline of tp 0, dp 0: rank tp + TP (dp + DP pp) = TP DP pp.
  const int stride = tp * dp;
  std::vector<StageWait> stages(static_cast<size_t>(pp));
  for (int p = 0; p < pp; p++) stages[p] = {p, p * stride};
  double begin = std::numeric_limits<double>::infinity();
  double end = -std::numeric_limits<double>::infinity();
  std::set<int> first_stage_micro_batches;
  int max_virtual_stage = 0;
  std::vector<bool> computes(static_cast<size_t>(pp), false);
  for (const TimedBox& b : boxes) {
    if (b.rank % stride != 0 || b.rank / stride >= pp) continue;
    const int p = b.rank / stride;
    const bool compute = b.kind == "forward" || b.kind == "backward";
    const bool wait = b.kind == "pipeline wait";
    if (!compute && !wait) continue;
    const double length = std::max(b.end - b.start, 0.0);
    begin = std::min(begin, b.start);
    if (wait) {
      stages[p].recorded_wait_s += length;
      continue;
    }
    end = std::max(end, b.end);
    stages[p].compute_s += length;
    computes[p] = true;
    if (b.kind == "forward") {
      max_virtual_stage = std::max(max_virtual_stage, b.stage);
      if (p == 0) first_stage_micro_batches.insert(b.micro_batch);
    }
  }
  if (std::find(computes.begin(), computes.end(), false) != computes.end()) return out;
  out.vpp = max_virtual_stage / pp + 1;
  out.micro_batches = static_cast<int64_t>(first_stage_micro_batches.size());
  out.analytic = analytic_bubble(pp, out.vpp, out.micro_batches);
  out.span_s = end - begin;
  for (StageWait& s : stages) s.wait_s = std::max(out.span_s - s.compute_s, 0.0);
  out.stages = std::move(stages);
  return out;
}

}  // namespace lattice
