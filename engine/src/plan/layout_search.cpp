// The layout search behind `lattice plan --suggest` and the Studio's Suggest: every valid
// TP x PP x VPP x micro batch x recomputation x distributed-optimizer choice for a model, global
// batch and cluster, estimated and ranked (docs/design-notes.md#planner-step-time-and-layout-
// search), over the five axes TP x CP x EP x DP x PP (the expert grid ETP x EP x EDP x PP with
// ETP = TP). Non-goals: uneven pipeline splits, sequence parallelism off with TP > 1, an ETP of
// its own.
#include <algorithm>
#include <cstdint>

#include "lattice/layout.h"
#include "lattice/plan.h"

namespace lattice {

namespace {

// Selective recomputation is not a candidate: it changes nothing (Note [selective
// recomputation] in model/gpt_layer.cpp).
enum class Recompute : uint8_t { kNone, kFull };

// One point of the search space and its score, small enough to keep tens of thousands.
struct Choice {
  int tp = 1, cp = 1, ep = 1, pp = 1, layers_per_virtual_stage = 0, micro_batch = 1;
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
// TP > 1 and each context-parallel rank's share of the sequence splits evenly.
TrainOptions apply(const TrainOptions& base, const Choice& c) {
  TrainOptions o = base;
  ParallelOptions& par = o.parallel;
  o.model.tensor_model_parallel_size = c.tp;
  o.micro_batch_size = c.micro_batch;
  par.pipeline_model_parallel_size = c.pp;
  par.context_parallel_size = c.cp;
  par.expert_model_parallel_size = c.ep;
  par.expert_tensor_parallel_size = 0;  // as TP
  par.num_layers_per_virtual_pipeline_stage = c.layers_per_virtual_stage;
  par.decoder_first_pipeline_num_layers = par.decoder_last_pipeline_num_layers = 0;
  par.sequence_parallel = c.tp > 1 && (o.model.seq_length / c.cp) % c.tp == 0;
  par.use_distributed_optimizer = c.distributed;
  par.recompute_granularity = c.recompute == Recompute::kFull ? "full" : "";
  par.recompute_method = c.recompute == Recompute::kFull ? "uniform" : "";
  par.recompute_num_layers = c.recompute == Recompute::kFull ? 1 : 0;
  return o;
}

// Candidates of one (TP, CP, EP, PP) grid.
void enumerate_grid(const TrainOptions& base, int world, const Choice& grid,
                    std::vector<Choice>& out) {
  const int tp = grid.tp, pp = grid.pp;
  const int L = base.model.num_layers, dp = world / (tp * grid.cp * pp);
  const int64_t per_replica = base.global_batch_size / dp;  // samples per DP rank
  if (base.global_batch_size % dp != 0) return;
  for (int mb : divisors(per_replica)) {
    const int64_t micro_batches = per_replica / mb;
    std::vector<int> virtual_stages = {0};  // 0: not interleaved
    if (pp > 1 && micro_batches % pp == 0)
      for (int chunks : divisors(L / pp))
        if (chunks > 1) virtual_stages.push_back(L / pp / chunks);
    for (int v : virtual_stages)
      for (Recompute r : {Recompute::kNone, Recompute::kFull})
        for (bool distributed : {false, true}) {
          // The same layout as without: no data-parallel group to shard over, dense or expert.
          if (distributed && dp * grid.cp == 1) continue;
          Choice c = grid;
          c.layers_per_virtual_stage = v, c.micro_batch = mb;
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
  TrainOptions base = planned_options(given, cluster);
  SuggestStats counts;
  const int world = cluster.world();
  const ModelConfig& m = base.model;
  if (world < 1 || max_results < 1 || m.num_layers < 1 || m.num_attention_heads < 1) return {};

  // Phase 1: every valid choice with its memory (cheap: parameter counts and the activation
  // formula per stage).
  std::vector<Choice> choices;
  // TP must divide the heads, the key/value heads (query groups: each rank holds whole ones)
  // and the MLP width; layout_errors checks every rule again below, this only skips early.
  // CP must leave each rank 2 whole chunks of the sequence, and the search keeps at least
  // kMinTokensPerContextRank of them per rank (a bound on the search for its speed, not a layout
  // rule: CP is for long sequences, and without it GPT-3 175B on 1024 GPUs has five times the
  // layouts). EP must divide the experts (and, with ETP = TP, the ranks a stage's TP groups
  // leave).
  constexpr int kMinTokensPerContextRank = 1024;
  std::vector<Choice> grids;
  for (int tp : divisors(m.num_attention_heads)) {
    if (world % tp != 0 || m.ffn() % tp != 0 || m.kv_heads() < 1 || m.kv_heads() % tp != 0)
      continue;
    for (int pp : divisors(m.num_layers)) {
      if (world % (static_cast<int64_t>(tp) * pp) != 0) continue;
      for (int cp : divisors(world / (tp * pp))) {
        if (cp > 1 &&
            (m.seq_length % (2 * cp) != 0 || m.seq_length / cp < kMinTokensPerContextRank))
          continue;
        for (int ep : m.moe() ? divisors(m.num_experts) : std::vector<int>{1}) {
          if ((world / (tp * pp)) % ep != 0) continue;
          Choice g;
          g.tp = tp, g.cp = cp, g.ep = ep, g.pp = pp;
          grids.push_back(g);
        }
      }
    }
  }
  for (const Choice& grid : grids) {
    const size_t from = choices.size();
    enumerate_grid(base, world, grid, choices);
    // Keep only the layouts `lattice plan` lays out (layout_errors and validate: the trainer's
    // temporary refusals, such as MoE with TP or CP, are not the planner's), with their memory.
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
