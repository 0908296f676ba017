// The GPT-2 model (ARCHITECTURE.md "Model"): explicit forward and backward per module over
// one flat parameter arena and one flat gradient arena, llm.c style. A GptModel is one model
// chunk: the layers of one (virtual) pipeline stage, split over tensor-parallel ranks
// (ModelShard); with the default shard it is the whole model in one process. Activations
// live in a GptActivations object per micro-batch, so several can be in flight (1F1B).
// Instantiated for float (training) and double (gradient and parallel-equivalence checks).
// Not thread-safe. docs/design-notes.md#tensor-parallelism explains the TP/SP data flow.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/profiler.h"
#include "lattice/comm.h"
#include "lattice/model_config.h"
#include "model/dropout_sites.h"
#include "model/param_layout.h"

namespace lattice {

// Which activations backward recomputes instead of keeping (Megatron's --recompute-*).
struct RecomputePlan {
  bool selective = false;  // attention probabilities (the s^2 part) recomputed per layer
  // Per local layer: -1 kept; otherwise the first local layer of the group of consecutive
  // layers recomputed together from that layer's input (full recomputation).
  std::vector<int> group_start;
  int max_group = 0;  // layers in the largest group (scratch slots the model keeps)

  // "" | "full" | "selective", method "uniform" | "block", n = --recompute-num-layers.
  static RecomputePlan make(const std::string& granularity, const std::string& method, int n,
                            int num_local_layers);
  bool recomputed(int local_layer) const {
    return !group_start.empty() && group_start[local_layer] >= 0;
  }
};

// Saved tensors of one layer for one micro-batch; t = TP size, R = rows of the residual stream
// this rank holds (N = B*T, or N/t with sequence parallelism), HL = heads on this rank.
template <typename T>
struct LayerActivations {
  T* ln1;       // (R, C)
  T* ln1_mean;  // (R)
  T* ln1_rstd;  // (R)
  T* qkv;       // (N, 3C/t)
  T* atty;      // (N, C/t) attention output before the projection
  T* probs;     // (B, HL, T, T) softmax before dropout; the model's scratch when recomputed
  T* res_mid;   // (R, C) residual after the attention block
  T* ln2;       // (R, C)
  T* ln2_mean;  // (R)
  T* ln2_rstd;  // (R)
  T* fc1;       // (N, F/t) before GELU
  T* gelu;      // (N, F/t)
};

// Sizes every buffer of a chunk agrees on.
struct ChunkDims {
  ChunkDims(const ModelConfig& c, const ModelShard& s, int micro_batch);
  int B, T, C, F, NH, V;     // V: padded vocabulary of the whole model
  int t, tp_rank, L;         // TP size and rank, layers in this chunk
  int N, R, Ct, Ft, Ht, Vt;  // rows, residual rows held, per-rank C/t, F/t, heads, V/t
  size_t row0;               // first residual row held (sequence parallelism), else 0
  size_t layer_elems(bool with_probs) const;
};

// Everything one micro-batch's forward keeps for its backward.
template <typename T>
struct GptActivations {
  // The whole model, nothing recomputed.
  GptActivations(const ModelConfig& config, int micro_batch);
  GptActivations(const ModelConfig& config, const ModelShard& shard, int micro_batch,
                 const RecomputePlan& plan);
  size_t bytes() const { return storage.size() * sizeof(T); }

  int B, T_;
  std::vector<T> storage;                   // one allocation; the pointers below index into it
  T* residual;                              // (L+1, R, C): [0] chunk input, [l+1] layer l output
  std::vector<LayerActivations<T>> layers;  // kept layers; recomputed ones set in backward
  T* lnf = nullptr;                         // post: (R, C)
  T* lnf_mean = nullptr;                    // post: (R)
  T* lnf_rstd = nullptr;                    // post: (R)
  T* logits = nullptr;          // post: (N, V/t); after a training forward d loss / d logits
  T* losses = nullptr;          // post: (N)
  std::vector<int32_t> tokens;  // (N) pre: for the embedding backward
  uint64_t dropout_seed = 0;
  bool has_grad = false;  // forward ran in training mode: backward may run
};

struct MemoryBreakdown {
  size_t weights = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  size_t total() const { return weights + grads + optimizer + activations + workspace; }
};

template <typename T>
class GptModel {
 public:
  // The whole model in one process.
  GptModel(const ModelConfig& config, int micro_batch);
  // One chunk. `tp` is the tensor-parallel group (null or size 1: no TP); it must outlive the
  // model. A failing collective ends the job through tp->abort().
  GptModel(const ModelConfig& config, const ModelShard& shard, int micro_batch, Comm* tp,
           const RecomputePlan& recompute);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const ChunkDims& dims() const { return dims_; }
  const RecomputePlan& recompute() const { return recompute_; }
  T* params() { return params_.data(); }
  const T* params() const { return params_.data(); }
  T* grads() { return grads_.data(); }
  const T* grads() const { return grads_.data(); }
  size_t arena_size() const { return params_.size(); }

  // Megatron's initialisation: weights ~ N(0, std), output projections (linear_proj,
  // linear_fc2) ~ N(0, std / sqrt(2 L)), biases 0, norms weight 1 bias 0. Each global tensor
  // draws from its own stream keyed by (seed, name) and each rank keeps its slice, so the
  // model is the same whatever the layout.
  void init_weights(uint64_t seed);
  void zero_grads();

  // The whole model: tokens, targets (B, T). Returns the mean loss over its B*T tokens.
  // Training (grad_scale > 0): dropout is active, keyed by dropout_seed (every mask of this
  // micro-batch derives from it, kernels/dropout_hash.h), and the logits buffer receives
  // d(grad_scale * sum of token losses) / d logits so that backward(acts) may follow.
  // Evaluation (grad_scale == 0): no dropout, nothing kept for backward.
  double forward(GptActivations<T>& acts, const int32_t* tokens, const int32_t* targets,
                 uint64_t dropout_seed, float grad_scale);
  // Accumulates this micro-batch's parameter gradients into grads().
  void backward(GptActivations<T>& acts);

  // A pipeline stage: a pre chunk reads tokens, a later one `input` (R, C), the previous
  // stage's output. A post chunk returns the mean loss; others return 0 and leave their
  // output (R, C) at output(acts).
  double forward_stage(GptActivations<T>& acts, const int32_t* tokens, const T* input,
                       const int32_t* targets, uint64_t dropout_seed, float grad_scale);
  const T* output(const GptActivations<T>& acts) const;
  // A post chunk starts from its loss; a later-stage chunk from `output_grad` (R, C), the
  // gradient of its output. A chunk that is not pre leaves the gradient of its input (R, C)
  // at input_grad() until the next backward.
  void backward_stage(GptActivations<T>& acts, const T* output_grad);
  const T* input_grad() const { return d_residual_; }
  size_t boundary_elems() const { return static_cast<size_t>(dims_.R) * dims_.C; }

  // When set, backward calls it with each range [first, last) of tensors() whose gradients
  // are final for this iteration (sequence-parallel partial gradients already summed over
  // TP): after every layer, the final norm, and the word/position embeddings. Only while
  // final_backward is true (the last micro-batch of the iteration).
  void set_grads_ready(std::function<void(int first, int last)> callback) {
    grads_ready_ = std::move(callback);
  }
  void set_final_backward(bool final) { final_backward_ = final; }
  // Called after every layer's forward and backward: lets the caller progress communication
  // in flight (MPI moves a large non-blocking message only inside MPI calls).
  void set_progress(std::function<void()> callback) { progress_ = std::move(callback); }

  Profiler& profiler() { return profiler_; }
  // Bytes of weights, grads and workspace held by the model; activations: only the layers
  // full recomputation rebuilds during backward (the kept ones are per GptActivations).
  MemoryBreakdown memory() const;

 private:
  LayerActivations<T> recompute_slot(int slot) const;
  void embedding_forward(GptActivations<T>& a, const int32_t* tokens, float p_hidden);
  void embedding_backward(GptActivations<T>& a);
  double head_forward(GptActivations<T>& a, const int32_t* targets, float grad_scale);
  void head_backward(GptActivations<T>& a);
  void layer_forward(int l, const LayerActivations<T>& la, const T* x, T* out, bool training);
  void layer_backward(int l, const LayerActivations<T>& la, const T* x);
  void recompute_group(GptActivations<T>& a, int first, int last);
  void notify_ready(int first, int last);

  // Tensor-parallel plumbing (no-ops at t == 1). Rows: R held, N full.
  const T* gather_rows(const T* held, T* full);  // (R, C) -> (N, C); returns held if no SP
  void reduce_rows(T* partial_full, T* held);    // (N, C) summed over TP -> (R, C)
  void row_parallel_forward(T* out, const T* inp, const T* weight, const T* bias, int K);
  void check(const Status& s);

  ModelConfig config_;
  ModelShard shard_;
  ParamLayout layout_;
  ChunkDims dims_;
  Comm* tp_;
  RecomputePlan recompute_;
  std::vector<T> params_;  // the arena, layout_ offsets
  std::vector<T> grads_;   // same shape as params_
  // Backward scratch, shared by all micro-batches (backward runs one at a time).
  std::vector<T> scratch_;
  T* d_residual_;  // (R, C) gradient flowing down the residual stream
  T* d_c_a_;       // (R, C)
  T* d_c_b_;       // (R, C)
  T* fwd_c_;       // (R, C) forward temporary (projection outputs)
  T* full_;        // (N, C) TP: partial sums before reduction, gathered gradients
  T* gathered_;    // (N, C) SP: a gathered LayerNorm output
  T* d_f_;         // (N, F/t)
  T* d_qkv_;       // (N, 3C/t)
  T* d_atty_;      // (N, C/t)
  T* probs_;       // (B, HL, T, T) selective recomputation's attention probabilities
  std::vector<T> recompute_storage_;       // max_group layers of LayerActivations
  std::vector<T> row_max_, target_logit_;  // (N) vocabulary-parallel cross-entropy
  std::vector<double> sum_exp_;            // (N)
  std::vector<T> pack_;                    // sequence-parallel gradients summed at once
  std::vector<T> attention_ws_;            // threads * attention_workspace_elems(T)
  uint64_t current_seed_ = 0;              // dropout seed of the micro-batch being run
  std::function<void(int, int)> grads_ready_;
  std::function<void()> progress_;
  bool final_backward_ = false;
  Profiler profiler_;
};

}  // namespace lattice
