// The planner's memory estimate: exact parameter counts per pipeline stage, Korthikanti et al.'s
// activation formula ("Reducing Activation Recomputation in Large Transformer Models", 2022)
// and the schedule's micro-batches in flight
// (docs/design-notes.md#parallel-layout-and-the-planner), for fp32, 16-bit and fp64 training.
// Non-goals: measured figures (the trainer's --log-memory), workspace.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <nlohmann/json.hpp>

#include "lattice/plan.h"

namespace lattice {

namespace {

// Korthikanti et al.'s formula counts 16-bit activations: fp32 takes twice the bytes, fp64
// four times.
double activation_scale(const std::string& precision) {
  return precision == "fp32" ? 2.0 : precision == "fp64" ? 4.0 : 1.0;
}

struct ParamCount {
  int64_t total = 0, replicated = 0;
};

// One TP rank's parameters on pipeline rank `p`. Per layer, with t = TP: QKV (3C, C) + 3C and
// FC1 (F, C) + F are split by rows, proj (C, C) and FC2 (C, F) by columns; the two LayerNorms
// (4C) and the row-parallel biases (2C) are whole on every TP rank.
ParamCount stage_parameters(const ModelConfig& m, const ParallelLayout& layout, int p) {
  const int64_t C = m.hidden_size, F = m.ffn(), t = layout.tp;
  const int64_t split = 3 * C * C + 3 * C + C * C + F * C + F + C * F;
  const int64_t layers = layout.stage_num_layers(p);
  ParamCount n;
  n.replicated = layers * 6 * C;
  n.total = layers * split / t + n.replicated;
  const int64_t word_embedding = static_cast<int64_t>(m.padded_vocab_size()) * C / t;
  if (layout.is_first_stage(p)) {
    n.total += word_embedding + m.max_positions() * C;  // position table: whole on every TP rank
    n.replicated += m.max_positions() * C;
  }
  if (layout.is_last_stage(p)) {
    if (!layout.is_first_stage(p)) n.total += word_embedding;  // the LM head's tied copy
    n.total += 2 * C;                                          // final LayerNorm
    n.replicated += 2 * C;
  }
  return n;
}

// Bytes one transformer layer keeps for one micro-batch, 16-bit formula (s b h)(34 + 5 a s / h)
// split as: 10 sbh outside TP regions (LayerNorm inputs, dropout masks), 24 sbh inside them,
// and 5 a s^2 b for the attention scores. TP divides the inner parts, sequence parallelism the
// rest; selective recompute drops the attention scores.
double layer_bytes(const TrainOptions& o, int t) {
  const ModelConfig& m = o.model;
  const double s = m.seq_length, b = o.micro_batch_size, h = m.hidden_size,
               a = m.num_attention_heads, sbh = s * b * h;
  const bool sp = o.parallel.sequence_parallel;
  const double attention = o.parallel.recompute_granularity == "selective" ? 0 : 5 * a * s / h;
  const double factor = sp ? (34 + attention) / t : 10 + (24 + attention) / t;
  return sbh * factor;
}

// The layer input full recomputation keeps: 2 sbh, split along the sequence with SP.
double checkpoint_bytes(const TrainOptions& o, int t) {
  const double sbh =
      static_cast<double>(o.model.seq_length) * o.micro_batch_size * o.model.hidden_size;
  return 2 * sbh / (o.parallel.sequence_parallel ? t : 1);
}

struct ChunkActivations {
  double per_micro_batch = 0;  // 16-bit bytes of one model chunk for one micro-batch
  double transient = 0;        // recomputed during one backward, alive once
};

// Full recomputation: `uniform` keeps the input of every group of N layers and recomputes one
// group at a time; `block` recomputes the first N layers of the chunk and stores the rest.
ChunkActivations chunk_activations(const TrainOptions& o, const ParallelLayout& layout, int p) {
  const int layers = layout.stage_num_layers(p) / layout.vpp, t = layout.tp;
  const double full = layer_bytes(o, t);
  const ParallelOptions& par = o.parallel;
  if (par.recompute_granularity != "full") return {layers * full, 0};
  const int n = std::min(std::max(par.recompute_num_layers, 1), layers);
  if (par.recompute_method == "block")
    return {n * checkpoint_bytes(o, t) + (layers - n) * full, full};
  const int groups = (layers + n - 1) / n;
  return {groups * checkpoint_bytes(o, t), n * full};
}

// Peak micro-batches in flight on pipeline rank p, as pipeline/schedule.cpp orders them: the
// warm-up forwards plus one (1F1B: min(pp - p - 1, M); interleaved: 2 (pp - p - 1) +
// (vpp - 1) pp chunk forwards, all of them when M == pp, as Megatron).
double in_flight(const ParallelLayout& layout, int p, int64_t micro_batches) {
  if (layout.vpp > 1) {
    const int64_t total = micro_batches * layout.vpp;
    const int64_t warmup =
        micro_batches == layout.pp ? total : 2 * (layout.pp - p - 1) + (layout.vpp - 1) * layout.pp;
    return static_cast<double>(std::min(total, warmup + 1)) / layout.vpp;
  }
  return static_cast<double>(std::min<int64_t>(micro_batches, layout.pp - p));
}

}  // namespace

std::string training_precision(const TrainOptions& o) {
  return o.bf16 ? "bf16" : o.fp16 ? "fp16" : o.fp64 ? "fp64" : "fp32";
}

// 16-bit training as Megatron's mixed precision: 16-bit weights, fp32 main grads (gradients
// are accumulated and reduced in fp32), fp32 master weights and AdamW moments.
ParameterBytes bytes_per_parameter(const std::string& precision) {
  if (precision == "bf16" || precision == "fp16") return {2, 4, 12};
  if (precision == "fp64") return {8, 8, 16};
  return {4, 4, 8};
}

MemoryEstimate estimate_memory(const TrainOptions& given, const ParallelLayout& layout) {
  const TrainOptions o = with_default_global_batch(given, layout.world);
  const ModelConfig& m = o.model;
  assert(m.vocab_size > 0 && m.tensor_model_parallel_size == layout.tp);
  const std::string precision = training_precision(o);
  const ParameterBytes per_param = bytes_per_parameter(precision);
  const double scale = activation_scale(precision);
  MemoryEstimate est;
  est.micro_batches = o.global_batch_size / (static_cast<int64_t>(o.micro_batch_size) * layout.dp);
  est.flops_per_iteration = flops_per_iteration(m, o.global_batch_size);
  est.flops_per_rank = est.flops_per_iteration / layout.world;

  const double s = m.seq_length, b = o.micro_batch_size, h = m.hidden_size, t = layout.tp;
  const bool sp = o.parallel.sequence_parallel;
  // First stage: the embedding dropout mask (sbh). Last stage: the final LayerNorm's and the
  // LM head's inputs (2 sbh each) in the formula's precision, and the logits in fp32 (4 sbV/t:
  // the cross-entropy keeps its softmax in fp32 whatever the training precision).
  const double embedding_extra = s * b * h / (sp ? t : 1);
  const double head_extra = 2 * s * b * h / (sp ? t : 1) + 2 * s * b * h;
  const double logits_bytes = (precision == "fp64" ? 8 : 4) * s * b * m.padded_vocab_size() / t;

  for (int p = 0; p < layout.pp; p++) {
    StageEstimate st;
    st.pp_rank = p;
    const ParamCount n = stage_parameters(m, layout, p);
    st.parameters = n.total;
    st.replicated_parameters = n.replicated;
    const size_t params = static_cast<size_t>(n.total);
    st.weight_bytes = params * per_param.weights;
    st.grad_bytes = params * per_param.grads;
    const size_t sharded = o.parallel.use_distributed_optimizer
                               ? (params + layout.dp - 1) / static_cast<size_t>(layout.dp)
                               : params;
    st.optimizer_bytes = sharded * per_param.optimizer;

    const ChunkActivations chunk = chunk_activations(o, layout, p);
    double per_micro_batch = layout.vpp * chunk.per_micro_batch;
    if (layout.is_first_stage(p)) per_micro_batch += embedding_extra;
    st.micro_batches_in_flight = in_flight(layout, p, est.micro_batches);
    double peak = st.micro_batches_in_flight * per_micro_batch + chunk.transient;
    double once = 0;
    if (layout.is_last_stage(p)) once = scale * head_extra + logits_bytes;
    st.activation_bytes_per_micro_batch =
        static_cast<size_t>(std::llround(scale * per_micro_batch + once));
    st.activation_bytes = static_cast<size_t>(std::llround(scale * peak + once));
    est.stages.push_back(st);
  }
  for (size_t i = 1; i < est.stages.size(); i++)
    if (est.stages[i].total_bytes() > est.stages[est.most_loaded].total_bytes())
      est.most_loaded = static_cast<int>(i);
  return est;
}

std::string plan_json(const ParallelLayout& layout, const MemoryEstimate& est, int indent) {
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const StageEstimate& st : est.stages)
    stages.push_back({{"pp_rank", st.pp_rank},
                      {"parameters", st.parameters},
                      {"replicated_parameters", st.replicated_parameters},
                      {"weight_bytes", st.weight_bytes},
                      {"grad_bytes", st.grad_bytes},
                      {"optimizer_bytes", st.optimizer_bytes},
                      {"activation_bytes_per_micro_batch", st.activation_bytes_per_micro_batch},
                      {"micro_batches_in_flight", st.micro_batches_in_flight},
                      {"activation_bytes", st.activation_bytes},
                      {"total_bytes", st.total_bytes()}});
  nlohmann::ordered_json out = nlohmann::ordered_json::parse(layout_json(layout));
  out["memory"] = {{"micro_batches", est.micro_batches},
                   {"flops_per_iteration", est.flops_per_iteration},
                   {"flops_per_rank", est.flops_per_rank},
                   {"most_loaded_pp_rank", est.most_loaded},
                   {"stages", stages}};
  return out.dump(indent);
}

}  // namespace lattice
