// ParallelLayout: Megatron's rank order and process groups, the layers each pipeline stage
// holds, and every rule a TP x PP x DP layout must keep
// (docs/design-notes.md#parallel-layout-and-the-planner). Non-goals: context and expert
// parallelism, uneven splits with virtual stages.
#include "lattice/layout.h"

#include <algorithm>
#include <cassert>
#include <nlohmann/json.hpp>

namespace lattice {

namespace {

std::string str(int64_t v) {
  return std::to_string(v);
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += (out.empty() ? "" : "\n") + line;
  return out;
}

// Rules on the pipeline split: layers per stage, and what interleaving (virtual stages) needs.
void pipeline_errors(const TrainOptions& o, int dp, std::vector<std::string>& errors) {
  const int L = o.model.num_layers, pp = o.parallel.pipeline_model_parallel_size;
  const int v = o.parallel.num_layers_per_virtual_pipeline_stage;
  const int first = o.parallel.decoder_first_pipeline_num_layers,
            last = o.parallel.decoder_last_pipeline_num_layers;
  if (first < 0 || last < 0)
    errors.push_back(
        "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers "
        "must not be negative");
  if (first > 0 || last > 0) {
    const std::string flags = first > 0 && last > 0
                                  ? "--decoder-first-pipeline-num-layers " + str(first) +
                                        " and --decoder-last-pipeline-num-layers " + str(last)
                              : first > 0 ? "--decoder-first-pipeline-num-layers " + str(first)
                                          : "--decoder-last-pipeline-num-layers " + str(last);
    const int others = pp - (first > 0 ? 1 : 0) - (last > 0 ? 1 : 0);
    const int rest = L - std::max(first, 0) - std::max(last, 0);
    if (pp < 2)
      errors.push_back(flags +
                       " split the pipeline unevenly, which needs "
                       "--pipeline-model-parallel-size > 1");
    else if (v > 0)
      errors.push_back(flags + " cannot be combined with --num-layers-per-virtual-pipeline-stage");
    else if (rest < 0 || (others == 0 && rest != 0) ||
             (others > 0 && (rest <= 0 || rest % others != 0)))
      errors.push_back(flags + " leave " + str(rest) + " of --num-layers " + str(L) + " for " +
                       str(others) + " other pipeline stage(s), which must share them evenly " +
                       "(at least one each)");
    return;
  }
  if (pp >= 1 && L > 0 && L % pp != 0)
    errors.push_back("--pipeline-model-parallel-size " + str(pp) +
                     " does not divide --num-layers " + str(L) +
                     " (or set --decoder-first-pipeline-num-layers / "
                     "--decoder-last-pipeline-num-layers)");
  if (v < 0)
    errors.push_back("--num-layers-per-virtual-pipeline-stage must not be negative, got " + str(v));
  if (v <= 0) return;
  if (pp == 1)
    errors.push_back(
        "--num-layers-per-virtual-pipeline-stage " + str(v) +
        " interleaves pipeline stages, which needs --pipeline-model-parallel-size > 1");
  if (pp >= 1 && L > 0 && L % pp == 0 && (L / pp) % v != 0)
    errors.push_back("--num-layers-per-virtual-pipeline-stage " + str(v) + " does not divide the " +
                     str(L / pp) + " layers of each pipeline stage (--num-layers " + str(L) +
                     " / --pipeline-model-parallel-size " + str(pp) + ")");
  // Interleaved 1F1B runs the micro-batches in rounds of PP per model chunk (Megatron asserts
  // the same); checked only when the micro-batch count per data-parallel rank is whole.
  const int mb = o.micro_batch_size, gb = o.global_batch_size;
  if (pp > 1 && dp > 0 && mb > 0 && gb > 0 && gb % (static_cast<int64_t>(mb) * dp) == 0) {
    const int64_t micro_batches = gb / (static_cast<int64_t>(mb) * dp);
    if (micro_batches % pp != 0)
      errors.push_back("--num-layers-per-virtual-pipeline-stage (interleaved 1F1B) needs the " +
                       str(micro_batches) +
                       " micro-batches per data-parallel rank (--global-batch-size " + str(gb) +
                       " / (--micro-batch-size " + str(mb) + " x data-parallel size " + str(dp) +
                       ")) to be a multiple of --pipeline-model-parallel-size " + str(pp));
  }
}

}  // namespace

ParallelLayout::Coord ParallelLayout::coord(int r) const {
  assert(r >= 0 && r < world);
  Coord c;
  c.tp = r % tp;
  c.dp = (r / tp) % dp;
  c.pp = r / (tp * dp);
  return c;
}

// Megatron's initialize_model_parallel builds each kind of group in this order.
std::vector<std::vector<int>> ParallelLayout::tensor_groups() const {
  std::vector<std::vector<int>> groups;
  for (int p = 0; p < pp; p++)
    for (int d = 0; d < dp; d++) {
      std::vector<int>& g = groups.emplace_back();
      for (int t = 0; t < tp; t++) g.push_back(rank({t, d, p}));
    }
  return groups;
}

std::vector<std::vector<int>> ParallelLayout::data_groups() const {
  std::vector<std::vector<int>> groups;
  for (int p = 0; p < pp; p++)
    for (int t = 0; t < tp; t++) {
      std::vector<int>& g = groups.emplace_back();
      for (int d = 0; d < dp; d++) g.push_back(rank({t, d, p}));
    }
  return groups;
}

std::vector<std::vector<int>> ParallelLayout::pipeline_groups() const {
  std::vector<std::vector<int>> groups;
  for (int d = 0; d < dp; d++)
    for (int t = 0; t < tp; t++) {
      std::vector<int>& g = groups.emplace_back();
      for (int p = 0; p < pp; p++) g.push_back(rank({t, d, p}));
    }
  return groups;
}

std::vector<std::vector<int>> ParallelLayout::model_groups() const {
  std::vector<std::vector<int>> groups;
  for (int d = 0; d < dp; d++) {
    std::vector<int>& g = groups.emplace_back();
    for (int p = 0; p < pp; p++)
      for (int t = 0; t < tp; t++) g.push_back(rank({t, d, p}));
  }
  return groups;
}

std::vector<std::vector<int>> ParallelLayout::embedding_groups() const {
  std::vector<std::vector<int>> groups;
  for (const std::vector<int>& g : pipeline_groups())
    groups.push_back(g.size() > 1 ? std::vector<int>{g.front(), g.back()} : g);
  return groups;
}

ParallelLayout::LayerRange ParallelLayout::stage_layers(int pp_rank, int chunk) const {
  assert(pp_rank >= 0 && pp_rank < pp && chunk >= 0 && chunk < vpp);
  if (first_stage_layers > 0 || last_stage_layers > 0) {
    // Uneven: the first and last stages as given (or an even share of what the set ones
    // leave), the stages between sharing the rest evenly.
    const int first = first_stage_layers, last = last_stage_layers;
    const int others = pp - (first > 0 ? 1 : 0) - (last > 0 ? 1 : 0);
    const int share = others > 0 ? (num_layers - first - last) / others : 0;
    int begin = 0;
    for (int p = 0; p < pp; p++) {
      const int n = p == 0 && first > 0 ? first : p == pp - 1 && last > 0 ? last : share;
      if (p == pp_rank) return {begin, begin + n};
      begin += n;
    }
  }
  const int per_chunk = layers_per_chunk();
  const int virtual_stage = chunk * pp + pp_rank;
  return {virtual_stage * per_chunk, (virtual_stage + 1) * per_chunk};
}

int ParallelLayout::stage_num_layers(int pp_rank) const {
  int n = 0;
  for (int c = 0; c < vpp; c++) {
    const LayerRange r = stage_layers(pp_rank, c);
    n += r.end - r.begin;
  }
  return n;
}

std::vector<std::string> layout_errors(const TrainOptions& o, int world) {
  std::vector<std::string> errors;
  const int tp = o.model.tensor_model_parallel_size, pp = o.parallel.pipeline_model_parallel_size;
  if (world < 1)
    errors.push_back("world size " + str(world) +
                     " (--world-size, or the ranks started) must be positive");
  if (tp < 1) errors.push_back("--tensor-model-parallel-size must be positive, got " + str(tp));
  if (pp < 1) errors.push_back("--pipeline-model-parallel-size must be positive, got " + str(pp));
  int dp = 0;  // unknown until the world divides evenly
  if (world >= 1 && tp >= 1 && pp >= 1) {
    if (world % (static_cast<int64_t>(tp) * pp) != 0)
      errors.push_back("world size " + str(world) +
                       " (--world-size, or the ranks started) is not a multiple of "
                       "--tensor-model-parallel-size " +
                       str(tp) + " x --pipeline-model-parallel-size " + str(pp) + " = " +
                       str(static_cast<int64_t>(tp) * pp));
    else
      dp = world / (tp * pp);
  }
  if (tp >= 1) {
    const ModelConfig& m = o.model;
    if (m.num_attention_heads > 0 && m.num_attention_heads % tp != 0)
      errors.push_back("--tensor-model-parallel-size " + str(tp) +
                       " does not divide --num-attention-heads " + str(m.num_attention_heads));
    if (m.group_query_attention && m.num_query_groups > 0 && m.num_query_groups % tp != 0)
      errors.push_back("--tensor-model-parallel-size " + str(tp) +
                       " does not divide --num-query-groups " + str(m.num_query_groups) +
                       " (each rank holds whole key/value heads)");
    if (m.hidden_size > 0 && m.ffn() > 0 && m.ffn() % tp != 0)
      errors.push_back("--tensor-model-parallel-size " + str(tp) +
                       " does not divide the MLP hidden size " + str(m.ffn()) +
                       (m.ffn_hidden_size > 0 ? " (--ffn-hidden-size)"
                        : m.swiglu   ? " (8/3 x --hidden-size, a multiple of 64)"
                                     : " (4 x --hidden-size)"));
    if (o.parallel.sequence_parallel && tp == 1)
      errors.push_back(
          "--sequence-parallel splits the sequence over tensor-parallel ranks, which needs "
          "--tensor-model-parallel-size > 1");
    if (o.parallel.sequence_parallel && tp > 1 && m.seq_length > 0 && m.seq_length % tp != 0)
      errors.push_back("--tensor-model-parallel-size " + str(tp) +
                       " does not divide --seq-length " + str(m.seq_length) +
                       ", which --sequence-parallel splits");
  }
  pipeline_errors(o, dp, errors);
  // --global-batch-size % --micro-batch-size alone is TrainOptions::validate's rule; this is
  // the data-parallel part of it.
  const int mb = o.micro_batch_size, gb = o.global_batch_size;
  if (dp > 1 && mb > 0 && gb > 0 && gb % mb == 0 && gb % (static_cast<int64_t>(mb) * dp) != 0)
    errors.push_back("--global-batch-size " + str(gb) +
                     " is not a multiple of --micro-batch-size " + str(mb) +
                     " x data-parallel size " + str(dp) + " = " +
                     str(static_cast<int64_t>(mb) * dp) + " (data-parallel size = world size " +
                     str(world) + " / (TP " + str(tp) + " x PP " + str(pp) + "))");
  return errors;
}

TrainOptions with_default_global_batch(TrainOptions o, int world) {
  const int64_t model_parallel = static_cast<int64_t>(o.model.tensor_model_parallel_size) *
                                 o.parallel.pipeline_model_parallel_size;
  if (o.global_batch_size == 0 && world >= 1 && model_parallel >= 1 && world % model_parallel == 0)
    o.global_batch_size = static_cast<int>(o.micro_batch_size * (world / model_parallel));
  return o;
}

Result<ParallelLayout> make_layout(const TrainOptions& o, int world) {
  if (std::vector<std::string> errors = layout_errors(o, world); !errors.empty())
    return Status::invalid_argument(join_lines(errors));
  ParallelLayout layout;
  layout.world = world;
  layout.tp = o.model.tensor_model_parallel_size;
  layout.pp = o.parallel.pipeline_model_parallel_size;
  layout.dp = world / (layout.tp * layout.pp);
  layout.num_layers = o.model.num_layers;
  const int v = o.parallel.num_layers_per_virtual_pipeline_stage;
  layout.vpp = v > 0 ? o.model.num_layers / layout.pp / v : 1;
  layout.first_stage_layers = o.parallel.decoder_first_pipeline_num_layers;
  layout.last_stage_layers = o.parallel.decoder_last_pipeline_num_layers;
  return layout;
}

std::string layout_json(const ParallelLayout& layout) {
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (int p = 0; p < layout.pp; p++) {
    nlohmann::ordered_json chunks = nlohmann::ordered_json::array();
    for (int c = 0; c < layout.vpp; c++) {
      const ParallelLayout::LayerRange r = layout.stage_layers(p, c);
      chunks.push_back(
          {{"chunk", c}, {"virtual_stage", c * layout.pp + p}, {"layers", {r.begin, r.end}}});
    }
    std::vector<int> ranks;  // pp is the slowest-varying coordinate: one contiguous block
    for (int r = p * layout.tp * layout.dp; r < (p + 1) * layout.tp * layout.dp; r++)
      ranks.push_back(r);
    stages.push_back({{"pp_rank", p},
                      {"ranks", ranks},
                      {"chunks", chunks},
                      {"holds_embedding", layout.is_first_stage(p)},
                      {"holds_head", layout.is_last_stage(p)}});
  }
  nlohmann::ordered_json out = {{"world", layout.world},
                                {"tp", layout.tp},
                                {"pp", layout.pp},
                                {"dp", layout.dp},
                                {"vpp", layout.vpp},
                                {"num_layers", layout.num_layers},
                                {"groups",
                                 {{"tensor", layout.tensor_groups()},
                                  {"data", layout.data_groups()},
                                  {"pipeline", layout.pipeline_groups()},
                                  {"model", layout.model_groups()},
                                  {"embedding", layout.embedding_groups()}}},
                                {"stages", stages}};
  return out.dump();
}

}  // namespace lattice
