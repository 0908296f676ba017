// InferenceModel (infer_model.h): the forward of GptModel's layers (gpt_layer.cpp) restated
// for rows and a key/value cache, through the same kernels. GELU runs out of place (fc_ into
// act_) so that both activations read FC1's output the same way. MoE layers: gpt_moe.cpp's
// routing ops and per-expert GEMMs at capacity 0 (every route kept).
//
// Note [image rows at inference]: a vision-language model's prompt holds each image as Np
// consecutive rows of the placeholder id (Note [image rows] in model/gpt_vision.cpp). As in
// training, such a row's word embedding is zero (its id is looked up as -1, outside every
// rank's vocabulary range), the position embedding is added as to any row (RoPE rotates it in
// attention), and then the image's projected patch k, from encode_image on the tower whose
// weights are the first tensors of params_ (Note [vision tensors] in param_layout.h), is added
// to its k-th row: the training model's sum in the same order.
#include "infer/infer_model.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "device/cpu_device.h"
#include "lattice/kernels.h"
#include "model/vision_encoder.h"

namespace lattice {

namespace k = kernels;

namespace {
size_t padded(size_t n) {
  return (n + 15) / 16 * 16;
}

ModelShard whole_model_shard(int tp_rank, int tp_size) {
  ModelShard s;
  s.tp_rank = tp_rank;
  s.tp_size = tp_size;
  return s;
}
}  // namespace

InferenceModel::InferenceModel(const ModelConfig& config, Comm* tp)
    : config_(config),
      tp_(tp),
      t_(tp ? tp->size() : 1),
      tp_rank_(tp ? tp->rank() : 0),
      L_(config.num_layers),
      C_(config.hidden_size),
      F_(config.ffn()),
      NH_(config.num_attention_heads),
      HS_(config.head_size()),
      T_(config.max_positions()),
      V_(config.padded_vocab_size()),
      Ct_(C_ / t_),
      Ft_(F_ / t_),
      Ht_(NH_ / t_),
      Vt_(V_ / t_),
      Gt_(config.kv_heads() / t_),
      Wt_(static_cast<int>(config.qkv_width() / t_)),
      up_(config.swiglu ? 2 * Ft_ : Ft_),
      rotary_dim_(config.rope() ? config.rotary_dim() : 0),
      E_(config.moe() ? config.num_experts : 0),
      k_(config.moe() ? config.moe_router_topk : 0),
      Fmt_(config.moe() ? config.moe_ffn() / t_ : 0),
      upm_(config.swiglu ? 2 * Fmt_ : Fmt_),
      layout_(config, whole_model_shard(tp_rank_, t_)) {
  params_.assign(layout_.total_numel(), 0.0f);
  if (rotary_dim_ > 0) {
    const size_t n = static_cast<size_t>(T_) * (rotary_dim_ / 2);
    std::vector<double> cos(n), sin(n);
    k::rope_tables(cos.data(), sin.data(), T_, rotary_dim_, config.rotary_base,
                   config.llama3_rope_factor());
    rope_cos_.assign(cos.begin(), cos.end());
    rope_sin_.assign(sin.begin(), sin.end());
  }
  if (config.has_vision()) {
    // This rank's share of the tower (Note [tower tensor parallelism] in vision_encoder.cpp), as
    // layout_ lays out its tensors.
    TowerParallel<float> share{tp_rank_, t_,
                               [this](float* data, size_t n) { all_reduce(data, n); }};
    auto made = VisionEncoder<float>::create(config.vision, 1, host_device(), false, share);
    if (!made) throw std::runtime_error(made.status().message());
    vision_ = std::move(*made);
    // Forward only: backward (the one reader of the gradients) is never called.
    vision_->bind(params_.data(), nullptr);
  }
}

InferenceModel::~InferenceModel() = default;

const float* InferenceModel::encode_image(const float* image) {
  if (!vision_) throw std::logic_error("InferenceModel::encode_image: a model without a tower");
  const float* out = vision_->forward(image);
  (void)host_device().synchronize(host_device().compute());
  images_encoded_++;
  return out;
}

void InferenceModel::reserve(int slots, int max_rows) {
  if (slots > slots_) {
    slots_ = slots;
    const size_t per_layer = 2 * static_cast<size_t>(slots_) * Gt_ * T_ * HS_;
    // Old cache contents are not kept: reserve() is called between generations.
    cache_.assign(0, 0.0f);
    cache_.resize(per_layer * L_);
  }
  if (max_rows > max_rows_) {
    max_rows_ = max_rows;
    const size_t R = max_rows_, E = E_, Rk = R * k_;  // E, k: 0 without MoE layers
    const size_t sizes[] = {R * C_,  R * C_, R,     R,      R * Wt_, R * Ct_,   R * C_,    R * up_,
                            R * Ft_, R * E,  R * E, R * k_, Rk * C_, Rk * upm_, Rk * Fmt_, Rk * C_};
    float** ptrs[] = {&x_,         &ln_,        &mean_,       &rstd_,      &qkv_,   &att_,
                      &proj_,      &fc_,        &act_,        &router_,    &probs_, &route_w_,
                      &expert_in_, &expert_fc_, &expert_act_, &expert_out_};
    size_t total = 0;
    for (size_t s : sizes) total += padded(s);
    scratch_.assign(total, 0.0f);
    float* p = scratch_.data();
    for (size_t i = 0; i < std::size(sizes); i++) {
      *ptrs[i] = p;
      p += padded(sizes[i]);
    }
    if (E_ > 0) {
      moe_ints_.assign(3 * Rk + 2 * E, 0);
      route_ = moe_ints_.data();
      route_slot_ = route_ + Rk;
      slot_row_ = route_slot_ + Rk;
      routed_ = slot_row_ + Rk;
      counts_ = routed_ + E;
    }
  }
}

void InferenceModel::all_reduce(float* data, size_t n) {
  if (t_ == 1) return;
  if (Status s = tp_->all_reduce(data, n, DType::kFloat32, ReduceOp::kSum); !s)
    tp_->abort("tensor-parallel communication failed during generation: " + s.message(), 1);
}

// x (M, C) += inp (M, K) @ weight (C, K)^T summed over TP ranks, + bias (C).
void InferenceModel::row_parallel(float* x, const float* inp, const float* weight,
                                  const float* bias, int M, int K) {
  const size_t MC = static_cast<size_t>(M) * C_;
  if (t_ == 1) {
    k::matmul_forward(proj_, inp, weight, bias, M, K, C_);
  } else {
    k::matmul_forward<float>(proj_, inp, weight, nullptr, M, K, C_);
    all_reduce(proj_, MC);
    if (bias) k::add_bias(proj_, bias, M, C_);
  }
  k::residual_dropout_forward<float>(x, x, proj_, MC, 0.0f, 0);
}

void InferenceModel::moe_mlp(float* x, int l, int M) {
  const float* P = params_.data();
  const LayerParams<const float> w = layout_.layer(P, l);
  k::matmul_forward<float>(router_, ln_, w.router_w, nullptr, M, C_, E_);
  k::moe_route(probs_, route_, route_w_, router_, M, E_, k_);
  // Capacity 0: every route kept, expert-major (each expert's rows one block).
  k::moe_dispatch_plan(routed_, counts_, route_slot_, slot_row_, route_, route_w_, M, E_, k_, 0);
  const int rows = M * k_;
  k::moe_gather_rows(expert_in_, ln_, slot_row_, rows, C_);
  for (int e = 0, r0 = 0; e < E_; r0 += counts_[e++]) {
    if (counts_[e] == 0) continue;
    const ExpertParams<const float> x = layout_.expert(P, l, e);
    k::matmul_forward(expert_fc_ + static_cast<size_t>(r0) * upm_,
                      expert_in_ + static_cast<size_t>(r0) * C_, x.fc1_w, x.fc1_b, counts_[e], C_,
                      upm_);
  }
  if (config_.swiglu)
    k::swiglu_forward(expert_act_, expert_fc_, rows, Fmt_);
  else
    k::gelu_forward(expert_act_, expert_fc_, static_cast<size_t>(rows) * Fmt_);
  // FC2 row-parallel inside each expert: its bias added by TP rank 0 alone, before the
  // weighted combine (as in training), so the combine's sum over TP is the whole output.
  for (int e = 0, r0 = 0; e < E_; r0 += counts_[e++]) {
    if (counts_[e] == 0) continue;
    const ExpertParams<const float> x = layout_.expert(P, l, e);
    k::matmul_forward<float>(expert_out_ + static_cast<size_t>(r0) * C_,
                             expert_act_ + static_cast<size_t>(r0) * Fmt_, x.fc2_w,
                             tp_rank_ == 0 ? x.fc2_b : nullptr, counts_[e], Fmt_, C_);
  }
  k::moe_combine(proj_, expert_out_, route_w_, route_slot_, M, C_, k_);
  const size_t MC = static_cast<size_t>(M) * C_;
  all_reduce(proj_, MC);
  k::residual_dropout_forward<float>(x, x, proj_, MC, 0.0f, 0);
}

void InferenceModel::norm(float* out, const float* inp, const float* weight, const float* bias,
                          int M) {
  if (config_.rms_norm())
    k::rmsnorm_forward(out, rstd_, inp, weight, M, C_, config_.norm_epsilon);
  else
    k::layernorm_forward(out, mean_, rstd_, inp, weight, bias, M, C_);
}

const float* InferenceModel::forward(const int32_t* tokens, const int32_t* slots,
                                     const int32_t* positions, int M, const int32_t* logit_rows,
                                     int K, const float* const* image_rows) {
  const auto& tensors = layout_.tensors();
  const float* P = params_.data();
  const float* wte = P + tensors[layout_.word_embedding_index()].offset;
  const float* wpe = layout_.at(P, layout_.position_embedding_index());  // null: RoPE or none
  const size_t MC = static_cast<size_t>(M) * C_;
  // Embedding: vocabulary-parallel lookup summed over ranks, then the positions.
  const int v0 = tp_rank_ * Vt_;
  if (image_rows) {  // Note [image rows at inference]: no word embedding on image rows
    embed_ids_.assign(tokens, tokens + M);
    for (int m = 0; m < M; m++)
      if (image_rows[m]) embed_ids_[m] = -1;
    tokens = embed_ids_.data();
  }
  k::embedding_forward<float>(x_, tokens, wte, nullptr, M, 1, C_, v0, v0 + Vt_);
  all_reduce(x_, MC);
  for (int m = 0; wpe && m < M; m++) {
    float* row = x_ + static_cast<size_t>(m) * C_;
    const float* pos = wpe + static_cast<size_t>(positions[m]) * C_;
#pragma omp simd
    for (int c = 0; c < C_; c++) row[c] += pos[c];
  }
  for (int m = 0; image_rows && m < M; m++) {
    if (!image_rows[m]) continue;
    float* row = x_ + static_cast<size_t>(m) * C_;
    const float* patch = image_rows[m];
#pragma omp simd
    for (int c = 0; c < C_; c++) row[c] += patch[c];
  }
  const size_t cache_layer = 2 * static_cast<size_t>(slots_) * Gt_ * T_ * HS_;
  const size_t ws = static_cast<size_t>(k::num_threads()) * T_;
  if (attn_ws_.size() < ws) attn_ws_.resize(ws);
  for (int l = 0; l < L_; l++) {
    const LayerParams<const float> w = layout_.layer(P, l);
    float* k_cache = cache_.data() + l * cache_layer;
    float* v_cache = k_cache + cache_layer / 2;
    norm(ln_, x_, w.ln1_w, w.ln1_b, M);
    k::matmul_forward(qkv_, ln_, w.qkv_w, w.qkv_b, M, C_, Wt_);
    if (rotary_dim_ > 0)  // each row at its own position
      k::rope_forward(qkv_, rope_cos_.data(), rope_sin_.data(), positions, M, T_, Ht_, Gt_, HS_,
                      rotary_dim_);
    k::attention_kv_forward(att_, k_cache, v_cache, qkv_, slots, positions, M, Ht_, HS_, T_,
                            attn_ws_.data(), Gt_);
    row_parallel(x_, att_, w.proj_w, w.proj_b, M, Ct_);
    norm(ln_, x_, w.ln2_w, w.ln2_b, M);
    if (layout_.is_moe(l)) {
      moe_mlp(x_, l, M);
      continue;
    }
    k::matmul_forward(fc_, ln_, w.fc1_w, w.fc1_b, M, C_, up_);
    if (config_.swiglu)
      k::swiglu_forward(act_, fc_, M, Ft_);
    else
      k::gelu_forward(act_, fc_, static_cast<size_t>(M) * Ft_);
    row_parallel(x_, act_, w.fc2_w, w.fc2_b, M, Ft_);
  }
  if (K == 0) return nullptr;
  // The final norm and the LM head (the output layer, or the tied word embedding) on the
  // wanted rows only.
  for (int i = 0; i < K; i++)
    std::copy_n(x_ + static_cast<size_t>(logit_rows[i]) * C_, C_,
                proj_ + static_cast<size_t>(i) * C_);
  norm(ln_, proj_, layout_.at(P, layout_.final_norm_index()),
       layout_.at(P, layout_.final_norm_bias_index()), K);
  const size_t local = static_cast<size_t>(K) * Vt_;
  if (logits_local_.size() < local) logits_local_.resize(local);
  const float* head = layout_.at(P, layout_.output_index());
  k::matmul_forward<float>(logits_local_.data(), ln_, head, nullptr, K, C_, Vt_);
  if (t_ == 1) return logits_local_.data();
  if (logits_gathered_.size() < local * t_) logits_gathered_.resize(local * t_);
  if (logits_.size() < local * t_) logits_.resize(local * t_);
  const std::vector<size_t> counts(t_, local);
  if (Status s =
          tp_->all_gather(logits_local_.data(), logits_gathered_.data(), counts, DType::kFloat32);
      !s)
    tp_->abort("tensor-parallel communication failed during generation: " + s.message(), 1);
  // (t, K, V/t) -> (K, V): rank r holds vocabulary [r V/t, (r+1) V/t).
  for (int r = 0; r < t_; r++)
    for (int i = 0; i < K; i++)
      std::copy_n(logits_gathered_.data() + (static_cast<size_t>(r) * K + i) * Vt_, Vt_,
                  logits_.data() + static_cast<size_t>(i) * V_ + static_cast<size_t>(r) * Vt_);
  return logits_.data();
}

}  // namespace lattice
