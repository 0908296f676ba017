// The layout search behind `lattice plan --suggest` and the Studio's Suggest: every valid
// TP x PP x VPP x micro batch x recomputation x distributed-optimizer choice for a model, global
// batch and cluster, estimated and ranked (docs/design-notes.md#planner-step-time-and-layout-
// search). Non-goals: uneven pipeline splits, sequence parallelism off with TP > 1, context or
// expert parallelism.
#include <algorithm>
#include <cstdint>

#include "lattice/layout.h"
#include "lattice/plan.h"

namespace lattice {

namespace {

enum class Recompute : uint8_t { kNone, kSelective, kFull };

// One point of the search space and its score, small enough to keep tens of thousands.
struct Choice {
  int tp = 1, pp = 1, layers_per_virtual_stage = 0, micro_batch = 1;
  Recompute recompute = Recompute::kNone;
  bool distributed = false;
  bool fits = false;
  double most_loaded_bytes = 0;
  double tokens_per_second = -1;  // -1: not estimated (a non-fitting one not needed)
};

std::vector<int> divisors(int64_t n) {
  std::vector<int> out;
  for (int64_t d = 1; d <= n; d++)
    if (n % d == 0) out.push_back(static_cast<int>(d));
  return out;
}

// The base options with the choice's layout and batch flags; sequence parallelism whenever
// TP > 1 and the sequence splits evenly.
TrainOptions apply(const TrainOptions& base, const Choice& c) {
  TrainOptions o = base;
  ParallelOptions& par = o.parallel;
  o.model.tensor_model_parallel_size = c.tp;
  o.micro_batch_size = c.micro_batch;
  par.pipeline_model_parallel_size = c.pp;
  par.num_layers_per_virtual_pipeline_stage = c.layers_per_virtual_stage;
  par.decoder_first_pipeline_num_layers = par.decoder_last_pipeline_num_layers = 0;
  par.sequence_parallel = c.tp > 1 && o.model.seq_length % c.tp == 0;
  par.use_distributed_optimizer = c.distributed;
  par.recompute_granularity = c.recompute == Recompute::kFull        ? "full"
                              : c.recompute == Recompute::kSelective ? "selective"
                                                                     : "";
  par.recompute_method = c.recompute == Recompute::kFull ? "uniform" : "";
  par.recompute_num_layers = c.recompute == Recompute::kFull ? 1 : 0;
  return o;
}

// Candidates of one (TP, PP) pair; the options already carry TP and PP.
void enumerate_pair(const TrainOptions& base, int world, int tp, int pp, std::vector<Choice>& out) {
  const int L = base.model.num_layers, dp = world / (tp * pp);
  const int64_t per_replica = base.global_batch_size / dp;  // samples per DP rank
  if (base.global_batch_size % dp != 0) return;
  for (int mb : divisors(per_replica)) {
    const int64_t micro_batches = per_replica / mb;
    std::vector<int> virtual_stages = {0};  // 0: not interleaved
    if (pp > 1 && micro_batches % pp == 0)
      for (int chunks : divisors(L / pp))
        if (chunks > 1) virtual_stages.push_back(L / pp / chunks);
    for (int v : virtual_stages)
      for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
        for (bool distributed : {false, true}) {
          if (distributed && dp == 1) continue;  // the same layout as without
          Choice c;
          c.tp = tp, c.pp = pp, c.layers_per_virtual_stage = v, c.micro_batch = mb;
          c.recompute = r;
          c.distributed = distributed;
          out.push_back(c);
        }
  }
}

bool better(const Choice& a, const Choice& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.tokens_per_second != b.tokens_per_second) return a.tokens_per_second > b.tokens_per_second;
  return a.most_loaded_bytes < b.most_loaded_bytes;
}

}  // namespace

bool fits_in_memory(const MemoryEstimate& memory, const ClusterSpec& cluster) {
  if (memory.stages.empty()) return false;
  const double bytes = static_cast<double>(memory.stages[memory.most_loaded].total_bytes());
  return bytes <= cluster.usable_memory_bytes();
}

std::vector<LayoutCandidate> suggest_layouts(const TrainOptions& given, const ClusterSpec& cluster,
                                             int max_results, SuggestStats* stats) {
  TrainOptions base = given;
  base.device = engine_device(cluster.device);
  SuggestStats counts;
  const int world = cluster.world();
  const ModelConfig& m = base.model;
  if (world < 1 || max_results < 1 || m.num_layers < 1 || m.num_attention_heads < 1) return {};

  // Phase 1: every valid choice with its memory (cheap: parameter counts and the activation
  // formula per stage).
  std::vector<Choice> choices;
  // TP must divide the heads, the key/value heads (query groups: each rank holds whole ones)
  // and the MLP width; layout_errors checks every rule again below, this only skips early.
  for (int tp : divisors(m.num_attention_heads)) {
    if (world % tp != 0 || m.ffn() % tp != 0 || m.kv_heads() < 1 || m.kv_heads() % tp != 0)
      continue;
    for (int pp : divisors(m.num_layers)) {
      if (world % (static_cast<int64_t>(tp) * pp) != 0) continue;
      const size_t from = choices.size();
      enumerate_pair(base, world, tp, pp, choices);
      // Keep only what `lattice train` would accept, with each choice's memory.
      size_t kept = from;
      for (size_t i = from; i < choices.size(); i++) {
        Choice c = choices[i];
        const TrainOptions o = apply(base, c);
        Result<ParallelLayout> layout = make_layout(o, world);
        if (!layout || !o.validate(/*require_data=*/false).empty()) continue;
        const MemoryEstimate memory = estimate_memory(o, *layout);
        c.most_loaded_bytes = static_cast<double>(memory.stages[memory.most_loaded].total_bytes());
        c.fits = fits_in_memory(memory, cluster);
        choices[kept++] = c;
      }
      choices.resize(kept);
    }
  }

  // Phase 2: step estimates, for the fitting choices and, when they are fewer than asked
  // for, the others too (the best of those that do not fit still come back, after).
  const int64_t fitting =
      std::count_if(choices.begin(), choices.end(), [](const Choice& c) { return c.fits; });
  counts.valid = static_cast<int64_t>(choices.size());
  counts.fitting = fitting;
  if (stats) *stats = counts;
  const bool all = fitting < max_results;
  for (Choice& c : choices) {
    if (!c.fits && !all) continue;
    const TrainOptions o = apply(base, c);
    const ParallelLayout layout = *make_layout(o, world);
    c.tokens_per_second = estimate_step(o, layout, cluster).tokens_per_second;
  }
  const size_t n = std::min(choices.size(), static_cast<size_t>(max_results));
  std::partial_sort(choices.begin(), choices.begin() + static_cast<std::ptrdiff_t>(n),
                    choices.end(), better);

  std::vector<LayoutCandidate> out;
  for (size_t i = 0; i < n; i++) {
    LayoutCandidate cand;
    cand.options = apply(base, choices[i]);
    cand.layout = *make_layout(cand.options, world);
    cand.memory = estimate_memory(cand.options, cand.layout);
    cand.step = estimate_step(cand.options, cand.layout, cluster, cand.memory);
    cand.fits = choices[i].fits;
    out.push_back(std::move(cand));
  }
  return out;
}

}  // namespace lattice
