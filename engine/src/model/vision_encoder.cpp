// VisionEncoder (vision_encoder.h): the parameters, memory and the ViT encoder's forward and
// backward; the projector is vision_projector.cpp's. Shapes: B images of Cin x img_h x img_w,
// Np patches of K = Cin P P pixels, T = Np (+ 1 class token) rows of width C per image, N = B T.
//
// Note [bidirectional attention]: a ViT's attention is not causal: every patch sees every
// patch. The op list's block attention (attention_block_forward/backward, the ring's kernels)
// lets query i see key j when k_pos[j] <= q_pos[i]; with k_pos = 0 .. T - 1 and q_pos[i] = T - 1
// for every row, every key is visible, so one block over the whole sequence is full softmax
// attention (out, lse) and its backward (delta = rowsum(dout * out), then the block's
// gradients, the keys' and values' unpacked into dqkv). Every op list has these ops; no new
// attention kernel is needed. In 16 bits the block reads A and merges into G (ops.h): the output
// is merged in att_acc_ and rounded once into atty, the input gradient summed in d_qkv_acc_ and
// rounded once, as the context-parallel ring does (Note [ring attention in 16 bits]).
//
// Note [tower tensor parallelism]: under TP the tower is split as Megatron's LLaVA splits its
// vision model (the language model's column- and row-parallel linears, without sequence
// parallelism). Rank r of TP holds heads [r NHt, (r + 1) NHt) of qkv_proj (whole heads: the
// grouped layout's rows), the same columns of out_proj, rows [r Ft, (r + 1) Ft) of mlp.fc1 and
// those columns of mlp.fc2, and the projector's linear_1 rows and linear_2 columns of its Ht.
// Each rank runs every image through its share: the column-split GEMMs, the attention of its
// heads and the activations on its columns; a row-split GEMM gives a partial (rows, width) that
// tp_sum adds over the group (rank 0 adding the bias, so it enters once): two sums per layer
// each way (out_proj's and fc2's outputs forward; fc1's and qkv_proj's input gradients
// backward) and one for the projector each way. What follows a sum is whole and equal on every
// rank: the residual stream, the LayerNorms, the embeddings, the selected features and the
// projected patches, so the whole tensors' gradients are equal there and need no reduction over TP,
// and the language model's splice is unchanged. Activations, weights and their gradients shrink by
// TP but for those whole tensors and the (rows, C) residual states.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <random>

#include "model/vision_encoder.h"

#include "model/init_weights.h"

namespace lattice {

template <typename A>
VisionEncoder<A>::VisionEncoder(const VisionConfig& config, int batch, Device& device, Ops<A>& ops,
                                TowerParallel<A> tp)
    : config_(config), device_(device), ops_(ops), tp_(std::move(tp)), blocks_(device) {
  max_images_ = B_ = batch;
  Cin_ = config.num_channels;
  Np_ = config.patches();
  T_ = config.seq_length();
  C_ = config.hidden_size;
  NH_ = config.num_attention_heads;
  HS_ = C_ / NH_;
  F_ = config.ffn();
  H_ = config.lm_hidden_size;
  K_ = Cin_ * config.patch_dim * config.patch_dim;
  L_ = config.num_layers;
  Lrun_ = config.layers_run();
  NHt_ = NH_ / tp_.size;  // Note [tower tensor parallelism]
  Ct_ = NHt_ * HS_;
  Ft_ = F_ / tp_.size;
  Ht_ = H_ / tp_.size;
  N_ = static_cast<size_t>(B_) * T_;
  // Note [vision tensors] in param_layout.h
  tensors_ = ParamLayout::vision_tensors(config, tp_.rank, tp_.size);
  num_params_ = ParamLayout::vision_arena_numel(config, tp_.size);
  auto index = [&](const std::string& name) {
    for (size_t i = 0; i < tensors_.size(); i++)
      if (tensors_[i].name == name) return static_cast<int>(i);
    return -1;
  };
  const std::string emb = "vision_model.embeddings.";
  patch_w_ = index(emb + "patch_embedding.weight");
  patch_b_ = index(emb + "patch_embedding.bias");
  cls_ = index(emb + "class_embedding");
  pos_ = index(emb + "position_embedding.weight");
  pre_w_ = index("vision_model.pre_layrnorm.weight");
  pre_b_ = index("vision_model.pre_layrnorm.bias");
  first_layer_ = pre_b_ + 1;
  proj1_w_ = index("multi_modal_projector.linear_1.weight");
  proj1_b_ = proj1_w_ + 1;
  proj2_w_ = proj1_w_ + 2;
  proj2_b_ = proj1_w_ + 3;
}

template <typename A>
template <typename X>
VisionLayerParams<X> VisionEncoder<A>::layer(X* arena, int l) const {
  const int i = first_layer_ + 12 * l;
  return {tensor(arena, i),     tensor(arena, i + 1), tensor(arena, i + 2),  tensor(arena, i + 3),
          tensor(arena, i + 4), tensor(arena, i + 5), tensor(arena, i + 6),  tensor(arena, i + 7),
          tensor(arena, i + 8), tensor(arena, i + 9), tensor(arena, i + 10), tensor(arena, i + 11)};
}

template <typename A>
Result<std::unique_ptr<VisionEncoder<A>>> VisionEncoder<A>::create(const VisionConfig& config,
                                                                   int batch, Device& device,
                                                                   bool own_params,
                                                                   TowerParallel<A> tp) {
  if (const std::vector<std::string> errors = config.validate(); !errors.empty()) {
    std::string all;
    for (const std::string& e : errors) all += (all.empty() ? "" : " ") + e;
    return Status::invalid_argument(all);
  }
  if (batch <= 0)
    return Status::invalid_argument("the vision encoder's batch " + std::to_string(batch) +
                                    " must be positive.");
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size || (tp.size > 1 && !tp.sum))
    return Status::internal("VisionEncoder: TP rank " + std::to_string(tp.rank) + " of " +
                            std::to_string(tp.size) + " without its group's sum");
  if (const std::vector<std::string> why = config.tensor_parallel_errors(tp.size); !why.empty())
    return Status::invalid_argument(why.front() + ".");
  if (config.lm_hidden_size % tp.size != 0)
    return Status::invalid_argument("--tensor-model-parallel-size " + std::to_string(tp.size) +
                                    " does not divide the projector's width --hidden-size " +
                                    std::to_string(config.lm_hidden_size) + ".");
  if (own_params && !std::is_same_v<A, G>)
    return Status::internal("a 16-bit vision encoder runs on a model's arenas (own_params false)");
  Ops<A>* ops = device.ops<A>();
  if (!ops || !ops->has_vision() || !ops->has_ring_attention())
    return Status::invalid_argument(
        "the vision encoder needs the vision ops (patchify, quick_gelu, exact GELU) and the block "
        "attention, which " +
        device.describe() +
        "'s op list for this compute type lacks; run it in fp32 or on the CPU.");
  // The block attention's head sizes (CUDA's: 64 and 128; the CPU's: any).
  const std::vector<int>& head_sizes = device.capabilities().head_sizes;
  const int hs = config.hidden_size / config.num_attention_heads;
  if (!head_sizes.empty() &&
      std::find(head_sizes.begin(), head_sizes.end(), hs) == head_sizes.end()) {
    std::string sizes;
    for (size_t i = 0; i < head_sizes.size(); i++)
      sizes += (i == 0                       ? ""
                : i + 1 == head_sizes.size() ? " or "
                                             : ", ") +
               std::to_string(head_sizes[i]);
    return Status::invalid_argument(
        "the vision encoder's head size --vision-hidden-size / --vision-num-attention-heads = " +
        std::to_string(hs) + " must be " + sizes + " on " + device.describe() +
        " (its attention's sizes); change either flag or run on the CPU.");
  }
  std::unique_ptr<VisionEncoder> e(new VisionEncoder(config, batch, device, *ops, std::move(tp)));
  if (Status s = e->allocate(own_params); !s) return s;
  return e;
}

template <typename A>
Status VisionEncoder<A>::allocate(bool own_params) {
  // Sized for max_images_ (a forward on fewer uses the buffers' front, as laid out for B_).
  const size_t N = static_cast<size_t>(max_images_) * T_, C = C_,
               M = static_cast<size_t>(max_images_) * Np_, R = Lrun_;
  const auto W = MemoryCategory::kWeights, Gr = MemoryCategory::kGrads,
             Ac = MemoryCategory::kActivations, Ws = MemoryCategory::kWorkspace;
  if (own_params) {
    params_ = blocks_.take<A>(num_params_, W);
    grads_ = blocks_.take<G>(num_params_, Gr);
  }
  cols_ = blocks_.take<A>(M * K_, Ac);
  x0_ = blocks_.take<A>(N * C, Ac);
  patch_out_ = config_.class_token ? blocks_.take<A>(M * C, Ac) : x0_;
  pre_mean_ = blocks_.take<G>(2 * N, Ac);
  pre_rstd_ = pre_mean_ + N;
  hidden_ = blocks_.take<A>((R + 1) * N * C, Ac);
  ln1_ = blocks_.take<A>(R * N * C, Ac);
  ln1_stats_ = blocks_.take<G>(R * 2 * N, Ac);
  const size_t Ct = Ct_, Ft = Ft_, Ht = Ht_;  // this rank's shares
  qkv_ = blocks_.take<A>(R * N * 3 * Ct, Ac);
  atty_ = blocks_.take<A>(R * N * Ct, Ac);
  lse_ = blocks_.take<G>(R * N * NHt_, Ac);
  res_mid_ = blocks_.take<A>(R * N * C, Ac);
  ln2_ = blocks_.take<A>(R * N * C, Ac);
  ln2_stats_ = blocks_.take<G>(R * 2 * N, Ac);
  fc1_ = blocks_.take<A>(R * N * Ft, Ac);
  act_ = blocks_.take<A>(R * N * Ft, Ac);
  features_ = config_.class_token ? blocks_.take<A>(M * C, Ac) : hidden_ + R * N * C;
  p1_ = blocks_.take<A>(M * Ht, Ac);
  p1_act_ = blocks_.take<A>(M * Ht, Ac);
  out_ = blocks_.take<A>(M * H_, Ac);
  kv_ = blocks_.take<A>(N * 2 * Ct, Ws);
  d_kv_ = blocks_.take<G>(N * 2 * Ct, Ws);
  delta_ = blocks_.take<G>(N * NHt_, Ws);
  workspace_ =
      blocks_.take<G>(ops_.attention_block_workspace_elems(max_images_, NHt_, T_, T_, HS_), Ws);
  if constexpr (!std::is_same_v<A, G>) {
    att_acc_ = blocks_.take<G>(N * Ct, Ws);
    d_qkv_acc_ = blocks_.take<G>(N * 3 * Ct, Ws);
  }
  q_pos_ = blocks_.take<int32_t>(2 * static_cast<size_t>(T_), Ws);
  k_pos_ = q_pos_ + T_;
  d_h_ = blocks_.take<A>(N * C, Ws);
  d_c_ = blocks_.take<A>(N * C, Ws);
  d_c2_ = blocks_.take<A>(N * C, Ws);
  d_f_ = blocks_.take<A>(N * std::max<size_t>(Ft, 3 * Ct), Ws);
  d_p_ = blocks_.take<A>(M * std::max<size_t>(Ht, K_), Ws);  // also the patches' gradient
  if (Status s = blocks_.status(); !s) return s;
  std::vector<int32_t> pos(2 * static_cast<size_t>(T_), T_ - 1);  // Note [bidirectional attention]
  for (int t = 0; t < T_; t++) pos[T_ + t] = t;
  device_.copy(q_pos_, pos.data(), pos.size() * sizeof(int32_t), CopyKind::kHostToDevice,
               compute());
  if (own_params) {
    device_.zero(params_, num_params_ * sizeof(A), compute());
    zero_grads();
  }
  return device_.synchronize(compute());
}

template <typename A>
void VisionEncoder<A>::zero_grads() {
  device_.zero(grads_, num_params_ * sizeof(G), compute());
}

template <typename A>
Status VisionEncoder<A>::init_weights(uint64_t seed) {
  if constexpr (!std::is_same_v<A, G>) {  // a 16-bit tower's weights are its model's
    (void)seed;
    return Status::internal("VisionEncoder::init_weights: a 16-bit tower owns no weights");
  } else {
    // The language model's rule (init_weights.h), so the tower alone and inside a GptModel start
    // from the same bits.
    ModelConfig rule;
    rule.init_method_std = config_.init_method_std;
    std::vector<A> host(num_params_);
    for (const ParamTensor& t : tensors_)
      if (size_t bytes = init_tensor(rule, t, seed, host.data() + t.offset); bytes > 0)
        return Status::resource_exhausted("initialising " + t.name + " needs a host buffer of " +
                                          std::to_string(bytes) +
                                          " bytes that cannot be allocated.");
    device_.copy(params_, host.data(), num_params_ * sizeof(A), CopyKind::kHostToDevice, compute());
    return device_.synchronize(compute());
  }
}

template <typename A>
const A* VisionEncoder<A>::forward(const A* images, int count) {
  assert(count == -1 || (1 <= count && count <= max_images_));
  B_ = count < 0 ? max_images_ : count;  // the rows below, and backward's, are B_'s
  N_ = static_cast<size_t>(B_) * T_;
  const int B = B_, T = T_, C = C_, M = B_ * Np_;
  const size_t TC = static_cast<size_t>(T) * C;
  images_ = images;
  A* P = params_;
  // Patch embedding: a stride = kernel = P convolution as im2col and one GEMM.
  ops_.patchify_forward(cols_, images, B, Cin_, config_.img_h, config_.img_w, config_.patch_dim);
  ops_.matmul_forward(patch_out_, nullptr, cols_, tensor(P, patch_w_), tensor(P, patch_b_), M, K_,
                      C, Epilogue::kNone);
  if (cls_ >= 0)  // row 0 of each image: the class embedding (added below); rows 1..: patches
    for (int b = 0; b < B; b++) {
      device_.zero(x0_ + b * TC, C * sizeof(A), compute());
      device_.copy(x0_ + b * TC + C, patch_out_ + static_cast<size_t>(b) * Np_ * C,
                   static_cast<size_t>(Np_) * C * sizeof(A), CopyKind::kDeviceToDevice, compute());
      ops_.add_bias(x0_ + b * TC, tensor(P, cls_), 1, C);
    }
  ops_.add_bias(x0_, tensor(P, pos_), B, static_cast<int>(TC));  // positions, a (T C) bias
  ops_.layernorm_forward(hidden_, pre_mean_, pre_rstd_, x0_, tensor(P, pre_w_), tensor(P, pre_b_),
                         static_cast<int>(N_), C);
  for (int l = 0; l < Lrun_; l++) layer_forward(l);
  A* selected = hidden_ + Lrun_ * N_ * C;
  if (cls_ < 0)  // the features are the selected state, where this forward's B puts it
    features_ = selected;
  else  // LLaVA's "patch" features: the class token's row dropped
    for (int b = 0; b < B; b++)
      device_.copy(features_ + static_cast<size_t>(b) * Np_ * C, selected + b * TC + C,
                   static_cast<size_t>(Np_) * C * sizeof(A), CopyKind::kDeviceToDevice, compute());
  projector_forward();
  return out_;
}

// This rank's NHt heads (Note [tower tensor parallelism]).
template <typename A>
void VisionEncoder<A>::attention_forward(int l) {
  const size_t N = N_, Ct = Ct_;
  A* qkv = qkv_ + l * N * 3 * Ct;
  A* atty = atty_ + l * N * Ct;
  G* lse = lse_ + l * N * NHt_;
  G* merged = merged_in_accum(atty, att_acc_);
  ops_.fill(merged, N * Ct, G(0));
  ops_.fill(lse, N * NHt_, -std::numeric_limits<G>::infinity());
  ops_.attention_kv_pack(kv_, qkv, N, NHt_, NHt_, HS_);
  kernels::AttentionBlock block{B_, NHt_, NHt_, HS_, T_, 0, T_, T_, 0, T_, q_pos_, k_pos_, nullptr};
  ops_.attention_block_forward(merged, lse, qkv, kv_, block, workspace_);
  if constexpr (!std::is_same_v<A, G>) ops_.to_compute(atty, merged, N * Ct);
}

template <typename A>
void VisionEncoder<A>::attention_backward(int l, A* d_qkv, const A* d_atty) {
  const size_t N = N_, Ct = Ct_;
  const A* qkv = qkv_ + l * N * 3 * Ct;
  ops_.attention_row_dot(delta_, d_atty, atty_ + l * N * Ct, B_, T_, NHt_, HS_);
  G* grads = merged_in_accum(d_qkv, d_qkv_acc_);
  ops_.fill(grads, N * 3 * Ct, G(0));
  ops_.fill(d_kv_, N * 2 * Ct, G(0));
  ops_.attention_kv_pack(kv_, qkv, N, NHt_, NHt_, HS_);
  kernels::AttentionBlock block{B_, NHt_, NHt_, HS_, T_, 0, T_, T_, 0, T_, q_pos_, k_pos_, nullptr};
  ops_.attention_block_backward(grads, d_kv_, d_atty, delta_, lse_ + l * N * NHt_, qkv, kv_, block,
                                workspace_);
  ops_.attention_kv_unpack(grads, d_kv_, N, NHt_, NHt_, HS_);
  if constexpr (!std::is_same_v<A, G>) ops_.to_compute(d_qkv, grads, N * 3 * Ct);
}

// Layer l (CLIP's pre-norm block): res_mid = h + proj(attention(qkv(ln1(h))));
// h' = res_mid + fc2(quick_gelu(fc1(ln2(res_mid)))). Under TP the column-split qkv and fc1 and
// the attention run on this rank's share, proj and fc2 give partial sums (Note [tower tensor
// parallelism]).
template <typename A>
void VisionEncoder<A>::layer_forward(int l) {
  const int N = static_cast<int>(N_), C = C_, Ct = Ct_, Ft = Ft_;
  const size_t NC = N_ * C, NCt = N_ * Ct, NFt = N_ * Ft;
  const VisionLayerParams<A> w = layer(params_, l);
  A* h = hidden_ + l * NC;
  A* ln1 = ln1_ + l * NC;
  G* s1 = ln1_stats_ + l * 2 * N_;
  ops_.layernorm_forward(ln1, s1, s1 + N, h, w.ln1_w, w.ln1_b, N, C);
  ops_.matmul_forward(qkv_ + l * N_ * 3 * Ct, nullptr, ln1, w.qkv_w, w.qkv_b, N, C, 3 * Ct,
                      Epilogue::kNone);
  attention_forward(l);
  A* proj_out = d_c_;  // scratch until the backward
  ops_.matmul_forward(proj_out, nullptr, atty_ + l * NCt, w.proj_w, row_split_bias(w.proj_b), N, Ct,
                      C, Epilogue::kNone);
  tp_sum(proj_out, NC);
  G* s2 = ln2_stats_ + l * 2 * N_;
  ops_.residual_layernorm_forward(res_mid_ + l * NC, ln2_ + l * NC, s2, s2 + N, h, proj_out,
                                  w.ln2_w, w.ln2_b, N, C);
  ops_.matmul_forward(fc1_ + l * NFt, nullptr, ln2_ + l * NC, w.fc1_w, w.fc1_b, N, C, Ft,
                      Epilogue::kNone);
  ops_.activation_forward(act_ + l * NFt, fc1_ + l * NFt, NFt, kernels::Activation::kQuickGelu);
  A* next = h + NC;
  ops_.matmul_forward(next, nullptr, act_ + l * NFt, w.fc2_w, row_split_bias(w.fc2_b), N, Ft, C,
                      Epilogue::kNone);
  tp_sum(next, NC);
  // next += res_mid: the residual add (dropout of p 0 is a plain add, in every compute type).
  ops_.residual_dropout_forward(next, next, res_mid_ + l * NC, NC, 0.0f, 0, 0);
}

// d_h_ holds d h' on entry and d h on return. Under TP the input gradients of the column-split
// fc1 and qkv are partial sums (Note [tower tensor parallelism]); the row-split biases'
// gradients are whole, from the whole d h'.
template <typename A>
void VisionEncoder<A>::layer_backward(int l) {
  const int N = static_cast<int>(N_), C = C_, Ct = Ct_, Ft = Ft_;
  const size_t NC = N_ * C, NCt = N_ * Ct, NFt = N_ * Ft;
  const VisionLayerParams<A> w = layer(params_, l);
  const VisionLayerParams<G> g = layer(grads_, l);
  // MLP block: d res_mid = d h' + the branch's gradient through ln2 (layernorm_backward's +=).
  ops_.matmul_backward(d_f_, g.fc2_w, g.fc2_b, d_h_, act_ + l * NFt, w.fc2_w, N, Ft, C);
  ops_.activation_backward(d_f_, fc1_ + l * NFt, d_f_, NFt, kernels::Activation::kQuickGelu);
  ops_.matmul_backward(d_c_, g.fc1_w, g.fc1_b, d_f_, ln2_ + l * NC, w.fc1_w, N, C, Ft);
  tp_sum(d_c_, NC);
  const G* s2 = ln2_stats_ + l * 2 * N_;
  ops_.layernorm_backward(d_h_, g.ln2_w, g.ln2_b, d_c_, res_mid_ + l * NC, w.ln2_w, s2, s2 + N, N,
                          C);
  // Attention block: d h = d res_mid + the branch's gradient through ln1.
  ops_.matmul_backward(d_c_, g.proj_w, g.proj_b, d_h_, atty_ + l * NCt, w.proj_w, N, Ct, C);
  attention_backward(l, d_f_, d_c_);
  ops_.matmul_backward(d_c2_, g.qkv_w, g.qkv_b, d_f_, ln1_ + l * NC, w.qkv_w, N, C, 3 * Ct);
  tp_sum(d_c2_, NC);
  const G* s1 = ln1_stats_ + l * 2 * N_;
  ops_.layernorm_backward(d_h_, g.ln1_w, g.ln1_b, d_c2_, hidden_ + l * NC, w.ln1_w, s1, s1 + N, N,
                          C);
}

template <typename A>
void VisionEncoder<A>::backward(const A* d_out, A* d_images, bool encoder) {
  const int B = B_, T = T_, C = C_, M = B_ * Np_;
  const size_t TC = static_cast<size_t>(T) * C, NC = N_ * C;
  A* P = params_;
  G* Gr = grads_;
  projector_backward(d_out, encoder);  // d_h_ = d of the selected hidden state
  if (!encoder) return;
  for (int l = Lrun_ - 1; l >= 0; l--) layer_backward(l);
  device_.zero(d_c_, NC * sizeof(A), compute());  // d x0 (layernorm_backward adds)
  ops_.layernorm_backward(d_c_, tensor(Gr, pre_w_), tensor(Gr, pre_b_), d_h_, x0_,
                          tensor(P, pre_w_), pre_mean_, pre_rstd_, static_cast<int>(N_), C);
  // The positions' gradient: d x0 summed over the images; the class embedding's: row 0's.
  ops_.matmul_backward(nullptr, nullptr, tensor(Gr, pos_), d_c_, nullptr, nullptr, B, 0,
                       static_cast<int>(TC));
  const A* d_patch = d_c_;
  if (cls_ >= 0) {
    for (int b = 0; b < B; b++) {
      ops_.matmul_backward(nullptr, nullptr, tensor(Gr, cls_), d_c_ + b * TC, nullptr, nullptr, 1,
                           0, C);
      device_.copy(d_c2_ + static_cast<size_t>(b) * Np_ * C, d_c_ + b * TC + C,
                   static_cast<size_t>(Np_) * C * sizeof(A), CopyKind::kDeviceToDevice, compute());
    }
    d_patch = d_c2_;
  }
  A* d_cols = d_images ? d_p_ : nullptr;
  ops_.matmul_backward(d_cols, tensor(Gr, patch_w_), tensor(Gr, patch_b_), d_patch, cols_,
                       tensor(P, patch_w_), M, K_, C);
  if (d_images)
    ops_.patchify_backward(d_images, d_cols, B, Cin_, config_.img_h, config_.img_w,
                           config_.patch_dim);
}

template class VisionEncoder<float>;
template class VisionEncoder<double>;
template class VisionEncoder<bf16>;
template class VisionEncoder<fp16>;

}  // namespace lattice
