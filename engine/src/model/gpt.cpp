// GPT-2 forward and backward over the kernel op list (kernels/include/lattice/kernels.h).
// Per layer: x -> LN1 -> QKV -> attention -> proj -> dropout + residual -> LN2 -> FC1 ->
// GELU -> FC2 -> dropout + residual. Head: final LN -> logits = x wte^T -> cross-entropy.
#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "lattice/dropout_hash.h"
#include "lattice/kernels.h"

namespace lattice {

namespace k = kernels;

template <typename T>
GptActivations<T>::GptActivations(const ModelConfig& c, int micro_batch)
    : B(micro_batch), T_(c.seq_length) {
  const size_t L = c.num_layers, C = c.hidden_size, F = c.ffn(), NH = c.num_attention_heads,
               V = c.padded_vocab_size(), N = static_cast<size_t>(B) * T_;
  const size_t sizes[] = {(L + 1) * N * C,
                          L * N * C,
                          L * N,
                          L * N,
                          L * N * 3 * C,
                          L * N * C,
                          L * B * NH * T_ * T_,
                          L * N * C,
                          L * N * C,
                          L * N,
                          L * N,
                          L * N * F,
                          L * N * F,
                          N * C,
                          N,
                          N,
                          N * V,
                          N};
  T** ptrs[] = {&residual, &ln1,     &ln1_mean, &ln1_rstd, &qkv,      &atty,
                &probs,    &res_mid, &ln2,      &ln2_mean, &ln2_rstd, &fc1,
                &gelu,     &lnf,     &lnf_mean, &lnf_rstd, &logits,   &losses};
  size_t total = 0;
  for (size_t s : sizes) total += (s + 15) / 16 * 16;
  storage.assign(total, T(0));
  size_t offset = 0;
  for (size_t i = 0; i < std::size(sizes); i++) {
    *ptrs[i] = storage.data() + offset;
    offset += (sizes[i] + 15) / 16 * 16;
  }
  tokens.assign(N, 0);
}

template <typename T>
GptModel<T>::GptModel(const ModelConfig& config, int micro_batch)
    : config_(config), layout_(config), micro_batch_(micro_batch) {
  params_.assign(layout_.total_numel(), T(0));
  grads_.assign(layout_.total_numel(), T(0));
  const size_t N = static_cast<size_t>(micro_batch) * config.seq_length, C = config.hidden_size,
               F = config.ffn();
  scratch_.assign(N * (4 * C + F + 3 * C), T(0));
  T* p = scratch_.data();
  d_residual_ = p;
  p += N * C;
  d_c_a_ = p;
  p += N * C;
  d_c_b_ = p;
  p += N * C;
  fwd_c_ = p;
  p += N * C;
  d_f_ = p;
  p += N * F;
  d_qkv_ = p;
  attention_ws_.assign(k::attention_workspace_elems(config.seq_length) * k::num_threads(), T(0));
}

template <typename T>
MemoryBreakdown GptModel<T>::memory() const {
  MemoryBreakdown m;
  m.weights = params_.size() * sizeof(T);
  m.grads = grads_.size() * sizeof(T);
  m.workspace = (scratch_.size() + attention_ws_.size()) * sizeof(T);
  return m;
}

namespace {
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}
}  // namespace

template <typename T>
void GptModel<T>::init_weights(uint64_t seed) {
  const double out_std = config_.init_method_std / std::sqrt(2.0 * config_.num_layers);
  std::fill(params_.begin(), params_.end(), T(0));
  for (const ParamTensor& t : layout_.tensors()) {
    T* w = params_.data() + t.offset;
    const bool is_norm = t.name.find("layernorm") != std::string::npos;
    const bool is_bias = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
    if (is_bias) continue;  // zero
    if (is_norm) {
      std::fill(w, w + t.numel, T(1));
      continue;
    }
    const bool is_output = t.name.find("linear_proj.weight") != std::string::npos ||
                           t.name.find("linear_fc2.weight") != std::string::npos;
    std::mt19937_64 rng(k::dropout_hash(seed, fnv1a(t.name)));
    std::normal_distribution<double> normal(0.0, is_output ? out_std : config_.init_method_std);
    for (size_t i = 0; i < t.numel; i++) w[i] = static_cast<T>(normal(rng));
  }
}

template <typename T>
void GptModel<T>::zero_grads() {
  std::memset(grads_.data(), 0, grads_.size() * sizeof(T));
}

template <typename T>
uint64_t GptModel<T>::dropout_site_key(uint64_t seed, int layer, int site) const {
  return k::dropout_hash(seed, static_cast<uint64_t>(layer + 1) * 4 + site);
}

namespace {
enum Site { kEmbeddingDropout = 0, kAttentionDropout = 1, kProjDropout = 2, kFc2Dropout = 3 };
}

template <typename T>
double GptModel<T>::forward(GptActivations<T>& a, const int32_t* tokens, const int32_t* targets,
                            uint64_t dropout_seed, float grad_scale) {
  const ModelConfig& c = config_;
  const int B = a.B, Tn = a.T_, C = c.hidden_size, F = c.ffn(), NH = c.num_attention_heads,
            V = c.padded_vocab_size(), L = c.num_layers, N = B * Tn;
  const bool training = grad_scale > 0.0f;
  const float p_hidden = training ? c.hidden_dropout : 0.0f;
  const float p_attn = training ? c.attention_dropout : 0.0f;
  const size_t NC = static_cast<size_t>(N) * C, NF = static_cast<size_t>(N) * F;
  a.dropout_seed = dropout_seed;
  std::copy(tokens, tokens + N, a.tokens.begin());
  T* P = params_.data();
  const auto& tensors = layout_.tensors();
  const T* wte = P + tensors[layout_.word_embedding_index()].offset;
  const T* wpe = P + tensors[layout_.position_embedding_index()].offset;

  {
    ScopedOp op(&profiler_, Op::kEmbedding);
    k::embedding_forward(a.residual, tokens, wte, wpe, B, Tn, C);
    k::residual_dropout_forward<T>(a.residual, nullptr, a.residual, NC, p_hidden,
                                   dropout_site_key(dropout_seed, -1, kEmbeddingDropout));
  }
  for (int l = 0; l < L; l++) {
    const LayerParams<T> w = layout_.layer(P, l);
    const size_t lNC = l * NC, lN = static_cast<size_t>(l) * N;
    T* x = a.residual + lNC;
    T* ln1 = a.ln1 + lNC;
    T* qkv = a.qkv + 3 * lNC;
    T* atty = a.atty + lNC;
    T* probs = a.probs + static_cast<size_t>(l) * B * NH * Tn * Tn;
    T* res_mid = a.res_mid + lNC;
    T* ln2 = a.ln2 + lNC;
    T* fc1 = a.fc1 + l * NF;
    T* gelu = a.gelu + l * NF;
    T* out = a.residual + lNC + NC;
    {
      ScopedOp op(&profiler_, Op::kLayerNorm);
      k::layernorm_forward(ln1, a.ln1_mean + lN, a.ln1_rstd + lN, x, w.ln1_w, w.ln1_b, N, C);
    }
    {
      ScopedOp op(&profiler_, Op::kMatmulForward);
      k::matmul_forward(qkv, ln1, w.qkv_w, w.qkv_b, N, C, 3 * C);
    }
    {
      ScopedOp op(&profiler_, Op::kAttentionForward);
      k::attention_forward(atty, probs, qkv, B, Tn, C, NH, p_attn,
                           dropout_site_key(dropout_seed, l, kAttentionDropout),
                           attention_ws_.data());
    }
    {
      ScopedOp op(&profiler_, Op::kMatmulForward);
      k::matmul_forward(fwd_c_, atty, w.proj_w, w.proj_b, N, C, C);
    }
    {
      ScopedOp op(&profiler_, Op::kResidualDropout);
      k::residual_dropout_forward<T>(res_mid, x, fwd_c_, NC, p_hidden,
                                     dropout_site_key(dropout_seed, l, kProjDropout));
    }
    {
      ScopedOp op(&profiler_, Op::kLayerNorm);
      k::layernorm_forward(ln2, a.ln2_mean + lN, a.ln2_rstd + lN, res_mid, w.ln2_w, w.ln2_b, N, C);
    }
    {
      ScopedOp op(&profiler_, Op::kMatmulForward);
      k::matmul_forward(fc1, ln2, w.fc1_w, w.fc1_b, N, C, F);
    }
    {
      ScopedOp op(&profiler_, Op::kGelu);
      k::gelu_forward(gelu, fc1, NF);
    }
    {
      ScopedOp op(&profiler_, Op::kMatmulForward);
      k::matmul_forward(fwd_c_, gelu, w.fc2_w, w.fc2_b, N, F, C);
    }
    {
      ScopedOp op(&profiler_, Op::kResidualDropout);
      k::residual_dropout_forward<T>(out, res_mid, fwd_c_, NC, p_hidden,
                                     dropout_site_key(dropout_seed, l, kFc2Dropout));
    }
  }
  const ParamTensor& lnf = tensors[layout_.final_norm_index()];
  {
    ScopedOp op(&profiler_, Op::kLayerNorm);
    k::layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.residual + L * NC, P + lnf.offset,
                         P + lnf.offset + C, N, C);
  }
  {
    ScopedOp op(&profiler_, Op::kLmHeadForward);
    k::matmul_forward<T>(a.logits, a.lnf, wte, nullptr, N, C, V);
  }
  {
    ScopedOp op(&profiler_, Op::kCrossEntropy);
    k::softmax_cross_entropy<T>(a.losses, training ? a.logits : nullptr, a.logits, targets, N, V,
                                grad_scale);
  }
  a.has_grad = training;
  double sum = 0;
  for (int i = 0; i < N; i++) sum += a.losses[i];
  return sum / N;
}

template <typename T>
void GptModel<T>::backward(GptActivations<T>& a) {
  const ModelConfig& c = config_;
  const int B = a.B, Tn = a.T_, C = c.hidden_size, F = c.ffn(), NH = c.num_attention_heads,
            V = c.padded_vocab_size(), L = c.num_layers, N = B * Tn;
  const float p_hidden = c.hidden_dropout, p_attn = c.attention_dropout;
  const size_t NC = static_cast<size_t>(N) * C, NF = static_cast<size_t>(N) * F;
  const uint64_t seed = a.dropout_seed;
  T* P = params_.data();
  T* G = grads_.data();
  const auto& tensors = layout_.tensors();
  const size_t wte_off = tensors[layout_.word_embedding_index()].offset;
  const size_t wpe_off = tensors[layout_.position_embedding_index()].offset;
  const ParamTensor& lnf = tensors[layout_.final_norm_index()];

  // Head: dlnf = dlogits wte; dwte += dlogits^T lnf; then the final LayerNorm.
  {
    ScopedOp op(&profiler_, Op::kLmHeadBackward);
    k::matmul_backward<T>(d_c_a_, G + wte_off, nullptr, a.logits, a.lnf, P + wte_off, N, C, V);
  }
  {
    ScopedOp op(&profiler_, Op::kLayerNorm);
    std::memset(d_residual_, 0, NC * sizeof(T));
    k::layernorm_backward(d_residual_, G + lnf.offset, G + lnf.offset + C, d_c_a_,
                          a.residual + L * NC, P + lnf.offset, a.lnf_mean, a.lnf_rstd, N, C);
  }
  for (int l = L - 1; l >= 0; l--) {
    const LayerParams<T> w = layout_.layer(P, l);
    const LayerParams<T> g = layout_.layer(G, l);
    const size_t lNC = l * NC, lN = static_cast<size_t>(l) * N;
    const T* x = a.residual + lNC;
    const T* ln1 = a.ln1 + lNC;
    const T* qkv = a.qkv + 3 * lNC;
    const T* atty = a.atty + lNC;
    const T* probs = a.probs + static_cast<size_t>(l) * B * NH * Tn * Tn;
    const T* res_mid = a.res_mid + lNC;
    const T* ln2 = a.ln2 + lNC;
    const T* fc1 = a.fc1 + l * NF;
    const T* gelu = a.gelu + l * NF;
    // MLP block: out = res_mid + dropout(fc2(gelu(fc1(ln2(res_mid))))).
    {
      ScopedOp op(&profiler_, Op::kResidualDropout);
      k::dropout_backward(d_c_a_, d_residual_, NC, p_hidden,
                          dropout_site_key(seed, l, kFc2Dropout));
    }
    {
      ScopedOp op(&profiler_, Op::kMatmulBackward);
      k::matmul_backward(d_f_, g.fc2_w, g.fc2_b, d_c_a_, gelu, w.fc2_w, N, F, C);
    }
    {
      ScopedOp op(&profiler_, Op::kGelu);
      k::gelu_backward(d_f_, fc1, d_f_, NF);
    }
    {
      ScopedOp op(&profiler_, Op::kMatmulBackward);
      k::matmul_backward(d_c_b_, g.fc1_w, g.fc1_b, d_f_, ln2, w.fc1_w, N, C, F);
    }
    {
      ScopedOp op(&profiler_, Op::kLayerNorm);
      k::layernorm_backward(d_residual_, g.ln2_w, g.ln2_b, d_c_b_, res_mid, w.ln2_w,
                            a.ln2_mean + lN, a.ln2_rstd + lN, N, C);
    }
    // Attention block: res_mid = x + dropout(proj(attention(qkv(ln1(x))))).
    {
      ScopedOp op(&profiler_, Op::kResidualDropout);
      k::dropout_backward(d_c_a_, d_residual_, NC, p_hidden,
                          dropout_site_key(seed, l, kProjDropout));
    }
    {
      ScopedOp op(&profiler_, Op::kMatmulBackward);
      k::matmul_backward(d_c_b_, g.proj_w, g.proj_b, d_c_a_, atty, w.proj_w, N, C, C);
    }
    {
      ScopedOp op(&profiler_, Op::kAttentionBackward);
      k::attention_backward(d_qkv_, d_c_b_, qkv, probs, B, Tn, C, NH, p_attn,
                            dropout_site_key(seed, l, kAttentionDropout), attention_ws_.data());
    }
    {
      ScopedOp op(&profiler_, Op::kMatmulBackward);
      k::matmul_backward(d_c_a_, g.qkv_w, g.qkv_b, d_qkv_, ln1, w.qkv_w, N, C, 3 * C);
    }
    {
      ScopedOp op(&profiler_, Op::kLayerNorm);
      k::layernorm_backward(d_residual_, g.ln1_w, g.ln1_b, d_c_a_, x, w.ln1_w, a.ln1_mean + lN,
                            a.ln1_rstd + lN, N, C);
    }
  }
  {
    ScopedOp op(&profiler_, Op::kEmbedding);
    k::dropout_backward(d_residual_, d_residual_, NC, p_hidden,
                        dropout_site_key(seed, -1, kEmbeddingDropout));
    k::embedding_backward(G + wte_off, G + wpe_off, d_residual_, a.tokens.data(), B, Tn, C);
  }
  a.has_grad = false;
}

template struct GptActivations<float>;
template struct GptActivations<double>;
template class GptModel<float>;
template class GptModel<double>;

}  // namespace lattice
