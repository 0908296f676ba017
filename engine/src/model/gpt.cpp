// GPT-2 chunk: construction, initialisation, the stage drivers, and the two ends of the model
// (embedding; final LayerNorm + LM head + cross-entropy). The transformer layers and the
// tensor-parallel plumbing are in gpt_layer.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/host_memory.h"
#include "lattice/kernels.h"
#include "model/gpt.h"
#include "model/init_weights.h"

namespace lattice {

namespace k = kernels;

namespace {
size_t padded(size_t n) {
  return (n + 15) / 16 * 16;
}

// Carves one layer's saved tensors from `p`, advancing it.
template <typename T>
LayerActivations<T> carve_layer(T*& p, const ChunkDims& d, bool with_probs) {
  auto take = [&p](size_t n) {
    T* out = p;
    p += padded(n);
    return out;
  };
  const size_t N = d.N, R = d.R, C = d.C;
  LayerActivations<T> la{};
  la.ln1 = take(R * C);
  la.ln1_mean = take(R);
  la.ln1_rstd = take(R);
  la.qkv = take(N * 3 * d.Ct);
  la.atty = take(N * d.Ct);
  la.probs = with_probs ? take(static_cast<size_t>(d.B) * d.Ht * d.T * d.T) : nullptr;
  la.res_mid = take(R * C);
  la.ln2 = take(R * C);
  la.ln2_mean = take(R);
  la.ln2_rstd = take(R);
  la.fc1 = take(N * d.Ft);
  la.gelu = take(N * d.Ft);
  return la;
}
}  // namespace

RecomputePlan RecomputePlan::make(const std::string& granularity, const std::string& method, int n,
                                  int num_local_layers) {
  RecomputePlan plan;
  if (granularity == "selective") plan.selective = true;
  if (granularity != "full") return plan;
  plan.group_start.assign(num_local_layers, -1);
  if (method == "uniform") {
    // Megatron's uniform method: the chunk's layers in groups of n, each group recomputed
    // from its input.
    for (int l = 0; l < num_local_layers; l++) plan.group_start[l] = l / n * n;
    plan.max_group = std::min(n, num_local_layers);
  } else {
    // block: the first n layers of the chunk recomputed one by one, the rest kept.
    for (int l = 0; l < std::min(n, num_local_layers); l++) plan.group_start[l] = l;
    plan.max_group = std::min(n, num_local_layers) > 0 ? 1 : 0;
  }
  return plan;
}

ChunkDims::ChunkDims(const ModelConfig& c, const ModelShard& s, int micro_batch)
    : B(micro_batch),
      T(c.seq_length),
      C(c.hidden_size),
      F(c.ffn()),
      NH(c.num_attention_heads),
      V(c.padded_vocab_size()),
      t(s.tp_size),
      tp_rank(s.tp_rank),
      L(s.num_layers(c)) {
  N = B * T;
  R = s.sequence_parallel ? N / t : N;
  Ct = C / t;
  Ft = F / t;
  Ht = NH / t;
  Vt = V / t;
  row0 = s.sequence_parallel ? static_cast<size_t>(tp_rank) * R : 0;
}

size_t ChunkDims::layer_elems(bool with_probs) const {
  const size_t n = N, r = R, c = C;
  return padded(r * c) * 4 + padded(r) * 4 + padded(n * 3 * Ct) + padded(n * Ct) +
         (with_probs ? padded(static_cast<size_t>(B) * Ht * T * T) : 0) + padded(n * Ft) * 2;
}

template <typename T>
GptActivations<T>::GptActivations(const ModelConfig& config, int micro_batch)
    : GptActivations(config, ModelShard{}, micro_batch, RecomputePlan{}) {}

template <typename T>
GptActivations<T>::GptActivations(const ModelConfig& c, const ModelShard& s, int micro_batch,
                                  const RecomputePlan& plan)
    : B(micro_batch), T_(c.seq_length) {
  const ChunkDims d(c, s, micro_batch);
  const size_t R = d.R, C = d.C;
  size_t total = padded((d.L + 1) * R * C);
  for (int l = 0; l < d.L; l++)
    if (!plan.recomputed(l)) total += d.layer_elems(!plan.selective);
  if (s.post)
    total += padded(R * C) + 2 * padded(R) + padded(d.N * static_cast<size_t>(d.Vt)) + padded(d.N);
  host_assign(storage, total, MemoryCategory::kActivations);
  T* p = storage.data();
  residual = p;
  p += padded((d.L + 1) * R * C);
  layers.resize(d.L);
  for (int l = 0; l < d.L; l++)
    if (!plan.recomputed(l)) layers[l] = carve_layer(p, d, !plan.selective);
  if (s.post) {
    lnf = p;
    p += padded(R * C);
    lnf_mean = p;
    p += padded(R);
    lnf_rstd = p;
    p += padded(R);
    logits = p;
    p += padded(d.N * static_cast<size_t>(d.Vt));
    losses = p;
  }
  if (s.pre) host_assign(tokens, d.N, MemoryCategory::kActivations);
}

template <typename T>
GptModel<T>::GptModel(const ModelConfig& config, int micro_batch)
    : GptModel(config, ModelShard{}, micro_batch, nullptr, RecomputePlan{}) {}

template <typename T>
GptModel<T>::GptModel(const ModelConfig& config, const ModelShard& shard, int micro_batch, Comm* tp,
                      const RecomputePlan& recompute)
    : config_(config),
      shard_(shard),
      layout_(config, shard),
      dims_(config, layout_.shard(), micro_batch),
      tp_(tp),
      recompute_(recompute) {
  shard_ = layout_.shard();
  host_assign(params_, layout_.total_numel(), MemoryCategory::kWeights);
  host_assign(grads_, layout_.total_numel(), MemoryCategory::kGrads);
  const ChunkDims& d = dims_;
  const size_t R = d.R, N = d.N, C = d.C;
  const size_t sizes[] = {R * C, R * C,    R * C,        R * C,   N * C,
                          N * C, N * d.Ft, N * 3 * d.Ct, N * d.Ct};
  T** ptrs[] = {&d_residual_, &d_c_a_, &d_c_b_, &fwd_c_, &full_,
                &gathered_,   &d_f_,   &d_qkv_, &d_atty_};
  size_t total = 0;
  for (size_t s : sizes) total += padded(s);
  const size_t probs_elems = static_cast<size_t>(d.B) * d.Ht * d.T * d.T;
  if (recompute_.selective) total += padded(probs_elems);
  host_assign(scratch_, total, MemoryCategory::kWorkspace);
  T* p = scratch_.data();
  for (size_t i = 0; i < std::size(sizes); i++) {
    *ptrs[i] = p;
    p += padded(sizes[i]);
  }
  probs_ = recompute_.selective ? p : nullptr;
  host_assign(recompute_storage_, recompute_.max_group * d.layer_elems(true),
              MemoryCategory::kActivations);
  if (d.t > 1) {
    host_assign(row_max_, N, MemoryCategory::kWorkspace);
    host_assign(target_logit_, N, MemoryCategory::kWorkspace);
    host_assign(sum_exp_, N, MemoryCategory::kWorkspace);
  }
  host_assign(attention_ws_, k::attention_workspace_elems(d.T) * k::num_threads(),
              MemoryCategory::kWorkspace);
}

template <typename T>
MemoryBreakdown GptModel<T>::memory() const {
  MemoryBreakdown m;
  m.weights = params_.size() * sizeof(T);
  m.grads = grads_.size() * sizeof(T);
  m.workspace = (scratch_.size() + attention_ws_.size() + row_max_.size() + target_logit_.size() +
                 pack_.size()) *
                    sizeof(T) +
                sum_exp_.size() * sizeof(double);
  // Full recomputation's layer slots hold activations during one backward.
  m.activations = recompute_storage_.size() * sizeof(T);
  return m;
}

template <typename T>
void GptModel<T>::init_weights(uint64_t seed) {
  if (const size_t failed = init_arena(config_, layout_, seed, params_.data()); failed > 0)
    throw OutOfMemory(MemoryCategory::kWorkspace, failed);
}

template <typename T>
void GptModel<T>::zero_grads() {
  std::memset(grads_.data(), 0, grads_.size() * sizeof(T));
}

template <typename T>
LayerActivations<T> GptModel<T>::recompute_slot(int slot) const {
  T* p = const_cast<T*>(recompute_storage_.data()) + slot * dims_.layer_elems(true);
  return carve_layer(p, dims_, true);
}

template <typename T>
const T* GptModel<T>::output(const GptActivations<T>& a) const {
  return a.residual + static_cast<size_t>(dims_.L) * dims_.R * dims_.C;
}

template <typename T>
double GptModel<T>::forward(GptActivations<T>& a, const int32_t* tokens, const int32_t* targets,
                            uint64_t dropout_seed, float grad_scale) {
  return forward_stage(a, tokens, nullptr, targets, dropout_seed, grad_scale);
}

template <typename T>
void GptModel<T>::backward(GptActivations<T>& a) {
  backward_stage(a, nullptr);
}

template <typename T>
double GptModel<T>::forward_stage(GptActivations<T>& a, const int32_t* tokens, const T* input,
                                  const int32_t* targets, uint64_t dropout_seed, float grad_scale) {
  const ChunkDims& d = dims_;
  const bool training = grad_scale > 0.0f;
  const size_t RC = static_cast<size_t>(d.R) * d.C;
  a.dropout_seed = dropout_seed;
  current_seed_ = dropout_seed;
  if (shard_.pre) {
    embedding_forward(a, tokens, training ? config_.hidden_dropout : 0.0f);
  } else {
    if (input != a.residual) std::copy(input, input + RC, a.residual);
  }
  for (int l = 0; l < d.L; l++) {
    LayerActivations<T> la =
        recompute_.recomputed(l) ? recompute_slot(l - recompute_.group_start[l]) : a.layers[l];
    if (recompute_.selective) la.probs = probs_;
    layer_forward(l, la, a.residual + l * RC, a.residual + (l + 1) * RC, training);
    if (progress_) progress_();
  }
  a.has_grad = training;
  return shard_.post ? head_forward(a, targets, grad_scale) : 0.0;
}

template <typename T>
void GptModel<T>::backward_stage(GptActivations<T>& a, const T* output_grad) {
  const ChunkDims& d = dims_;
  const size_t RC = static_cast<size_t>(d.R) * d.C;
  current_seed_ = a.dropout_seed;
  if (shard_.post) {
    head_backward(a);
  } else {
    std::copy(output_grad, output_grad + RC, d_residual_);
  }
  for (int l = d.L - 1; l >= 0; l--) {
    LayerActivations<T> la = a.layers[l];
    if (recompute_.recomputed(l)) {
      const int first = recompute_.group_start[l];
      const bool top = l == d.L - 1 || recompute_.group_start[l + 1] != first;
      if (top) recompute_group(a, first, l + 1);
      la = recompute_slot(l - first);
    }
    if (recompute_.selective) la.probs = probs_;
    layer_backward(l, la, a.residual + l * RC);
    notify_ready(layout_.layer_index(l), layout_.layer_index(l + 1));
    if (progress_) progress_();
  }
  if (shard_.pre) embedding_backward(a);
  a.has_grad = false;
}

template <typename T>
void GptModel<T>::recompute_group(GptActivations<T>& a, int first, int last) {
  const size_t RC = static_cast<size_t>(dims_.R) * dims_.C;
  for (int l = first; l < last; l++)
    layer_forward(l, recompute_slot(l - first), a.residual + l * RC, a.residual + (l + 1) * RC,
                  true);
}

template <typename T>
void GptModel<T>::embedding_forward(GptActivations<T>& a, const int32_t* tokens, float p_hidden) {
  ScopedOp op(&profiler_, Op::kEmbedding);
  const ChunkDims& d = dims_;
  const auto& tensors = layout_.tensors();
  const T* wte = params_.data() + tensors[layout_.word_embedding_index()].offset;
  const T* wpe = params_.data() + tensors[layout_.position_embedding_index()].offset;
  std::copy(tokens, tokens + d.N, a.tokens.begin());
  if (d.t == 1) {
    k::embedding_forward(a.residual, tokens, wte, wpe, d.B, d.T, d.C);
  } else {
    // Vocabulary-parallel: each rank looks up the tokens it holds, the sum over ranks is the
    // embedding; positions are added once after the sum.
    const int v0 = d.tp_rank * d.Vt;
    T* whole = shard_.sequence_parallel ? full_ : a.residual;
    k::embedding_forward<T>(whole, tokens, wte, nullptr, d.B, d.T, d.C, v0, v0 + d.Vt);
    {
      ScopedOp comm(&profiler_, Op::kTensorParallelComm);
      check(tp_->all_reduce(whole, static_cast<size_t>(d.N) * d.C, dtype_of<T>(), ReduceOp::kSum));
    }
    k::position_embedding_forward(whole, wpe, d.B, d.T, d.C);
    if (shard_.sequence_parallel)
      std::copy_n(whole + d.row0 * d.C, static_cast<size_t>(d.R) * d.C, a.residual);
  }
  k::residual_dropout_forward<T>(
      a.residual, nullptr, a.residual, static_cast<size_t>(d.R) * d.C, p_hidden,
      dropout_site_key(current_seed_, -1, DropoutSite::kEmbedding), d.row0 * d.C);
}

template <typename T>
void GptModel<T>::embedding_backward(GptActivations<T>& a) {
  ScopedOp op(&profiler_, Op::kEmbedding);
  const ChunkDims& d = dims_;
  const auto& tensors = layout_.tensors();
  T* dwte = grads_.data() + tensors[layout_.word_embedding_index()].offset;
  T* dwpe = grads_.data() + tensors[layout_.position_embedding_index()].offset;
  k::dropout_backward(d_residual_, d_residual_, static_cast<size_t>(d.R) * d.C,
                      config_.hidden_dropout,
                      dropout_site_key(current_seed_, -1, DropoutSite::kEmbedding), d.row0 * d.C);
  const T* dout = gather_rows(d_residual_, full_);
  const int v0 = d.tp_rank * d.Vt;
  k::embedding_backward(dwte, dwpe, dout, a.tokens.data(), d.B, d.T, d.C, v0, v0 + d.Vt);
  notify_ready(layout_.word_embedding_index(), layout_.position_embedding_index() + 1);
}

template <typename T>
double GptModel<T>::head_forward(GptActivations<T>& a, const int32_t* targets, float grad_scale) {
  const ChunkDims& d = dims_;
  const bool training = grad_scale > 0.0f;
  const auto& tensors = layout_.tensors();
  const T* P = params_.data();
  const ParamTensor& lnf = tensors[layout_.final_norm_index()];
  const T* wte = P + tensors[layout_.word_embedding_index()].offset;
  const T* x = output(a);
  {
    ScopedOp op(&profiler_, Op::kLayerNorm);
    k::layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, P + lnf.offset, P + lnf.offset + d.C,
                         d.R, d.C);
  }
  const T* lnf_full = gather_rows(a.lnf, gathered_);
  {
    ScopedOp op(&profiler_, Op::kLmHeadForward);
    k::matmul_forward<T>(a.logits, lnf_full, wte, nullptr, d.N, d.C, d.Vt);
  }
  T* dlogits = training ? a.logits : nullptr;
  if (d.t == 1) {
    ScopedOp op(&profiler_, Op::kCrossEntropy);
    k::softmax_cross_entropy<T>(a.losses, dlogits, a.logits, targets, d.N, d.V, grad_scale);
  } else {
    // Vocabulary-parallel: the row max, the sum of exponentials and the target's logit are
    // reduced over the TP group; the (N, V) logits are never gathered.
    const int v0 = d.tp_rank * d.Vt;
    ScopedOp op(&profiler_, Op::kCrossEntropy);
    k::cross_entropy_shard_max(row_max_.data(), a.logits, d.N, d.Vt);
    check(tp_->all_reduce(row_max_.data(), d.N, dtype_of<T>(), ReduceOp::kMax));
    k::cross_entropy_shard_sums(sum_exp_.data(), target_logit_.data(), a.logits, row_max_.data(),
                                targets, v0, d.N, d.Vt);
    check(tp_->all_reduce(sum_exp_.data(), d.N, DType::kFloat64, ReduceOp::kSum));
    check(tp_->all_reduce(target_logit_.data(), d.N, dtype_of<T>(), ReduceOp::kSum));
    k::cross_entropy_shard_finish(a.losses, dlogits, a.logits, row_max_.data(), sum_exp_.data(),
                                  target_logit_.data(), targets, v0, d.N, d.Vt, grad_scale);
  }
  double sum = 0;
  for (int i = 0; i < d.N; i++) sum += a.losses[i];
  return sum / d.N;
}

template <typename T>
void GptModel<T>::head_backward(GptActivations<T>& a) {
  const ChunkDims& d = dims_;
  const auto& tensors = layout_.tensors();
  T* P = params_.data();
  T* G = grads_.data();
  const ParamTensor& lnf = tensors[layout_.final_norm_index()];
  const size_t wte_off = tensors[layout_.word_embedding_index()].offset;
  // dlnf = dlogits wte (partial over TP ranks); dwte += dlogits^T lnf.
  const T* lnf_full = gather_rows(a.lnf, gathered_);
  {
    ScopedOp op(&profiler_, Op::kLmHeadBackward);
    k::matmul_backward<T>(d.t == 1 ? d_c_a_ : full_, G + wte_off, nullptr, a.logits, lnf_full,
                          P + wte_off, d.N, d.C, d.Vt);
  }
  if (d.t > 1) reduce_rows(full_, d_c_a_);
  {
    ScopedOp op(&profiler_, Op::kLayerNorm);
    std::memset(d_residual_, 0, static_cast<size_t>(d.R) * d.C * sizeof(T));
    k::layernorm_backward(d_residual_, G + lnf.offset, G + lnf.offset + d.C, d_c_a_, output(a),
                          P + lnf.offset, a.lnf_mean, a.lnf_rstd, d.R, d.C);
  }
  notify_ready(layout_.final_norm_index(), static_cast<int>(tensors.size()));
}

template struct GptActivations<float>;
template struct GptActivations<double>;
template class GptModel<float>;
template class GptModel<double>;

}  // namespace lattice
