// ParallelLayout: Megatron's rank order and process groups over TP x CP x EP x DP x PP (the dense
// grid and the expert grid over the same ranks), the layers each pipeline stage holds, and
// every rule a layout must keep (docs/design-notes.md#parallel-layout-and-the-planner).
// Non-goals: Megatron's other orders ("tp-pp-dp"), uneven splits with virtual stages.
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

// Note [orthogonal groups]: the world is a grid of `sizes`, axis 0 varying fastest, so a rank
// is sum(coordinate[i] * stride[i]) with stride[i] the product of the sizes before i. A group
// holds the ranks that differ only on the axes `in_group` marks. Megatron's
// generate_masked_orthogonal_rank_groups lists the groups by the other axes' coordinates
// counted as one mixed-radix number (fastest axis first), and each group's ranks the same way
// over its own axes, which makes every group ascending.
std::vector<std::vector<int>> grid_groups(const std::vector<int>& sizes,
                                          const std::vector<bool>& in_group) {
  assert(sizes.size() == in_group.size());
  std::vector<int> stride(sizes.size());
  int world = 1, group_size = 1;
  std::vector<size_t> inside, outside;
  for (size_t i = 0; i < sizes.size(); i++) {
    stride[i] = world;
    world *= sizes[i];
    (in_group[i] ? inside : outside).push_back(i);
    if (in_group[i]) group_size *= sizes[i];
  }
  // The rank offset of the index-th combination of `axes`' coordinates.
  auto offset = [&](int index, const std::vector<size_t>& axes) {
    int rank = 0;
    for (size_t a : axes) {
      rank += index % sizes[a] * stride[a];
      index /= sizes[a];
    }
    return rank;
  };
  std::vector<std::vector<int>> groups(static_cast<size_t>(world / group_size));
  for (size_t g = 0; g < groups.size(); g++) {
    const int base = offset(static_cast<int>(g), outside);
    for (int r = 0; r < group_size; r++) groups[g].push_back(base + offset(r, inside));
  }
  return groups;
}

// The dense grid's axes, fastest first (Megatron's "tp-cp-ep-dp-pp" with EP 1), and the expert
// grid's (the same order with CP 1 and the expert TP and DP).
std::vector<std::vector<int>> dense(const ParallelLayout& l, bool tp, bool cp, bool dp, bool pp) {
  return grid_groups({l.tp, l.cp, l.dp, l.pp}, {tp, cp, dp, pp});
}
std::vector<std::vector<int>> expert(const ParallelLayout& l, bool etp, bool ep, bool edp) {
  return grid_groups({l.etp, l.ep, l.edp, l.pp}, {etp, ep, edp, false});
}

}  // namespace

ParallelLayout::Coord ParallelLayout::coord(int r) const {
  assert(r >= 0 && r < world);
  Coord c;
  c.tp = r % tp;
  c.cp = (r / tp) % cp;
  c.dp = (r / (tp * cp)) % dp;
  c.pp = r / (tp * cp * dp);
  return c;
}

ParallelLayout::ExpertCoord ParallelLayout::expert_coord(int r) const {
  assert(r >= 0 && r < world);
  ExpertCoord c;
  c.etp = r % etp;
  c.ep = (r / etp) % ep;
  c.edp = (r / (etp * ep)) % edp;
  c.pp = r / (etp * ep * edp);
  return c;
}

std::vector<std::vector<int>> ParallelLayout::tensor_groups() const {
  return dense(*this, true, false, false, false);
}
std::vector<std::vector<int>> ParallelLayout::context_groups() const {
  return dense(*this, false, true, false, false);
}
std::vector<std::vector<int>> ParallelLayout::data_groups() const {
  return dense(*this, false, false, true, false);
}
std::vector<std::vector<int>> ParallelLayout::data_context_groups() const {
  return dense(*this, false, true, true, false);
}
std::vector<std::vector<int>> ParallelLayout::tensor_context_groups() const {
  return dense(*this, true, true, false, false);
}
std::vector<std::vector<int>> ParallelLayout::pipeline_groups() const {
  return dense(*this, false, false, false, true);
}
std::vector<std::vector<int>> ParallelLayout::model_groups() const {
  return dense(*this, true, false, false, true);
}

std::vector<std::vector<int>> ParallelLayout::embedding_groups() const {
  std::vector<std::vector<int>> groups;
  for (const std::vector<int>& g : pipeline_groups())
    groups.push_back(g.size() > 1 ? std::vector<int>{g.front(), g.back()} : g);
  return groups;
}

std::vector<std::vector<int>> ParallelLayout::expert_groups() const {
  return expert(*this, false, true, false);
}
std::vector<std::vector<int>> ParallelLayout::expert_tensor_groups() const {
  return expert(*this, true, false, false);
}
std::vector<std::vector<int>> ParallelLayout::expert_data_groups() const {
  return expert(*this, false, false, true);
}
std::vector<std::vector<int>> ParallelLayout::expert_tensor_model_groups() const {
  return expert(*this, true, true, false);
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

namespace {

// The rules of the sizes of the two grids: each positive, and the world divisible into
// TP x CP x PP (the dense grid; DP is what is left) and ETP x EP x PP (the expert grid).
// Returns DP, or 0 while it is unknown.
int grid_errors(const TrainOptions& o, int world, std::vector<std::string>& errors) {
  const int tp = o.model.tensor_model_parallel_size, pp = o.parallel.pipeline_model_parallel_size;
  const int cp = o.parallel.context_parallel_size, ep = o.parallel.expert_model_parallel_size;
  const int etp = o.parallel.expert_tensor_parallel_size;
  if (world < 1)
    errors.push_back("world size " + str(world) +
                     " (--world-size, or the ranks started) must be positive");
  if (tp < 1) errors.push_back("--tensor-model-parallel-size must be positive, got " + str(tp));
  if (pp < 1) errors.push_back("--pipeline-model-parallel-size must be positive, got " + str(pp));
  if (cp < 1) errors.push_back("--context-parallel-size must be positive, got " + str(cp));
  if (ep < 1) errors.push_back("--expert-model-parallel-size must be positive, got " + str(ep));
  if (etp < 0)
    errors.push_back(
        "--expert-tensor-parallel-size must be positive (0: as "
        "--tensor-model-parallel-size), got " +
        str(etp));
  if (world < 1 || tp < 1 || pp < 1 || cp < 1) return 0;
  const std::string head =
      "world size " + str(world) + " (--world-size, or the ranks started) is not a multiple of ";
  const int64_t dense = static_cast<int64_t>(tp) * cp * pp;
  int dp = 0;
  if (world % dense != 0)
    errors.push_back(head + "--tensor-model-parallel-size " + str(tp) +
                     (cp > 1 ? " x --context-parallel-size " + str(cp) : "") +
                     " x --pipeline-model-parallel-size " + str(pp) + " = " + str(dense));
  else
    dp = static_cast<int>(world / dense);
  // The expert grid has its own sizes only with EP > 1 or an ETP of its own; otherwise it is
  // the TP x PP grid the rule above has checked.
  const int expert_tp = etp > 0 ? etp : tp;
  const int64_t experts = static_cast<int64_t>(expert_tp) * std::max(ep, 1) * pp;
  if (ep >= 1 && etp >= 0 && (ep > 1 || expert_tp != tp) && world % experts != 0)
    errors.push_back(head + "--expert-tensor-parallel-size " + str(expert_tp) +
                     " x --expert-model-parallel-size " + str(ep) +
                     " x --pipeline-model-parallel-size " + str(pp) + " = " + str(experts) +
                     " (the expert layers' grid)");
  return dp;
}

// Rules on the sequence: context parallelism cuts it into 2 x CP chunks, and sequence
// parallelism splits each rank's share over TP.
void sequence_errors(const TrainOptions& o, std::vector<std::string>& errors) {
  const int tp = o.model.tensor_model_parallel_size, cp = o.parallel.context_parallel_size;
  const int seq = o.model.seq_length;
  if (cp > 1 && seq > 0 && seq % (2 * cp) != 0)
    errors.push_back("--context-parallel-size " + str(cp) + " needs --seq-length " + str(seq) +
                     " to be a multiple of 2 x " + str(cp) + " = " + str(2 * cp) +
                     " (each context-parallel rank holds 2 of 2 x CP equal chunks, Megatron's "
                     "causal load balance)");
  if (tp < 1 || !o.parallel.sequence_parallel) return;
  if (tp == 1) {
    errors.push_back(
        "--sequence-parallel splits the sequence over tensor-parallel ranks, which needs "
        "--tensor-model-parallel-size > 1");
  } else if (cp > 1 && seq > 0 && seq % (2 * cp) == 0 && (seq / cp) % tp != 0) {
    errors.push_back("--tensor-model-parallel-size " + str(tp) + " does not divide the " +
                     str(seq / cp) + " tokens of each context-parallel rank (--seq-length " +
                     str(seq) + " / --context-parallel-size " + str(cp) +
                     "), which --sequence-parallel splits");
  } else if (cp == 1 && seq > 0 && seq % tp != 0) {
    errors.push_back("--tensor-model-parallel-size " + str(tp) + " does not divide --seq-length " +
                     str(seq) + ", which --sequence-parallel splits");
  }
}

}  // namespace

// The rules Megatron asserts for expert parallelism (arguments.py, "Expert parallelism check"):
// EP splits the experts of MoE layers, whole experts per rank; ETP splits each expert's width.
std::vector<std::string> expert_rules(const TrainOptions& o) {
  std::vector<std::string> errors;
  const int ep = o.parallel.expert_model_parallel_size, experts = o.model.num_experts;
  if (ep > 1 && experts <= 0)
    errors.push_back("--expert-model-parallel-size " + str(ep) +
                     " splits the experts of MoE layers, which needs --num-experts");
  else if (ep > 1 && experts % ep != 0)
    errors.push_back("--expert-model-parallel-size " + str(ep) + " does not divide --num-experts " +
                     str(experts) + ": each rank holds whole experts");
  const int tp = o.model.tensor_model_parallel_size;
  const int etp =
      o.parallel.expert_tensor_parallel_size > 0 ? o.parallel.expert_tensor_parallel_size : tp;
  if (experts > 0 && etp > 1 && o.model.moe_ffn() % etp != 0)
    errors.push_back("--expert-tensor-parallel-size " + str(etp) +
                     " does not divide the experts' width " + str(o.model.moe_ffn()) +
                     " (--moe-ffn-hidden-size, else --ffn-hidden-size)");
  // Expert TP below TP: each TP rank (expert TP 1) or group of expert-TP ranks routes its share
  // of a micro-batch's tokens (Note [expert tensor parallelism 1] and [expert tensor parallelism
  // e] in model/gpt_moe.cpp).
  const int cp = std::max(o.parallel.context_parallel_size, 1);
  const int64_t tokens = static_cast<int64_t>(o.micro_batch_size) * o.model.seq_length / cp;
  const int parts = etp >= 1 && etp < tp && tp % etp == 0 ? tp / etp : 1;
  if (experts > 0 && parts > 1 && tokens > 0 && tokens % parts != 0)
    errors.push_back("--expert-tensor-parallel-size " + str(etp) + " splits each micro-batch's " +
                     str(tokens) + " tokens (--micro-batch-size x --seq-length" +
                     (cp > 1 ? std::string(" / --context-parallel-size") : "") + ") into " +
                     str(parts) + " parts (--tensor-model-parallel-size " + str(tp) + " / " +
                     str(etp) + "), which must divide them");
  return errors;
}

std::vector<std::string> trainer_layout_refusals(const TrainOptions& o) {
  std::vector<std::string> refusals;
  const char* const tail = " is not yet supported by the trainer; `lattice plan` lays it out";
  // Context parallelism (Note [context parallelism] in model/gpt_layer.cpp): what its ring and
  // its split rows do not reproduce one process for yet.
  if (const int cp = o.parallel.context_parallel_size; cp > 1) {
    const std::string with = "--context-parallel-size " + str(cp);
    if (o.model.attention_dropout > 0)
      refusals.push_back(with + " needs --attention-dropout 0 (the ring attention has no dropout)");
  }
  // Expert TP: a divisor of TP (TP itself: each expert split as the dense MLP; 1: whole
  // experts; between: expert-TP groups, Note [expert tensor parallelism 1] and [expert tensor
  // parallelism e] in model/gpt_moe.cpp). Megatron's expert TP above TP, or not dividing it,
  // would need the expert grid's TP groups to cross the dense ones.
  const int etp = o.parallel.expert_tensor_parallel_size, tp = o.model.tensor_model_parallel_size;
  if (etp > 1 && tp >= 1 && (etp > tp || tp % etp != 0))
    refusals.push_back("--expert-tensor-parallel-size " + str(etp) +
                       " that does not divide --tensor-model-parallel-size " + str(tp) +
                       std::string(tail));
  return refusals;
}

std::vector<std::string> layout_errors(const TrainOptions& o, int world) {
  std::vector<std::string> errors;
  const int tp = o.model.tensor_model_parallel_size, pp = o.parallel.pipeline_model_parallel_size;
  const int cp = o.parallel.context_parallel_size;
  const int dp = grid_errors(o, world, errors);  // 0 until the world divides evenly
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
                        : m.swiglu            ? " (8/3 x --hidden-size, a multiple of 64)"
                                              : " (4 x --hidden-size)"));
    if (!o.vision_model_type.empty())  // Note [tower tensor parallelism] (vision_encoder.cpp)
      for (std::string& e : o.vision_config().tensor_parallel_errors(tp))
        errors.push_back(std::move(e));
  }
  sequence_errors(o, errors);
  for (std::string& e : expert_rules(o)) errors.push_back(std::move(e));
  pipeline_errors(o, dp, errors);
  // --global-batch-size % --micro-batch-size alone is TrainOptions::validate's rule; this is
  // the data-parallel part of it.
  const int mb = o.micro_batch_size, gb = o.global_batch_size;
  if (dp > 1 && mb > 0 && gb > 0 && gb % mb == 0 && gb % (static_cast<int64_t>(mb) * dp) != 0)
    errors.push_back(
        "--global-batch-size " + str(gb) + " is not a multiple of --micro-batch-size " + str(mb) +
        " x data-parallel size " + str(dp) + " = " + str(static_cast<int64_t>(mb) * dp) +
        " (data-parallel size = world size " + str(world) + " / (TP " + str(tp) +
        (cp > 1 ? " x CP " + str(cp) : "") + " x PP " + str(pp) + "))");
  return errors;
}

TrainOptions with_default_global_batch(TrainOptions o, int world) {
  const int64_t model_parallel = static_cast<int64_t>(o.model.tensor_model_parallel_size) *
                                 o.parallel.context_parallel_size *
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
  layout.cp = o.parallel.context_parallel_size;
  layout.dp = world / (layout.tp * layout.cp * layout.pp);
  const int etp = o.parallel.expert_tensor_parallel_size;
  layout.etp = etp > 0 ? etp : layout.tp;
  layout.ep = o.parallel.expert_model_parallel_size;
  layout.edp = world / (layout.etp * layout.ep * layout.pp);
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
    const int stage_ranks = layout.world / layout.pp;
    for (int r = p * stage_ranks; r < (p + 1) * stage_ranks; r++) ranks.push_back(r);
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
                                {"cp", layout.cp},
                                {"ep", layout.ep},
                                {"etp", layout.etp},
                                {"edp", layout.edp},
                                {"groups",
                                 {{"tensor", layout.tensor_groups()},
                                  {"data", layout.data_groups()},
                                  {"pipeline", layout.pipeline_groups()},
                                  {"model", layout.model_groups()},
                                  {"embedding", layout.embedding_groups()},
                                  {"context", layout.context_groups()},
                                  {"data_context", layout.data_context_groups()},
                                  {"tensor_context", layout.tensor_context_groups()},
                                  {"expert", layout.expert_groups()},
                                  {"expert_tensor", layout.expert_tensor_groups()},
                                  {"expert_data", layout.expert_data_groups()},
                                  {"expert_tensor_model", layout.expert_tensor_model_groups()}}},
                                {"stages", stages}};
  return out.dump();
}

}  // namespace lattice
