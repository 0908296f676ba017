// The planner's analytical memory estimate (ARCHITECTURE.md "Memory estimate (the planner)",
// docs/design-notes.md#parallel-layout-and-the-planner): what one rank of each pipeline stage
// holds, from the model config and the layout alone. Pure arithmetic, shared by `lattice plan` and
// the Studio. Non-goals: workspace and communication buffers, allocator overheads (the trainer
// measures those), 16-bit training (the engine trains in fp32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lattice/layout.h"
#include "lattice/train_options.h"

namespace lattice {

// One rank of pipeline stage `pp_rank`; every TP and DP rank of the stage holds as much.
struct StageEstimate {
  int pp_rank = 0;
  // Parameter elements on the rank: the rank's 1/TP slice of split tensors, plus the tensors
  // every TP rank holds whole (LayerNorms, row-parallel biases), counted in
  // `replicated_parameters` too. Summed over a TP x PP grid counting the replicated ones once,
  // this is ModelConfig::num_parameters() plus the last stage's tied word embedding (pp > 1).
  int64_t parameters = 0;
  int64_t replicated_parameters = 0;
  size_t weight_bytes = 0;  // fp32: 4 per parameter
  size_t grad_bytes = 0;    // fp32: 4 per parameter
  size_t optimizer_bytes =
      0;  // AdamW m and v, 8 per parameter; / DP with the distributed optimizer
  // Activations one micro-batch keeps for its backward on this rank (all its model chunks),
  // Korthikanti et al.'s per-layer formula for the recompute setting, doubled for fp32.
  size_t activation_bytes_per_micro_batch = 0;
  // Micro-batches whose activations are alive at once at the schedule's peak: 1 without
  // pipelining, min(M, PP - pp_rank) with 1F1B, the interleaved warm-up / VPP with virtual
  // stages (PP * (1 + (PP - 1) / (PP * VPP)) on the first stage, all M when M == PP); M is the
  // micro-batch count per DP rank.
  double micro_batches_in_flight = 0;
  // At that peak, with the embedding / LM-head extras and the one recomputed chunk.
  size_t activation_bytes = 0;

  size_t total_bytes() const {
    return weight_bytes + grad_bytes + optimizer_bytes + activation_bytes;
  }
};

struct MemoryEstimate {
  std::vector<StageEstimate> stages;  // one per pipeline rank, in order
  int most_loaded = 0;                // index into stages of the largest total_bytes()
  int64_t micro_batches = 0;          // per data-parallel rank and iteration
  // Model FLOPs of one iteration (flops_per_iteration(), Megatron's count) and per rank.
  double flops_per_iteration = 0;
  double flops_per_rank = 0;
};

// Requires a valid layout for `options` (make_layout) and a known vocabulary
// (options.model.vocab_size > 0: resolve a file tokenizer first).
MemoryEstimate estimate_memory(const TrainOptions& options, const ParallelLayout& layout);
// layout_json()'s object plus "memory": {"micro_batches", "flops_per_iteration",
// "flops_per_rank", "most_loaded_pp_rank", "stages": [{"pp_rank", "parameters",
// "replicated_parameters", "weight_bytes", "grad_bytes", "optimizer_bytes",
// "activation_bytes_per_micro_batch", "micro_batches_in_flight", "activation_bytes",
// "total_bytes"}]} (`lattice plan --json`). indent < 0: one line.
std::string plan_json(const ParallelLayout& layout, const MemoryEstimate& estimate,
                      int indent = -1);

// ---- Step time and layout search (Studio issue, part 1) ---------------------------------
// A device kind: memory and peak dense rate in the training precision, and the bandwidth one
// device gets to its peers inside a node and across nodes.
struct DeviceSpec {
  std::string name;  // "H100 SXM 80GB", "this machine's CPU", ...
  double memory_bytes = 0;
  double peak_flops = 0;               // per device, in the precision the options train in
  double intra_node_bandwidth = 0;     // bytes/s per device (NVLink, shared memory)
  double inter_node_bandwidth = 0;     // bytes/s per device (InfiniBand, Ethernet)
};
// The built-in table (H100, H200, A100 80GB / 40GB) for `precision` ("bf16", "fp16", "fp32").
std::vector<DeviceSpec> known_devices(const std::string& precision);
// This machine's CPU: its memory, the measured SGEMM rate (GFLOP/s) as the peak.
DeviceSpec this_machine_cpu(double measured_sgemm_gflops);

struct ClusterSpec {
  int nodes = 1, devices_per_node = 1;
  DeviceSpec device;
  double compute_efficiency = 0.5;  // achieved / peak on the model's GEMMs
};

// One training step's time by term, for the most loaded pipeline stage.
struct StepEstimate {
  double compute_s = 0;     // model FLOPs per rank / (peak * efficiency)
  double tp_comm_s = 0;     // TP collectives per step (inter-node bandwidth if a TP group spans nodes)
  double pp_bubble_s = 0;   // 1F1B bubble: (PP - 1) / (VPP * M) of the pipeline's compute
  double dp_comm_s = 0;     // gradient reduction not hidden behind backward
  double total_s = 0;
  double tokens_per_second = 0;  // global batch tokens / total_s
  double mfu = 0;                // model FLOPs / (total_s * peak * devices)
};
StepEstimate estimate_step(const TrainOptions& options, const ParallelLayout& layout,
                           const ClusterSpec& cluster);

// Every valid layout of options' model and global batch on the cluster's devices (TP, PP,
// virtual stages, micro batch, recomputation, distributed optimizer), with its estimates and
// whether it fits in device memory; fitting ones first, by estimated tokens/s.
struct LayoutCandidate {
  TrainOptions options;  // the base options with the candidate's layout and batch flags
  ParallelLayout layout;
  MemoryEstimate memory;
  StepEstimate step;
  bool fits = false;
};
std::vector<LayoutCandidate> suggest_layouts(const TrainOptions& base, const ClusterSpec& cluster,
                                             int max_results = 50);

}  // namespace lattice
