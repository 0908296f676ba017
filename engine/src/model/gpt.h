// The GPT-2 model (ARCHITECTURE.md "Model"): explicit forward and backward per module over
// one flat parameter arena and one flat gradient arena, llm.c style. Activations live in a
// GptActivations object per micro-batch, so several micro-batches can be in flight (1F1B).
// Instantiated for float (training) and double (gradient checks). Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/profiler.h"
#include "lattice/model_config.h"
#include "model/param_layout.h"

namespace lattice {

// Everything one micro-batch's forward keeps for its backward. B = micro batch size.
template <typename T>
struct GptActivations {
  GptActivations(const ModelConfig& config, int micro_batch);
  size_t bytes() const { return storage.size() * sizeof(T); }

  int B, T_;
  std::vector<T> storage;  // one allocation; the pointers below index into it
  T* residual;  // (L+1, B, T, C): residual[0] = embeddings, residual[l+1] = layer l output
  T* ln1;       // (L, B, T, C)
  T* ln1_mean;  // (L, B, T)
  T* ln1_rstd;  // (L, B, T)
  T* qkv;       // (L, B, T, 3C)
  T* atty;      // (L, B, T, C) attention output before the projection
  T* probs;     // (L, B, NH, T, T) softmax before dropout
  T* res_mid;   // (L, B, T, C) residual after the attention block
  T* ln2;       // (L, B, T, C)
  T* ln2_mean;  // (L, B, T)
  T* ln2_rstd;  // (L, B, T)
  T* fc1;       // (L, B, T, F) before GELU
  T* gelu;      // (L, B, T, F)
  T* lnf;       // (B, T, C)
  T* lnf_mean;  // (B, T)
  T* lnf_rstd;  // (B, T)
  T* logits;    // (B, T, Vp); after a training forward it holds d loss / d logits
  T* losses;    // (B, T)
  std::vector<int32_t> tokens;  // (B, T)
  uint64_t dropout_seed = 0;
  bool has_grad = false;  // logits hold gradients: backward may run
};

struct MemoryBreakdown {
  size_t weights = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  size_t total() const { return weights + grads + optimizer + activations + workspace; }
};

template <typename T>
class GptModel {
 public:
  GptModel(const ModelConfig& config, int micro_batch);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  T* params() { return params_.data(); }
  const T* params() const { return params_.data(); }
  T* grads() { return grads_.data(); }
  const T* grads() const { return grads_.data(); }
  size_t arena_size() const { return params_.size(); }

  // Megatron's initialisation: weights ~ N(0, std), output projections (linear_proj,
  // linear_fc2) ~ N(0, std / sqrt(2 L)), biases 0, norms weight 1 bias 0. Each tensor draws
  // from its own stream keyed by (seed, tensor name), so it does not depend on layout.
  void init_weights(uint64_t seed);
  void zero_grads();

  // Runs one micro-batch: tokens, targets (B, T). Returns the mean loss over its B*T tokens.
  // Training (grad_scale > 0): dropout is active, keyed by dropout_seed (every mask of this
  // micro-batch derives from it, kernels/dropout_hash.h), and the logits buffer receives
  // d(grad_scale * sum of token losses) / d logits so that backward(acts) may follow.
  // Evaluation (grad_scale == 0): no dropout, nothing kept for backward.
  double forward(GptActivations<T>& acts, const int32_t* tokens, const int32_t* targets,
                 uint64_t dropout_seed, float grad_scale);
  // Accumulates this micro-batch's parameter gradients into grads().
  void backward(GptActivations<T>& acts);

  Profiler& profiler() { return profiler_; }
  // Bytes of weights, grads and workspace held by the model (activations are per object).
  MemoryBreakdown memory() const;

 private:
  uint64_t dropout_site_key(uint64_t seed, int layer, int site) const;

  ModelConfig config_;
  ParamLayout layout_;
  int micro_batch_;
  std::vector<T> params_;  // the arena, layout_ offsets
  std::vector<T> grads_;   // same shape as params_
  // Backward scratch, shared by all micro-batches (backward runs one at a time).
  std::vector<T> scratch_;
  T* d_residual_;                // (B, T, C) gradient flowing down the residual stream
  T* d_c_a_;                     // (B, T, C)
  T* d_c_b_;                     // (B, T, C)
  T* d_f_;                       // (B, T, F)
  T* d_qkv_;                     // (B, T, 3C)
  T* fwd_c_;                     // (B, T, C) forward temporary (projection outputs)
  std::vector<T> attention_ws_;  // threads * attention_workspace_elems(T)
  Profiler profiler_;
};

}  // namespace lattice
