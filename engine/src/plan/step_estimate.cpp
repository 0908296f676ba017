// The planner's step-time model: compute from Megatron's FLOP count and the device's rate, plus
// tensor-parallel collectives, pipeline sends, the 1F1B bubble, the data-parallel reduction
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

struct StageTime {
  double compute = 0, tp = 0, pp = 0;  // on the pipeline's critical path, per iteration
  double dp_total = 0, dp_exposed = 0, optimizer = 0;  // after the last backward
  double pipeline() const { return compute + tp + pp; }
  double tail() const { return dp_exposed + optimizer; }
};

}  // namespace

StepEstimate estimate_step(const TrainOptions& o, const ParallelLayout& layout,
                           const ClusterSpec& cluster) {
  TrainOptions on = o;
  on.device = engine_device(cluster.device);
  return estimate_step(o, layout, cluster, estimate_memory(on, layout));
}

StepEstimate estimate_step(const TrainOptions& given, const ParallelLayout& layout,
                           const ClusterSpec& cluster, const MemoryEstimate& memory) {
  const TrainOptions o = with_default_global_batch(given, layout.world);
  const ModelConfig& m = o.model;
  const ParallelOptions& par = o.parallel;
  const DeviceSpec& dev = cluster.device;
  const std::string precision = training_precision(o);
  const ParameterBytes per_param = bytes_per_parameter(precision);
  const double s = m.seq_length, b = o.micro_batch_size, h = m.hidden_size,
               V = m.padded_vocab_size();
  const int t = layout.tp, pp = layout.pp, vpp = layout.vpp;
  // Context parallelism: each rank computes 1/CP of every sequence, and the dense gradients are
  // reduced over DP x CP. Non-goal so far: the ring's K/V passes (counted as free).
  const int cp = layout.cp, dp = layout.dp * cp;
  const double M = static_cast<double>(memory.micro_batches);
  const double rate = dev.peak_flops * cluster.compute_efficiency;
  const double tokens = M * b * s / cp;  // per rank and iteration

  // Forward FLOPs per token, flops_per_iteration()'s own terms: a layer's GEMMs and causal
  // attention, the attention products alone (what selective recomputation repeats), the LM head.
  const TokenFlops per_token = forward_flops_per_token(m);
  const double layer_fwd = per_token.layer, attention_fwd = per_token.attention,
               head_fwd = per_token.head;
  const bool full = par.recompute_granularity == "full";
  const bool selective = par.recompute_granularity == "selective";
  const bool distributed = par.use_distributed_optimizer;

  // Which link a group uses: groups are blocks of consecutive ranks (TP: `tp` ranks; DP: the
  // TP x DP ranks of a stage, strided), inside one node when the block divides a node.
  const int per_node = std::max(cluster.devices_per_node, 1);
  auto link = [&](int span) {
    const bool inside = layout.world <= per_node || (span <= per_node && per_node % span == 0);
    return inside ? dev.intra_node_bandwidth : dev.inter_node_bandwidth;
  };
  const double tp_bandwidth = link(t), dp_bandwidth = link(t * dp);
  // Pipeline neighbours are TP x DP ranks apart: some boundary crosses nodes whenever the job
  // does.
  const double pp_bandwidth =
      layout.world <= per_node ? dev.intra_node_bandwidth : dev.inter_node_bandwidth;
  const double activation = s / cp * b * h * activation_element_bytes(precision);  // (s/cp, b, h)

  std::vector<StageTime> stages(static_cast<size_t>(pp));
  for (int p = 0; p < pp; p++) {
    StageTime& st = stages[static_cast<size_t>(p)];
    const bool first = layout.is_first_stage(p), last = layout.is_last_stage(p);
    const int layers = layout.stage_num_layers(p);
    const int recomputed = !full ? 0
                           : par.recompute_method == "block"
                               ? vpp * std::min(std::max(par.recompute_num_layers, 1), layers / vpp)
                               : layers;
    const double forward = tokens * (layers * layer_fwd + (last ? head_fwd : 0)) / t;
    const double repeated = tokens *
                            (full        ? recomputed * layer_fwd
                             : selective ? layers * attention_fwd
                                         : 0) /
                            t;
    st.compute = (3 * forward + repeated) / rate;

    // Per micro-batch and layer 2 forward + 2 backward all-reduces of (s, b, h) (sequence
    // parallelism: reduce-scatter + all-gather, the same bytes), 2 more per recomputed layer;
    // the embedding's forward and the LM head input's backward on the end stages.
    if (t > 1) {
      const int collectives = 4 * layers + 2 * recomputed + (first ? 1 : 0) + (last ? 1 : 0);
      st.tp = M * collectives * all_reduce_s(activation, t, tp_bandwidth);
    }
    // One activation forward and one gradient backward per micro-batch and model chunk, split
    // along the sequence with SP; sends and receives share the link in both directions.
    if (pp > 1) st.pp = M * vpp * 2 * activation / (par.sequence_parallel ? t : 1) / pp_bandwidth;

    // Data parallelism (see the design note for the overlap rule): fp32 gradients reduced
    // (all-reduce, or reduce-scatter + all-gather of the weights with the distributed
    // optimizer), overlapped with the last micro-batch's backward and, on later stages, the
    // pipeline's cool-down; the tied embedding's gradient sum between the end stages is not
    // (an untied output layer has no copy to sum).
    const double params = static_cast<double>(memory.stages[static_cast<size_t>(p)].parameters);
    st.dp_total = distributed ? half_ring_s(params * per_param.grads, dp, dp_bandwidth) +
                                    half_ring_s(params * per_param.weights, dp, dp_bandwidth)
                              : all_reduce_s(params * per_param.grads, dp, dp_bandwidth);
    const double backward_per_micro_batch = (2 * forward + repeated) / M / rate / vpp;
    const double window =
        backward_per_micro_batch * (pp - p) + (distributed ? forward / M / rate : 0);
    st.dp_exposed = std::max(0.0, st.dp_total - window);
    if (pp > 1 && m.tied_output() && (first || last)) {
      const double embedding = V * h / t * per_param.grads;
      st.dp_exposed += all_reduce_s(embedding, 2, pp_bandwidth);
      st.dp_total += all_reduce_s(embedding, 2, pp_bandwidth);
    }
    const double updated = distributed ? params / dp : params;
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
