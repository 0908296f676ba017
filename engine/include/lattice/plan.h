// The planner's analytical memory estimate (ARCHITECTURE.md "Memory estimate (the planner)",
// docs/design-notes.md#parallel-layout-and-the-planner): what one rank of each pipeline stage
// holds, from the model config and the layout alone. Pure arithmetic, shared by `lattice plan` and
// the Studio. Also the step-time model and the layout search built on it
// (docs/design-notes.md#planner-step-time-and-layout-search). Every buffer the engine takes in
// its memory categories is counted, workspace and communication buffers included. Non-goals:
// the allocator's overheads, the libraries' own memory (BLAS, MPI, NCCL, cuBLAS, the CUDA
// context) and transient buffers freed before the step ends (the trainer measures the process).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lattice/layout.h"
#include "lattice/train_options.h"

namespace lattice {

// One rank of pipeline stage `pp_rank`; every TP and DP rank of the stage holds as much.
struct StageEstimate {
  int pp_rank = 0;
  // Parameter elements on the rank: the rank's 1/TP slice of split tensors, plus the tensors
  // every TP rank holds whole (norms, row-parallel biases, a learned position table), counted
  // in `replicated_parameters` too. Summed over a TP x PP grid counting the replicated ones
  // once, this is ModelConfig::num_parameters() plus the last stage's tied word embedding
  // (pp > 1; an untied output layer is part of num_parameters and sits on the last stage).
  int64_t parameters = 0;
  int64_t replicated_parameters = 0;
  // Of `parameters`, those the optimizer trains, as ParamLayout freezes them (no moments and, but
  // for a tower's, no gradients for a frozen tensor): the language model's, none with
  // --freeze-LM, its adapters alone with LoRA (Note [LoRA] in model/param_layout.h); a vision
  // tower's projector always, its encoder unless --freeze-ViT or LoRA (Note [vision tensors]).
  int64_t trainable_parameters = 0;
  // Of `parameters`, those the data-parallel reduction moves (and the distributed optimizer's
  // all-gather): every element of a bucket (optim/grad_buckets.h) of trained tensors, alignment
  // gaps included; the buckets never mix frozen and trained tensors, and those of frozen ones
  // are skipped (Note [LoRA] in model/param_layout.h). All of `parameters` when every tensor
  // trains. Split as the reduction groups are: dense over DP x CP, experts over EDP.
  int64_t reduced_dense_parameters = 0, reduced_expert_parameters = 0;
  // Bytes per parameter by training precision (bytes_per_parameter()), in the engine's memory
  // categories (the trainer's --log-memory measures the same):
  //   fp32: weights 4, grads 4, AdamW m and v 8            (16; 8 + 8/DP distributed)
  // (with frozen tensors, grads only for the gradient arena: the trained tensors and a tower's
  // block, ParamLayout::grad_numel)
  //   bf16 / fp16: the 16-bit weights 2, fp32 main grads 4, the fp32 master copy and m and v
  //                12 (18; 6 + 12/DP distributed, as Megatron: Note [master weights in the
  //                optimizer] in optim/adamw.h; a frozen tensor has its 16-bit weights alone)
  //   fp64 (verification runs): twice fp32                 (32; 16 + 16/DP distributed)
  size_t weight_bytes = 0;
  size_t grad_bytes = 0;
  // With the distributed optimizer (DP x CP > 1) and frozen tensors (LoRA, --freeze-LM,
  // --freeze-ViT) the ranks of a stage differ (Note [distributed optimizer in the plan] in
  // plan/memory_estimate.cpp): each keeps moments for the trained elements inside its shards of
  // the whole arena's buckets, frozen tensors included in the cut. optimizer_bytes is then the
  // most loaded rank's, optimizer_bytes_by_rank every rank's, world rank
  // pp_rank x TP x CP x DP + i at i (empty otherwise: every rank holds optimizer_bytes).
  size_t optimizer_bytes = 0;
  std::vector<size_t> optimizer_bytes_by_rank;
  // Activations one micro-batch keeps for its backward on this rank (all its model chunks): the
  // buffers the engine's model takes for it (model/gpt.h new_activations) for the recompute
  // setting and the precision (the attention's saved tensor is its (B, heads, T) log-sum-exps on
  // every device).
  size_t activation_bytes_per_micro_batch = 0;
  // Micro-batches whose activations are alive at once at the schedule's peak: 1 without
  // pipelining, min(M, PP - pp_rank) with 1F1B, the interleaved warm-up / VPP with virtual
  // stages (PP * (1 + (PP - 1) / (PP * VPP)) on the first stage, all M when M == PP); M is the
  // micro-batch count per DP rank.
  double micro_batches_in_flight = 0;
  // Each model chunk's activations times the micro-batches its pool in the executor grows to
  // (pipeline/schedule.h chunk_peaks: min(M, PP - pp_rank) with 1F1B; interleaved, each chunk's
  // own peak, whose sum can exceed micro_batches_in_flight * VPP), plus the recomputed layers'
  // scratch (full recomputation), held once.
  size_t activation_bytes = 0;

  // MoE layers (Note [MoE layout] in model/param_layout.h; all 0 in a dense model). Of
  // `parameters`: the rank's experts, E / EP of each MoE layer with fc1 by rows and fc2 by
  // columns over ETP (each expert's fc2 bias whole), and the routers (E, C), whole on every rank.
  // Their weights, grads and optimizer bytes are in the categories above: expert parameters
  // shard over EDP with the distributed optimizer, the rest over DP x CP.
  int64_t expert_parameters = 0, router_parameters = 0;
  // Rows each MoE layer's experts hold per micro-batch on this rank, and the routes its tokens
  // make (N k, N = micro-batch x seq-length / CP tokens): with EP 1 both are N k (every route is
  // local; the buffers are sized for no drop). With EP > 1 a rank receives its E / EP experts'
  // routes from every EP rank: counted at the worst case, N x EP x min(k, E / EP) (every routing
  // must fit: memory is allocated for the step's routing, and an imbalanced step must not run
  // out), capped with --moe-expert-capacity-factor f at E x ceil(N k / E x f) (each expert keeps
  // that many routes of each source rank). `expert_rows_expected` is the balanced N k.
  int64_t expert_rows = 0, expert_rows_expected = 0;
  // Of activation_bytes_per_micro_batch: the MoE layers' MLP part (router probabilities, routes,
  // permuted rows, expert FC1 / activation outputs; model/gpt.cpp take_layer_acts).
  size_t moe_activation_bytes_per_micro_batch = 0;
  // Dispatch buffers, held once per model chunk (GptModel::allocate's MoE workspace): router
  // logits (N, E), route-weight grads, the permuted rows' and expert activations' grads, the
  // load-balancing losses; with EP > 1 also the all-to-all send and return buffers (N k, C).
  size_t dispatch_bytes = 0;

  // The vision tower (VisionEstimate; first stage only, all 0 elsewhere or without one). Of
  // `parameters` and `replicated_parameters`: the tower's on this TP rank
  // (VisionEstimate::parameters, replicated_parameters); of
  // trainable_parameters: VisionEstimate::trained_parameters. Of
  // activation_bytes_per_micro_batch: the tower's buffers and one micro-batch's image inputs;
  // activation_bytes holds the tower's buffers once and the inputs times the first model
  // chunk's peak.
  int64_t vision_parameters = 0;
  size_t vision_activation_bytes_per_micro_batch = 0;
  size_t vision_workspace_bytes = 0;  // VisionEstimate::workspace_bytes, once

  // The rest of the rank's scratch (kWorkspace; Note [workspace in the plan] in
  // plan/memory_estimate.cpp): each model chunk's buffers for the backward's gradients, the
  // attention's workspace (the CPU's per thread: planned_cpu_threads), selective
  // recomputation's one saved tensor, the vocabulary-parallel cross-entropy's rows, LoRA's
  // adapter rows, the context ring's scratch; the trainer's token losses and the optimizer's
  // norm.
  size_t workspace_bytes = 0;
  // Communication buffers (kCommBuffers): the pipeline's gradient rows for every micro-batch a
  // chunk's pool holds, the context ring's travelling keys and values and their gradients, and
  // on the CPU the distributed optimizer's reduce-scatter shards (CUDA reduces in place). The
  // shards differ by a few elements from rank to rank: comm_buffer_bytes is the most loaded
  // rank's, comm_buffer_bytes_by_rank every rank's as optimizer_bytes_by_rank (empty when all
  // ranks hold comm_buffer_bytes).
  size_t comm_buffer_bytes = 0;
  std::vector<size_t> comm_buffer_bytes_by_rank;
  // The communication buffers of the stage's rank `i` (world rank mod TP x CP x DP).
  size_t comm_buffer_bytes_of(size_t i) const {
    return comm_buffer_bytes_by_rank.empty() ? comm_buffer_bytes : comm_buffer_bytes_by_rank.at(i);
  }

  // Every kWorkspace buffer: MoE's dispatch buffers, a tower's scratch and the rest.
  size_t all_workspace_bytes() const {
    return dispatch_bytes + vision_workspace_bytes + workspace_bytes;
  }
  size_t total_bytes() const {
    return weight_bytes + grad_bytes + optimizer_bytes + activation_bytes +
           all_workspace_bytes() + comm_buffer_bytes;
  }
};

// A LLaVA-style vision tower (--vision-model-type clip, TrainOptions::vision_config(); Note
// [vision tower in the plan] in plan/vision_estimate.cpp): the CLIP ViT and its MLP projector
// on the first pipeline stage (the pre chunk), split over TP as Megatron's (Note [tower tensor
// parallelism] in model/vision_encoder.cpp), trained with the language model's tensors (fp32
// master weights, grads, AdamW moments; the moments sharded over DP x CP by the distributed
// optimizer). Its image tokens take Np of the --seq-length
// positions, so the language model's own figures do not change.
struct VisionEstimate {
  // VisionEncoder::num_params() on one TP rank: every layer's, run or not, the split tensors'
  // shares (Note [tower tensor parallelism] in model/vision_encoder.cpp) and the whole ones, of
  // which replicated_parameters (the embeddings, LayerNorms and row-split biases).
  int64_t parameters = 0;
  int64_t replicated_parameters = 0;
  int layers_run = 0;              // the encoder layers the forward runs (--vision-select-layer)
  int images_per_micro_batch = 0;  // --micro-batch-size x 1 image per sample
  // Those a CP rank's tower encodes: ceil(images_per_micro_batch / CP) (Note [images under
  // context parallelism] in model/gpt_vision.cpp); the buffers and the FLOPs below are for them.
  int images_per_rank = 0;
  // What the optimizer keeps moments for on a TP rank (Note [vision tensors] in
  // model/param_layout.h): the projector always, the encoder unless --freeze-ViT or LoRA freezes
  // it (encoder_trains).
  int64_t trained_parameters = 0;
  bool encoder_trains = false;
  // VisionEncoder::allocate's kActivations buffers on a TP rank for images_per_rank
  // images, in its
  // compute type (fp32; double in an fp64 run), taken once per model: micro-batches in flight
  // share them (a backward re-runs the tower's forward when another ran since; Note [image rows]
  // in model/gpt_vision.cpp).
  size_t activation_bytes_per_micro_batch = 0;
  // The tower's scratch (kWorkspace) on a TP rank, once per model: VisionEncoder::allocate's
  // (encoder_workspace_bytes: attention K/V and their gradients, the backward's row gradients,
  // the CPU block attention's per-thread workspace, none on CUDA) plus GptModel's splice buffers
  // (the projected rows' gradient, and in a 16-bit run the rows widened to fp32).
  size_t encoder_workspace_bytes = 0;
  size_t workspace_bytes = 0;
  // The images' input buffers each micro-batch in flight holds (GptActivations: the normalised
  // pixels in the compute type, and the int32 row maps image_slot, image_rows, embed_tokens).
  size_t input_bytes_per_micro_batch = 0;
  // Forward FLOPs of one image: the patch GEMM, the layers run (GEMMs 2 m n k, attention
  // 4 T^2 C) and the projector.
  double forward_flops_per_image = 0;
  // Forward and the backward the engine runs: twice the forward for the layers and the
  // projector's second GEMM; the patch GEMM's weight gradient alone (the images need none);
  // with a frozen encoder no encoder backward and the projector's first GEMM's weight gradient
  // alone (its input needs none).
  double training_flops_per_image = 0;
  // The same on one TP rank: the layers' and the projector's FLOPs split over TP, the patch
  // GEMM whole on each.
  double rank_forward_flops_per_image = 0;
  double rank_training_flops_per_image = 0;
  // Bytes a TP rank sums over its group per image (0 without TP): forward, and the backward the
  // engine runs (none with a frozen encoder).
  double tp_forward_bytes_per_image = 0;
  double tp_backward_bytes_per_image = 0;
  // Under CP, the bytes of the CP collectives per micro-batch (each moving (CP - 1) / CP of
  // them): the projected patches' all-gather forward and their gradient's reduce-scatter.
  double cp_bytes_per_micro_batch = 0;
  // Micro-batches per data-parallel rank and iteration whose backward re-runs the tower's
  // forward first (Note [tower re-runs] in plan/vision_estimate.cpp): 0 without pipelining, all
  // M of them with 1F1B and M > 1. Needs the layout (estimate_vision's second form).
  int reruns_per_iteration = 0;
  // training_flops_per_image x the global batch's images, plus the re-runs' forwards (x DP).
  double flops_per_iteration = 0;
};
// Whether `options` train with a vision tower (--vision-model-type set).
bool has_vision_tower(const TrainOptions& options);
// The tower's figures for `options` (all 0 without one). Requires a config its validate()
// accepts and a --global-batch-size (with_default_global_batch) for flops_per_iteration.
VisionEstimate estimate_vision(const TrainOptions& options);
// The same on `layout` (make_layout of `options`), with the pipeline's re-runs of the tower's
// forward counted (reruns_per_iteration); estimate_memory's `vision`.
VisionEstimate estimate_vision(const TrainOptions& options, const ParallelLayout& layout);

struct MemoryEstimate {
  std::vector<StageEstimate> stages;  // one per pipeline rank, in order
  int most_loaded = 0;                // index into stages of the largest total_bytes()
  int64_t micro_batches = 0;          // per data-parallel rank and iteration
  // Model FLOPs of one iteration (flops_per_iteration(), Megatron's count, less the language
  // model's weight gradients with --freeze-LM, plus a vision tower's
  // VisionEstimate::flops_per_iteration with its re-runs) and per rank.
  double flops_per_iteration = 0;
  double flops_per_rank = 0;
  VisionEstimate vision;  // all 0 without a tower
};

// "bf16", "fp16", "fp64" or "fp32" (the default): the precision `options` train in.
std::string training_precision(const TrainOptions& options);
// The precision the engine computes and stores `options` in, which the estimates size: as
// training_precision, except "fp32" for --fp16 on the CPU engine (any --device but cuda), which
// runs Megatron's loss scaler over fp32 weights and arithmetic.
std::string compute_precision(const TrainOptions& options);
// Bytes per parameter a rank keeps by category for `precision` (the table above, before the
// distributed optimizer's division of `optimizer`, the AdamW moments).
struct ParameterBytes {
  int weights = 4, grads = 4, optimizer = 8;
};
ParameterBytes bytes_per_parameter(const std::string& precision);

// The CPU kernels' threads per rank the planner sizes per-thread workspaces for: --threads,
// else this process's (kernels::num_threads(): all its cores), which is what a run on this
// machine with one rank takes; with several ranks the trainer passes its own count.
int planned_cpu_threads(const TrainOptions& options);

// A --global-batch-size of 0 is Megatron's default for the layout (with_default_global_batch).
// Requires a valid layout for `options` (make_layout) and a known vocabulary
// (options.model.vocab_size > 0: resolve a file tokenizer first).
MemoryEstimate estimate_memory(const TrainOptions& options, const ParallelLayout& layout);

// Model FLOPs of one iteration of `options` on `layout`, MemoryEstimate::flops_per_iteration:
// Megatron's count less the language model's weight gradients with --freeze-LM, plus a vision
// tower's with its re-runs. The trainer's TFLOP/s and MFU count the same.
double model_flops_per_iteration(const TrainOptions& options, const ParallelLayout& layout);
// layout_json()'s object plus "memory": {"micro_batches", "flops_per_iteration",
// "flops_per_rank", "most_loaded_pp_rank", "stages": [{"pp_rank", "parameters",
// "replicated_parameters", "weight_bytes", "grad_bytes", "optimizer_bytes",
// "activation_bytes_per_micro_batch", "micro_batches_in_flight", "activation_bytes",
// "workspace_bytes" (all_workspace_bytes), "comm_buffer_bytes", "total_bytes",
// "optimizer_bytes_by_rank" and "comm_buffer_bytes_by_rank" where the ranks differ, and with MoE
// layers "moe": {"expert_parameters", "router_parameters", "expert_rows",
// "expert_rows_expected", "activation_bytes_per_micro_batch", "dispatch_bytes"}, with a vision tower on its stage "vision": {"parameters",
// "activation_bytes_per_micro_batch", "workspace_bytes"}}], and with a tower "vision":
// {"parameters", "layers_run", "images_per_micro_batch", "images_per_rank",
// "activation_bytes_per_micro_batch",
// "workspace_bytes", "forward_flops_per_image", "reruns_per_iteration", "flops_per_iteration",
// "flops_share"}} (`lattice plan --json`).
// indent < 0: one line.
std::string plan_json(const ParallelLayout& layout, const MemoryEstimate& estimate,
                      int indent = -1);

// The architecture in a few words, as `lattice plan` and the Studio print it: attention (MHA,
// "GQA 8 groups", MQA), MLP (GELU, SwiGLU), norm and its epsilon, positions ("RoPE θ 500000",
// learned, none), the LM head (tied or untied) and the biases. GPT-2: "MHA, GELU, LayerNorm ε
// 1e-05, learned positions, tied head, biases".
std::string architecture_text(const ModelConfig& model);

// ---- Step time and layout search (Studio issue, part 1) ---------------------------------
// A device kind: memory and peak dense rate in the training precision, and the bandwidth one
// device gets to its peers inside a node and across nodes (one direction, as a ring
// collective uses it). Sources and assumptions: docs/design-notes.md#planner-step-time-and-
// layout-search.
struct DeviceSpec {
  std::string name;  // "H100 SXM 80GB", "this machine's CPU", ...
  std::string key;   // short name for `lattice plan --device`: "h100", "a100-40gb", "cpu"
  double memory_bytes = 0;
  double peak_flops = 0;            // per device, in the precision the options train in
  double intra_node_bandwidth = 0;  // bytes/s per device (NVLink, shared memory)
  double inter_node_bandwidth = 0;  // bytes/s per device (InfiniBand, Ethernet)
  double memory_bandwidth = 0;      // bytes/s (HBM, DRAM): the optimizer step's rate
};
// The built-in table (H100 SXM and PCIe, H200, A100 80GB / 40GB) for `precision` ("bf16", "fp16",
// "fp32", "fp64"): dense peak rates from NVIDIA's datasheets; fp32 is the CUDA-core rate, not TF32.
std::vector<DeviceSpec> known_devices(const std::string& precision);
// The entry of known_devices(precision) whose key or name equals `name` (case-insensitive);
// nullopt when there is none.
std::optional<DeviceSpec> find_device(const std::string& name, const std::string& precision);
// The engine device a run on `device` trains with, as TrainOptions::device: "cpu" for the CPU
// kind (key "cpu"), else "cuda". A plan for a cluster estimates with it (estimate_memory reads
// options.device: the attention's saved tensor differs).
std::string engine_device(const DeviceSpec& device);
// The entry for a GPU as CUDA names it ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", ...):
// the board, not only the family, so a PCIe H100 gets its own peak; nullopt for a board the
// table lacks (the caller then reports no MFU rather than a wrong one).
std::optional<DeviceSpec> device_for_gpu_name(const std::string& cuda_name,
                                              const std::string& precision);
// This machine's CPU: its memory (sysconf), the measured SGEMM rate (GFLOP/s, all cores) as
// the peak, and a memory-copy rate for shared-memory communication (measure_copy_bandwidth():
// measured once per process, 0.03-0.25 s, so call it off a UI thread). With `ranks_per_node` > 1
// each rank is one device with its share of the cores, memory, peak and memory bandwidth.
// Between machines, 10 GbE is assumed.
DeviceSpec this_machine_cpu(double measured_sgemm_gflops, int ranks_per_node = 1);
// One thread's memcpy rate on this machine, bytes/s (bytes copied per second; a 32 MiB block,
// best of 3 after a first pass that faults the pages in), cached after the first call.
// Thread-safe.
double measure_copy_bandwidth();

struct ClusterSpec {
  int nodes = 1, devices_per_node = 1;
  DeviceSpec device;
  double compute_efficiency = 0.5;  // achieved / peak on the model's GEMMs
  // Share of device memory kept free for what the estimate leaves out (the libraries' own
  // memory: the CUDA context, cuBLAS, NCCL, MPI, BLAS; allocator slack): a layout fits when its most loaded rank needs at most
  // (1 - memory_headroom) * device.memory_bytes.
  double memory_headroom = 0.05;
  double usable_memory_bytes() const { return (1 - memory_headroom) * device.memory_bytes; }
  int world() const { return nodes * devices_per_node; }
};
// The options a plan for `cluster` estimates with: options.device the cluster's engine device,
// and on the CPU without --threads the threads each rank takes as the trainer gives them
// (threads_per_rank: this machine's cores shared among devices_per_node ranks), which size the
// CPU attention's per-thread workspace.
TrainOptions planned_options(const TrainOptions& options, const ClusterSpec& cluster);
// The CPU kernels' threads of each of `ranks` ranks sharing this machine's cores: at least 1.
int shared_cpu_threads(int ranks);
// The most loaded rank of `memory` fits the cluster's usable device memory.
bool fits_in_memory(const MemoryEstimate& memory, const ClusterSpec& cluster);

// One training step's time by term, for the slowest pipeline stage
// (docs/design-notes.md#planner-step-time-and-layout-search states every rule).
struct StepEstimate {
  double compute_s = 0;  // FLOPs per rank with recomputation / (peak * efficiency)
  double tp_comm_s = 0;  // TP collectives per step (inter-node bandwidth if a TP group spans nodes)
  // Context parallelism's ring: each layer passes K/V around the CP group forward, K/V and their
  // grads backward; what the attention's own compute does not hide.
  double cp_comm_s = 0;
  // Expert parallelism's all-to-alls: per MoE layer and micro-batch dispatch + combine forward
  // and their two backward, (EP - 1) / EP of routes x hidden x dtype bytes each.
  double ep_comm_s = 0;
  double pp_comm_s = 0;        // pipeline sends and receives between stages
  double pp_bubble_s = 0;      // 1F1B bubble: (PP - 1) / (VPP * M) of the stage's time
  double dp_comm_s = 0;        // gradient reduction (and parameter all-gather) not hidden
  double dp_comm_total_s = 0;  // the whole data-parallel traffic's time, hidden or not
  double optimizer_s = 0;      // AdamW step, memory bound
  double total_s = 0;
  double tokens_per_second = 0;  // global batch tokens / total_s
  double mfu = 0;                // model FLOPs / (total_s * peak * devices)
  int slowest_stage = 0;         // pp rank whose time sets the pipeline's pace
};
// Requires a valid layout for `options` (make_layout), a known vocabulary and a device with
// positive rates. The terms add up to total_s: compute, TP and PP communication of the slowest
// stage, its bubble, then the data-parallel tail (dp_comm_s + optimizer_s) of the stage where it
// is longest.
StepEstimate estimate_step(const TrainOptions& options, const ParallelLayout& layout,
                           const ClusterSpec& cluster);
// The same, reusing an estimate_memory() of the same options and layout.
StepEstimate estimate_step(const TrainOptions& options, const ParallelLayout& layout,
                           const ClusterSpec& cluster, const MemoryEstimate& memory);

// Every valid layout of options' model and global batch on the cluster's devices (TP, CP, EP,
// PP, virtual stages, micro batch, recomputation, distributed optimizer; ETP = TP and so
// EDP = world / (TP x EP x PP)), with its estimates and
// whether it fits in device memory; fitting ones first, by estimated tokens/s.
// Sequence parallelism is on whenever TP > 1 (it saves memory at the same traffic); uneven
// pipeline splits are not searched. At most max_results come back. Pure arithmetic: safe to
// run on any thread (the Studio runs it off the UI thread).
struct LayoutCandidate {
  TrainOptions options;  // the base options with the candidate's layout and batch flags
  ParallelLayout layout;
  MemoryEstimate memory;
  StepEstimate step;
  bool fits = false;
};
// What a search went through: the valid layouts it estimated (it enumerates only choices that
// keep the divisibility rules, then checks each with layout_errors and validate) and how many
// of them fit.
struct SuggestStats {
  int64_t valid = 0, fitting = 0;
};
std::vector<LayoutCandidate> suggest_layouts(const TrainOptions& base, const ClusterSpec& cluster,
                                             int max_results = 50, SuggestStats* stats = nullptr);

// The `lattice train` flags that select a candidate's layout and batch:
// "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 ...".
std::string layout_flags(const TrainOptions& options);
// plan_json()'s object plus "cluster": {"nodes", "devices_per_node", "device": {"name", "key",
// "memory_bytes", "peak_flops", "intra_node_bandwidth", "inter_node_bandwidth",
// "memory_bandwidth"}, "compute_efficiency", "memory_headroom", "usable_memory_bytes"},
// "fits" and "step": {"compute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s",
// "pp_bubble_s", "dp_comm_s", "dp_comm_total_s", "optimizer_s", "total_s", "tokens_per_second",
// "mfu", "slowest_stage"}.
std::string plan_json(const ParallelLayout& layout, const MemoryEstimate& estimate,
                      const ClusterSpec& cluster, const StepEstimate& step, int indent = -1);
// {"cluster": {...as above}, "candidates": [{"tp", "cp", "ep", "pp", "vpp", "dp",
// "micro_batch_size", "micro_batches", "recompute", "distributed_optimizer", "sequence_parallel",
// "most_loaded_bytes", "fits", "step": {...}, "flags"}]} (`lattice plan --suggest --json`).
std::string suggest_json(const std::vector<LayoutCandidate>& candidates, const ClusterSpec& cluster,
                         int indent = -1);

}  // namespace lattice
