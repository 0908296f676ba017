// The planner's memory estimate: exact parameter counts per pipeline stage, the activations the
// engine's one model keeps (model/gpt.h: every buffer it takes per micro-batch, counted from
// the same shapes and recompute plan) and the schedule's micro-batches in flight
// (docs/design-notes.md#parallel-layout-and-the-planner), for fp32, 16-bit and fp64 training on
// the CPU or CUDA, for GPT-2 and the Llama family (query groups, SwiGLU, RMSNorm, RoPE, an
// untied head, no biases; issue 23) and MoE layers on the expert grid (ETP x EP x EDP; issue 25).
// Megatron's published formula (Korthikanti et al. 2022) is the comparison in test_planner, not the
// estimate. Workspace and communication buffers too (Note [workspace in the plan]). Non-goals:
// measured figures (the trainer's --log-memory).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <nlohmann/json.hpp>

#include "lattice/kernels.h"
#include "lattice/plan.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "optim/grad_buckets.h"
#include "parallel/model_chunks.h"
#include "pipeline/schedule.h"

namespace lattice {

namespace {

struct ParamCount {
  int64_t total = 0, replicated = 0;
  int64_t adapters = 0;              // LoRA's, included in total
  int64_t experts = 0, routers = 0;  // MoE layers', included in total (routers in replicated)
};

// One layer's parameters as the engine's ParamLayout holds them (Megatron-core's tensors): the
// elements split over TP (linear_qkv (W, C) and its bias (W), linear_fc1 ((2,) F, C) and its
// bias by rows, whole query groups per rank; linear_proj (C, C) and linear_fc2 (C, F) by
// columns) and those every TP rank holds whole (the two norms' weights, LayerNorm's biases,
// the row-parallel biases of proj and FC2). split + replicated is layer_parameters().
struct LayerParamCount {
  int64_t split = 0, replicated = 0;
};
// The attention and the norms alone: what an MoE layer keeps of the dense layer.
LayerParamCount attention_param_count(const ModelConfig& m) {
  const int64_t C = m.hidden_size, W = m.qkv_width();
  const int64_t norm = m.rms_norm() ? C : 2 * C;  // weight (and LayerNorm's bias)
  return {W * C + (m.qkv_bias() ? W : 0) + C * C, 2 * norm + (m.linear_bias() ? C : 0)};
}
// One MLP of width F: FC1 ((2) F, C) and its bias by rows, FC2 (C, F) by columns; FC2's bias
// whole.
LayerParamCount mlp_param_count(const ModelConfig& m, int64_t F) {
  const int64_t C = m.hidden_size;
  const int64_t up = m.swiglu ? 2 * F : F;  // FC1's rows: gate and up with SwiGLU
  return {up * C + (m.linear_bias() ? up : 0) + C * F, m.linear_bias() ? C : 0};
}
LayerParamCount layer_param_count(const ModelConfig& m) {
  const LayerParamCount a = attention_param_count(m), f = mlp_param_count(m, m.ffn());
  return {a.split + f.split, a.replicated + f.replicated};
}

// One MoE layer's MLP on one rank (Note [MoE layout] in model/param_layout.h, Megatron's expert
// grid): the router (E, C) whole on every rank, and E / EP local experts, each an MLP of width
// Fm split over ETP (mlp_param_count). The layer's attention and norms are the dense layer's.
struct MoeParamCount {
  int64_t router = 0, experts = 0, experts_replicated = 0;  // experts include their replicated
};
MoeParamCount moe_param_count(const ModelConfig& m, const ParallelLayout& layout) {
  const int64_t local = m.num_experts / std::max(layout.ep, 1);
  const LayerParamCount expert = mlp_param_count(m, m.moe_ffn());
  MoeParamCount n;
  n.router = static_cast<int64_t>(m.num_experts) * m.hidden_size;
  n.experts_replicated = local * expert.replicated;
  n.experts = local * (expert.split / std::max(layout.etp, 1)) + n.experts_replicated;
  return n;
}

// One layer's LoRA adapters (Note [LoRA] in model/param_layout.h) on one TP rank of t: a
// column-parallel target's A (r, C) whole and B (out, r) by rows, a row-parallel one's A
// (r, in) by columns and B (C, r) whole. Of them, replicated: the whole halves.
LayerParamCount layer_adapter_count(const ModelConfig& m, int64_t t) {
  LayerParamCount n;
  if (!m.lora()) return n;
  const int64_t r = m.lora_rank, C = m.hidden_size, F = m.ffn(), W = m.qkv_width();
  const int64_t up = m.swiglu ? 2 * F : F;
  auto column = [&](const char* name, int64_t out) {
    if (!m.lora_targets(name)) return;
    n.replicated += r * C;
    n.split += r * C + out * r / t;
  };
  auto row = [&](const char* name, int64_t in) {
    if (!m.lora_targets(name)) return;
    n.replicated += C * r;
    n.split += r * in / t + C * r;
  };
  column("linear_qkv", W);
  row("linear_proj", C);
  column("linear_fc1", up);
  row("linear_fc2", F);
  return n;  // split: the rank's whole count here
}

// One TP rank's parameters on pipeline rank `p`: its layers (layer_param_count, the split part
// / TP), the word embedding's vocabulary rows (Vp C / TP) and the position table (whole) on the
// first stage, the final norm (whole) on the last, and there too the LM head's rows: an untied
// output_layer (Vp C / TP, even with PP 1), or with a tied head and PP > 1 the word
// embedding's copy. Summed over a TP x PP grid counting the replicated ones once this is
// num_parameters() plus that tied copy.
ParamCount stage_parameters(const ModelConfig& m, const ParallelLayout& layout, int p) {
  const int64_t C = m.hidden_size, t = layout.tp;
  const LayerParamCount per_layer = layer_param_count(m);
  // MoE layers (Note [MoE layout] in model/param_layout.h) hold the dense layer's attention and
  // norms, the router and the rank's E / EP experts instead of the dense MLP.
  int64_t layers = 0, moe_layers = 0;
  for (int c = 0; c < layout.vpp; c++) {
    const ParallelLayout::LayerRange r = layout.stage_layers(p, c);
    for (int l = r.begin; l < r.end; l++) (m.is_moe_layer(l) ? moe_layers : layers)++;
  }
  ParamCount n;
  n.replicated = layers * per_layer.replicated;
  n.total = layers * per_layer.split / t + n.replicated;
  if (moe_layers > 0) {
    const LayerParamCount attention = attention_param_count(m);
    const MoeParamCount moe = moe_param_count(m, layout);
    n.experts = moe_layers * moe.experts;
    n.routers = moe_layers * moe.router;
    n.total += moe_layers * (attention.split / t + attention.replicated) + n.experts + n.routers;
    n.replicated += moe_layers * (attention.replicated + moe.experts_replicated) + n.routers;
  }
  const LayerParamCount adapters = layer_adapter_count(m, t);
  n.adapters = layers * adapters.split;
  n.total += n.adapters;
  n.replicated += layers * adapters.replicated;
  const int64_t vocabulary_rows = static_cast<int64_t>(m.padded_vocab_size()) * C / t;
  if (layout.is_first_stage(p)) {
    n.total += vocabulary_rows;
    if (m.learned_positions()) {  // RoPE and "none" have no table
      n.total += m.max_positions() * C;
      n.replicated += m.max_positions() * C;
    }
  }
  if (layout.is_last_stage(p)) {
    if (!m.tied_output() || !layout.is_first_stage(p)) n.total += vocabulary_rows;
    const int64_t final_norm = m.rms_norm() ? C : 2 * C;
    n.total += final_norm;
    n.replicated += final_norm;
  }
  return n;
}

// Bytes of the one model's element types (model/gpt.h): A the compute type of the
// activations, G its accumulation type (LayerNorm statistics, the attention's saved tensor,
// logits, losses).
struct ElementBytes {
  double a = 4, g = 4;
};
ElementBytes element_bytes(const std::string& precision) {
  if (precision == "bf16" || precision == "fp16") return {2, 4};
  if (precision == "fp64") return {8, 8};
  return {4, 4};
}

// The shapes of one model chunk (GptModel's): N = B*T rows, R of them held in the residual stream
// (N/t with sequence parallelism), this rank's C/t, F/t, query heads and vocabulary rows, its
// QKV width W/t ((NH + 2 G) head size / t) and FC1 width U/t (2 F / t with SwiGLU, else F / t),
// and the statistics each norm keeps per row (LayerNorm: mean and rstd; RMSNorm: rstd). With
// context parallelism a rank holds T = --seq-length / CP tokens of each sequence, whose queries
// still attend over Tk = --seq-length keys (Megatron's sequence split); the ring's own buffers
// (the travelling keys and values, kCommBuffers, and its scratch) are not counted.
struct ChunkShape {
  double B, T, Tk, N, R, C, Ct, Ft, Ht, Vt, Wt, Ut, norm_stats;
};
ChunkShape chunk_shape(const TrainOptions& o, int t) {
  const ModelConfig& m = o.model;
  const double B = o.micro_batch_size, Tk = m.seq_length;
  const double T = Tk / std::max(o.parallel.context_parallel_size, 1), N = B * T;
  const double R = o.parallel.sequence_parallel ? N / t : N;
  const double F = m.ffn();
  return {B,
          T,
          Tk,
          N,
          R,
          static_cast<double>(m.hidden_size),
          static_cast<double>(m.hidden_size) / t,
          F / t,
          static_cast<double>(m.num_attention_heads) / t,
          static_cast<double>(m.padded_vocab_size()) / t,
          static_cast<double>(m.qkv_width()) / t,
          (m.swiglu ? 2 * F : F) / t,
          m.rms_norm() ? 1.0 : 2.0};
}

// Elements of the attention's saved tensor per layer (GptModel::attention_saved_elems): the (B,
// heads, T) log-sum-exps, on every device and with context parallelism's ring alike (Note
// [attention keeps log-sum-exps] in kernels/cpu/attention.cpp).
double attention_saved(const ChunkShape& d) { return d.B * d.Ht * d.T; }

// One layer's activations of one micro-batch (GptModel::take_layer_acts): ln1, res_mid, ln2
// (R, C); qkv (N, W/t) and the attention output (N, C/t); FC1's output (N, U/t) and the
// activation's (GELU, or SwiGLU's silu(gate) * up) (N, F/t); the two norms' statistics (R
// each) and, unless dropped, the attention's saved tensor. RoPE keeps nothing per micro-batch.
// GPT-2 (W = 3C, U = F, LayerNorm): 3 R C + N (4 C + 2 F) / t and 4 R, as before issue 23.
double layer_bytes(const ElementBytes& e, const ChunkShape& d, double saved) {
  return e.a * (3 * d.R * d.C + d.N * (d.Wt + d.Ct + d.Ut + d.Ft)) +
         e.g * (2 * d.norm_stats * d.R + saved);
}

// One MoE layer's sizes on this rank (Note [MoE layer] in model/gpt_moe.cpp): E experts, the
// routes of the rank's N tokens (N k), the expert rows S (StageEstimate::expert_rows) and each
// expert's FC1 / activation widths over ETP (Fm' / ETP, Fm / ETP).
struct MoeShape {
  double E = 0, routes = 0, S = 0, Fmt = 0, Umt = 0;
  int ep = 1;
};

// Rows a rank's experts hold per MoE layer and micro-batch (StageEstimate::expert_rows states
// the rule): N k with EP 1, what gpt.cpp allocates; the worst case with EP > 1, capped by the
// capacity factor. N: the tokens each EP rank routes (N / TP with expert TP 1 under TP, Note
// [expert tensor parallelism 1] in model/gpt_moe.cpp).
int64_t expert_rows(const ModelConfig& m, int ep, int64_t N) {
  const int64_t E = m.num_experts, k = m.moe_router_topk, routes = N * k;
  if (ep <= 1) return routes;
  int64_t rows = N * ep * std::min<int64_t>(k, E / ep);
  if (m.moe_expert_capacity_factor > 0) {
    const double per_expert =
        std::ceil(static_cast<double>(routes) / E * m.moe_expert_capacity_factor);
    rows = std::min(rows, E * static_cast<int64_t>(per_expert));
  }
  return rows;
}

// The parts a micro-batch's tokens are routed in per TP group (ModelShard::moe_row_parts): TP /
// ETP with an expert TP below TP (each expert-TP group routes N ETP / TP of them), else 1.
int moe_row_parts(const ParallelLayout& layout) {
  return layout.etp >= 1 && layout.etp < layout.tp ? layout.tp / layout.etp : 1;
}

MoeShape moe_shape(const TrainOptions& o, const ParallelLayout& layout, const ChunkShape& d) {
  const ModelConfig& m = o.model;
  const double Fm = m.moe_ffn(), etp = std::max(layout.etp, 1);
  MoeShape s;
  s.E = m.num_experts;
  s.routes = d.N * m.moe_router_topk;
  s.ep = std::max(layout.ep, 1);
  // EP 1 allocates the N k routes' rows whatever the expert TP (gpt.cpp).
  const double routed = layout.ep > 1 ? d.N / moe_row_parts(layout) : d.N;
  s.S = static_cast<double>(expert_rows(m, layout.ep, static_cast<int64_t>(routed)));
  s.Fmt = Fm / etp;
  s.Umt = (m.swiglu ? 2 * Fm : Fm) / etp;
  return s;
}

// One MoE layer's MLP activations of one micro-batch (take_layer_acts with moe): FC1's and the
// activation's outputs for the S expert rows (at least a dense layer's, so that the recompute
// scratch serves both), the router's probabilities (N, E) in G, the routes, their weights (G),
// slots and rows (int32), the two per-expert counts (int32; with EP > 1 every EP rank's too),
// the expert rows' input (S, C) and the routes' outputs (N k, C). The attention and norms are
// layer_bytes' without the dense MLP.
double moe_mlp_bytes(const ElementBytes& e, const ChunkShape& d, const MoeShape& s) {
  return e.a * (std::max(s.S * s.Umt, d.N * d.Ut) + std::max(s.S * s.Fmt, d.N * d.Ft) +
                (s.S + s.routes) * d.C) +
         e.g * (d.N * s.E + s.routes) +
         sizeof(int32_t) * (3 * s.routes + 2 * s.E + (s.ep > 1 ? s.ep * s.E : 0));
}
double moe_layer_bytes(const ElementBytes& e, const ChunkShape& d, const MoeShape& s,
                       double saved) {
  return layer_bytes(e, d, saved) - e.a * d.N * (d.Ut + d.Ft) + moe_mlp_bytes(e, d, s);
}

// The MoE workspace GptModel::allocate takes once per model chunk with an MoE layer: the router
// logits (N, E), the route weights' grads (N k, G), the routes' rows' grads (N k, C) and the
// activation's for the expert rows (S, Fm / ETP; SwiGLU's gate and up too, 2 S Fm / ETP), the
// chunk's L load-balancing losses (G). With EP > 1 the all-to-alls' buffers (Note [expert
// parallelism] in model/gpt_moe.cpp): the rank's own routes' rows going out (N k, C), and the
// rows its experts receive and hold regrouped (2 S C).
double dispatch_bytes(const ElementBytes& e, const ChunkShape& d, const MoeShape& s, int layers,
                      int ep, bool swiglu) {
  double bytes = e.a * (d.N * s.E + s.routes * d.C + s.S * s.Fmt + (swiglu ? 2 * s.S * s.Fmt : 0)) +
                 e.g * (s.routes + layers);
  if (ep > 1) bytes += e.a * (s.routes + 2 * s.S) * d.C;
  return bytes;
}

struct ChunkActivations {
  double per_micro_batch = 0;      // bytes of one model chunk for one micro-batch
  double moe_per_micro_batch = 0;  // of them, the MoE layers' MLP part
  double once = 0;                 // the recomputed layers' scratch, shared by every micro-batch
  double dispatch = 0;             // the MoE workspace (dispatch_bytes)
};

// Model chunk `shard` as GptModel::new_activations and allocate take it: tokens, targets and
// positions (packed sequences),
// the residual stream (L + 1 rows of (R, C): the input and every layer's output), the layers
// the recompute plan keeps (full recomputation keeps only the residual input of a recomputed
// layer and rebuilds the layer in a scratch of the largest group's layers, MoE-sized when the
// chunk has an MoE layer), and on the last chunk the final norm and its statistics, the logits
// in G (and their 16-bit copy) and the token losses.
ChunkActivations chunk_activations(const TrainOptions& o, const ParallelLayout& layout,
                                   const ModelShard& shard) {
  const int t = layout.tp;
  const ChunkShape d = chunk_shape(o, t);
  const ElementBytes e = element_bytes(compute_precision(o));
  const ParallelOptions& par = o.parallel;
  const ModelConfig& m = o.model;
  const int layers = shard.num_layers(m);
  const RecomputePlan plan = RecomputePlan::make(par.recompute_granularity, par.recompute_method,
                                                 par.recompute_num_layers, layers);
  const double saved = attention_saved(d);
  const MoeShape s = m.moe() ? moe_shape(o, layout, d) : MoeShape{};
  ChunkActivations c;
  c.per_micro_batch = 3 * d.N * sizeof(int32_t) + e.a * (layers + 1) * d.R * d.C;
  bool any_moe = false;
  for (int l = 0; l < layers; l++) {
    const bool moe = m.is_moe_layer(shard.layer_begin + l);
    any_moe = any_moe || moe;
    if (plan.recomputed(l)) continue;
    c.per_micro_batch += moe ? moe_layer_bytes(e, d, s, saved) : layer_bytes(e, d, saved);
    if (moe) c.moe_per_micro_batch += moe_mlp_bytes(e, d, s);
  }
  if (shard.post) {
    c.per_micro_batch += e.a * d.R * d.C + e.g * (d.norm_stats * d.R + d.N * d.Vt + d.N);
    if (e.a != e.g) c.per_micro_batch += e.a * d.N * d.Vt;
  }
  c.once = plan.max_group * (any_moe ? moe_layer_bytes(e, d, s, saved) : layer_bytes(e, d, saved));
  if (any_moe) c.dispatch = dispatch_bytes(e, d, s, layers, layout.ep, m.swiglu);
  // Expert TP 1 under TP without sequence parallelism: this rank's rows before their all-gather.
  if (any_moe && layout.etp == 1 && layout.tp > 1 && !shard.sequence_parallel)
    c.dispatch += e.a * d.N / moe_row_parts(layout) * d.C;
  return c;
}

// Note [workspace in the plan]: besides what a micro-batch keeps (chunk_activations), each model
// chunk takes scratch once (GptModel::allocate, kWorkspace) and, per micro-batch its pool holds,
// the pipeline's gradient rows (take_activations, kCommBuffers); with context parallelism its
// ring takes its own (RingAttention's constructor and workspace()). Counted here from the same
// shapes as the engine takes them, so that `lattice plan` and the trainer's --log-memory agree to
// the byte (test_parallel_memory); MoE's dispatch buffers and a tower's scratch are counted by
// their own estimates. On one rank of stage p, once: the trainer's token losses (N x M in G)
// and its found-inf flag (4 bytes), each chunk's optimizer's norm (8 bytes); on the CPU the
// distributed optimizer's reduce-scatter shards (GradReducer, G), each rank's own
// (shard_states). The CPU's attention workspace is per thread: kernels::attention_workspace_elems
// (three blocks of 64 rows of T, the head's keys and values packed), the ring's
// kernels::attention_block_workspace_elems with T its local rows.
struct ChunkScratch {
  double workspace = 0;
  double comm = 0;  // but the distributed optimizer's shards, per rank
};

ChunkScratch chunk_scratch(const TrainOptions& o, const ParallelLayout& layout,
                           const ModelShard& shard, int pool, bool frozen) {
  const int t = layout.tp;
  const ChunkShape d = chunk_shape(o, t);
  const ElementBytes e = element_bytes(compute_precision(o));
  const ModelConfig& m = o.model;
  const bool cuda = o.device == "cuda";
  const double threads = planned_cpu_threads(o);
  ChunkScratch s;
  double& ws = s.workspace;
  if (shard.post && t > 1) ws += d.N * (2 * e.g + sizeof(double));  // row max, target, sum exp
  if (!shard.post) ws += 2 * d.N * e.g;  // the discarded norm's statistics
  // proj_out, fc2_out, d_res, d_c (R, C); d_f (N, F/t), d_qkv (N, W/t), d_atty (N, C/t); with
  // sequence parallelism the gathered and full rows (N, C); SwiGLU's d_up (N, 2 F/t).
  ws += e.a * (4 * d.R * d.C + d.N * (d.Ft + d.Wt + d.Ct));
  if (shard.sequence_parallel) ws += e.a * 2 * d.N * d.C;
  if (m.swiglu) ws += e.a * 2 * d.N * d.Ft;
  // The attention's: the CPU kernel's per thread (kernels.h).
  const double cpu_attention =
      threads * kernels::attention_workspace_elems(static_cast<int>(d.T), m.head_size());
  ws += e.g * (cuda ? d.B * d.Ht * d.T : cpu_attention);
  if (m.lora()) {  // the adapters' input, its gradient, hidden rows and output (Note [LoRA])
    const double K = std::max(d.C, d.Ft), O = std::max({d.Wt, d.Ut, d.C});
    const double Nr = d.N * m.lora_rank;
    ws += e.a * (2 * d.N * K + 2 * Nr + d.N * O) + (e.a != e.g ? e.g * Nr : 0);
  }
  if (frozen) ws += 2 * d.C * e.g;  // a frozen norm's discarded gradients
  // The pipeline's gradient rows (R, C): sent to the previous stage, received from the next.
  s.comm += pool * e.a * d.R * d.C * ((shard.pre ? 0 : 1) + (shard.post ? 0 : 1));
  if (layout.cp > 1) {  // the ring (RingAttention): T here is the rank's T / CP rows
    const double HS = d.C / m.num_attention_heads;
    const double Gt = (d.Wt / HS - d.Ht) / 2;  // query groups on this TP rank
    const double kv = d.B * d.T * 2 * Gt * HS, rows = d.B * d.T;
    ws += sizeof(int32_t) * d.Tk + e.g * d.B * d.Ht * d.T;  // positions, delta
    if (e.a != e.g) ws += e.g * rows * (2 * d.Ht + 2 * Gt) * HS;  // fp32 accumulators
    const int Tl = static_cast<int>(d.T);
    ws += e.g * (cuda ? 1 : threads * kernels::attention_block_workspace_elems(Tl, Tl, HS));
    s.comm += 2 * (e.a + e.g) * kv + e.g * kv;
  }
  return s;
}

// Note [FLOPs with frozen weights]: the planner's model FLOPs are Megatron's count
// (flops_per_iteration: every GEMM's forward, causal attention counted half, a backward of twice
// the forward) for what the engine computes. A frozen matrix (--freeze-LM: every matrix of the
// language model; LoRA: every base matrix, the LM head too) gets no weight gradient (its
// gradient pointer is null, so matmul_backward skips dweight), but its input gradient still runs
// (on to the adapters below, or the projector; the engine runs it through the first layer too),
// so its backward is once its forward; the attention products have no weights and keep their
// twice. LoRA's adapters add per target A (r, in) and B (out, r): forward 2 r (in + out) a token
// (lora_forward_flops_per_token), backward twice that (the input and weight gradient of each).
// Left out, as Megatron's count leaves recomputation out: the A product each adapter's backward
// runs again (its hidden A x is recomputed, not kept; docs/lora.md), and under TP the halves every
// rank runs whole (A of a column-parallel target, B of a row-parallel one): the model is counted
// once. The step time (step_estimate.cpp) counts both, since they take time. The embeddings'
// backward is a scatter (no FLOPs counted), skipped when they are frozen.
double language_model_flops(const ModelConfig& m, int64_t global_batch) {
  const double all = flops_per_iteration(m, global_batch);
  if (!m.freeze_lm && !m.lora()) return all;
  const TokenFlops f = forward_flops_per_token(m);
  const LoraFlops adapter = lora_forward_flops_per_token(m);
  const double tokens = static_cast<double>(global_batch) * m.seq_length;
  const double weight_gradients = tokens * (m.num_layers * (f.layer - f.attention) + f.head);
  return all - weight_gradients + 3 * tokens * m.num_layers * (adapter.a + adapter.b);
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

// Note [distributed optimizer in the plan]: the engine's distributed optimizer
// (optim/optimizer_shard.h) cuts each model chunk's whole arena, frozen tensors and alignment
// gaps included, into buckets (split_buckets), each bucket into one contiguous shard per rank of
// its group (shard_counts: DP x CP for dense buckets, expert-data for expert-parallel ones), and
// a rank keeps moments for the trained elements inside its shards alone. With frozen tensors
// (LoRA, --freeze-LM, --freeze-ViT) the trained elements are not spread evenly: a rank whose
// shards hold the adapters or the projector keeps their moments, another none. The planner
// counts every rank's trained elements in its shards from the same ParamLayout and cut, with a
// prefix sum over the tensors instead of optimizer_shard's pieces (a plan of a large cluster
// asks for every rank).
struct ShardStates {
  std::vector<size_t> dense;    // (DP x CP) by data-context rank: elements in dense buckets
  std::vector<size_t> experts;  // (EDP) by expert-data rank: elements in expert buckets
  // The same ranks' shards of the buckets holding a trained tensor, whole, where the bucket's
  // group has several ranks: the CPU reducer's receive buffers (Note [workspace in the plan]).
  std::vector<size_t> dense_buffers, expert_buffers;
};

// Whether bucket `b` of `t` holds a tensor that trains (the reducer moves it, and on the CPU
// takes a receive buffer for it with the distributed optimizer).
bool bucket_trains(const std::vector<ParamTensor>& t, const BucketSpan& b) {
  for (int i = b.first_tensor; i < b.last_tensor; i++)
    if (!t[i].frozen) return true;
  return false;
}

// World rank `rank`'s count of ShardStates' by-rank vectors: its data-context rank's dense
// entry, plus on the expert grid its expert-data rank's.
size_t rank_share(const ParallelLayout& layout, int rank, const std::vector<size_t>& dense,
                  const std::vector<size_t>& experts) {
  const ParallelLayout::Coord c = layout.coord(rank);
  return dense[c.cp + layout.cp * c.dp] +
         (layout.expert_grid() ? experts[layout.expert_coord(rank).edp] : 0);
}

// Trained elements of `layout` below arena offset x, from the tensors' offsets (sorted) and the
// trained elements before each (prefix).
size_t trained_below(const ParamLayout& layout, const std::vector<size_t>& prefix, size_t x) {
  const std::vector<ParamTensor>& t = layout.tensors();
  const auto after = std::upper_bound(t.begin(), t.end(), x,
                                      [](size_t v, const ParamTensor& p) { return v < p.offset; });
  if (after == t.begin()) return 0;
  const size_t i = static_cast<size_t>(after - t.begin()) - 1;
  return prefix[i] + (t[i].frozen ? 0 : std::min(x - t[i].offset, t[i].numel));
}

// Model chunk c of stage p as the trainer builds it (its experts' grid too; every EP rank's
// are alike).
ParamLayout chunk_layout(const TrainOptions& o, const ParallelLayout& layout, int p, int c) {
  ModelShard shard = shard_of(layout, {0, 0, p}, c, o.parallel.sequence_parallel);
  shard.ep_size = layout.ep;
  shard.etp_size = layout.etp;
  return ParamLayout(o.model, shard);
}

ShardStates shard_states(const TrainOptions& o, const ParallelLayout& layout, int p) {
  const int shards = layout.dp * layout.cp, edp = std::max(layout.edp, 1);
  ShardStates s{std::vector<size_t>(shards), std::vector<size_t>(edp), std::vector<size_t>(shards),
                std::vector<size_t>(edp)};
  const size_t bucket_elems = ddp_bucket_elems(o.parallel, shards);
  for (int c = 0; c < layout.vpp; c++) {
    const ParamLayout chunk = chunk_layout(o, layout, p, c);
    const std::vector<ParamTensor>& t = chunk.tensors();
    std::vector<size_t> prefix(t.size() + 1, 0);
    for (size_t i = 0; i < t.size(); i++)
      prefix[i + 1] = prefix[i] + (t[i].frozen ? 0 : t[i].numel);
    for (const BucketSpan& b : split_buckets(chunk, bucket_elems)) {
      const bool expert = t[b.first_tensor].expert_parallel;
      std::vector<size_t>& out = expert ? s.experts : s.dense;
      std::vector<size_t>& buffers = expert ? s.expert_buffers : s.dense_buffers;
      const bool trained = bucket_trains(t, b);
      size_t begin = b.begin;
      const std::vector<size_t> counts = shard_counts(b.end - b.begin, expert ? edp : shards);
      for (size_t r = 0; r < counts.size(); r++) {
        out[r] +=
            trained_below(chunk, prefix, begin + counts[r]) - trained_below(chunk, prefix, begin);
        if (trained && counts.size() > 1) buffers[r] += counts[r];
        begin += counts[r];
      }
    }
  }
  return s;
}

// The elements the data-parallel reduction of stage p moves (StageEstimate's reduced_*): the
// buckets of every model chunk that hold a trained tensor, cut as the reducer cuts them.
std::pair<size_t, size_t> reduced_elements(const TrainOptions& o, const ParallelLayout& layout,
                                           int p) {
  const size_t bucket_elems = ddp_bucket_elems(o.parallel, layout.dp * layout.cp);
  size_t dense = 0, experts = 0;
  for (int c = 0; c < layout.vpp; c++) {
    const ParamLayout chunk = chunk_layout(o, layout, p, c);
    const std::vector<ParamTensor>& t = chunk.tensors();
    for (const BucketSpan& b : split_buckets(chunk, bucket_elems))
      if (bucket_trains(t, b))
        (t[b.first_tensor].expert_parallel ? experts : dense) += b.end - b.begin;
  }
  return {dense, experts};
}

}  // namespace

int planned_cpu_threads(const TrainOptions& o) {
  return o.threads > 0 ? o.threads : kernels::num_threads();
}

std::string training_precision(const TrainOptions& o) {
  return o.bf16 ? "bf16" : o.fp16 ? "fp16" : o.fp64 ? "fp64" : "fp32";
}

std::string compute_precision(const TrainOptions& o) {
  if (o.fp16 && o.device != "cuda") return "fp32";  // Trainer<float> with the loss scaler
  return training_precision(o);
}

// 16-bit training as Megatron's mixed precision (16-bit weights, fp32 main grads accumulated
// and reduced in fp32, fp32 master weights and AdamW moments), in the categories the engine
// measures them in: its weights are the 16-bit compute copy, its optimizer state the fp32
// master and the moments (Note [master weights in the optimizer] in optim/adamw.h), 2 + 4 + 12
// as Megatron counts them.
ParameterBytes bytes_per_parameter(const std::string& precision) {
  if (precision == "bf16" || precision == "fp16") return {2, 4, 12};
  if (precision == "fp64") return {8, 8, 16};
  return {4, 4, 8};
}

namespace {
// The language model's FLOPs per iteration and the tower's (`vision`, estimate_vision's) over
// `o`'s global batch.
double flops_per_iteration(const TrainOptions& o, const VisionEstimate& vision) {
  return language_model_flops(o.model, o.global_batch_size) + vision.flops_per_iteration;
}
}  // namespace

double model_flops_per_iteration(const TrainOptions& given, const ParallelLayout& layout) {
  const TrainOptions o = with_default_global_batch(given, layout.world);
  return flops_per_iteration(o, estimate_vision(o, layout));
}

MemoryEstimate estimate_memory(const TrainOptions& given, const ParallelLayout& layout) {
  const TrainOptions o = with_default_global_batch(given, layout.world);
  const ModelConfig& m = o.model;
  assert(m.vocab_size > 0 && m.tensor_model_parallel_size == layout.tp);
  const std::string precision = compute_precision(o);
  const ParameterBytes per_param = bytes_per_parameter(precision);
  MemoryEstimate est;
  est.micro_batches = o.global_batch_size / (static_cast<int64_t>(o.micro_batch_size) * layout.dp);
  // A vision tower (Note [vision tower in the plan] in vision_estimate.cpp): its parameters
  // and activations on the first stage, its FLOPs in the model's.
  est.vision = estimate_vision(o, layout);
  est.flops_per_iteration = flops_per_iteration(o, est.vision);
  est.flops_per_rank = est.flops_per_iteration / layout.world;

  for (int p = 0; p < layout.pp; p++) {
    StageEstimate st;
    st.pp_rank = p;
    ParamCount n = stage_parameters(m, layout, p);
    const int64_t language_model = n.total;
    if (layout.is_first_stage(p)) {  // this TP rank's share (Note [vision tower in the plan])
      st.vision_parameters = est.vision.parameters;
      n.total += est.vision.parameters;
      n.replicated += est.vision.replicated_parameters;
    }
    st.parameters = n.total;
    st.replicated_parameters = n.replicated;
    const size_t params = static_cast<size_t>(n.total);
    st.weight_bytes = params * per_param.weights;
    // RoPE's cos and sin tables (T, rotary_dim / 2) in the master type, one pair per model
    // chunk (GptModel keeps them with the weights).
    if (m.rope())
      st.weight_bytes += static_cast<size_t>(layout.vpp) * 2 * m.seq_length * (m.rotary_dim() / 2) *
                         (precision == "fp64" ? 8 : 4);
    // With context parallelism each model chunk keeps its rows' global positions, (B, T / CP)
    // int32 (Note [context parallelism] in model/gpt_layer.cpp), with the weights too.
    if (layout.cp > 1)
      st.weight_bytes += static_cast<size_t>(layout.vpp) * o.micro_batch_size *
                         (m.seq_length / layout.cp) * sizeof(int32_t);
    // The gradient arena holds the trained tensors alone (a tower its whole block) when any are
    // frozen (Note [LoRA] in model/param_layout.h): each model chunk's, from its layout.
    st.grad_bytes = params * per_param.grads;
    if (m.freezes_any()) {
      size_t grads = 0;
      for (int c = 0; c < layout.vpp; c++) grads += chunk_layout(o, layout, p, c).grad_numel();
      st.grad_bytes = grads * per_param.grads;
    }
    // The optimizer keeps moments for the trained parameters alone (ParamLayout's frozen flags:
    // LoRA trains the adapters, --freeze-LM none of the language model; a tower's projector
    // always, its encoder unless frozen).
    st.trainable_parameters = m.lora() ? n.adapters : m.freeze_lm ? 0 : language_model;
    if (layout.is_first_stage(p)) st.trainable_parameters += est.vision.trained_parameters;
    // The moments (per_param.optimizer) for the trained ones, and a 16-bit run's fp32 master of
    // the same elements (Note [master weights in the optimizer] in optim/adamw.h: 2 + 4 + 12
    // bytes a trained parameter, 2 a frozen one).
    // The moments shard over DP x CP, the ranks that reduce the dense gradients (Megatron's
    // distributed optimizer shards over its data-parallel group with context parallelism).
    // Expert parameters shard over EDP (Megatron's expert data-parallel group); when EDP is
    // DP x CP (EP 1, ETP = TP) the engine shards the one arena, rounded once.
    const size_t shards = static_cast<size_t>(layout.dp) * static_cast<size_t>(layout.cp);
    const size_t expert_shards = static_cast<size_t>(std::max(layout.edp, 1));
    const bool distributed = o.parallel.use_distributed_optimizer && shards > 1;
    auto shard = [&](size_t count, size_t over) {
      return distributed ? (count + over - 1) / over : count;
    };
    const size_t moments = per_param.optimizer;
    const size_t experts = static_cast<size_t>(n.experts);
    const size_t trained = static_cast<size_t>(st.trainable_parameters);
    // Every parameter trains: the even split, the DP x CP shards and the experts' over EDP.
    // With frozen tensors (or a tower, whose alignment gaps `parameters` counts) each rank's own
    // count (slower: it cuts the layout, so the layout search of a text model, which plans full
    // training, keeps the even split).
    const bool frozen = trained < params;
    // The CPU's reducer takes a receive buffer for each rank's shards (Note [workspace in the
    // plan]), which differ by rank: every rank's count then, as with frozen tensors.
    const bool shard_buffers = distributed && o.device != "cuda";
    const ShardStates states =
        distributed && (frozen || shard_buffers) ? shard_states(o, layout, p) : ShardStates{};
    const int per_stage = layout.tp * layout.cp * layout.dp;
    if (!distributed) {
      st.optimizer_bytes = trained * moments;
    } else if (!frozen) {
      st.optimizer_bytes =
          experts == 0 || expert_shards == shards
              ? shard(trained, shards) * moments
              : (shard(trained - experts, shards) + shard(experts, expert_shards)) * moments;
    } else {
      // Note [distributed optimizer in the plan]: each rank's moments, the most loaded's in
      // optimizer_bytes. The stage's ranks are world ranks [p S, (p + 1) S), S = TP CP DP.
      st.optimizer_bytes_by_rank.resize(per_stage);
      size_t most = 0;
      for (int i = 0; i < per_stage; i++) {
        const size_t elements = rank_share(layout, p * per_stage + i, states.dense, states.experts);
        st.optimizer_bytes_by_rank[i] = elements * moments;
        most = std::max(most, elements);
      }
      st.optimizer_bytes = most * moments;
    }
    st.expert_parameters = n.experts;
    st.router_parameters = n.routers;
    if (frozen) {
      const auto [dense, expert] = reduced_elements(o, layout, p);
      st.reduced_dense_parameters = static_cast<int64_t>(dense);
      st.reduced_expert_parameters = static_cast<int64_t>(expert);
    } else {
      st.reduced_dense_parameters = st.parameters - n.experts;
      st.reduced_expert_parameters = n.experts;
    }

    // Every model chunk of the stage (virtual stages: one per VPP), each with as many
    // micro-batches as its pool in the executor grows to (chunk_peaks: each chunk's own peak in
    // the schedule; interleaved, their sum can exceed micro_batches_in_flight * VPP).
    const std::vector<int> peaks =
        chunk_peaks(layout.pp, p, layout.vpp, static_cast<int>(est.micro_batches));
    double per_micro_batch = 0, peak = 0, moe = 0, dispatch = 0;
    for (int c = 0; c < layout.vpp; c++) {
      const ChunkActivations chunk = chunk_activations(
          o, layout, shard_of(layout, {0, 0, p}, c, o.parallel.sequence_parallel));
      per_micro_batch += chunk.per_micro_batch;
      moe += chunk.moe_per_micro_batch;
      peak += peaks[c] * chunk.per_micro_batch + chunk.once;
      dispatch += chunk.dispatch;
    }
    // Note [workspace in the plan]: the trainer's token losses and found-inf flag, each
    // chunk's optimizer norm, its scratch and its communication buffers.
    const ElementBytes e = element_bytes(precision);
    double workspace = e.g * static_cast<double>(est.micro_batches) *
                           (static_cast<double>(o.micro_batch_size) * m.seq_length / layout.cp) +
                       sizeof(float) + layout.vpp * sizeof(double);
    double comm = 0;
    for (int c = 0; c < layout.vpp; c++) {
      const bool frozen_chunk = m.freezes_any() && chunk_layout(o, layout, p, c).has_frozen();
      const ChunkScratch chunk = chunk_scratch(
          o, layout, shard_of(layout, {0, 0, p}, c, o.parallel.sequence_parallel), peaks[c],
          frozen_chunk);
      workspace += chunk.workspace;
      comm += chunk.comm;
    }
    st.workspace_bytes = static_cast<size_t>(std::llround(workspace));
    st.comm_buffer_bytes = static_cast<size_t>(std::llround(comm));
    if (shard_buffers) {
      st.comm_buffer_bytes_by_rank.resize(per_stage);
      for (int i = 0; i < per_stage; i++) {
        const size_t elements = rank_share(layout, p * per_stage + i, states.dense_buffers,
                                           states.expert_buffers);
        st.comm_buffer_bytes_by_rank[i] =
            st.comm_buffer_bytes + elements * static_cast<size_t>(e.g);
      }
      st.comm_buffer_bytes = *std::max_element(st.comm_buffer_bytes_by_rank.begin(),
                                               st.comm_buffer_bytes_by_rank.end());
    }
    if (layout.is_first_stage(p)) {  // the tower runs in the first chunk, the pre one
      // Note [vision tower in the plan]: its buffers once, the images' inputs per micro-batch.
      const double tower = static_cast<double>(est.vision.activation_bytes_per_micro_batch);
      const double inputs = static_cast<double>(est.vision.input_bytes_per_micro_batch);
      st.vision_activation_bytes_per_micro_batch =
          est.vision.activation_bytes_per_micro_batch + est.vision.input_bytes_per_micro_batch;
      st.vision_workspace_bytes = est.vision.workspace_bytes;
      per_micro_batch += tower + inputs;
      peak += tower + peaks[0] * inputs;
    }
    st.micro_batches_in_flight = in_flight(layout, p, est.micro_batches);
    st.activation_bytes_per_micro_batch = static_cast<size_t>(std::llround(per_micro_batch));
    st.activation_bytes = static_cast<size_t>(std::llround(peak));
    st.moe_activation_bytes_per_micro_batch = static_cast<size_t>(std::llround(moe));
    st.dispatch_bytes = static_cast<size_t>(std::llround(dispatch));
    if (m.moe()) {
      const int64_t N = static_cast<int64_t>(o.micro_batch_size) * m.seq_length /
                        std::max(o.parallel.context_parallel_size, 1);
      st.expert_rows = expert_rows(m, layout.ep, layout.ep > 1 ? N / moe_row_parts(layout) : N);
      st.expert_rows_expected = N * m.moe_router_topk;
    }
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
                      {"trainable_parameters", st.trainable_parameters},
                      {"reduced_dense_parameters", st.reduced_dense_parameters},
                      {"reduced_expert_parameters", st.reduced_expert_parameters},
                      {"activation_bytes_per_micro_batch", st.activation_bytes_per_micro_batch},
                      {"micro_batches_in_flight", st.micro_batches_in_flight},
                      {"activation_bytes", st.activation_bytes},
                      {"workspace_bytes", st.all_workspace_bytes()},
                      {"comm_buffer_bytes", st.comm_buffer_bytes},
                      {"total_bytes", st.total_bytes()}});
  for (size_t i = 0; i < est.stages.size(); i++) {  // the distributed optimizer's unequal ranks
    if (!est.stages[i].optimizer_bytes_by_rank.empty())
      stages[i]["optimizer_bytes_by_rank"] = est.stages[i].optimizer_bytes_by_rank;
    if (!est.stages[i].comm_buffer_bytes_by_rank.empty())
      stages[i]["comm_buffer_bytes_by_rank"] = est.stages[i].comm_buffer_bytes_by_rank;
  }
  for (size_t i = 0; i < est.stages.size(); i++) {
    const StageEstimate& st = est.stages[i];
    if (st.expert_parameters == 0) continue;
    stages[i]["moe"] = {
        {"expert_parameters", st.expert_parameters},
        {"router_parameters", st.router_parameters},
        {"expert_rows", st.expert_rows},
        {"expert_rows_expected", st.expert_rows_expected},
        {"activation_bytes_per_micro_batch", st.moe_activation_bytes_per_micro_batch},
        {"dispatch_bytes", st.dispatch_bytes}};
  }
  for (size_t i = 0; i < est.stages.size(); i++) {
    const StageEstimate& st = est.stages[i];
    if (st.vision_parameters == 0) continue;
    stages[i]["vision"] = {
        {"parameters", st.vision_parameters},
        {"activation_bytes_per_micro_batch", st.vision_activation_bytes_per_micro_batch},
        {"workspace_bytes", st.vision_workspace_bytes}};
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::parse(layout_json(layout));
  out["memory"] = {{"micro_batches", est.micro_batches},
                   {"flops_per_iteration", est.flops_per_iteration},
                   {"flops_per_rank", est.flops_per_rank},
                   {"most_loaded_pp_rank", est.most_loaded},
                   {"stages", stages}};
  if (const VisionEstimate& v = est.vision; v.parameters > 0)
    out["memory"]["vision"] = {
        {"parameters", v.parameters},
        {"layers_run", v.layers_run},
        {"images_per_micro_batch", v.images_per_micro_batch},
        {"images_per_rank", v.images_per_rank},
        {"trained_parameters", v.trained_parameters},
        {"encoder_trains", v.encoder_trains},
        {"activation_bytes_per_micro_batch", v.activation_bytes_per_micro_batch},
        {"input_bytes_per_micro_batch", v.input_bytes_per_micro_batch},
        {"workspace_bytes", v.workspace_bytes},
        {"forward_flops_per_image", v.forward_flops_per_image},
        {"training_flops_per_image", v.training_flops_per_image},
        {"reruns_per_iteration", v.reruns_per_iteration},
        {"flops_per_iteration", v.flops_per_iteration},
        {"flops_share", v.flops_per_iteration / est.flops_per_iteration}};
  return out.dump(indent);
}

}  // namespace lattice
