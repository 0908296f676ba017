// GpuGpt (gpu_model.h): forward and backward of GPT-2 over lattice::kernels::cuda ops. The
// residual adds are fused into the LayerNorm that follows them (residual_layernorm_forward, as
// llm.c): layer l's input residual[l] is made by layer l's first LayerNorm from layer l-1's
// res_mid and MLP output, and the final LayerNorm makes residual[L]. Backward runs the same
// gradient convention as the CPU model: parameter gradients +=, the residual stream's gradient
// d_res_ accumulated by every LayerNorm backward.
#include "gpu/gpu_model.h"

#include <cuda_runtime_api.h>

#include <type_traits>

namespace lattice::gpu {

void zero_async(cu::Context& ctx, void* dst, size_t bytes) {
  if (cudaMemsetAsync(dst, 0, bytes, ctx.stream()) != cudaSuccess)
    ctx.record_error("cudaMemsetAsync failed");
}

void copy_to_device_async(cu::Context& ctx, void* dst, const void* src, size_t bytes) {
  if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream()) != cudaSuccess)
    ctx.record_error("cudaMemcpyAsync (host to device) failed");
}

void copy_to_host_async(cu::Context& ctx, void* dst, const void* src, size_t bytes) {
  if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream()) != cudaSuccess)
    ctx.record_error("cudaMemcpyAsync (device to host) failed");
}

void copy_device_async(cu::Context& ctx, void* dst, const void* src, size_t bytes) {
  if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream()) != cudaSuccess)
    ctx.record_error("cudaMemcpyAsync (device to device) failed");
}

template <typename A>
GpuGpt<A>::GpuGpt(const ModelConfig& config, int micro_batch, cu::Context& ctx,
                  CachingAllocator& memory)
    : config_(config),
      layout_(config),
      ctx_(ctx),
      memory_(memory),
      B_(micro_batch),
      T_(config.seq_length),
      C_(config.hidden_size),
      F_(config.ffn()),
      NH_(config.num_attention_heads),
      L_(config.num_layers),
      Vp_(config.padded_vocab_size()),
      N_(micro_batch * config.seq_length) {}

template <typename A>
GpuGpt<A>::~GpuGpt() {
  for (void* p : blocks_) memory_.free(p);
}

template <typename A>
template <typename X>
X* GpuGpt<A>::take(size_t n, MemoryCategory category) {
  const size_t bytes = n * sizeof(X);
  void* p = memory_.allocate(bytes, category);
  if (!p) {
    if (failed_bytes_ == 0) {
      failed_bytes_ = bytes;
      failed_category_ = category;
    }
    return nullptr;
  }
  blocks_.push_back(p);
  return static_cast<X*>(p);
}

template <typename A>
Status GpuGpt<A>::allocate() {
  using MC = MemoryCategory;
  const size_t n = numel(), NC = static_cast<size_t>(N_) * C_, NF = static_cast<size_t>(N_) * F_;
  const size_t lse = static_cast<size_t>(B_) * NH_ * T_;
  master_ = take<float>(n, MC::kWeights);
  grads_ = take<float>(n, MC::kGrads);
  if constexpr (std::is_same_v<A, float>) {
    compute_ = master_;
  } else {
    bf16_copy_ = take<cu::bf16>(n, MC::kWeights);
    compute_ = bf16_copy_;
  }
  residual_ = take<A>(static_cast<size_t>(L_ + 1) * NC, MC::kActivations);
  for (int l = 0; l < L_; l++) {
    GpuLayerActs<A> a;
    a.ln1 = take<A>(NC, MC::kActivations);
    a.ln1_mean = take<float>(N_, MC::kActivations);
    a.ln1_rstd = take<float>(N_, MC::kActivations);
    a.qkv = take<A>(3 * NC, MC::kActivations);
    a.atty = take<A>(NC, MC::kActivations);
    a.lse = take<float>(lse, MC::kActivations);
    a.res_mid = take<A>(NC, MC::kActivations);
    a.ln2 = take<A>(NC, MC::kActivations);
    a.ln2_mean = take<float>(N_, MC::kActivations);
    a.ln2_rstd = take<float>(N_, MC::kActivations);
    a.fc1 = take<A>(NF, MC::kActivations);
    a.gelu = take<A>(NF, MC::kActivations);
    layers_.push_back(a);
  }
  lnf_ = take<A>(NC, MC::kActivations);
  lnf_mean_ = take<float>(N_, MC::kActivations);
  lnf_rstd_ = take<float>(N_, MC::kActivations);
  const size_t NV = static_cast<size_t>(N_) * Vp_;
  logits_f32_ = take<float>(NV, MC::kActivations);
  if constexpr (!std::is_same_v<A, float>) logits_ = take<A>(NV, MC::kActivations);
  losses_ = take<float>(N_, MC::kActivations);
  proj_out_ = take<A>(NC, MC::kWorkspace);
  fc2_out_ = take<A>(NC, MC::kWorkspace);
  d_res_ = take<A>(NC, MC::kWorkspace);
  d_c_ = take<A>(NC, MC::kWorkspace);
  d_f_ = take<A>(NF, MC::kWorkspace);
  d_qkv_ = take<A>(3 * NC, MC::kWorkspace);
  d_atty_ = take<A>(NC, MC::kWorkspace);
  attention_ws_ = take<float>(cu::attention_workspace_floats(B_, T_, NH_), MC::kWorkspace);
  if (failed_bytes_ > 0)
    return Status::internal("out of device memory: " + std::to_string(failed_bytes_) +
                            " bytes of " + memory_category_name(failed_category_) +
                            " (try a smaller --micro-batch-size)");
  return Status::ok();
}

template <typename A>
Result<std::unique_ptr<GpuGpt<A>>> GpuGpt<A>::create(const ModelConfig& config, int micro_batch,
                                                     cu::Context& ctx, CachingAllocator& memory) {
  std::unique_ptr<GpuGpt<A>> m(new GpuGpt<A>(config, micro_batch, ctx, memory));
  if (Status s = m->allocate(); !s) return s;
  return m;
}

template <typename A>
void GpuGpt<A>::upload(const float* host) {
  // On the Context's stream, so that a failed copy is recorded there like every other op.
  copy_to_device_async(ctx_, master_, host, numel() * sizeof(float));
  if constexpr (!std::is_same_v<A, float>) cu::convert(ctx_, bf16_copy_, master_, numel());
  (void)ctx_.synchronize();  // an error stays recorded in the Context
}

template <typename A>
void GpuGpt<A>::download(float* host) {
  copy_to_host_async(ctx_, host, master_, numel() * sizeof(float));
  (void)ctx_.synchronize();  // an error stays recorded in the Context
}

template <typename A>
void GpuGpt<A>::zero_grads() {
  zero_async(ctx_, grads_, numel() * sizeof(float));
}

template <typename A>
void GpuGpt<A>::forward(const int32_t* tokens, const int32_t* targets, float grad_scale) {
  const int B = B_, T = T_, C = C_, F = F_, NH = NH_, N = N_;
  const size_t NC = static_cast<size_t>(N) * C;
  const auto& t = layout_.tensors();
  A* P = compute_;
  const A* wte = P + t[layout_.word_embedding_index()].offset;
  const A* wpe = P + t[layout_.position_embedding_index()].offset;
  cu::embedding_forward(ctx_, residual_, tokens, wte, wpe, B, T, C);
  for (int l = 0; l < L_; l++) {
    const LayerParams<A> w = layout_.layer(P, l);
    const GpuLayerActs<A>& a = layers_[l];
    A* x = residual_ + l * NC;
    if (l == 0)
      cu::layernorm_forward(ctx_, a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
    else  // x = the previous layer's res_mid + its MLP output, then LayerNorm
      cu::residual_layernorm_forward(ctx_, x, a.ln1, a.ln1_mean, a.ln1_rstd, layers_[l - 1].res_mid,
                                     fc2_out_, w.ln1_w, w.ln1_b, N, C);
    cu::matmul_forward(ctx_, a.qkv, nullptr, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * C, false);
    cu::attention_forward(ctx_, a.atty, a.lse, a.qkv, B, T, C, NH, 0.0f, 0);
    cu::matmul_forward(ctx_, proj_out_, nullptr, a.atty, w.proj_w, w.proj_b, N, C, C, false);
    cu::residual_layernorm_forward(ctx_, a.res_mid, a.ln2, a.ln2_mean, a.ln2_rstd, x, proj_out_,
                                   w.ln2_w, w.ln2_b, N, C);
    cu::matmul_forward(ctx_, a.gelu, a.fc1, a.ln2, w.fc1_w, w.fc1_b, N, C, F, true);
    cu::matmul_forward(ctx_, fc2_out_, nullptr, a.gelu, w.fc2_w, w.fc2_b, N, F, C, false);
  }
  const A* lnf_w = P + t[layout_.final_norm_index()].offset;
  cu::residual_layernorm_forward(ctx_, residual_ + L_ * NC, lnf_, lnf_mean_, lnf_rstd_,
                                 layers_[L_ - 1].res_mid, fc2_out_, lnf_w, lnf_w + C, N, C);
  // LM head tied to the word embedding; the cross-entropy reads fp32 logits (over the padded
  // vocabulary, as the CPU model and Megatron).
  if constexpr (std::is_same_v<A, float>) {
    cu::matmul_forward(ctx_, logits_f32_, nullptr, lnf_, wte, nullptr, N, C, Vp_, false);
  } else {
    cu::matmul_forward(ctx_, logits_, nullptr, lnf_, wte, nullptr, N, C, Vp_, false);
    cu::convert(ctx_, logits_f32_, logits_, static_cast<size_t>(N) * Vp_);
  }
  cu::softmax_cross_entropy(ctx_, losses_, grad_scale > 0 ? logits_f32_ : nullptr, logits_f32_,
                            targets, N, Vp_, grad_scale);
}

template <typename A>
void GpuGpt<A>::backward(const int32_t* tokens) {
  const int B = B_, T = T_, C = C_, F = F_, NH = NH_, N = N_;
  const size_t NC = static_cast<size_t>(N) * C;
  const auto& t = layout_.tensors();
  A* P = compute_;
  float* G = grads_;
  const size_t wte_off = t[layout_.word_embedding_index()].offset;
  const size_t wpe_off = t[layout_.position_embedding_index()].offset;
  const size_t lnf_off = t[layout_.final_norm_index()].offset;
  // Head: dlnf = dlogits wte; dwte += dlogits^T lnf; then the final LayerNorm.
  const A* dlogits;
  if constexpr (std::is_same_v<A, float>) {
    dlogits = logits_f32_;
  } else {
    cu::convert(ctx_, logits_, logits_f32_, static_cast<size_t>(N) * Vp_);
    dlogits = logits_;
  }
  cu::matmul_backward(ctx_, d_c_, G + wte_off, nullptr, dlogits, lnf_, P + wte_off, N, C, Vp_);
  zero_async(ctx_, d_res_, NC * sizeof(A));
  cu::layernorm_backward(ctx_, d_res_, G + lnf_off, G + lnf_off + C, d_c_, residual_ + L_ * NC,
                         P + lnf_off, lnf_mean_, lnf_rstd_, N, C);
  notify(layout_.final_norm_index(), static_cast<int>(t.size()));
  for (int l = L_ - 1; l >= 0; l--) {
    const LayerParams<A> w = layout_.layer(P, l);
    const LayerParams<float> g = layout_.layer(G, l);
    const GpuLayerActs<A>& a = layers_[l];
    const A* x = residual_ + l * NC;
    // MLP block: out = res_mid + fc2(gelu(fc1(ln2(res_mid)))); d_res_ holds d out.
    cu::matmul_backward(ctx_, d_f_, g.fc2_w, g.fc2_b, d_res_, a.gelu, w.fc2_w, N, F, C);
    cu::gelu_backward(ctx_, d_f_, a.fc1, d_f_, static_cast<size_t>(N) * F);
    cu::matmul_backward(ctx_, d_c_, g.fc1_w, g.fc1_b, d_f_, a.ln2, w.fc1_w, N, C, F);
    cu::layernorm_backward(ctx_, d_res_, g.ln2_w, g.ln2_b, d_c_, a.res_mid, w.ln2_w, a.ln2_mean,
                           a.ln2_rstd, N, C);
    // Attention block: res_mid = x + proj(attention(qkv(ln1(x)))); d_res_ holds d res_mid.
    cu::matmul_backward(ctx_, d_atty_, g.proj_w, g.proj_b, d_res_, a.atty, w.proj_w, N, C, C);
    cu::attention_backward(ctx_, d_qkv_, d_atty_, a.qkv, a.atty, a.lse, attention_ws_, B, T, C, NH,
                           0.0f, 0);
    cu::matmul_backward(ctx_, d_c_, g.qkv_w, g.qkv_b, d_qkv_, a.ln1, w.qkv_w, N, C, 3 * C);
    cu::layernorm_backward(ctx_, d_res_, g.ln1_w, g.ln1_b, d_c_, x, w.ln1_w, a.ln1_mean, a.ln1_rstd,
                           N, C);
    notify(layout_.layer_index(l), layout_.layer_index(l) + ParamLayout::kPerLayer);
  }
  cu::embedding_backward(ctx_, G + wte_off, G + wpe_off, d_res_, tokens, B, T, C);
  notify(layout_.word_embedding_index(), layout_.position_embedding_index() + 1);
}

template class GpuGpt<float>;
template class GpuGpt<cu::bf16>;

}  // namespace lattice::gpu
