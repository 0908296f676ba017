// The model's forward for inference (GPT-2 or the Llama family, as ModelConfig says: RoPE at
// each row's position, RMSNorm, SwiGLU, grouped keys and values in the cache, an untied head):
// one tensor-parallel shard of the whole model (all layers,
// embeddings and head) with a key/value cache, run on "rows" (one token of one sequence at a
// known position) rather than on (B, T) blocks. A prompt is its rows all at once (prefill), a
// decoding step is one row per live sequence, so sequences of different lengths share every
// matrix product. Tensor parallelism as in training (docs/design-notes.md#tensor-parallelism):
// QKV and FC1 column-parallel, the projections row-parallel (all-reduce, then the bias), the
// embedding and LM head vocabulary-parallel; the logits are all-gathered so every rank samples
// the same token. MoE layers (ModelConfig::is_moe_layer) route each row as training does (Note
// [MoE layer] in model/gpt_moe.cpp: softmax over all experts, the top k renormalised), every
// route kept: no token dropping at inference, whatever --moe-expert-capacity-factor the model
// trained with (the capacity is a training-time limit). Each expert is split over TP as in training
// (fc1 column-, fc2 row-parallel), so the combine is a partial sum reduced with the projections'.
// Non-goals: pipeline stages, sequence or expert parallelism, dropout. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lattice/comm.h"
#include "lattice/model_config.h"
#include "model/param_layout.h"

namespace lattice {

template <typename A>
class VisionEncoder;

class InferenceModel {
 public:
  // `tp` may be null (one process); otherwise this is rank tp->rank() of tp->size(), and
  // config.tensor_model_parallel_size must equal tp->size() (the vocabulary padding).
  // Throws std::runtime_error when a vision tower cannot be created on the host device.
  InferenceModel(const ModelConfig& config, Comm* tp);
  ~InferenceModel();

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  float* params() { return params_.data(); }
  int padded_vocab() const { return V_; }
  Comm* tp() const { return tp_; }  // null: one process

  // Sizes the key/value cache for `slots` sequences of up to max_positions tokens and the
  // scratch for `max_rows` rows per forward; grows only (buffers are reused across calls).
  void reserve(int slots, int max_rows);
  int num_slots() const { return slots_; }
  int max_rows() const { return max_rows_; }

  // Runs M rows: tokens, slots, positions (M); a slot's rows in increasing position order, its
  // earlier positions already in the cache. Returns the full-vocabulary logits (K, padded V) of
  // the rows listed in logit_rows (K indices into [0, M)), valid until the next call; null when
  // K == 0. M <= max_rows(), K <= M. Collective over the TP group.
  // image_rows (M), when non-null: row m's input embedding is the (C) vector image_rows[m]
  // where that is non-null (an image row, Note [image rows at inference]) instead of its
  // token's word embedding; the position embedding / RoPE apply as to any row.
  const float* forward(const int32_t* tokens, const int32_t* slot_ids, const int32_t* positions,
                       int M, const int32_t* logit_rows, int K,
                       const float* const* image_rows = nullptr);

  // A vision-language model (config().has_vision()): out (Np, C) = the projected patches of one
  // image (Cin, img_h, img_w), normalised as training's data was; valid until the next call.
  // The whole tower on every TP rank (its weights are replicated), on the host device.
  const float* encode_image(const float* image);
  // Images encode_image has run so far (the generator runs each distinct image of a batch
  // once: Note [one tower run per image] in generator.cpp).
  size_t images_encoded() const { return images_encoded_; }

  // Bytes held: weights, and cache + scratch.
  size_t weight_bytes() const { return params_.size() * sizeof(float); }
  size_t cache_bytes() const { return (cache_.size() + scratch_.size()) * sizeof(float); }

 private:
  void row_parallel(float* x, const float* inp, const float* weight, const float* bias, int M,
                    int K);
  void all_reduce(float* data, size_t n);

  // x (M, C) += the MoE layer l's output for ln_ (M, C) (Note [MoE layer]), reduced over TP.
  void moe_mlp(float* x, int l, int M);

  // out (M, C) = the configured norm (LayerNorm or RMSNorm) of inp (M, C).
  void norm(float* out, const float* inp, const float* weight, const float* bias, int M);

  ModelConfig config_;
  Comm* tp_;
  int t_ = 1, tp_rank_ = 0;
  int L_, C_, F_, NH_, HS_, T_, V_;  // layers, channels, ffn, heads, head size, positions, padded V
  int Ct_, Ft_, Ht_, Vt_;            // per-rank C/t, F/t, heads, V/t
  int Gt_, Wt_, up_;       // per-rank key/value heads, QKV width, FC1 width (2 Ft with SwiGLU)
  int rotary_dim_;         // 0 without RoPE
  int E_, k_, Fmt_, upm_;  // MoE: experts, routes per row, per-rank expert width, its FC1 width
  std::vector<float> rope_cos_, rope_sin_;  // (T, rotary_dim / 2) kernels::rope_tables
  ParamLayout layout_;
  std::vector<float> params_;                     // layout_'s arena
  std::unique_ptr<VisionEncoder<float>> vision_;  // null without a tower
  size_t images_encoded_ = 0;
  std::vector<int32_t> embed_ids_;  // (max_rows) tokens, -1 on image rows
  int slots_ = 0, max_rows_ = 0;
  std::vector<float> cache_;  // (L, 2, slots, Gt, T, HS): keys then values of each layer
  std::vector<float> scratch_;
  float* x_ = nullptr;     // (max_rows, C) residual stream
  float* ln_ = nullptr;    // (max_rows, C) LayerNorm output
  float* mean_ = nullptr;  // (max_rows)
  float* rstd_ = nullptr;  // (max_rows)
  float* qkv_ = nullptr;   // (max_rows, Wt) grouped [q..q|k|v] per query group
  float* att_ = nullptr;   // (max_rows, C/t)
  float* proj_ = nullptr;  // (max_rows, C) row-parallel output (partial sums before reduce)
  float* fc_ = nullptr;    // (max_rows, up) FC1's output (gate | up with SwiGLU)
  float* act_ = nullptr;   // (max_rows, F/t) the activation's output
  // MoE scratch (empty without MoE layers), R = max_rows, routes R k (every route kept):
  float* router_ = nullptr;      // (R, E) router logits
  float* probs_ = nullptr;       // (R, E) their softmax
  float* route_w_ = nullptr;     // (R, k) the k routes' renormalised weights
  float* expert_in_ = nullptr;   // (R k, C) ln2's rows permuted expert-major
  float* expert_fc_ = nullptr;   // (R k, upm) each route's FC1 output
  float* expert_act_ = nullptr;  // (R k, Fm/t) its activation
  float* expert_out_ = nullptr;  // (R k, C) its FC2 output (partial over TP)
  std::vector<int32_t> moe_ints_;
  int32_t* route_ = nullptr;       // (R, k) the experts
  int32_t* route_slot_ = nullptr;  // (R, k) each route's permuted row
  int32_t* slot_row_ = nullptr;    // (R k) each permuted row's row
  int32_t* routed_ = nullptr;      // (E) routes per expert (all kept)
  int32_t* counts_ = nullptr;      // (E) kept routes per expert
  std::vector<float> attn_ws_;     // (threads, T), sized to the thread count of each call
  std::vector<float> logits_local_, logits_gathered_, logits_;  // (K, V/t), (t, K, V/t), (K, V)
};

}  // namespace lattice
