// One transformer layer forward and backward, with Megatron's tensor parallelism: QKV and FC1
// are column-parallel (each rank computes its heads / its slice of the MLP), the attention
// projection and FC2 are row-parallel (partial sums reduced over the TP group, bias added
// after). With sequence parallelism the residual stream, LayerNorms and dropout hold only
// this rank's rows; an all-gather feeds the column-parallel layers and a reduce-scatter
// replaces the all-reduce. docs/design-notes.md#tensor-parallelism.
#include <algorithm>
#include <cstring>

#include "core/host_memory.h"
#include "lattice/kernels.h"
#include "model/gpt.h"

namespace lattice {

namespace k = kernels;

namespace {}

template <typename T>
void GptModel<T>::check(const Status& s) {
  if (!s) tp_->abort("tensor-parallel communication failed: " + s.message(), 1);
}

template <typename T>
const T* GptModel<T>::gather_rows(const T* held, T* full) {
  if (!shard_.sequence_parallel || dims_.t == 1) return held;
  ScopedOp op(&profiler_, Op::kTensorParallelComm);
  const std::vector<size_t> counts(dims_.t, static_cast<size_t>(dims_.R) * dims_.C);
  check(tp_->all_gather(held, full, counts, dtype_of<T>()));
  return full;
}

template <typename T>
void GptModel<T>::reduce_rows(T* partial_full, T* held) {
  ScopedOp op(&profiler_, Op::kTensorParallelComm);
  const size_t RC = static_cast<size_t>(dims_.R) * dims_.C;
  if (shard_.sequence_parallel) {
    const std::vector<size_t> counts(dims_.t, RC);
    check(tp_->reduce_scatter(partial_full, held, counts, dtype_of<T>()));
  } else {
    check(tp_->all_reduce(partial_full, RC, dtype_of<T>(), ReduceOp::kSum));
    if (held != partial_full) std::copy_n(partial_full, RC, held);
  }
}

template <typename T>
void GptModel<T>::row_parallel_forward(T* out, const T* inp, const T* weight, const T* bias,
                                       int K) {
  const ChunkDims& d = dims_;
  if (d.t == 1) {
    ScopedOp op(&profiler_, Op::kMatmulForward);
    k::matmul_forward(out, inp, weight, bias, d.N, K, d.C);
    return;
  }
  {
    ScopedOp op(&profiler_, Op::kMatmulForward);
    k::matmul_forward<T>(full_, inp, weight, nullptr, d.N, K, d.C);
  }
  reduce_rows(full_, out);
  k::add_bias(out, bias, d.R, d.C);
}

template <typename T>
void GptModel<T>::notify_ready(int first, int last) {
  if (!final_backward_ || first >= last) return;
  const auto& tensors = layout_.tensors();
  if (shard_.sequence_parallel && dims_.t > 1) {
    // Sequence-parallel LayerNorm and bias gradients saw only this rank's rows: sum them over
    // the TP group in one call.
    size_t n = 0;
    for (int i = first; i < last; i++)
      if (tensors[i].sequence_parallel_grad) n += tensors[i].numel;
    if (n > 0) {
      ScopedOp op(&profiler_, Op::kTensorParallelComm);
      host_grow(pack_, n, MemoryCategory::kWorkspace);
      T* p = pack_.data();
      for (int i = first; i < last; i++)
        if (tensors[i].sequence_parallel_grad)
          p = std::copy_n(grads_.data() + tensors[i].offset, tensors[i].numel, p);
      check(tp_->all_reduce(pack_.data(), n, dtype_of<T>(), ReduceOp::kSum));
      p = pack_.data();
      for (int i = first; i < last; i++)
        if (tensors[i].sequence_parallel_grad) {
          std::copy_n(p, tensors[i].numel, grads_.data() + tensors[i].offset);
          p += tensors[i].numel;
        }
    }
  }
  if (grads_ready_) grads_ready_(first, last);
}

template <typename T>
void GptModel<T>::layer_forward(int l, const LayerActivations<T>& la, const T* x, T* out,
                                bool training) {
  const ChunkDims& d = dims_;
  const LayerParams<T> w = layout_.layer(params_.data(), l);
  const int layer = shard_.layer_begin + l;
  const float p_hidden = training ? config_.hidden_dropout : 0.0f;
  const float p_attn = training ? config_.attention_dropout : 0.0f;
  const size_t RC = static_cast<size_t>(d.R) * d.C, NF = static_cast<size_t>(d.N) * d.Ft;
  {
    ScopedOp op(&profiler_, Op::kLayerNorm);
    k::layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, x, w.ln1_w, w.ln1_b, d.R, d.C);
  }
  const T* ln1 = gather_rows(la.ln1, gathered_);
  {
    ScopedOp op(&profiler_, Op::kMatmulForward);
    k::matmul_forward(la.qkv, ln1, w.qkv_w, w.qkv_b, d.N, d.C, 3 * d.Ct);
  }
  {
    ScopedOp op(&profiler_, Op::kAttentionForward);
    k::attention_forward(la.atty, la.probs, la.qkv, d.B, d.T, d.Ct, d.Ht, p_attn,
                         dropout_site_key(current_seed_, layer, DropoutSite::kAttention),
                         attention_ws_.data(), d.tp_rank * d.Ht, d.NH);
  }
  row_parallel_forward(fwd_c_, la.atty, w.proj_w, w.proj_b, d.Ct);
  {
    ScopedOp op(&profiler_, Op::kResidualDropout);
    k::residual_dropout_forward<T>(la.res_mid, x, fwd_c_, RC, p_hidden,
                                   dropout_site_key(current_seed_, layer, DropoutSite::kProjection),
                                   d.row0 * d.C);
  }
  {
    ScopedOp op(&profiler_, Op::kLayerNorm);
    k::layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.res_mid, w.ln2_w, w.ln2_b, d.R, d.C);
  }
  const T* ln2 = gather_rows(la.ln2, gathered_);
  {
    ScopedOp op(&profiler_, Op::kMatmulForward);
    k::matmul_forward(la.fc1, ln2, w.fc1_w, w.fc1_b, d.N, d.C, d.Ft);
  }
  {
    ScopedOp op(&profiler_, Op::kGelu);
    k::gelu_forward(la.gelu, la.fc1, NF);
  }
  row_parallel_forward(fwd_c_, la.gelu, w.fc2_w, w.fc2_b, d.Ft);
  {
    ScopedOp op(&profiler_, Op::kResidualDropout);
    k::residual_dropout_forward<T>(out, la.res_mid, fwd_c_, RC, p_hidden,
                                   dropout_site_key(current_seed_, layer, DropoutSite::kFc2),
                                   d.row0 * d.C);
  }
}

template <typename T>
void GptModel<T>::layer_backward(int l, const LayerActivations<T>& la, const T* x) {
  const ChunkDims& d = dims_;
  const LayerParams<T> w = layout_.layer(params_.data(), l);
  const LayerParams<T> g = layout_.layer(grads_.data(), l);
  const int layer = shard_.layer_begin + l;
  const float p_hidden = config_.hidden_dropout, p_attn = config_.attention_dropout;
  const size_t RC = static_cast<size_t>(d.R) * d.C, NF = static_cast<size_t>(d.N) * d.Ft;
  const bool sp = shard_.sequence_parallel && d.t > 1;
  const uint64_t attn_key = dropout_site_key(current_seed_, layer, DropoutSite::kAttention);
  if (recompute_.selective) {
    // Selective recomputation: the attention probabilities were not kept; recompute them
    // (d_atty_ is free until the projection's backward and takes the unused output).
    ScopedOp op(&profiler_, Op::kAttentionForward);
    k::attention_forward(d_atty_, la.probs, la.qkv, d.B, d.T, d.Ct, d.Ht, p_attn, attn_key,
                         attention_ws_.data(), d.tp_rank * d.Ht, d.NH);
  }
  // MLP block: out = res_mid + dropout(fc2(gelu(fc1(ln2(res_mid))))).
  {
    ScopedOp op(&profiler_, Op::kResidualDropout);
    k::dropout_backward(d_c_a_, d_residual_, RC, p_hidden,
                        dropout_site_key(current_seed_, layer, DropoutSite::kFc2), d.row0 * d.C);
  }
  const T* dout = gather_rows(d_c_a_, full_);
  {
    ScopedOp op(&profiler_, Op::kMatmulBackward);
    k::matmul_backward(d_f_, g.fc2_w, sp ? nullptr : g.fc2_b, dout, la.gelu, w.fc2_w, d.N, d.Ft,
                       d.C);
    // Sequence parallelism adds the bias to this rank's rows only: a partial gradient.
    if (sp) k::matmul_backward<T>(nullptr, nullptr, g.fc2_b, d_c_a_, nullptr, nullptr, d.R, 0, d.C);
  }
  {
    ScopedOp op(&profiler_, Op::kGelu);
    k::gelu_backward(d_f_, la.fc1, d_f_, NF);
  }
  const T* ln2 = gather_rows(la.ln2, gathered_);
  {
    ScopedOp op(&profiler_, Op::kMatmulBackward);
    k::matmul_backward(d.t == 1 ? d_c_b_ : full_, g.fc1_w, g.fc1_b, d_f_, ln2, w.fc1_w, d.N, d.C,
                       d.Ft);
  }
  if (d.t > 1) reduce_rows(full_, d_c_b_);
  {
    ScopedOp op(&profiler_, Op::kLayerNorm);
    k::layernorm_backward(d_residual_, g.ln2_w, g.ln2_b, d_c_b_, la.res_mid, w.ln2_w, la.ln2_mean,
                          la.ln2_rstd, d.R, d.C);
  }
  // Attention block: res_mid = x + dropout(proj(attention(qkv(ln1(x))))).
  {
    ScopedOp op(&profiler_, Op::kResidualDropout);
    k::dropout_backward(d_c_a_, d_residual_, RC, p_hidden,
                        dropout_site_key(current_seed_, layer, DropoutSite::kProjection),
                        d.row0 * d.C);
  }
  dout = gather_rows(d_c_a_, full_);
  {
    ScopedOp op(&profiler_, Op::kMatmulBackward);
    k::matmul_backward(d_atty_, g.proj_w, sp ? nullptr : g.proj_b, dout, la.atty, w.proj_w, d.N,
                       d.Ct, d.C);
    if (sp)
      k::matmul_backward<T>(nullptr, nullptr, g.proj_b, d_c_a_, nullptr, nullptr, d.R, 0, d.C);
  }
  {
    ScopedOp op(&profiler_, Op::kAttentionBackward);
    k::attention_backward(d_qkv_, d_atty_, la.qkv, la.probs, d.B, d.T, d.Ct, d.Ht, p_attn, attn_key,
                          attention_ws_.data(), d.tp_rank * d.Ht, d.NH);
  }
  const T* ln1 = gather_rows(la.ln1, gathered_);
  {
    ScopedOp op(&profiler_, Op::kMatmulBackward);
    k::matmul_backward(d.t == 1 ? d_c_a_ : full_, g.qkv_w, g.qkv_b, d_qkv_, ln1, w.qkv_w, d.N, d.C,
                       3 * d.Ct);
  }
  if (d.t > 1) reduce_rows(full_, d_c_a_);
  {
    ScopedOp op(&profiler_, Op::kLayerNorm);
    k::layernorm_backward(d_residual_, g.ln1_w, g.ln1_b, d_c_a_, x, w.ln1_w, la.ln1_mean,
                          la.ln1_rstd, d.R, d.C);
  }
}

#define LATTICE_GPT_LAYER(T)                                                                     \
  template void GptModel<T>::check(const Status&);                                               \
  template const T* GptModel<T>::gather_rows(const T*, T*);                                      \
  template void GptModel<T>::reduce_rows(T*, T*);                                                \
  template void GptModel<T>::row_parallel_forward(T*, const T*, const T*, const T*, int);        \
  template void GptModel<T>::notify_ready(int, int);                                             \
  template void GptModel<T>::layer_forward(int, const LayerActivations<T>&, const T*, T*, bool); \
  template void GptModel<T>::layer_backward(int, const LayerActivations<T>&, const T*);
LATTICE_GPT_LAYER(float)
LATTICE_GPT_LAYER(double)
#undef LATTICE_GPT_LAYER

}  // namespace lattice
