// The GPT model (ARCHITECTURE.md "Model"), one for every device, llm.c style: GPT-2, or the Llama
// family where ModelConfig says so (RoPE on queries and keys, RMSNorm, SwiGLU, grouped-query
// attention, an untied LM head, no biases; docs/models.md). One chunk of the model (a
// ModelShard: its layers, the embeddings on a `pre` chunk, the final norm and the LM head on a
// `post` chunk, split over the tensor-parallel ranks) over one flat
// master-parameter arena in G = accum_t<A> (device/ops.h: fp32, fp64 for A = double) in
// ParamLayout(config, shard) order, one gradient arena in G (Megatron's main grads, accumulated
// over micro-batches), and the compute copy of the parameters and every activation in A: float
// (fp32), bf16 (--bf16), fp16 (--fp16, with the loss scaler of grad_scaling.h) or double
// (--fp64, where the device has an op list for it: the CPU). LayerNorm statistics, the
// attention's saved tensor and workspace, logits and token losses are in G. It runs on a Device
// (device/device.h: the CPU device, or the CUDA device of `lattice-gpu`) through the device's op
// list Ops<A> (device/ops.h); every buffer comes from the device under its memory category.
// Tensor parallelism (docs/design-notes.md#tensor-parallelism, docs/gpu.md#tensor-parallelism):
// the rank holds its heads and its slice of the MLP and of the vocabulary; the reductions over
// the TP group are the communicator's stream-ordered calls (comm.h) on the compute stream.
// Pipeline parallelism: a chunk without `pre` starts from an input hidden state, one without
// `post` ends at its output hidden state and its backward starts from the output's gradient.
// Each micro-batch in flight has its own activations (GptActivations, owned by the caller: the
// pipeline's pool, which moves the boundary tensors between stages); the model owns its arenas
// and the scratch every micro-batch shares.
// Dropout (model/dropout_sites.h): masks keyed by the micro-batch's seed, the global layer index
// and the site, so every layout drops the same elements; each micro-batch's activations
// remember its seed for its backward.
// Sequence parallelism (shard.sequence_parallel, TP > 1): the residual stream, the LayerNorms
// and the hidden dropout hold this rank's R = N/t rows; the column-parallel layers read
// all-gathered rows and the row-parallel outputs are reduce-scattered.
// Context parallelism (shard.cp_size > 1, the CP communicator given to create()): the model runs
// this CP rank's T/CP rows of each sequence at their global positions, the core attention by
// the ring over the CP group (Note [context parallelism] in gpt_layer.cpp); B*T below is then
// B * T/CP.
// Recomputation (docs/gpu.md#recomputation): RecomputePlan for the chunk's layers; a fully
// recomputed layer keeps only its input residual[l] per micro-batch, its other activations live
// in scratch shared by every micro-batch and are re-created by its group's forward just before
// the group's backward. Selective recomputation (Megatron's "core attention") changes nothing:
// every device's attention keeps only its (B, NH, T) log-sum-exps, nothing of size T x T to drop
// (Note [attention keeps log-sum-exps] in kernels/cpu/attention.cpp).
// Per-op times: with set_op_times(true), two Device::marks on the compute stream around each op,
// added to profiler() by collect_op_times().
// Tests and tools that want the whole model in this process without naming a device use the
// host constructors (GptModel(config, micro_batch), GptActivations(config, micro_batch)), which
// run it on the process's host device (host_device()).
// Not thread-safe; every op is queued on the device's compute stream and nothing here waits
// for it unless its comment says so.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/profiler.h"
#include "device/cpu_device.h"
#include "device/device.h"
#include "device/device_blocks.h"
#include "device/ops.h"
#include "lattice/comm.h"
#include "lattice/model_config.h"
#include "lattice/status.h"
#include "model/dropout_sites.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "model/vision_encoder.h"
#include "parallel/ring_attention.h"

namespace lattice {

// Saved tensors of one layer (N = B*T rows, C hidden, F = ffn, NH heads; t = TP size, so this
// rank holds Ct = C/t of the attention width, Ht = NH/t heads and Ft = F/t of the MLP; R = N/t
// rows with sequence parallelism, else N).
template <typename A>
struct LayerActivations {
  using G = accum_t<A>;
  A* ln1;       // (R, C)
  G* ln1_mean;  // (R), null with RMSNorm
  G* ln1_rstd;  // (R)
  A* qkv;       // (N, Wt) this rank's query groups [q..q|k|v], queries and keys rotated by RoPE
  A* atty;      // (N, Ct) attention output
  G* saved;     // Ops::attention_saved_elems(B, T, Ht): what attention_forward keeps for its
                // backward, the log-sum-exps (B, Ht, T) on every device
  A* res_mid;   // (R, C) residual after the attention block
  A* ln2;       // (R, C)
  G* ln2_mean;  // (R), null with RMSNorm
  G* ln2_rstd;  // (R)
  A* fc1;       // (N, Ft) before GELU; (N, 2Ft) gate | up with SwiGLU; MoE: (Sl, Fm')
  A* gelu;      // (N, Ft) the activation's output (GELU or SwiGLU); MoE: (Sl, Fm)
  // An MoE layer's (Note [MoE layer] in gpt_moe.cpp; E experts, k routes a token, S = N k
  // permuted rows of which the kept routes use the first sum(expert_counts)); null when dense.
  // Expert parallelism (EP > 1, Note [expert parallelism] in gpt_moe.cpp): this rank's E/EP
  // experts run on Sl = EP S rows at most, those every EP rank sent them.
  G* router_probs;             // (N, E) the router's softmax over every expert
  int32_t* route;              // (N, k) each token's experts
  G* route_weight;             // (N, k) their weights (renormalised over the k)
  int32_t* route_slot;         // (N, k) each route's permuted row, -1 where dropped
  int32_t* slot_row;           // (S) each permuted row's token
  int32_t* tokens_per_expert;  // (E) routes to each expert before dropping (the aux loss's)
  int32_t* expert_counts;      // (E) kept routes: expert e's block of permuted rows
  // (EP, E) every EP rank's expert_counts (EP > 1; null at EP 1): what this rank's experts got
  // from each rank.
  int32_t* expert_counts_all;
  // (EP, E) the counts the forward read on the host (expert_counts_all, or expert_counts at
  // EP 1): that buffer itself where device memory is host memory, else a host copy
  // (moe_host_counts), which the backward reuses.
  int32_t* expert_counts_host;
  A* expert_in;   // (Sl, C) this rank's experts' input rows (EP 1: the permuted ln2 rows)
  A* expert_out;  // (S, C) each kept route's expert output, back in this rank's permuted order
};

// "" when host positions (B, T) describe contiguous packed documents (Note [packed sequences]:
// each sequence starts a document at 0, and every later position is 0, a new document, or its
// predecessor + 1), else a sentence naming the first bad (sequence, token).
std::string packed_positions_error(const int32_t* positions, int B, int T);

// One micro-batch's activations, made for one chunk by its GptModel::new_activations and owned
// by the caller (a pipeline keeps a pool of them: one per micro-batch in flight); its memory
// goes back to the device with it. N = B*T rows, R as LayerActivations, L = the chunk's layers.
template <typename A>
struct GptActivations {
  using G = accum_t<A>;
  explicit GptActivations(Device& device) : blocks(device) {}
  // Empty activations on host_device() for the whole model of `config` on micro-batches of
  // `micro_batch` sequences (GptModel's host constructor), allocated by that model's forward()
  // at first use.
  GptActivations(const ModelConfig& config, int micro_batch)
      : blocks(host_device()), host_shape{micro_batch, config.seq_length} {}
  DeviceBlocks blocks;         // every buffer below
  int32_t* tokens = nullptr;   // (B, T) pre or post chunks: filled by the caller (stage API)
  int32_t* targets = nullptr;  // (B, T) post chunks
  // (B, T) every chunk: each token's position in its own packed document (Note [packed
  // sequences] in gpt_layer.cpp), filled by the caller; read only while `packed` is set.
  int32_t* positions = nullptr;
  bool packed = false;  // false: positions 0..T-1 and plain causal attention, as pretraining
  // A vision-language model's pre chunk (Note [image rows] in gpt.cpp), written by
  // GptModel::load_images; null otherwise. At most I images per sequence of Np patches each;
  // the tower runs on the micro-batch's present images only, n of them, compacted (Note [present
  // images] in gpt_vision.cpp); the buffers hold the bound B I.
  A* images = nullptr;              // (B I, Cin, img_h, img_w) normalised pixels, in A; n used
  int32_t* image_slot = nullptr;    // (N) each row's projected patch (row of n Np), -1: text
  int32_t* image_rows = nullptr;    // (B I Np) each patch's row, -1 where the sequence cut it
  int32_t* embed_tokens = nullptr;  // (N) tokens with -1 at image rows: what the embedding reads
  int num_images = 0;               // n: the images whose placeholders the sequences hold
  bool images_loaded = false;       // set by load_images, used up by the next forward
  A* residual = nullptr;  // (L+1, R, C): [0] embeddings or the input, [l+1] layer l's output
  // L layers; a recomputed layer's entry is all null (its activations live in the scratch).
  std::vector<LayerActivations<A>> layers;
  A* lnf = nullptr;           // (R, C) post
  G* lnf_mean = nullptr;      // (R) post with LayerNorm
  G* lnf_rstd = nullptr;      // (R) post
  G* logits_accum = nullptr;  // (N, Vt) post: logits in G, then dlogits in G
  // (N, Vt) post: the LM head's output in A, then dlogits (for float and double the same
  // buffer as logits_accum).
  A* logits = nullptr;
  G* losses = nullptr;       // (N) post
  A* output_grad = nullptr;  // (R, C) not post: the gradient of residual[L], from the next stage
  A* input_grad = nullptr;   // (R, C) not pre: the gradient of residual[0], for the previous one
  // The last forward's dropout: p of the hidden and attention sites (0 when evaluating) and
  // the micro-batch's seed; its backward draws the same masks.
  float p_hidden = 0, p_attention = 0, p_lora = 0;
  uint64_t dropout_seed = 0;
  // The last forward's grad_scale (0: evaluation): MoE's load-balancing loss enters the gradient
  // with it (Note [MoE layer] in gpt_moe.cpp).
  float grad_scale = 0;
  // The host constructor's (B, T), which forward() checks against the model's; {0, 0} otherwise.
  std::pair<int, int> host_shape{0, 0};
};

// Where a 16-bit model's fp32 master weights live: a whole arena in the model, or only in its
// optimizer's pieces (Note [master weights in the optimizer] in optim/adamw.h; the trainer's
// runs), when the model keeps its 16-bit compute copy alone. float and double models always hold
// the whole arena (their compute copy is the master).
enum class MasterWeights { kWhole, kInOptimizer };

template <typename A>
class GptModel {
 public:
  using G = accum_t<A>;  // master weights, gradients, statistics, logits, losses

  // Allocates the arenas and the scratch for micro-batches of `micro_batch` sequences on
  // `device` (outliving the model; its op list of A runs every op; each micro-batch in flight
  // needs its activations too: new_activations); an out-of-memory is the device's sentence
  // (Device::out_of_memory). shard: the chunk (layer range, pre, post, tensor-parallel split,
  // sequence parallelism when tp_size > 1, which needs tp_size to divide B*T). tp: the communicator
  // of the tensor-parallel group for the device's buffers (Device::make_comm), required when
  // tp_size > 1 and outliving the model; a failed reduction is recorded on the device like a failed
  // kernel. recompute: RecomputePlan::make for the chunk's layers (none by default; "selective"
  // is none: Note [selective recomputation] in gpt_layer.cpp). master: see
  // MasterWeights. Errors: also a device without an op list for A (CUDA has none for double).
  static Result<std::unique_ptr<GptModel>> create(
      const ModelConfig& config, int micro_batch, Device& device, const ModelShard& shard = {},
      Comm* tp = nullptr, const RecomputePlan& recompute = {}, Comm* cp = nullptr,
      Comm* ep = nullptr, Comm* etp = nullptr, MasterWeights master = MasterWeights::kWhole);
  // The whole model of `config` on host_device() (device/cpu_device.h), for tests and tools
  // that run it in this process (no tensor or pipeline parallelism, nothing recomputed).
  // Throws std::runtime_error with the device's out-of-memory sentence.
  GptModel(const ModelConfig& config, int micro_batch);
  // One micro-batch's activations for this chunk (kActivations; the boundary gradients
  // kCommBuffers), on the model's device; they may outlive the model. Errors: the device's
  // out-of-memory sentence.
  Result<std::unique_ptr<GptActivations<A>>> new_activations();
  ~GptModel() = default;
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const ParamLayout& layout() const { return layout_; }
  Device& device() { return device_; }
  size_t arena_size() const { return layout_.total_numel(); }
  // Elements of grads(): arena_size() unless tensors are frozen (Note [LoRA] in param_layout.h).
  size_t grad_size() const { return layout_.grad_numel(); }
  // (arena_size) master parameters in G: the weights the kernels read for float and double;
  // host memory on a host-addressable device (the CPU). A 16-bit model's kernels read
  // compute_params(): write weights with upload(). Null when the optimizer holds the master
  // (MasterWeights::kInOptimizer).
  G* params() { return master_; }
  const G* params() const { return master_; }
  G* grads() { return grads_; }  // (grad_size) gradients, in G, at ParamTensor::grad_offset
  const G* grads() const { return grads_; }
  // The parameters the kernels read: params() itself for float, a 16-bit copy otherwise.
  A* compute_params() { return compute_; }

  // Host parameters in G (numel, layout order) -> master and compute copy (the compute copy
  // alone without a master: the optimizer's pieces are AdamW::load_master's). Waits; a failed
  // copy stays recorded on the device (its synchronize() returns it).
  void upload(const G* host);
  // master -> host (numel, layout order); without a master the 16-bit copy widened (a frozen
  // tensor's only values; the trained ones' fp32 values are the optimizer's pieces, which
  // checkpoint/chunk_state.h gathers over them). Waits; errors as upload().
  void download(G* host);
  // The master weights were written in place (a checkpoint load on a host-addressable device,
  // the distributed optimizer's gather of the master): rounds them into the compute copy, on
  // the compute stream (nothing for float and double). Requires the master.
  void refresh_compute_copy();
  void zero_grads();
  // Megatron's initialisation (model/init_weights.h): each global tensor drawn on the host from
  // its own stream keyed by (seed, name) and this rank's slice kept, so the master weights are
  // the same bits on every layout and device.
  // Straight into the arena where the device's memory is host memory
  // (Capabilities::host_addressable), else staged through a host buffer tensor by tensor; then
  // the compute copy. Without a master (MasterWeights::kInOptimizer) tensor by tensor through a
  // host buffer into the compute copy, each tensor's fp32 values also handed to `master`
  // (arena offset, values, count: the optimizer's AdamW::load_master), whose error ends the
  // initialisation. Waits. Errors: a global tensor's host buffer that cannot be allocated
  // (OutOfMemory's sentence), a failed copy (the device's error).
  using MasterSink = std::function<Status(size_t offset, const G* values, size_t n)>;
  Status init_weights(uint64_t seed, const MasterSink& master = nullptr);

  // The whole model (pre and post): tokens, targets are host (B, T) int32, the same on every
  // rank of the TP group, copied into acts (activations of the host constructor are allocated
  // here at first use; their (B, T) must be the model's, else std::invalid_argument).
  // Training (grad_scale > 0): dropout as configured, with masks keyed by dropout_seed (the
  // trainer's seed of this micro-batch), and acts' logits left holding d(grad_scale * sum of
  // token losses) / d logits (this rank's vocabulary columns) for backward(). Evaluation
  // (grad_scale 0): no dropout. Waits for the device and returns the mean of acts.losses (N):
  // every token's whole loss, equal on every rank of the TP group; NaN when the device failed
  // (its synchronize() says why). positions: null, or host (B, T) int32 packing several
  // documents into each sequence (Note [packed sequences] in gpt_layer.cpp); positions that
  // packed_positions_error refuses throw std::invalid_argument with its sentence.
  double forward(GptActivations<A>& acts, const int32_t* tokens, const int32_t* targets,
                 uint64_t dropout_seed, float grad_scale, const int32_t* positions = nullptr);
  // Accumulates acts' micro-batch's parameter gradients into grads() (queued, not waited for).
  void backward(GptActivations<A>& acts);
  // A vision-language model's pre chunk (ModelConfig::has_vision; Note [image rows] in
  // gpt.cpp): before forward() or forward_stage(), the micro-batch's images, host
  // (B I, Cin, img_h, img_w) normalised float (I = vision.images_per_sample; a sequence's images
  // in order, unused slots anything), and its tokens, host (B, S) whole sequences (S =
  // seq_length; the rows queued are this CP rank's cp_split of them), whose image placeholder
  // rows (ModelConfig::image_token_id) take the images' patches in order (Note [images under
  // context parallelism] in gpt_vision.cpp). Only the images whose placeholders the sequences
  // hold are uploaded and run through the tower (Note [present images]). Queued.
  // Errors: a sequence with more placeholder rows than its I images have patches; a chunk
  // without the tower.
  Status load_images(GptActivations<A>& acts, const int32_t* tokens, const float* images);
  // The tower of a vision-language pre chunk, else null; it computes in A (Note [tower
  // precision] in gpt_vision.cpp).
  VisionEncoder<A>* vision() { return vision_.get(); }

  // A pipeline stage (gpu_pipeline.h): before forward_stage the caller has queued the
  // micro-batch's tokens and targets into acts (pre or post chunk), its positions and packed
  // flag (every chunk; packed false: none) and its input (acts.residual, (R, C): this rank's
  // rows with sequence parallelism); a post chunk leaves
  // acts.losses, another its output (output(acts)). dropout_seed: the micro-batch's, as
  // forward()'s; acts keeps it (and p) for its backward. Before backward_stage a chunk that is
  // not post has its output gradient in acts.output_grad; one that is not pre leaves its input
  // gradient in acts.input_grad. Queued, not waited for.
  void forward_stage(GptActivations<A>& acts, float grad_scale, uint64_t dropout_seed = 0);
  void backward_stage(GptActivations<A>& acts);
  const A* output(const GptActivations<A>& acts) const {
    return acts.residual + static_cast<size_t>(L_) * R_ * C_;
  }
  bool pre() const { return layout_.shard().pre; }
  bool post() const { return layout_.shard().post; }
  size_t boundary_elems() const { return static_cast<size_t>(R_) * C_; }  // (R, C)
  // Called during backward with each range [first, last) of layout().tensors() whose gradients
  // are complete once the work queued so far has run (a data-parallel reducer waits for an
  // event recorded at that point). Only when final_backward is set (last micro-batch), which
  // also sums the sequence-parallel gradients (sequence_parallel_grad) over the TP group
  // first.
  void set_grads_ready(std::function<void(int first, int last)> f) { grads_ready_ = std::move(f); }
  void set_final_backward(bool final) { final_backward_ = final; }

  // Per-op times (off by default). On: each op queued is bracketed by two Device::marks on the
  // compute stream, under core/profiler.h's Op names (GELU is FC1's epilogue, so it counts as
  // kMatmulForward; the fused residual add as kLayerNorm). collect_op_times() adds the marks'
  // seconds to profiler() and forgets them: call it once the compute stream has been
  // synchronised and before Device::reset_marks() (CUDA reuses the marks' events).
  void set_op_times(bool on) { op_times_ = on; }
  void collect_op_times();
  Profiler& profiler() { return profiler_; }

  int B() const { return B_; }
  // Rows per sequence this model runs: seq_length, or seq_length / CP on a CP rank.
  int T() const { return T_; }

  // MoE (Note [MoE layer] in gpt_moe.cpp): the load-balancing loss of the last forward, summed
  // over this chunk's MoE layers (coefficient included: the term added to the training loss);
  // 0 without MoE or with --moe-aux-loss-coeff 0. Waits for the device.
  double moe_aux_loss();
  // The training forwards' (grad_scale > 0) load-balancing losses summed since the last call
  // (every MoE layer of the chunk, every micro-batch), then reset: the trainer's "moe aux loss"
  // metric. Read on the host as each forward runs (copied there on a GPU).
  double take_moe_aux_loss_sum() { return std::exchange(moe_aux_sum_, 0.0); }
  // The training forwards' routes to each expert (before dropping) counted since the last
  // call, added into `load` ((num_layers, E) by global layer) at this chunk's MoE layers, then
  // reset: the trainer's per-expert load. Host counts, as take_moe_aux_loss_sum's.
  void take_moe_load(std::vector<double>& load);

 private:
  GptModel(const ModelConfig& config, const ModelShard& shard, int micro_batch, Device& device,
           Ops<A>& ops, Comm* tp);
  Status allocate();
  // Note [image rows] (gpt_vision.cpp): the tower for a vision-language pre chunk, in A on the
  // compute copy of the weights (Note [tower precision]).
  Status create_vision();
  // Runs the tower on a's images and adds each projected patch to its row of a.residual.
  void splice_images(GptActivations<A>& a);
  // Given d rows (N, C), the gradient of the embedding's output (all rows): the tower's
  // gradients (re-running its forward first when another micro-batch ran it since a's).
  void vision_backward(GptActivations<A>& a, const A* d_rows);
  // The images of a micro-batch's n present ones this CP rank encodes (Note [images under
  // context parallelism] in gpt_vision.cpp): `count` from `first`, of blocks of `per`; its first
  // image starts `offset` elements into the micro-batch's images, and a block's projected patches
  // take `block` elements (per Np C).
  struct ImageShare {
    int per = 0, first = 0, count = 0;
    size_t offset = 0, block = 0;
  };
  ImageShare image_share(int n) const;
  // Runs the tower on a's share of images (none: nothing); under CP all-gathers every rank's
  // patches. Returns the micro-batch's projected patches (n Np, C), image j's from row j Np.
  const A* encode_images(const GptActivations<A>& a);
  // RoPE's tables computed on the host and copied into rope_cos_, rope_sin_ (nothing without
  // RoPE). Waits.
  Status upload_rope_tables();
  // Takes every buffer of one micro-batch's activations from a.blocks (new_activations, and
  // the host constructor's activations at their first forward).
  Status take_activations(GptActivations<A>& a);
  // One layer's activations (kActivations) from `from`; an MoE layer's (moe) with its routing
  // tensors and expert rows, sized for a dense layer too (the recompute scratch).
  LayerActivations<A> take_layer_acts(DeviceBlocks& from, bool moe);
  // A pair of marks on the compute stream around one op's queueing (set_op_times), kept for
  // collect_op_times(); nothing when op times are off.
  class OpTimer {
   public:
    OpTimer(GptModel& model, Op op) : model_(model.op_times_ ? &model : nullptr), op_(op) {
      if (model_) from_ = model_->device_.mark(model_->compute());
    }
    ~OpTimer() {
      if (model_)
        model_->timed_ops_.push_back({op_, from_, model_->device_.mark(model_->compute())});
    }
    OpTimer(const OpTimer&) = delete;
    OpTimer& operator=(const OpTimer&) = delete;

   private:
    GptModel* model_;
    Op op_;
    Mark from_;
  };
  void run_forward(GptActivations<A>& a, float grad_scale, uint64_t dropout_seed);
  void run_backward(GptActivations<A>& a);
  // Layer l's forward from its ln1 (already in la) to its GELU output: attention, projection,
  // res_mid = x + dropout(proj) and ln2, FC1 and GELU. x: residual[l]. Shared by the forward
  // and the recomputation, so both queue the same ops, masks and TP reductions.
  void layer_forward_from_ln1(int l, const LayerActivations<A>& la, const A* x);
  // MoE layer l (Note [MoE layer] in gpt_moe.cpp). moe_experts_forward: from ln2 (N, C) the
  // router, routing, dispatch plan and the experts' outputs into la (part of the recomputed
  // forward); moe_combine_forward: fc2_out_ = the weighted sum of each token's expert outputs
  // (summed, or reduce-scattered, over TP), and the layer's load-balancing loss; moe_backward:
  // given d out (R, C), writes this TP rank's partial d ln2 into d_ln2 (N, C) and accumulates
  // the router's and experts' gradients (d_out may alias d_ln2); with whole experts (Note
  // [expert tensor parallelism 1]) it writes the whole d ln2 into d_c_ (R, C) instead and
  // returns true: nothing for the caller to reduce. moe_input: the MoE layer's (Nm, C) rows of
  // a held (R, C) tensor (gathered into `full` where it needs the N rows).
  void moe_experts_forward(int l, const LayerActivations<A>& la, const A* ln2);
  const A* moe_input(const A* held, A* full);
  void moe_all_gather_rows(const A* mine, A* all);
  void moe_combine_forward(int l, const LayerActivations<A>& la, bool training);
  // Expert parallelism's moves (Note [expert parallelism]): this rank's permuted rows `mine`
  // (S, C) to the experts' owners, regrouped expert-major into `local` (Sl, C), by the counts
  // the forward read (la.expert_counts_host); and back. moe_local_counts: (El) the rows each of
  // this rank's experts holds, from the host counts (EP, E).
  std::vector<int> moe_local_counts(const int32_t* counts) const;
  void moe_dispatch(const LayerActivations<A>& la, const A* mine, A* local);
  void moe_undispatch(const LayerActivations<A>& la, const A* local, A* mine);
  bool moe_backward(int l, const LayerActivations<A>& la, const A* d_out, A* d_ln2,
                    float grad_scale);
  // The forward's counts (EP, E) on the host, la.expert_counts_host: expert_counts at EP 1,
  // expert_counts_all (after the count exchange) at EP > 1; where device memory is not host
  // memory, one copy waited for (a failed device: zeros at EP 1, the job ended at EP > 1).
  const int32_t* moe_host_counts(const LayerActivations<A>& la);
  // Core attention of one layer over qkv (N, Wt) into out (N, Ct), keeping `saved` for the
  // backward: the device's attention op, or with context parallelism (cp_ > 1) the ring over
  // the CP group (Note [context parallelism] in gpt_layer.cpp; saved is then its (B, Ht, T)
  // log-sum-exp). key: the attention dropout's mask key.
  void core_attention_forward(A* out, G* saved, const A* qkv, uint64_t key);
  void core_attention_backward(A* dqkv, const A* dout, const A* qkv, const A* out, const G* saved,
                               uint64_t key);
  // What one layer's attention keeps for its backward (elements of G).
  size_t attention_saved_elems() const;
  // The configured normalisation (LayerNorm, or RMSNorm with mean and bias unused) over R rows.
  void norm_forward(A* out, G* mean, G* rstd, const A* inp, const A* weight, const A* bias);
  void residual_norm_forward(A* residual_out, A* out, G* mean, G* rstd, const A* residual,
                             const A* x, const A* weight, const A* bias);
  void norm_backward(A* dinp, G* dweight, G* dbias, const A* dout, const A* inp, const A* weight,
                     const G* mean, const G* rstd);
  // Full recomputation (Note [recomputation] in gpt_layer.cpp).
  // Where layer l's activations live: the micro-batch's own, or the scratch of a recomputed layer.
  const LayerActivations<A>& layer_acts(const GptActivations<A>& a, int l) const {
    return recompute_.recomputed(l) ? recompute_scratch_[l - recompute_.group_start[l]]
                                    : a.layers[l];
  }
  // Re-creates the activations of the recomputed layers [first, last) of a in the scratch,
  // with a's dropout masks.
  void recompute_group(const GptActivations<A>& a, int first, int last);
  // Queues an in-place all-reduce of data (count elements of `type`) over the TP group on the
  // compute stream; a failure is recorded on the device.
  void tp_all_reduce(void* data, size_t count, DType type, ReduceOp op);
  // Sums an (N, C) activation of partial sums over the TP group: the row-parallel layers'
  // outputs, the input gradients of the column-parallel ones and of the LM head.
  void tp_sum_rows(A* data);
  // Sequence parallelism (no-ops otherwise):
  // gather_rows all-gathers this rank's (R, C) rows into full (N, C) and returns it (held
  // itself without SP); reduce_rows sums partial (N, C) over the TP group into held (R, C):
  // a reduce-scatter with SP, else an all-reduce in place (held == partial; nothing at t 1).
  const A* gather_rows(const A* held, A* full);
  void reduce_rows(A* partial, A* held);
  // out (R, C) = the row-parallel layer inp (N, K) @ weight^T summed over TP, + bias once;
  // with a LoRA adapter (lora_a non-null) its partial output joins before the sum.
  void row_parallel_forward(A* out, const A* inp, const A* weight, const A* bias, int K,
                            const A* lora_a = nullptr, const A* lora_b = nullptr, int layer = 0,
                            int linear = 0);
  // LoRA (Note [LoRA] in param_layout.h; gpt_lora.cpp). out (N, OC) += s B A dropout(x) for x
  // (N, K), a (r, K), b (OC, r), s = alpha / r; nothing when a is null. layer: local; linear:
  // 0 qkv, 1 proj, 2 fc1, 3 fc2 (the dropout key).
  void lora_forward(A* out, const A* x, const A* a, const A* b, int K, int OC, int layer,
                    int linear);
  // Its backward given dy (N, OC): ga (r, K) +=, gb (OC, r) +=, dx (N, K) += the input's
  // gradient. h = A dropout(x) is recomputed (N x r: cheaper than keeping it per micro-batch).
  void lora_backward(A* dx, G* ga, G* gb, const A* dy, const A* x, const A* a, const A* b, int K,
                     int OC, int layer, int linear);
  // x (n) *= s in A (through G where A is 16-bit: the op list scales G only).
  void lora_scale(A* x, size_t n);
  // The position embedding wpe (T, C) added to this rank's rows (R, C) of the embedding; with
  // packed documents (positions_) each row's wpe[positions_[r]].
  void add_position_rows(A* rows, const A* wpe);
  // Sums the sequence_parallel_grad gradients of tensors [first, last) over the TP group.
  void sum_sequence_parallel_grads(int first, int last);
  // Context parallelism: f(held, global, count) for each piece of a chunk of the rows this rank
  // holds, as element offsets into the held (R, C) activation and into the whole batch's
  // (B T, C) (hidden dropout keys its masks by the latter, so every CP rank draws one process's
  // masks).
  void cp_chunks(const std::function<void(size_t, size_t, size_t)>& f) const;
  // Hidden dropout in place on an (R, C) activation (nothing when not training or p is 0), with
  // the current micro-batch's p and seed; layer: the local index (keyed by the global one), -1 for
  // the embedding.
  void hidden_dropout(A* data, int layer, DropoutSite site);
  // d data (R, C) = the mask of hidden_dropout(layer, site) applied to dout; returns dout
  // itself when there is no dropout.
  const A* hidden_dropout_backward(A* out, const A* dout, int layer, DropoutSite site);
  // The mask key of local layer `layer`'s site (-1: the embedding), keyed by the global layer
  // index (shard.layer_begin + layer), so every layout draws the same masks.
  uint64_t key(int layer, DropoutSite site) const {
    const int global = layer < 0 ? -1 : layout_.shard().layer_begin + layer;
    return dropout_site_key(dropout_seed_, global, site);
  }
  // Losses (and dlogits when grad_scale > 0) from logits_accum: whole-vocabulary softmax at
  // t == 1, the vocabulary-parallel passes otherwise.
  void cross_entropy(GptActivations<A>& a, float grad_scale);
  template <typename X>
  X* take(size_t n, MemoryCategory category) {
    return blocks_.take<X>(n, category);
  }
  void notify(int first, int last) {
    if (!final_backward_) return;
    sum_sequence_parallel_grads(first, last);
    if (grads_ready_) grads_ready_(first, last);
  }

  // "tensor-parallel all-reduce: <the communicator's message>" recorded on the device.
  void record_comm_error(const char* what, const Status& s);
  // A model without a master: `from` (host, n) rounded into the compute copy's [offset,
  // offset + n), or (from null) that range widened into `to` (host, n), on the compute stream.
  // Waits.
  void convert_through_host(const G* from, G* to, size_t offset, size_t n);
  Status init_compute_copy(uint64_t seed, const MasterSink& master);
  Stream& compute() { return device_.compute(); }

  ModelConfig config_;
  ParamLayout layout_;
  // Context parallelism (Note [context parallelism] in gpt_layer.cpp): CP size, the ring over
  // the CP group (cp_ > 1), and this rank's rows' global positions (B, T) on the device.
  int cp_ = 1, cp_rank_ = 0;
  std::unique_ptr<RingAttention<A>> ring_;
  // Note [image rows] (gpt.cpp): a vision-language pre chunk's tower on the arenas' first
  // tensors, the activations whose images it ran last, and the host staging of load_images.
  std::unique_ptr<VisionEncoder<A>> vision_;
  const GptActivations<A>* vision_owner_ = nullptr;
  // (CP ceil(B I / CP) Np, C): the projected patches' gradient (n Np rows used; under CP each
  // rank's block of ceil(n / CP) images summed over the CP group); and under CP every rank's
  // patches gathered (Note [images under context parallelism]).
  A* vision_d_out_ = nullptr;
  A* vision_gathered_ = nullptr;
  bool vision_encoder_trains_ = false, vision_trains_ = false;
  std::vector<int32_t> host_slot_, host_rows_, host_ids_;
  std::vector<A> host_images_;
  int32_t* cp_positions_ = nullptr;
  bool packed_ = false;  // the micro-batch being run packs documents
  Device& device_;
  Ops<A>& ops_;          // device_.ops<A>()
  Comm* tp_;             // null when t_ == 1
  DeviceBlocks blocks_;  // the arenas and scratch, freed with the model
  int B_, T_, C_, F_, NH_, L_, Vp_, N_;
  int HS_, KV_;  // head size; key/value heads (query groups)
  bool rms_norm_, swiglu_;
  float eps_;        // the norms' epsilon
  int t_, tp_rank_;  // tensor-parallel size and rank
  bool sp_;          // sequence parallelism (t_ > 1)
  int R_;            // rows of the residual stream held: N/t with sequence parallelism, else N
  size_t row0_;      // the first of them (tp_rank * R with sequence parallelism, else 0)
  int Ct_, Ft_, Ht_, Vt_;  // this rank's C/t, F/t, NH/t heads, Vp/t vocabulary rows
  int Gt_, Wt_;            // this rank's KV/t query groups and their QKV width (NH/t + 2 Gt) HS
  int up_;                 // FC1's output width on this rank: 2Ft with SwiGLU, else Ft
  int rotary_dim_;         // RoPE's rotated dims per head; 0 without RoPE

  MasterWeights master_kind_ = MasterWeights::kWhole;  // kWhole for float and double
  G* master_ = nullptr;   // (numel); null with MasterWeights::kInOptimizer
  G* grads_ = nullptr;    // (numel)
  A* compute_ = nullptr;  // (numel) master_, or a 16-bit copy of the master
  RecomputePlan recompute_;
  // max_group layers (kActivations): the recomputed layers' activations, shared by every
  // micro-batch.
  std::vector<LayerActivations<A>> recompute_scratch_;
  // Vocabulary-parallel cross-entropy (t > 1), reduced over the TP group between its passes.
  G* row_max_ = nullptr;       // (N)
  double* sum_exp_ = nullptr;  // (N)
  G* target_logit_ = nullptr;  // (N)
  // Scratch shared by forward and backward.
  A* proj_out_ = nullptr;  // (R, C) attention projection output, summed over TP (forward)
  A* fc2_out_ = nullptr;   // (R, C) MLP output, summed over TP; added by the next LayerNorm
  A* d_res_ = nullptr;     // (R, C) gradient of the residual stream
  A* d_c_ = nullptr;       // (N, C), (R, C) with sequence parallelism
  A* gathered_ = nullptr;  // (N, C) sequence parallelism: an all-gathered LayerNorm output
  A* full_ = nullptr;      // (N, C) sequence parallelism: partial sums, gathered gradients
  A* d_f_ = nullptr;       // (N, Ft)
  A* d_up_ = nullptr;      // (N, 2Ft) SwiGLU: the gradient of FC1's gate | up output
  A* d_qkv_ = nullptr;     // (N, Wt)
  // RoPE's angle tables (T, rotary_dim / 2) (kernels::rope_tables), kWeights; null without RoPE.
  G* rope_cos_ = nullptr;
  G* rope_sin_ = nullptr;
  A* d_atty_ = nullptr;         // (N, Ct)
  G* attention_ws_ = nullptr;   // Ops::attention_workspace_elems(B, T, Ht, HS)
  G* stats_scratch_ = nullptr;  // (2N) not post: the discarded LayerNorm of output()
  // LoRA's scratch (null without it; r = lora_rank, K = max(C, Ft), O = max(Wt, up, C)).
  int lora_r_ = 0;
  float p_lora_ = 0;
  A* lora_x_ = nullptr;        // (N, K) the dropped input
  A* lora_dx_ = nullptr;       // (N, K) its gradient
  A* lora_h_ = nullptr;        // (N, r) s A x
  A* lora_dh_ = nullptr;       // (N, r)
  A* lora_y_ = nullptr;        // (N, O) the adapter's output
  G* lora_hg_ = nullptr;       // (N, r) 16-bit A: lora_scale's staging
  G* norm_discard_ = nullptr;  // (2C) frozen norms' weight gradients go here, unread
  // MoE (null without MoE layers; E experts, k routes a token, S = N k, Fm this TP rank's
  // slice of the expert width, Fm' = 2 Fm with SwiGLU).
  int E_ = 0, k_ = 0, Fm_ = 0, upm_ = 0;
  // Expert parallelism (Note [expert parallelism] in gpt_moe.cpp): EP size and rank, the EP
  // communicator (ep_ > 1), this rank's El = E / EP experts, from global expert ep_first_.
  int ep_ = 1, ep_rank_ = 0, El_ = 0, ep_first_ = 0;
  // The rows this rank's experts can hold per MoE layer and micro-batch: N k at EP 1; with EP the
  // worst case, each EP rank's N tokens routing min(k, El) of their k routes here, at most E times
  // the capacity with token dropping (the planner's expert_rows, plan/memory_estimate.cpp).
  size_t expert_rows_ = 0;
  // Note [expert tensor parallelism 1] (gpt_moe.cpp; ModelShard::experts_whole): the MoE
  // layers route this rank's Nm = N / t rows [moe_row0_, + Nm) of the N, every expert whole;
  // with an expert TP e between 1 and t its group's N e / t; otherwise Nm = N from 0. moe_rows_:
  // (Nm, C) without sequence parallelism, the combined output and d ln2 of those rows before their
  // TP all-gather; null otherwise.
  bool moe_rows_split_ = false;
  int Nm_ = 0;
  size_t moe_row0_ = 0;
  A* moe_rows_ = nullptr;
  Comm* ep_comm_ = nullptr;
  // Note [expert tensor parallelism e] (gpt_moe.cpp): expert TP etp_ strictly between 1 and t:
  // this rank's expert-TP group (etp_comm_, rank etp_rank_) routes Nm = N etp / t rows
  // [moe_row0_, + Nm), each expert split over it; moe_grouped_ says so.
  bool moe_grouped_ = false;
  int etp_ = 1, etp_rank_ = 0;
  Comm* etp_comm_ = nullptr;
  // The context-parallel group (cp_ > 1): the MoE layers' expert counts are summed over it.
  Comm* cp_comm_ = nullptr;
  // (S, C) this rank's permuted rows going out, (Sl, C) the rows in the all-to-all's order
  // (source rank major), (Sl, C) this rank's experts' output rows; null at EP 1.
  A* moe_send_ = nullptr;
  A* moe_recv_ = nullptr;
  A* moe_local_ = nullptr;
  int capacity_ = 0;          // routes an expert keeps (0: no dropping)
  bool any_moe_ = false;      // the chunk has MoE layers
  A* moe_logits_ = nullptr;   // (N, E) router logits, then their gradient
  G* moe_dweight_ = nullptr;  // (N, k) the route weights' gradient
  A* moe_d_rows_ = nullptr;   // (S, C) d expert_out, then d expert_in
  A* moe_d_act_ = nullptr;    // (Sl, Fm)
  A* moe_d_up_ = nullptr;     // (Sl, 2Fm) SwiGLU
  G* moe_aux_ = nullptr;      // (L) each layer's load-balancing loss of the last forward
  double moe_aux_sum_ = 0;    // take_moe_aux_loss_sum's
  std::vector<int32_t> moe_routes_host_;  // (E) tokens_per_expert copied for moe_load_
  // (L, E) take_moe_load's: the routes to each expert counted since it last reset them.
  std::vector<int64_t> moe_load_;
  std::function<void(int, int)> grads_ready_;
  bool final_backward_ = false;
  // The micro-batch's positions (B, T) when it packs documents, else null (set from its
  // activations by run_forward / run_backward; Note [packed sequences]).
  const int32_t* positions_ = nullptr;
  // The dropout of the micro-batch being run (set from its activations by run_forward /
  // run_backward).
  float p_hidden_ = 0, p_attention_ = 0;
  uint64_t dropout_seed_ = 0;
  // Per-op times: the marks of the ops queued since the last collect_op_times().
  struct TimedOp {
    Op op;
    Mark from, to;
  };
  bool op_times_ = false;
  std::vector<TimedOp> timed_ops_;
  Profiler profiler_;
};

}  // namespace lattice
