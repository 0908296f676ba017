// The planner's step-time model: compute from Megatron's FLOP count and the device's rate, plus
// tensor-parallel collectives, the context-parallel ring, expert-parallel all-to-alls, pipeline
// sends, the 1F1B bubble, the data-parallel reduction
// that backward cannot hide and the optimizer step
// (docs/design-notes.md#planner-step-time-and-layout-search states every rule and its source).
// Non-goals: kernel-level modelling, network contention, stragglers.
#include <algorithm>

#include "lattice/plan.h"

namespace lattice {

namespace {

// Bytes of one activation element sent between ranks (TP collectives, pipeline sends).
double activation_element_bytes(const std::string& precision) {
  return precision == "fp32" ? 4 : precision == "fp64" ? 8 : 2;
}

// Bytes the AdamW step reads and writes per parameter it updates: master weights, gradient
// and both moments read, master weights and moments written (7 fp32 streams = 28 bytes),
// plus the 16-bit weight copy written in mixed precision (30); fp64 doubles fp32.
double optimizer_traffic_per_parameter(const std::string& precision) {
  if (precision == "bf16" || precision == "fp16") return 30;
  return precision == "fp64" ? 56 : 28;
}

// Ring collectives: per rank, an all-reduce moves 2 (n-1)/n of the buffer, a reduce-scatter
// or an all-gather (n-1)/n.
double all_reduce_s(double bytes, int n, double bandwidth) {
  return n > 1 ? 2.0 * (n - 1) / n * bytes / bandwidth : 0.0;
}
double half_ring_s(double bytes, int n, double bandwidth) {
  return n > 1 ? 1.0 * (n - 1) / n * bytes / bandwidth : 0.0;
}

// An all-to-all: each rank keeps 1/n of its buffer and sends the rest, (n-1)/n.
double all_to_all_s(double bytes, int n, double bandwidth) {
  return n > 1 ? 1.0 * (n - 1) / n * bytes / bandwidth : 0.0;
}

// Forward FLOPs per token of one layer, split by what divides them: `split` over TP (QKV, proj,
// causal attention; a dense layer's MLP), `router` whole on every TP rank (2 h E), `experts` over
// ETP (k experts of width Fm, 2 m h Fm each: a token runs k of the E experts, not E; with a
// capacity factor f < 1 at most a share f of the routes are kept). The sum with k experts is
// forward_flops_per_token()'s per-layer term for that layer.
struct LayerFlops {
  double split = 0, router = 0, experts = 0;
};
LayerFlops layer_flops(const ModelConfig& m, bool moe) {
  const double s = m.seq_length, h = m.hidden_size, W = static_cast<double>(m.qkv_width()),
               mlp = m.swiglu ? 3 : 2;
  LayerFlops f;
  f.split = 2 * h * W + 2 * h * h + 2 * s * h;
  if (!moe) {
    f.split += 2 * mlp * h * m.ffn();
    return f;
  }
  const double f_cap = m.moe_expert_capacity_factor;
  const double kept = f_cap > 0 ? std::min(1.0, static_cast<double>(f_cap)) : 1.0;
  f.router = 2 * h * m.num_experts;
  f.experts = kept * m.moe_router_topk * 2 * mlp * h * m.moe_ffn();
  return f;
}

struct StageTime {
  double compute = 0, tp = 0, cp = 0, ep = 0, pp = 0;  // on the pipeline's critical path
  double dp_total = 0, dp_exposed = 0, optimizer = 0;  // after the last backward
  double pipeline() const { return compute + tp + cp + ep + pp; }
  double tail() const { return dp_exposed + optimizer; }
};

}  // namespace

StepEstimate estimate_step(const TrainOptions& o, const ParallelLayout& layout,
                           const ClusterSpec& cluster) {
  return estimate_step(o, layout, cluster, estimate_memory(planned_options(o, cluster), layout));
}

StepEstimate estimate_step(const TrainOptions& given, const ParallelLayout& layout,
                           const ClusterSpec& cluster, const MemoryEstimate& memory) {
  const TrainOptions o = with_default_global_batch(given, layout.world);
  const ModelConfig& m = o.model;
  const ParallelOptions& par = o.parallel;
  const DeviceSpec& dev = cluster.device;
  const std::string precision = compute_precision(o);
  const ParameterBytes per_param = bytes_per_parameter(precision);
  const double s = m.seq_length, b = o.micro_batch_size, h = m.hidden_size,
               V = m.padded_vocab_size();
  const int t = layout.tp, pp = layout.pp, vpp = layout.vpp;
  // Context parallelism: each rank computes 1/CP of every sequence, passes K/V around the CP
  // ring, and the dense gradients are reduced over DP x CP. Expert gradients reduce over EDP.
  const int cp = layout.cp, dp = layout.dp * cp;
  const int ep = layout.ep, etp = std::max(layout.etp, 1), edp = std::max(layout.edp, 1);
  const double M = static_cast<double>(memory.micro_batches);
  const double rate = dev.peak_flops * cluster.compute_efficiency;
  const double tokens = M * b * s / cp;  // per rank and iteration

  // Forward FLOPs per token, flops_per_iteration()'s own terms: a layer's GEMMs and causal
  // attention, the attention products alone, the LM head. Selective recomputation repeats
  // nothing (Note [selective recomputation] in model/gpt_layer.cpp).
  const TokenFlops per_token = forward_flops_per_token(m);
  const double attention_fwd = per_token.attention, head_fwd = per_token.head;
  const bool full = par.recompute_granularity == "full";
  const bool distributed = par.use_distributed_optimizer;

  // Which link a group uses: groups are blocks of consecutive ranks (TP: `tp` ranks; DP: the
  // TP x DP ranks of a stage, strided), inside one node when the block divides a node.
  const int per_node = std::max(cluster.devices_per_node, 1);
  auto link = [&](int span) {
    const bool inside = layout.world <= per_node || (span <= per_node && per_node % span == 0);
    return inside ? dev.intra_node_bandwidth : dev.inter_node_bandwidth;
  };
  const double tp_bandwidth = link(t), dp_bandwidth = link(t * dp);
  // CP ranks are TP apart (a group spans TP x CP consecutive ranks), EP ranks ETP apart.
  const double cp_bandwidth = link(t * cp), ep_bandwidth = link(etp * ep);
  // Pipeline neighbours are TP x DP ranks apart: some boundary crosses nodes whenever the job
  // does.
  const double pp_bandwidth =
      layout.world <= per_node ? dev.intra_node_bandwidth : dev.inter_node_bandwidth;
  const double element = activation_element_bytes(precision);
  const double activation = s / cp * b * h * element;  // (s/cp, b, h)
  // One rank's K and V for one micro-batch and layer: (s/cp, b, (W - h) / t), passed around the
  // ring CP - 1 times forward, and backward K/V and their grads (2 (CP - 1)); the grads travel
  // in fp32 under --bf16 / --fp16 (Note [ring attention in 16 bits]): grad_kv.
  const double kv = s / cp * b * (static_cast<double>(m.qkv_width()) - h) / t * element;
  const double grad_kv = kv * (precision == "fp64" ? 8 : 4) / element;
  // One all-to-all of an MoE layer: the rank's routes (its tokens, split over TP with sequence
  // parallelism, times k; at most a share f kept with a capacity factor f < 1) of h elements.
  const double kept = m.moe_expert_capacity_factor > 0
                          ? std::min(1.0, static_cast<double>(m.moe_expert_capacity_factor))
                          : 1.0;
  const double routes = s / cp * b / (par.sequence_parallel ? t : 1) * m.moe_router_topk * kept;
  const double dispatch = routes * h * element;

  std::vector<StageTime> stages(static_cast<size_t>(pp));
  for (int p = 0; p < pp; p++) {
    StageTime& st = stages[static_cast<size_t>(p)];
    const bool first = layout.is_first_stage(p), last = layout.is_last_stage(p);
    const int layers = layout.stage_num_layers(p);
    const int recomputed = !full ? 0
                           : par.recompute_method == "block"
                               ? vpp * std::min(std::max(par.recompute_num_layers, 1), layers / vpp)
                               : layers;
    // The stage's own layers, dense and MoE (their FLOPs differ; per_token.layer is the mean).
    int moe_layers = 0;
    double layers_fwd = 0;  // per token, on this rank
    for (int c = 0; c < vpp; c++) {
      const ParallelLayout::LayerRange r = layout.stage_layers(p, c);
      for (int l = r.begin; l < r.end; l++) {
        const bool moe = m.is_moe_layer(l);
        moe_layers += moe;
        const LayerFlops f = layer_flops(m, moe);
        layers_fwd += f.split / t + f.router + f.experts / etp;
      }
    }
    const double mean_layer = layers > 0 ? layers_fwd / layers : 0;
    // A vision tower runs its TP share on every rank of the first stage, on each micro-batch's
    // images, its forward and the backward the engine runs
    // (VisionEstimate::rank_training_flops_per_image; Note [vision tower in the plan] in
    // vision_estimate.cpp). With PP > 1 a backward re-runs the tower's forward
    // (VisionEstimate::reruns_per_iteration).
    const VisionEstimate& v = memory.vision;
    const double vision =
        first ? v.images_per_rank * (M * v.rank_training_flops_per_image +
                                     v.reruns_per_iteration * v.rank_forward_flops_per_image)
              : 0;
    const double forward = tokens * (layers_fwd + (last ? head_fwd / t : 0));
    const double repeated = tokens * (full ? recomputed * mean_layer : 0);
    // Frozen matrices (--freeze-LM, LoRA's base; Note [FLOPs with frozen weights] in
    // memory_estimate.cpp): no weight gradients, their input gradients still run; the attention
    // products' backward stays twice theirs. LoRA's adapters as this rank runs them: forward,
    // a backward of twice it plus the A products again, and the forward of a recomputed layer.
    const double weight_gemms = forward - tokens * layers * attention_fwd / t;
    const LoraFlops lora = lora_forward_flops_per_token(m, t);
    const double adapters =
        tokens * (layers * (3 * (lora.a + lora.b) + lora.a) + recomputed * (lora.a + lora.b));
    const double frozen = m.freeze_lm || m.lora() ? weight_gemms : 0;
    st.compute = (3 * forward - frozen + repeated + adapters + vision) / rate;

    // The CP ring per micro-batch and layer (2 more passes per recomputed layer), hidden behind
    // the attention's own products (Megatron's ring attention sends the next block while it
    // computes on this one): what exceeds them is on the critical path.
    if (cp > 1) {
      const double ring =
          M * (cp - 1) * ((2 * layers + recomputed) * kv + layers * grad_kv) / cp_bandwidth;
      const int repeats = full ? recomputed : 0;
      const double attention = tokens * (3 * layers + repeats) * attention_fwd / t / rate;
      st.cp = std::max(0.0, ring - attention);
      // A tower's patches gathered over CP and their gradient scattered, not overlapped.
      if (first) st.cp += M * half_ring_s(v.cp_bytes_per_micro_batch, cp, cp_bandwidth);
    }
    // EP: dispatch and combine forward, their two backward, and again in the forward a full
    // recomputation repeats (recomputed layers that are MoE, in the stage's proportion); not
    // overlapped with compute.
    if (ep > 1 && moe_layers > 0) {
      const double share = static_cast<double>(moe_layers) / layers;
      const double all_to_alls = 4 * moe_layers + 2 * recomputed * share;
      st.ep = M * all_to_alls * all_to_all_s(dispatch, ep, ep_bandwidth);
    }

    // Per micro-batch and layer 2 forward + 2 backward all-reduces of (s, b, h) (sequence
    // parallelism: reduce-scatter + all-gather, the same bytes), 2 more per recomputed layer;
    // the embedding's forward and the LM head input's backward on the end stages.
    // A tower's own sums (VisionEstimate::tp_forward_bytes_per_image) on the first stage.
    if (t > 1) {
      const int collectives = 4 * layers + 2 * recomputed + (first ? 1 : 0) + (last ? 1 : 0);
      st.tp = M * collectives * all_reduce_s(activation, t, tp_bandwidth);
      if (first)
        st.tp += v.images_per_rank *
                 all_reduce_s(M * (v.tp_forward_bytes_per_image + v.tp_backward_bytes_per_image) +
                                  v.reruns_per_iteration * v.tp_forward_bytes_per_image,
                              t, tp_bandwidth);
    }
    // One activation forward and one gradient backward per micro-batch and model chunk, split
    // along the sequence with SP; sends and receives share the link in both directions.
    if (pp > 1) st.pp = M * vpp * 2 * activation / (par.sequence_parallel ? t : 1) / pp_bandwidth;

    // Data parallelism (see the design note for the overlap rule): fp32 gradients reduced
    // (all-reduce, or reduce-scatter + all-gather of the weights with the distributed
    // optimizer), overlapped with the last micro-batch's backward and, on later stages, the
    // pipeline's cool-down; the tied embedding's gradient sum between the end stages is not
    // (an untied output layer has no copy to sum).
    // The dense parameters reduce over DP x CP, the experts over EDP (same link: both groups
    // lie inside the stage's ranks).
    // Frozen tensors (LoRA, --freeze-LM, --freeze-ViT): only the buckets that hold a trained
    // tensor are reduced and gathered, and AdamW steps the trained elements of the rank's shards
    // alone (its most loaded rank's, optimizer_bytes).
    const StageEstimate& held = memory.stages[static_cast<size_t>(p)];
    const double dense = static_cast<double>(held.reduced_dense_parameters);
    const double experts = static_cast<double>(held.reduced_expert_parameters);
    // The distributed optimizer's all-gather moves the weights the kernels read: a 16-bit run's
    // 16-bit copy (its master is the optimizer's, Note [master weights in the optimizer] in
    // optim/adamw.h; Megatron gathers the 16-bit weights too), an fp32 or fp64 run's weights.
    const double gathered = per_param.weights;
    auto reduction = [&](double count, int n) {
      return distributed ? half_ring_s(count * per_param.grads, n, dp_bandwidth) +
                               half_ring_s(count * gathered, n, dp_bandwidth)
                         : all_reduce_s(count * per_param.grads, n, dp_bandwidth);
    };
    st.dp_total = reduction(dense, dp) + reduction(experts, edp);
    const double backward_per_micro_batch = (2 * forward + repeated) / M / rate / vpp;
    const double window =
        backward_per_micro_batch * (pp - p) + (distributed ? forward / M / rate : 0);
    st.dp_exposed = std::max(0.0, st.dp_total - window);
    // A frozen embedding's gradient is not summed (Trainer::finish_gradients).
    const bool embedding_trains = !m.lora() && !m.freeze_lm;
    if (pp > 1 && m.tied_output() && (first || last) && embedding_trains) {
      const double embedding = V * h / t * per_param.grads;
      st.dp_exposed += all_reduce_s(embedding, 2, pp_bandwidth);
      st.dp_total += all_reduce_s(embedding, 2, pp_bandwidth);
    }
    const double updated = static_cast<double>(held.optimizer_bytes) / per_param.optimizer;
    st.optimizer = updated * optimizer_traffic_per_parameter(precision) / dev.memory_bandwidth;
  }

  StepEstimate out;
  int tail = 0;
  for (int p = 1; p < pp; p++) {
    if (stages[p].pipeline() > stages[out.slowest_stage].pipeline()) out.slowest_stage = p;
    if (stages[p].tail() > stages[tail].tail()) tail = p;
  }
  const StageTime& slow = stages[static_cast<size_t>(out.slowest_stage)];
  out.compute_s = slow.compute;
  out.tp_comm_s = slow.tp;
  out.cp_comm_s = slow.cp;
  out.ep_comm_s = slow.ep;
  out.pp_comm_s = slow.pp;
  out.pp_bubble_s = pp > 1 ? (pp - 1) / (vpp * M) * slow.pipeline() : 0.0;
  out.dp_comm_s = stages[static_cast<size_t>(tail)].dp_exposed;
  out.dp_comm_total_s = stages[static_cast<size_t>(tail)].dp_total;
  out.optimizer_s = stages[static_cast<size_t>(tail)].optimizer;
  out.total_s = slow.pipeline() + out.pp_bubble_s + stages[static_cast<size_t>(tail)].tail();
  out.tokens_per_second = o.global_batch_size * s / out.total_s;
  out.mfu = memory.flops_per_iteration / (out.total_s * dev.peak_flops * layout.world);
  return out;
}

}  // namespace lattice
