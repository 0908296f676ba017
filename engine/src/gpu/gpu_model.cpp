// GpuGpt (gpu_model.h): forward and backward of GPT-2 over lattice::kernels::cuda ops. The
// residual adds are fused into the LayerNorm that follows them (residual_layernorm_forward, as
// llm.c): layer l's input residual[l] is made by layer l's first LayerNorm from layer l-1's
// res_mid and MLP output, and the final LayerNorm makes residual[L]. Backward runs the same
// gradient convention as the CPU model: parameter gradients +=, the residual stream's gradient
// d_res_ accumulated by every LayerNorm backward.
// A pipeline stage's chunk holds a layer range; without `pre` its residual[0] is the received
// input, without `post` its output residual[L] is made by an explicit residual add.
// Tensor parallelism follows the CPU model step for step (gpt_layer.cpp, gpt.cpp): QKV and FC1
// column-parallel, the attention projection and FC2 row-parallel with their partial outputs
// summed over the TP group before the residual add, the column-parallel layers' input
// gradients summed before the LayerNorm backward, vocabulary-parallel embedding, tied LM head
// and cross-entropy. A replicated term (a row-parallel bias, the position embedding) enters
// once: tp_rank 0 adds the bias inside its GEMM, the position embedding is added after the
// embedding's sum. Their gradients come from the whole (reduced) output gradient on every rank.
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
GpuGpt<A>::GpuGpt(const ModelConfig& config, const ModelShard& shard, int micro_batch,
                  cu::Context& ctx, CachingAllocator& memory, Comm* tp)
    : config_(config),
      layout_(config, shard),
      ctx_(ctx),
      memory_(memory),
      tp_(shard.tp_size > 1 ? tp : nullptr),
      B_(micro_batch),
      T_(config.seq_length),
      C_(config.hidden_size),
      F_(config.ffn()),
      NH_(config.num_attention_heads),
      L_(shard.num_layers(config)),
      Vp_(config.padded_vocab_size()),
      N_(micro_batch * config.seq_length),
      t_(shard.tp_size),
      tp_rank_(shard.tp_rank),
      Ct_(config.hidden_size / shard.tp_size),
      Ft_(config.ffn() / shard.tp_size),
      Ht_(config.num_attention_heads / shard.tp_size),
      Vt_(config.padded_vocab_size() / shard.tp_size) {}

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
GpuLayerActs<A> GpuGpt<A>::take_layer_acts() {
  using MC = MemoryCategory;
  const size_t NC = static_cast<size_t>(N_) * C_, NF = static_cast<size_t>(N_) * Ft_;
  const size_t NCt = static_cast<size_t>(N_) * Ct_;
  GpuLayerActs<A> a;
  a.ln1 = take<A>(NC, MC::kActivations);
  a.ln1_mean = take<float>(N_, MC::kActivations);
  a.ln1_rstd = take<float>(N_, MC::kActivations);
  a.qkv = take<A>(3 * NCt, MC::kActivations);
  a.atty = take<A>(NCt, MC::kActivations);
  a.lse = take<float>(static_cast<size_t>(B_) * Ht_ * T_, MC::kActivations);
  a.res_mid = take<A>(NC, MC::kActivations);
  a.ln2 = take<A>(NC, MC::kActivations);
  a.ln2_mean = take<float>(N_, MC::kActivations);
  a.ln2_rstd = take<float>(N_, MC::kActivations);
  a.fc1 = take<A>(NF, MC::kActivations);
  a.gelu = take<A>(NF, MC::kActivations);
  return a;
}

template <typename A>
Status GpuGpt<A>::allocate(int in_flight) {
  using MC = MemoryCategory;
  if (t_ > 1 && !tp_)
    return Status::internal("GpuGpt: tensor parallelism without a tensor-parallel communicator");
  if (L_ < 1) return Status::internal("GpuGpt: a pipeline stage without layers");
  if (layout_.shard().sequence_parallel)
    return Status::internal("GpuGpt: sequence parallelism is not implemented");
  const size_t n = numel(), NC = static_cast<size_t>(N_) * C_, NF = static_cast<size_t>(N_) * Ft_;
  const size_t NCt = static_cast<size_t>(N_) * Ct_;
  const size_t NV = static_cast<size_t>(N_) * Vt_;
  master_ = take<float>(n, MC::kWeights);
  grads_ = take<float>(n, MC::kGrads);
  if constexpr (std::is_same_v<A, float>) {
    compute_ = master_;
  } else {
    compute_ = take<A>(n, MC::kWeights);
  }
  slots_.resize(in_flight);
  for (GpuSlot<A>& s : slots_) {
    s.tokens = take<int32_t>(N_, MC::kActivations);
    s.targets = take<int32_t>(N_, MC::kActivations);
    s.residual = take<A>(static_cast<size_t>(L_ + 1) * NC, MC::kActivations);
    for (int l = 0; l < L_; l++)
      s.layers.push_back(recompute_.recomputed(l) ? GpuLayerActs<A>{} : take_layer_acts());
    if (post()) {
      s.lnf = take<A>(NC, MC::kActivations);
      s.lnf_mean = take<float>(N_, MC::kActivations);
      s.lnf_rstd = take<float>(N_, MC::kActivations);
      s.logits_f32 = take<float>(NV, MC::kActivations);
      if constexpr (!std::is_same_v<A, float>) s.logits = take<A>(NV, MC::kActivations);
      s.losses = take<float>(N_, MC::kActivations);
    } else {
      s.output_grad = take<A>(NC, MC::kCommBuffers);
    }
    if (!pre()) s.input_grad = take<A>(NC, MC::kCommBuffers);
  }
  for (int i = 0; i < recompute_.max_group; i++) recompute_scratch_.push_back(take_layer_acts());
  if (t_ > 1 && post()) {
    row_max_ = take<float>(N_, MC::kWorkspace);
    sum_exp_ = take<double>(N_, MC::kWorkspace);
    target_logit_ = take<float>(N_, MC::kWorkspace);
  }
  if (!post()) stats_scratch_ = take<float>(2 * static_cast<size_t>(N_), MC::kWorkspace);
  proj_out_ = take<A>(NC, MC::kWorkspace);
  fc2_out_ = take<A>(NC, MC::kWorkspace);
  d_res_ = take<A>(NC, MC::kWorkspace);
  d_c_ = take<A>(NC, MC::kWorkspace);
  d_f_ = take<A>(NF, MC::kWorkspace);
  d_qkv_ = take<A>(3 * NCt, MC::kWorkspace);
  d_atty_ = take<A>(NCt, MC::kWorkspace);
  attention_ws_ = take<float>(cu::attention_workspace_floats(B_, T_, Ht_), MC::kWorkspace);
  if (failed_bytes_ > 0)
    return Status::internal("out of device memory: " + std::to_string(failed_bytes_) +
                            " bytes of " + memory_category_name(failed_category_) +
                            " (try a smaller --micro-batch-size)");
  return Status::ok();
}

template <typename A>
Result<std::unique_ptr<GpuGpt<A>>> GpuGpt<A>::create(const ModelConfig& config, int micro_batch,
                                                     cu::Context& ctx, CachingAllocator& memory,
                                                     const ModelShard& shard, Comm* tp,
                                                     int in_flight,
                                                     const RecomputePlan& recompute) {
  std::unique_ptr<GpuGpt<A>> m(new GpuGpt<A>(config, shard, micro_batch, ctx, memory, tp));
  if (!recompute.group_start.empty() && recompute.group_start.size() != static_cast<size_t>(m->L_))
    return Status::internal("GpuGpt: a recompute plan for " +
                            std::to_string(recompute.group_start.size()) + " layers, not " +
                            std::to_string(m->L_));
  m->recompute_ = recompute;
  if (Status s = m->allocate(in_flight); !s) return s;
  return m;
}

template <typename A>
void GpuGpt<A>::upload(const float* host) {
  // On the Context's stream, so that a failed copy is recorded there like every other op.
  copy_to_device_async(ctx_, master_, host, numel() * sizeof(float));
  if constexpr (!std::is_same_v<A, float>) cu::convert(ctx_, compute_, master_, numel());
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
void GpuGpt<A>::tp_all_reduce(void* data, size_t count, DeviceDType type, ReduceOp op) {
#if LATTICE_HAVE_NCCL
  if (Status s = all_reduce_on_stream(*tp_, data, count, type, op, ctx_.stream()); !s)
    ctx_.record_error("tensor-parallel all-reduce: " + s.message());
#else
  (void)data, (void)count, (void)type, (void)op;
  ctx_.record_error("tensor parallelism on GPUs needs NCCL and MPI in the build");
#endif
}

template <typename A>
void GpuGpt<A>::tp_sum_rows(A* data) {
  if (t_ == 1) return;
  const DeviceDType type = std::is_same_v<A, float>      ? DeviceDType::kFloat32
                           : std::is_same_v<A, cu::fp16> ? DeviceDType::kFloat16
                                                         : DeviceDType::kBFloat16;
  tp_all_reduce(data, static_cast<size_t>(N_) * C_, type, ReduceOp::kSum);
}

template <typename A>
void GpuGpt<A>::hidden_dropout(A* data, int layer, DropoutSite site) {
  if (p_hidden_ == 0) return;
  const size_t n = static_cast<size_t>(N_) * C_;
  cu::residual_dropout_forward(ctx_, data, nullptr, data, n, p_hidden_, key(layer, site));
}

template <typename A>
const A* GpuGpt<A>::hidden_dropout_backward(A* out, const A* dout, int layer, DropoutSite site) {
  if (p_hidden_ == 0) return dout;
  const size_t n = static_cast<size_t>(N_) * C_;
  cu::dropout_backward(ctx_, out, dout, n, p_hidden_, key(layer, site));
  return out;
}

template <typename A>
void GpuGpt<A>::forward(const int32_t* tokens, const int32_t* targets, float grad_scale,
                        uint64_t dropout_seed) {
  run_forward(slots_[0], tokens, targets, grad_scale, dropout_seed);
}

template <typename A>
void GpuGpt<A>::backward(const int32_t* tokens) {
  run_backward(slots_[0], tokens);
}

template <typename A>
void GpuGpt<A>::forward_slot(int s, float grad_scale, uint64_t dropout_seed) {
  run_forward(slots_[s], slots_[s].tokens, slots_[s].targets, grad_scale, dropout_seed);
}

template <typename A>
void GpuGpt<A>::backward_slot(int s) {
  run_backward(slots_[s], slots_[s].tokens);
}

template <typename A>
void GpuGpt<A>::run_forward(GpuSlot<A>& a, const int32_t* tokens, const int32_t* targets,
                            float grad_scale, uint64_t dropout_seed) {
  const int B = B_, T = T_, C = C_, N = N_;
  const bool training = grad_scale > 0;
  a.p_hidden = training ? config_.hidden_dropout : 0.0f;
  a.p_attention = training ? config_.attention_dropout : 0.0f;
  a.dropout_seed = dropout_seed;
  p_hidden_ = a.p_hidden;
  p_attention_ = a.p_attention;
  dropout_seed_ = a.dropout_seed;
  const size_t NC = static_cast<size_t>(N) * C;
  const auto& t = layout_.tensors();
  A* P = compute_;
  // Row-parallel biases enter the sum once: tp_rank 0 adds them in its GEMM.
  const bool adds_bias = tp_rank_ == 0;
  if (pre()) {
    const A* wte = P + t[layout_.word_embedding_index()].offset;
    const A* wpe = P + t[layout_.position_embedding_index()].offset;
    if (t_ == 1) {
      cu::embedding_forward(ctx_, a.residual, tokens, wte, wpe, B, T, C);
    } else {
      // Vocabulary-parallel: this rank's rows (zero for other ranks' tokens), summed over TP;
      // then the position embedding once, as a (T*C) bias on each of the B sequences (wpe's
      // first T rows are contiguous).
      const int v0 = tp_rank_ * Vt_;
      cu::embedding_forward(ctx_, a.residual, tokens, wte, nullptr, B, T, C, v0, v0 + Vt_);
      tp_sum_rows(a.residual);
      cu::add_bias(ctx_, a.residual, wpe, B, T * C);
    }
    hidden_dropout(a.residual, -1, DropoutSite::kEmbedding);
  }  // else residual[0] holds the previous stage's output (the caller queued it)
  for (int l = 0; l < L_; l++) {
    const LayerParams<A> w = layout_.layer(P, l);
    const GpuLayerActs<A>& la = layer_acts(a, l);
    A* x = a.residual + l * NC;
    if (l == 0)
      cu::layernorm_forward(ctx_, la.ln1, la.ln1_mean, la.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
    else  // x = the previous layer's res_mid + its MLP output, then LayerNorm
      cu::residual_layernorm_forward(ctx_, x, la.ln1, la.ln1_mean, la.ln1_rstd,
                                     layer_acts(a, l - 1).res_mid, fc2_out_, w.ln1_w, w.ln1_b, N,
                                     C);
    layer_forward_from_ln1(l, la, x);
    cu::matmul_forward(ctx_, fc2_out_, nullptr, la.gelu, w.fc2_w, adds_bias ? w.fc2_b : nullptr, N,
                       Ft_, C, false);
    tp_sum_rows(fc2_out_);
    hidden_dropout(fc2_out_, l, DropoutSite::kFc2);  // added by the next LayerNorm (or add)
  }
  A* out = a.residual + L_ * NC;
  if (!post()) {
    // The stage's output residual[L] = res_mid + MLP output. The op list has no plain add for
    // both compute types, so the fused residual LayerNorm makes it and its normalised output
    // (into scratch, with the last layer's ln2 weights) is discarded: one extra (N, C) pass.
    const LayerParams<A> w = layout_.layer(P, L_ - 1);
    cu::residual_layernorm_forward(ctx_, out, d_c_, stats_scratch_, stats_scratch_ + N,
                                   layer_acts(a, L_ - 1).res_mid, fc2_out_, w.ln2_w, w.ln2_b, N, C);
    return;
  }
  const A* wte = P + t[layout_.word_embedding_index()].offset;
  const A* lnf_w = P + t[layout_.final_norm_index()].offset;
  cu::residual_layernorm_forward(ctx_, out, a.lnf, a.lnf_mean, a.lnf_rstd,
                                 layer_acts(a, L_ - 1).res_mid, fc2_out_, lnf_w, lnf_w + C, N, C);
  // LM head tied to the word embedding (this rank's Vt rows; a later stage's copy of it); the
  // cross-entropy reads fp32 logits (over the padded vocabulary, as the CPU model and
  // Megatron).
  if constexpr (std::is_same_v<A, float>) {
    cu::matmul_forward(ctx_, a.logits_f32, nullptr, a.lnf, wte, nullptr, N, C, Vt_, false);
  } else {
    cu::matmul_forward(ctx_, a.logits, nullptr, a.lnf, wte, nullptr, N, C, Vt_, false);
    cu::convert(ctx_, a.logits_f32, a.logits, static_cast<size_t>(N) * Vt_);
  }
  cross_entropy(a, targets, grad_scale);
}

template <typename A>
void GpuGpt<A>::layer_forward_from_ln1(int l, const GpuLayerActs<A>& la, const A* x) {
  const int B = B_, T = T_, C = C_, N = N_;
  const LayerParams<A> w = layout_.layer(compute_, l);
  const bool adds_bias = tp_rank_ == 0;  // row-parallel biases enter the sum once
  // Column-parallel QKV: this rank's heads [tp_rank * Ht, +Ht) of NH.
  cu::matmul_forward(ctx_, la.qkv, nullptr, la.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Ct_, false);
  cu::attention_forward(ctx_, la.atty, la.lse, la.qkv, B, T, Ct_, Ht_, p_attention_,
                        key(l, DropoutSite::kAttention), tp_rank_ * Ht_, NH_);
  // Row-parallel projection: partial sums over this rank's heads, summed over TP.
  cu::matmul_forward(ctx_, proj_out_, nullptr, la.atty, w.proj_w, adds_bias ? w.proj_b : nullptr, N,
                     Ct_, C, false);
  tp_sum_rows(proj_out_);
  hidden_dropout(proj_out_, l, DropoutSite::kProjection);  // res_mid = x + dropout(proj)
  cu::residual_layernorm_forward(ctx_, la.res_mid, la.ln2, la.ln2_mean, la.ln2_rstd, x, proj_out_,
                                 w.ln2_w, w.ln2_b, N, C);
  cu::matmul_forward(ctx_, la.gelu, la.fc1, la.ln2, w.fc1_w, w.fc1_b, N, C, Ft_, true);
}

// Note [GPU recomputation]: with --recompute-granularity full a recomputed layer keeps only
// residual[l] (its input, already kept for every layer); backward re-runs the forward of the
// layer's group (RecomputePlan: consecutive layers, max_group of them in the shared scratch)
// just before the group's top layer's backward. Each layer's ln1 is a plain LayerNorm of the
// stored residual[l]: the fused residual LayerNorm of the forward normalises the stored
// (rounded) sum, so in bf16 / fp16 too the recomputed ln1 and its statistics are the
// forward's, bit for bit. FC2 is not re-run: its output went into residual[l+1], which is kept.
// The slot's dropout seed and p (set by run_backward) give the forward's masks, and every TP
// rank recomputes, so the projection's all-reduce stays matched across the group.
template <typename A>
void GpuGpt<A>::recompute_group(const GpuSlot<A>& a, int first, int last) {
  const size_t NC = static_cast<size_t>(N_) * C_;
  for (int l = first; l < last; l++) {
    const LayerParams<A> w = layout_.layer(compute_, l);
    const GpuLayerActs<A>& la = layer_acts(a, l);
    const A* x = a.residual + l * NC;
    cu::layernorm_forward(ctx_, la.ln1, la.ln1_mean, la.ln1_rstd, x, w.ln1_w, w.ln1_b, N_, C_);
    layer_forward_from_ln1(l, la, x);
  }
}

template <typename A>
void GpuGpt<A>::cross_entropy(GpuSlot<A>& a, const int32_t* targets, float grad_scale) {
  const int N = N_;
  float* dlogits = grad_scale > 0 ? a.logits_f32 : nullptr;
  if (t_ == 1) {
    cu::softmax_cross_entropy(ctx_, a.losses, dlogits, a.logits_f32, targets, N, Vp_, grad_scale);
    return;
  }
  // Vocabulary-parallel, as the CPU model's head_forward: the row max, then the sum of
  // exponentials and the target's logit, each reduced over TP; the (N, Vp) logits are never
  // gathered.
  const int v0 = tp_rank_ * Vt_;
  const size_t n = static_cast<size_t>(N);
  cu::cross_entropy_shard_max(ctx_, row_max_, a.logits_f32, N, Vt_);
  tp_all_reduce(row_max_, n, DeviceDType::kFloat32, ReduceOp::kMax);
  cu::cross_entropy_shard_sums(ctx_, sum_exp_, target_logit_, a.logits_f32, row_max_, targets, v0,
                               N, Vt_);
  tp_all_reduce(sum_exp_, n, DeviceDType::kFloat64, ReduceOp::kSum);
  tp_all_reduce(target_logit_, n, DeviceDType::kFloat32, ReduceOp::kSum);
  cu::cross_entropy_shard_finish(ctx_, a.losses, dlogits, a.logits_f32, row_max_, sum_exp_,
                                 target_logit_, targets, v0, N, Vt_, grad_scale);
}

template <typename A>
void GpuGpt<A>::run_backward(GpuSlot<A>& a, const int32_t* tokens) {
  const int B = B_, T = T_, C = C_, N = N_;
  const size_t NC = static_cast<size_t>(N) * C;
  const auto& t = layout_.tensors();
  A* P = compute_;
  float* G = grads_;
  p_hidden_ = a.p_hidden;  // the masks of this slot's forward
  p_attention_ = a.p_attention;
  dropout_seed_ = a.dropout_seed;
  if (post()) {
    const size_t wte_off = t[layout_.word_embedding_index()].offset;
    const size_t lnf_off = t[layout_.final_norm_index()].offset;
    // Head: dlnf = dlogits wte (a partial sum over the vocabulary slices: summed over TP);
    // dwte += dlogits^T lnf (this rank's rows); then the final LayerNorm.
    const A* dlogits;
    if constexpr (std::is_same_v<A, float>) {
      dlogits = a.logits_f32;
    } else {
      cu::convert(ctx_, a.logits, a.logits_f32, static_cast<size_t>(N) * Vt_);
      dlogits = a.logits;
    }
    cu::matmul_backward(ctx_, d_c_, G + wte_off, nullptr, dlogits, a.lnf, P + wte_off, N, C, Vt_);
    tp_sum_rows(d_c_);
    zero_async(ctx_, d_res_, NC * sizeof(A));
    cu::layernorm_backward(ctx_, d_res_, G + lnf_off, G + lnf_off + C, d_c_, a.residual + L_ * NC,
                           P + lnf_off, a.lnf_mean, a.lnf_rstd, N, C);
    // The final norm and, on a later stage, the tied head's copy of the word embedding.
    notify(layout_.final_norm_index(), static_cast<int>(t.size()));
  } else {
    copy_device_async(ctx_, d_res_, a.output_grad, NC * sizeof(A));
  }
  for (int l = L_ - 1; l >= 0; l--) {
    const LayerParams<A> w = layout_.layer(P, l);
    const LayerParams<float> g = layout_.layer(G, l);
    if (recompute_.recomputed(l)) {
      const int first = recompute_.group_start[l];
      if (l == L_ - 1 || recompute_.group_start[l + 1] != first) recompute_group(a, first, l + 1);
    }
    const GpuLayerActs<A>& la = layer_acts(a, l);
    const A* x = a.residual + l * NC;
    // MLP block: out = res_mid + dropout(fc2(gelu(fc1(ln2(res_mid))))); d_res_ holds d out
    // (the same on every TP rank, so fc2's bias gradient is whole everywhere).
    const A* d_fc2 = hidden_dropout_backward(d_c_, d_res_, l, DropoutSite::kFc2);
    cu::matmul_backward(ctx_, d_f_, g.fc2_w, g.fc2_b, d_fc2, la.gelu, w.fc2_w, N, Ft_, C);
    cu::gelu_backward(ctx_, d_f_, la.fc1, d_f_, static_cast<size_t>(N) * Ft_);
    cu::matmul_backward(ctx_, d_c_, g.fc1_w, g.fc1_b, d_f_, la.ln2, w.fc1_w, N, C, Ft_);
    tp_sum_rows(d_c_);  // d ln2: every rank's MLP slice contributes
    cu::layernorm_backward(ctx_, d_res_, g.ln2_w, g.ln2_b, d_c_, la.res_mid, w.ln2_w, la.ln2_mean,
                           la.ln2_rstd, N, C);
    // Attention block: res_mid = x + dropout(proj(attention(qkv(ln1(x))))); d_res_ holds
    // d res_mid.
    const A* d_proj = hidden_dropout_backward(d_c_, d_res_, l, DropoutSite::kProjection);
    cu::matmul_backward(ctx_, d_atty_, g.proj_w, g.proj_b, d_proj, la.atty, w.proj_w, N, Ct_, C);
    cu::attention_backward(ctx_, d_qkv_, d_atty_, la.qkv, la.atty, la.lse, attention_ws_, B, T, Ct_,
                           Ht_, p_attention_, key(l, DropoutSite::kAttention), tp_rank_ * Ht_, NH_);
    cu::matmul_backward(ctx_, d_c_, g.qkv_w, g.qkv_b, d_qkv_, la.ln1, w.qkv_w, N, C, 3 * Ct_);
    tp_sum_rows(d_c_);  // d ln1: every rank's heads contribute
    cu::layernorm_backward(ctx_, d_res_, g.ln1_w, g.ln1_b, d_c_, x, w.ln1_w, la.ln1_mean,
                           la.ln1_rstd, N, C);
    notify(layout_.layer_index(l), layout_.layer_index(l) + ParamLayout::kPerLayer);
  }
  if (!pre()) {  // d_res_ is d residual[0]: the previous stage's output gradient
    copy_device_async(ctx_, a.input_grad, d_res_, NC * sizeof(A));
    return;
  }
  const size_t wte_off = t[layout_.word_embedding_index()].offset;
  const size_t wpe_off = t[layout_.position_embedding_index()].offset;
  hidden_dropout_backward(d_res_, d_res_, -1, DropoutSite::kEmbedding);
  const int v0 = tp_rank_ * Vt_;
  cu::embedding_backward(ctx_, G + wte_off, G + wpe_off, d_res_, tokens, B, T, C, v0, v0 + Vt_);
  notify(layout_.word_embedding_index(), layout_.position_embedding_index() + 1);
}

template class GpuGpt<float>;
template class GpuGpt<cu::bf16>;
template class GpuGpt<cu::fp16>;

}  // namespace lattice::gpu
