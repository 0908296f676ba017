// GptModel (gpt.h): the forward and backward passes of GPT-2 over a device's op list
// (device/ops.h). The residual adds are fused into the LayerNorm that follows them
// (residual_layernorm_forward, as llm.c): layer l's input residual[l] is made by layer l's first
// LayerNorm from layer l-1's res_mid and MLP output, and the final LayerNorm makes residual[L].
// Backward accumulates: parameter gradients +=, the residual stream's gradient d_res_ by every
// LayerNorm backward. A pipeline stage's chunk holds a layer range; without `pre` its residual[0]
// is the received input, without `post` its output residual[L] is made by an explicit residual add.
// Tensor parallelism (Megatron's; helpers in gpt.cpp): QKV and FC1 column-parallel, the attention
// projection and FC2 row-parallel with their partial outputs summed over the TP group before the
// residual add, the column-parallel layers' input gradients summed before the LayerNorm backward,
// vocabulary-parallel embedding, tied LM head and cross-entropy. A replicated term (a row-parallel
// bias, the position embedding) enters once: tp_rank 0 adds the bias inside its GEMM, the position
// embedding is added after the embedding's sum. Their gradients come from the whole (reduced)
// output gradient on every rank. Sequence parallelism (the `sp_` branches): the residual stream,
// LayerNorms and hidden dropout (mask offset row0 * C) on this rank's R rows; the LayerNorm outputs
// all-gathered (into gathered_, again in backward) before QKV, FC1 and the LM head; the
// row-parallel outputs, the column-parallel input gradients and the embedding reduce-scattered
// instead of all-reduced; each rank adds the row-parallel biases and the position embedding to its
// own rows, so their gradients (and the LayerNorms') are partial and summed over TP once the last
// micro-batch's backward has made them (notify).
//
// Note [packed sequences]: supervised fine-tuning packs several short documents into one
// sequence of T tokens (issue 24). The micro-batch then carries positions (B, T), each token's
// position in its own document (0 at a document's first token, +1 after), in its activations
// (a.positions with a.packed set; the pipeline loads them on every stage, since every layer's
// attention needs them). They replace t everywhere the model uses a position: the attention lets
// query t see keys [t - positions[t], t] only (its own document, never the one packed before
// it), RoPE rotates by positions[t] and GPT-2's learned embedding adds wpe[positions[t]]. So
// each document's tokens get the losses and gradients they would get alone (which targets count
// is the packer's and the loss's business, not the model's). Documents are contiguous, which the
// CUDA kernels rely on to skip tiles. Without packing positions_ is null and every op runs its
// plain causal path: positions 0..T-1, bit for bit the unpacked model.
#include <algorithm>
#include <type_traits>

#include "model/gpt.h"

namespace lattice {

template <typename A>
void GptModel<A>::run_forward(GptActivations<A>& a, float grad_scale, uint64_t dropout_seed) {
  const int32_t* tokens = a.tokens;
  const int B = B_, T = T_, C = C_, N = N_;
  const bool training = grad_scale > 0;
  a.p_hidden = training ? config_.hidden_dropout : 0.0f;
  a.p_attention = training ? config_.attention_dropout : 0.0f;
  a.p_lora = training ? config_.lora_dropout : 0.0f;
  a.dropout_seed = dropout_seed;
  a.grad_scale = grad_scale;
  p_hidden_ = a.p_hidden;
  p_attention_ = a.p_attention;
  p_lora_ = a.p_lora;
  dropout_seed_ = a.dropout_seed;
  packed_ = a.packed;  // under context parallelism positions_ is always set (global rows)
  positions_ = a.packed ? a.positions : cp_positions_;
  const size_t RC = static_cast<size_t>(R_) * C;
  const auto& t = layout_.tensors();
  A* P = compute_;
  if (pre()) {
    const A* wte = P + t[layout_.word_embedding_index()].offset;
    const A* wpe = layout_.at(P, layout_.position_embedding_index());  // null: RoPE or none
    // Note [image rows] (gpt_vision.cpp): image rows look up no word embedding.
    const int32_t* ids = vision_ ? a.embed_tokens : tokens;
    if (t_ == 1 && !vision_) {
      OpTimer timer(*this, Op::kEmbedding);
      ops_.embedding_forward(a.residual, ids, wte, wpe, B, T, C, 0, Vt_, positions_);
    } else if (sp_) {
      // Vocabulary-parallel, reduce-scattered to this rank's rows, which get their positions.
      const int v0 = tp_rank_ * Vt_;
      {
        OpTimer timer(*this, Op::kEmbedding);
        ops_.embedding_forward(full_, ids, wte, nullptr, B, T, C, v0, v0 + Vt_, nullptr);
      }
      reduce_rows(full_, a.residual);
      OpTimer timer(*this, Op::kEmbedding);
      if (wpe) add_position_rows(a.residual, wpe);
    } else {
      // Vocabulary-parallel: this rank's rows (zero for other ranks' tokens), summed over TP;
      // then the position embedding once, as a (T*C) bias on each of the B sequences (wpe's
      // first T rows are contiguous). (One rank with a vision tower: the same, no sum.)
      const int v0 = tp_rank_ * Vt_;
      {
        OpTimer timer(*this, Op::kEmbedding);
        ops_.embedding_forward(a.residual, ids, wte, nullptr, B, T, C, v0, v0 + Vt_, nullptr);
      }
      if (t_ > 1) tp_sum_rows(a.residual);
      OpTimer timer(*this, Op::kEmbedding);
      if (wpe && positions_)
        add_position_rows(a.residual, wpe);
      else if (wpe)
        ops_.add_bias(a.residual, wpe, B, T * C);
    }
    if (vision_) splice_images(a);
    hidden_dropout(a.residual, -1, DropoutSite::kEmbedding);
  }  // else residual[0] holds the previous stage's output (the caller queued it)
  for (int l = 0; l < L_; l++) {
    const LayerParams<A> w = layout_.layer(P, l);
    const LayerActivations<A>& la = layer_acts(a, l);
    A* x = a.residual + l * RC;
    if (l == 0)
      norm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, x, w.ln1_w, w.ln1_b);
    else  // x = the previous layer's res_mid + its MLP output, then the norm
      residual_norm_forward(x, la.ln1, la.ln1_mean, la.ln1_rstd, layer_acts(a, l - 1).res_mid,
                            fc2_out_, w.ln1_w, w.ln1_b);
    layer_forward_from_ln1(l, la, x);
    if (layout_.is_moe(l))
      moe_combine_forward(l, la, training);
    else
      row_parallel_forward(fc2_out_, la.gelu, w.fc2_w, w.fc2_b, Ft_, w.fc2_la, w.fc2_lb, l, 3);
    hidden_dropout(fc2_out_, l, DropoutSite::kFc2);  // added by the next LayerNorm (or add)
    device_.progress();  // communication in flight (pipeline sends) moves on
  }
  A* out = a.residual + L_ * RC;
  if (!post()) {
    // The stage's output residual[L] = res_mid + MLP output. The op list has no plain add for
    // both compute types, so the fused residual norm makes it and its normalised output (into
    // scratch, with the last layer's ln2 weights) is discarded: one extra (N, C) pass.
    const LayerParams<A> w = layout_.layer(P, L_ - 1);
    residual_norm_forward(out, d_c_, stats_scratch_, stats_scratch_ + N,
                          layer_acts(a, L_ - 1).res_mid, fc2_out_, w.ln2_w, w.ln2_b);
    return;
  }
  const A* head = P + t[layout_.output_index()].offset;
  residual_norm_forward(out, a.lnf, a.lnf_mean, a.lnf_rstd, layer_acts(a, L_ - 1).res_mid, fc2_out_,
                        P + t[layout_.final_norm_index()].offset,
                        layout_.at(P, layout_.final_norm_bias_index()));
  // LM head: the output layer, or tied to the word embedding (a later stage's copy of it); this
  // rank's Vt rows over all N rows; the cross-entropy reads its logits in G (over the padded
  // vocabulary, as the CPU model and Megatron).
  const A* lnf = gather_rows(a.lnf, gathered_);
  {
    OpTimer timer(*this, Op::kLmHeadForward);
    if constexpr (std::is_same_v<A, G>) {
      ops_.matmul_forward(a.logits_accum, nullptr, lnf, head, nullptr, N, C, Vt_, Epilogue::kNone);
    } else {
      ops_.matmul_forward(a.logits, nullptr, lnf, head, nullptr, N, C, Vt_, Epilogue::kNone);
      ops_.to_accum(a.logits_accum, a.logits, static_cast<size_t>(N) * Vt_);
    }
  }
  cross_entropy(a, grad_scale);
}

template <typename A>
void GptModel<A>::layer_forward_from_ln1(int l, const LayerActivations<A>& la, const A* x) {
  const int T = T_, C = C_, N = N_;
  const LayerParams<A> w = layout_.layer(compute_, l);
  // Column-parallel QKV: this rank's heads [tp_rank * Ht, +Ht) of NH (over every row: the
  // LayerNorm's rows gathered with sequence parallelism).
  const A* ln1 = gather_rows(la.ln1, gathered_);
  {
    OpTimer timer(*this, Op::kMatmulForward);
    ops_.matmul_forward(la.qkv, nullptr, ln1, w.qkv_w, w.qkv_b, N, C, Wt_, Epilogue::kNone);
  }
  lora_forward(la.qkv, ln1, w.qkv_la, w.qkv_lb, C, Wt_, l, 0);  // Note [LoRA] (param_layout.h)
  {
    OpTimer timer(*this, Op::kAttentionForward);
    if (rotary_dim_ > 0)  // queries and keys rotated in place; the attention reads them so
      ops_.rope_forward(la.qkv, rope_cos_, rope_sin_, positions_, N, T, Ht_, Gt_, HS_, rotary_dim_);
    core_attention_forward(la.atty, la.saved, la.qkv, key(l, DropoutSite::kAttention));
  }
  // Row-parallel projection: partial sums over this rank's heads, summed (or reduce-scattered)
  // over TP.
  row_parallel_forward(proj_out_, la.atty, w.proj_w, w.proj_b, Ct_, w.proj_la, w.proj_lb, l, 1);
  hidden_dropout(proj_out_, l, DropoutSite::kProjection);  // res_mid = x + dropout(proj)
  residual_norm_forward(la.res_mid, la.ln2, la.ln2_mean, la.ln2_rstd, x, proj_out_, w.ln2_w,
                        w.ln2_b);
  if (layout_.is_moe(l)) {
    moe_experts_forward(l, la, moe_input(la.ln2, gathered_));
    return;
  }
  const A* ln2 = gather_rows(la.ln2, gathered_);
  if (swiglu_) {  // FC1 makes gate | up (N, 2Ft); SwiGLU combines them
    {
      OpTimer timer(*this, Op::kMatmulForward);
      ops_.matmul_forward(la.fc1, nullptr, ln2, w.fc1_w, w.fc1_b, N, C, up_, Epilogue::kNone);
    }
    lora_forward(la.fc1, ln2, w.fc1_la, w.fc1_lb, C, up_, l, 2);
    OpTimer timer(*this, Op::kGelu);
    ops_.swiglu_forward(la.gelu, la.fc1, N, Ft_);
    return;
  }
  if (w.fc1_la) {  // the adapter joins before GELU, so GELU is not the GEMM's epilogue
    {
      OpTimer timer(*this, Op::kMatmulForward);
      ops_.matmul_forward(la.fc1, nullptr, ln2, w.fc1_w, w.fc1_b, N, C, Ft_, Epilogue::kNone);
    }
    lora_forward(la.fc1, ln2, w.fc1_la, w.fc1_lb, C, Ft_, l, 2);
    OpTimer timer(*this, Op::kGelu);
    ops_.gelu_forward(la.gelu, la.fc1, static_cast<size_t>(N) * Ft_);
    return;
  }
  OpTimer timer(*this, Op::kMatmulForward);  // FC1 with GELU as its epilogue
  ops_.matmul_forward(la.gelu, la.fc1, ln2, w.fc1_w, w.fc1_b, N, C, Ft_, Epilogue::kGelu);
}

// Note [context parallelism]: with --context-parallel-size CP > 1 a model runs T / CP rows of
// each sequence (cp_split, parallel/context_split.h: chunks r and 2 CP - 1 - r of 2 CP), the
// loader having split the micro-batch's tokens, targets and packed positions the same way. Every
// op but the core attention is row-local, so it runs on the local rows unchanged; the rows keep
// their global positions (positions_: cp_positions_, or the split document positions when
// packed), which is all the learned position embedding and RoPE need. The core attention is
// the ring over the CP group (RingAttention, parallel/ring_attention.h): keys and values travel
// round the ring, each rank's saved tensor is its queries' log-sum-exp (B, Ht, T / CP), and
// its backward sends the key/value gradients home, so every rank ends with the exact gradient
// of its own qkv rows. The ring is collective over the CP group: every rank of it runs the
// same schedule of layers (forward, the recomputation, backward), so the calls pair up. The
// token losses are the local rows'; the trainer divides by the whole batch's token count and
// sums the weights' gradients over DP x CP, so the step equals one process's. Hidden dropout
// keys its masks by global rows (cp_chunks, gpt.cpp); sequence parallelism splits a CP rank's
// rows again over TP. The ring runs on the model's device through its op list and the device's
// CP communicator (Note [ring attention on a device]); under --bf16 / --fp16 it reads and sends
// 16-bit values and merges in fp32 (Note [ring attention in 16 bits]). Not here: attention
// dropout is refused (trainer), as is an op list without the ring ops (create()).
template <typename A>
void GptModel<A>::core_attention_forward(A* out, G* saved, const A* qkv, uint64_t key) {
  if (cp_ == 1) {
    ops_.attention_forward(out, saved, qkv, attention_ws_, B_, T_, Ct_, Ht_, p_attention_, key,
                           tp_rank_ * Ht_, NH_, Gt_, positions_);
    return;
  }
  if (Status s = ring_->forward(out, saved, qkv, packed_ ? positions_ : nullptr); !s)
    record_comm_error("context-parallel ring attention", s);
}

template <typename A>
void GptModel<A>::core_attention_backward(A* dqkv, const A* dout, const A* qkv, const A* out,
                                          const G* saved, uint64_t key) {
  if (cp_ == 1) {
    ops_.attention_backward(dqkv, dout, qkv, out, saved, attention_ws_, B_, T_, Ct_, Ht_,
                            p_attention_, key, tp_rank_ * Ht_, NH_, Gt_, positions_);
    return;
  }
  if (Status s = ring_->backward(dqkv, dout, qkv, out, saved, packed_ ? positions_ : nullptr); !s)
    record_comm_error("context-parallel ring attention", s);
}

template <typename A>
size_t GptModel<A>::attention_saved_elems() const {
  if (cp_ > 1) return static_cast<size_t>(B_) * Ht_ * T_;  // the ring's log-sum-exp
  return ops_.attention_saved_elems(B_, T_, Ht_);
}

// Note [recomputation]: with --recompute-granularity full a recomputed layer keeps only
// residual[l] (its input, already kept for every layer); backward re-runs the forward of the
// layer's group (RecomputePlan: consecutive layers, max_group of them in the shared scratch)
// just before the group's top layer's backward. Each layer's ln1 is a plain LayerNorm of the
// stored residual[l]: the fused residual LayerNorm of the forward normalises the stored
// (rounded) sum, so in bf16 / fp16 too the recomputed ln1 and its statistics are the
// forward's, bit for bit. FC2 is not re-run: its output went into residual[l+1], which is kept.
// The micro-batch's dropout seed and p (set by run_backward) give the forward's masks, and every TP
// rank recomputes, so the projection's all-reduce (reduce-scatter with sequence parallelism)
// and the all-gathers stay matched across the group.
//
// Note [selective recomputation]: --recompute-granularity selective (Megatron's "core
// attention" recomputation, which drops the s^2 scores) is accepted and changes nothing: every
// device's attention keeps only its (B, Ht, T) log-sum-exps and recomputes the probabilities in
// its own backward (Note [attention keeps log-sum-exps] in kernels/cpu/attention.cpp).
template <typename A>
void GptModel<A>::recompute_group(const GptActivations<A>& a, int first, int last) {
  const size_t RC = static_cast<size_t>(R_) * C_;
  for (int l = first; l < last; l++) {
    const LayerParams<A> w = layout_.layer(compute_, l);
    const LayerActivations<A>& la = layer_acts(a, l);
    const A* x = a.residual + l * RC;
    norm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, x, w.ln1_w, w.ln1_b);
    layer_forward_from_ln1(l, la, x);
  }
}

template <typename A>
void GptModel<A>::cross_entropy(GptActivations<A>& a, float grad_scale) {
  // A target of kernels::kIgnoreIndex (an SFT masked token) gets loss 0 and a zero dlogits row
  // from every kernel below, so it adds nothing to the loss or to any gradient.
  const int32_t* targets = a.targets;
  const int N = N_;
  G* dlogits = grad_scale > 0 ? a.logits_accum : nullptr;
  if (t_ == 1) {
    OpTimer timer(*this, Op::kCrossEntropy);
    ops_.softmax_cross_entropy(a.losses, dlogits, a.logits_accum, targets, N, Vp_, grad_scale);
    return;
  }
  // Vocabulary-parallel (Megatron's): the row max, then the sum of
  // exponentials and the target's logit, each reduced over TP; the (N, Vp) logits are never
  // gathered.
  const int v0 = tp_rank_ * Vt_;
  const size_t n = static_cast<size_t>(N);
  {
    OpTimer timer(*this, Op::kCrossEntropy);
    ops_.cross_entropy_shard_max(row_max_, a.logits_accum, N, Vt_);
  }
  tp_all_reduce(row_max_, n, dtype_of<G>(), ReduceOp::kMax);
  {
    OpTimer timer(*this, Op::kCrossEntropy);
    ops_.cross_entropy_shard_sums(sum_exp_, target_logit_, a.logits_accum, row_max_, targets, v0, N,
                                  Vt_);
  }
  tp_all_reduce(sum_exp_, n, DType::kFloat64, ReduceOp::kSum);
  tp_all_reduce(target_logit_, n, dtype_of<G>(), ReduceOp::kSum);
  OpTimer timer(*this, Op::kCrossEntropy);
  ops_.cross_entropy_shard_finish(a.losses, dlogits, a.logits_accum, row_max_, sum_exp_,
                                  target_logit_, targets, v0, N, Vt_, grad_scale);
}

template <typename A>
void GptModel<A>::run_backward(GptActivations<A>& a) {
  const int32_t* tokens = a.tokens;
  const int B = B_, T = T_, C = C_, N = N_;
  const size_t RC = static_cast<size_t>(R_) * C;
  const auto& t = layout_.tensors();
  A* P = compute_;
  G* grads = grads_;
  // Where a column-parallel layer's input gradient (N, C) goes before reduce_rows sums it into
  // d_c_ (R, C): in place without sequence parallelism.
  A* d_col = sp_ ? full_ : d_c_;
  p_hidden_ = a.p_hidden;  // the masks of this micro-batch's forward
  p_attention_ = a.p_attention;
  p_lora_ = a.p_lora;
  dropout_seed_ = a.dropout_seed;
  packed_ = a.packed;  // under context parallelism positions_ is always set (global rows)
  positions_ = a.packed ? a.positions : cp_positions_;
  if (post()) {
    const size_t head_off = t[layout_.output_index()].offset;
    const size_t lnf_off = t[layout_.final_norm_index()].offset;
    const int lnf_bias = layout_.final_norm_bias_index();
    // Head: dlnf = dlogits head (a partial sum over the vocabulary slices: summed over TP);
    // dhead += dlogits^T lnf (this rank's rows); then the final norm.
    const A* lnf = gather_rows(a.lnf, gathered_);
    {
      OpTimer timer(*this, Op::kLmHeadBackward);
      const A* dlogits;
      if constexpr (std::is_same_v<A, G>) {
        dlogits = a.logits_accum;
      } else {
        ops_.to_compute(a.logits, a.logits_accum, static_cast<size_t>(N) * Vt_);
        dlogits = a.logits;
      }
      ops_.matmul_backward(d_col, layout_.grad_at(grads, layout_.output_index()), nullptr, dlogits,
                           lnf, P + head_off, N, C, Vt_);
    }
    reduce_rows(d_col, d_c_);
    device_.zero(d_res_, RC * sizeof(A), compute());
    norm_backward(d_res_, layout_.grad_at(grads, layout_.final_norm_index()),
                  layout_.grad_at(grads, lnf_bias), d_c_, a.residual + L_ * RC, P + lnf_off,
                  a.lnf_mean, a.lnf_rstd);
    // The final norm and the head (the output layer, or a later stage's copy of the word
    // embedding).
    notify(layout_.final_norm_index(), static_cast<int>(t.size()));
  } else {
    device_.copy(d_res_, a.output_grad, RC * sizeof(A), CopyKind::kDeviceToDevice, compute());
  }
  for (int l = L_ - 1; l >= 0; l--) {
    const LayerParams<A> w = layout_.layer(P, l);
    const LayerParams<G> g = layout_.grad_layer(grads, l);  // null where frozen (LoRA)
    if (recompute_.recomputed(l)) {
      const int first = recompute_.group_start[l];
      if (l == L_ - 1 || recompute_.group_start[l + 1] != first) recompute_group(a, first, l + 1);
    }
    const LayerActivations<A>& la = layer_acts(a, l);
    const A* x = a.residual + l * RC;
    const uint64_t attention_key = key(l, DropoutSite::kAttention);
    // MLP block: out = res_mid + dropout(fc2(gelu(fc1(ln2(res_mid))))); d_res_ holds d out
    // (the same on every TP rank, so fc2's bias gradient is whole everywhere; with sequence
    // parallelism this rank's rows of it, so the bias gradient is partial).
    const A* d_fc2 = hidden_dropout_backward(d_c_, d_res_, l, DropoutSite::kFc2);
    bool d_ln2_whole = false;  // in d_c_ already (Note [expert tensor parallelism 1])
    if (layout_.is_moe(l)) {
      d_ln2_whole = moe_backward(l, la, d_fc2, d_col, a.grad_scale);
    } else {
      const A* d_fc2_rows = gather_rows(d_fc2, full_);
      {
        OpTimer timer(*this, Op::kMatmulBackward);
        ops_.matmul_backward(d_f_, g.fc2_w, sp_ ? nullptr : g.fc2_b, d_fc2_rows, la.gelu, w.fc2_w,
                             N, Ft_, C);
        lora_backward(d_f_, g.fc2_la, g.fc2_lb, d_fc2_rows, la.gelu, w.fc2_la, w.fc2_lb, Ft_, C, l,
                      3);
        if (sp_ && g.fc2_b)
          ops_.matmul_backward(nullptr, nullptr, g.fc2_b, d_fc2, nullptr, nullptr, R_, 0, C);
      }
      A* d_fc1 = swiglu_ ? d_up_ : d_f_;  // (N, up_)
      {
        OpTimer timer(*this, Op::kGelu);
        if (swiglu_)
          ops_.swiglu_backward(d_up_, la.fc1, d_f_, N, Ft_);
        else
          ops_.gelu_backward(d_f_, la.fc1, d_f_, static_cast<size_t>(N) * Ft_);
      }
      const A* ln2 = gather_rows(la.ln2, gathered_);
      {
        OpTimer timer(*this, Op::kMatmulBackward);
        ops_.matmul_backward(d_col, g.fc1_w, g.fc1_b, d_fc1, ln2, w.fc1_w, N, C, up_);
        lora_backward(d_col, g.fc1_la, g.fc1_lb, d_fc1, ln2, w.fc1_la, w.fc1_lb, C, up_, l, 2);
      }
    }
    if (!d_ln2_whole) reduce_rows(d_col, d_c_);  // d ln2: every rank's MLP slice contributes
    norm_backward(d_res_, g.ln2_w, g.ln2_b, d_c_, la.res_mid, w.ln2_w, la.ln2_mean, la.ln2_rstd);
    // Attention block: res_mid = x + dropout(proj(attention(qkv(ln1(x))))); d_res_ holds
    // d res_mid.
    const A* d_proj = hidden_dropout_backward(d_c_, d_res_, l, DropoutSite::kProjection);
    const A* d_proj_rows = gather_rows(d_proj, full_);
    {
      OpTimer timer(*this, Op::kMatmulBackward);
      ops_.matmul_backward(d_atty_, g.proj_w, sp_ ? nullptr : g.proj_b, d_proj_rows, la.atty,
                           w.proj_w, N, Ct_, C);
      lora_backward(d_atty_, g.proj_la, g.proj_lb, d_proj_rows, la.atty, w.proj_la, w.proj_lb, Ct_,
                    C, l, 1);
      if (sp_ && g.proj_b)
        ops_.matmul_backward(nullptr, nullptr, g.proj_b, d_proj, nullptr, nullptr, R_, 0, C);
    }
    {
      OpTimer timer(*this, Op::kAttentionBackward);
      core_attention_backward(d_qkv_, d_atty_, la.qkv, la.atty, la.saved, attention_key);
      if (rotary_dim_ > 0)  // back through the rotation to the QKV GEMM's output
        ops_.rope_backward(d_qkv_, rope_cos_, rope_sin_, positions_, N, T, Ht_, Gt_, HS_,
                           rotary_dim_);
    }
    const A* ln1 = gather_rows(la.ln1, gathered_);
    {
      OpTimer timer(*this, Op::kMatmulBackward);
      ops_.matmul_backward(d_col, g.qkv_w, g.qkv_b, d_qkv_, ln1, w.qkv_w, N, C, Wt_);
      lora_backward(d_col, g.qkv_la, g.qkv_lb, d_qkv_, ln1, w.qkv_la, w.qkv_lb, C, Wt_, l, 0);
    }
    reduce_rows(d_col, d_c_);  // d ln1: every rank's heads contribute
    norm_backward(d_res_, g.ln1_w, g.ln1_b, d_c_, x, w.ln1_w, la.ln1_mean, la.ln1_rstd);
    notify(layout_.layer_index(l), layout_.layer_end_index(l));
    device_.progress();  // communication in flight (pipeline, data-parallel) moves on
  }
  if (!pre()) {  // d_res_ is d residual[0]: the previous stage's output gradient
    device_.copy(a.input_grad, d_res_, RC * sizeof(A), CopyKind::kDeviceToDevice, compute());
    return;
  }
  G* d_wte = layout_.grad_at(grads, layout_.word_embedding_index());
  G* d_wpe = layout_.grad_at(grads, layout_.position_embedding_index());
  // Nothing to accumulate with frozen embeddings (LoRA, --freeze-LM) and no tower training.
  if (d_wte || d_wpe || vision_trains_) {
    hidden_dropout_backward(d_res_, d_res_, -1, DropoutSite::kEmbedding);
    const int v0 = tp_rank_ * Vt_;
    // Both gradients from every row: the rows gathered with sequence parallelism.
    const A* d_rows = gather_rows(d_res_, full_);
    if (d_wte || d_wpe) {
      OpTimer timer(*this, Op::kEmbedding);
      ops_.embedding_backward(d_wte, d_wpe, d_rows, vision_ ? a.embed_tokens : tokens, B, T, C, v0,
                              v0 + Vt_, positions_);
    }
    if (vision_trains_) vision_backward(a, d_rows);  // Note [image rows] (gpt_vision.cpp)
  }
  notify(0, layout_.pre_tensors_end());
}

template class GptModel<float>;
template class GptModel<double>;
template class GptModel<bf16>;
template class GptModel<fp16>;

}  // namespace lattice
