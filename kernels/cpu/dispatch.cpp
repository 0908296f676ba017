// The op list's entry points (lattice/kernels.h): each calls the same op in the namespace of the
// instruction set the kernels run, cpu_isa() (Note [CPU dispatch], kernels/cpu/README.md). This
// file is compiled once, for plain x86-64; the ops it calls were compiled once per ISA.
#include <algorithm>

#include "attention_workspace.h"
#include "lattice/cpu_isa.h"
#include "lattice/kernels.h"

#define LATTICE_ISA_OPS_NS generic
#include "isa_ops.h"
#undef LATTICE_ISA_OPS_NS
#define LATTICE_ISA_OPS_NS avx2
#include "isa_ops.h"
#undef LATTICE_ISA_OPS_NS
#define LATTICE_ISA_OPS_NS avx512
#include "isa_ops.h"
#undef LATTICE_ISA_OPS_NS

// Returns cpu::<isa>::op(args...) for the ISA chosen now: one predictable branch per call.
#define LATTICE_DISPATCH(op, ...)          \
  switch (cpu_isa()) {                     \
    case CpuIsa::avx512:                   \
      return cpu::avx512::op(__VA_ARGS__); \
    case CpuIsa::avx2:                     \
      return cpu::avx2::op(__VA_ARGS__);   \
    case CpuIsa::generic:                  \
      break;                               \
  }                                        \
  return cpu::generic::op(__VA_ARGS__)

namespace lattice::kernels {

int cpu_isa_vector_bytes() {
  LATTICE_DISPATCH(vector_bytes);
}

size_t attention_workspace_elems(int T, int HS) {
  return cpu::attention_layout(T, HS).size;
}
size_t attention_block_workspace_elems(int Tq, int Tk, int HS) {
  return cpu::attention_block_layout(Tq, Tk, HS).size;
}

template <typename S>
void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int C, int OC) {
  LATTICE_DISPATCH(matmul_forward<S>, out, inp, weight, bias, N, C, OC);
}
template <typename S>
void add_bias(S* out, const S* bias, int N, int OC) {
  LATTICE_DISPATCH(add_bias<S>, out, bias, N, OC);
}
template <typename S>
void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                     int N, int C, int OC) {
  LATTICE_DISPATCH(matmul_backward<S>, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

template <typename S>
void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                       int C, int vocab_begin, int vocab_end, const int32_t* positions) {
  LATTICE_DISPATCH(embedding_forward<S>, out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end,
                   positions);
}
template <typename S>
void position_embedding_forward(S* out, const S* wpe, int B, int T, int C) {
  LATTICE_DISPATCH(position_embedding_forward<S>, out, wpe, B, T, C);
}
template <typename S>
void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T, int C,
                        int vocab_begin, int vocab_end, const int32_t* positions) {
  LATTICE_DISPATCH(embedding_backward<S>, dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end,
                   positions);
}

template <typename S>
void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                       int N, int C) {
  LATTICE_DISPATCH(layernorm_forward<S>, out, mean, rstd, inp, weight, bias, N, C);
}
template <typename S>
void residual_layernorm_forward(S* residual_out, S* out, S* mean, S* rstd, const S* residual,
                                const S* x, const S* weight, const S* bias, int N, int C) {
  LATTICE_DISPATCH(residual_layernorm_forward<S>, residual_out, out, mean, rstd, residual, x,
                   weight, bias, N, C);
}
template <typename S>
void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                        const S* mean, const S* rstd, int N, int C) {
  LATTICE_DISPATCH(layernorm_backward<S>, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N,
                   C);
}

template <typename S>
void rmsnorm_forward(S* out, S* rstd, const S* inp, const S* weight, int N, int C, float eps) {
  LATTICE_DISPATCH(rmsnorm_forward<S>, out, rstd, inp, weight, N, C, eps);
}
template <typename S>
void residual_rmsnorm_forward(S* residual_out, S* out, S* rstd, const S* residual, const S* x,
                              const S* weight, int N, int C, float eps) {
  LATTICE_DISPATCH(residual_rmsnorm_forward<S>, residual_out, out, rstd, residual, x, weight, N, C,
                   eps);
}
template <typename S>
void rmsnorm_backward(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,
                      const S* rstd, int N, int C) {
  LATTICE_DISPATCH(rmsnorm_backward<S>, dinp, dweight, dout, inp, weight, rstd, N, C);
}

template <typename S>
void rope_forward(S* qkv, const S* cos, const S* sin, const int32_t* positions, int N, int T,
                  int NH, int KV, int HS, int rotary_dim) {
  LATTICE_DISPATCH(rope_forward<S>, qkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
}
template <typename S>
void rope_backward(S* dqkv, const S* cos, const S* sin, const int32_t* positions, int N, int T,
                   int NH, int KV, int HS, int rotary_dim) {
  LATTICE_DISPATCH(rope_backward<S>, dqkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
}

template <typename S>
void swiglu_forward(S* out, const S* inp, int N, int F) {
  LATTICE_DISPATCH(swiglu_forward<S>, out, inp, N, F);
}
template <typename S>
void swiglu_backward(S* dinp, const S* inp, const S* dout, int N, int F) {
  LATTICE_DISPATCH(swiglu_backward<S>, dinp, inp, dout, N, F);
}

template <typename S>
void gelu_forward(S* out, const S* inp, size_t n) {
  LATTICE_DISPATCH(gelu_forward<S>, out, inp, n);
}
template <typename S>
void gelu_backward(S* dinp, const S* inp, const S* dout, size_t n) {
  LATTICE_DISPATCH(gelu_backward<S>, dinp, inp, dout, n);
}

template <typename S>
void residual_dropout_forward(S* out, const S* residual, const S* x, size_t n, float p,
                              uint64_t key, size_t index_offset) {
  LATTICE_DISPATCH(residual_dropout_forward<S>, out, residual, x, n, p, key, index_offset);
}
template <typename S>
void dropout_backward(S* dx, const S* dout, size_t n, float p, uint64_t key, size_t index_offset) {
  LATTICE_DISPATCH(dropout_backward<S>, dx, dout, n, p, key, index_offset);
}

template <typename S>
void attention_forward(S* out, S* lse, const S* qkv, int B, int T, int C, int NH, float dropout_p,
                       uint64_t dropout_key, S* workspace, int head_offset, int total_heads,
                       int kv_heads, const int32_t* positions) {
  LATTICE_DISPATCH(attention_forward<S>, out, lse, qkv, B, T, C, NH, dropout_p, dropout_key,
                   workspace, head_offset, total_heads, kv_heads, positions);
}
template <typename S>
void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* lse, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, S* workspace,
                        int head_offset, int total_heads, int kv_heads, const int32_t* positions) {
  LATTICE_DISPATCH(attention_backward<S>, dqkv, dout, qkv, lse, B, T, C, NH, dropout_p,
                   dropout_key, workspace, head_offset, total_heads, kv_heads, positions);
}
template <typename S>
void attention_kv_forward(S* out, S* k_cache, S* v_cache, const S* qkv, const int32_t* slots,
                          const int32_t* positions, int M, int NH, int HS, int max_T, S* workspace,
                          int kv_heads) {
  LATTICE_DISPATCH(attention_kv_forward<S>, out, k_cache, v_cache, qkv, slots, positions, M, NH, HS,
                   max_T, workspace, kv_heads);
}

template <typename S>
void softmax_cross_entropy(S* losses, S* dlogits, const S* logits, const int32_t* targets, int N,
                           int V, float grad_scale) {
  LATTICE_DISPATCH(softmax_cross_entropy<S>, losses, dlogits, logits, targets, N, V, grad_scale);
}
template <typename S>
void cross_entropy_shard_max(S* row_max, const S* logits, int N, int V) {
  LATTICE_DISPATCH(cross_entropy_shard_max<S>, row_max, logits, N, V);
}
template <typename S>
void cross_entropy_shard_sums(double* sum_exp, S* target_logit, const S* logits, const S* row_max,
                              const int32_t* targets, int vocab_begin, int N, int V) {
  LATTICE_DISPATCH(cross_entropy_shard_sums<S>, sum_exp, target_logit, logits, row_max, targets,
                   vocab_begin, N, V);
}
template <typename S>
void cross_entropy_shard_finish(S* losses, S* dlogits, const S* logits, const S* row_max,
                                const double* sum_exp, const S* target_logit,
                                const int32_t* targets, int vocab_begin, int N, int V,
                                float grad_scale) {
  LATTICE_DISPATCH(cross_entropy_shard_finish<S>, losses, dlogits, logits, row_max, sum_exp,
                   target_logit, targets, vocab_begin, N, V, grad_scale);
}

template <typename S>
void adamw_update(S* param, const S* grad, S* m, S* v, size_t n, const AdamWParams& p) {
  LATTICE_DISPATCH(adamw_update<S>, param, grad, m, v, n, p);
}
template <typename S>
void adamw_update(const AdamWTensor<S>* tensors, int count, const AdamWParams& p, S grad_scale) {
  LATTICE_DISPATCH(adamw_update<S>, tensors, count, p, grad_scale);
}
template <typename S>
double sum_squares(const S* x, size_t n) {
  LATTICE_DISPATCH(sum_squares<S>, x, n);
}
template <typename S>
double sum_squares(const S* const* tensors, const size_t* sizes, int count) {
  LATTICE_DISPATCH(sum_squares<S>, tensors, sizes, count);
}
template <typename S>
void scale(S* x, size_t n, S s) {
  LATTICE_DISPATCH(scale<S>, x, n, s);
}

// Every op for float (training) and double (gradient checks).
#define LATTICE_INSTANTIATE_OPS(S)                                                                 \
  template void matmul_forward(S*, const S*, const S*, const S*, int, int, int);                   \
  template void add_bias(S*, const S*, int, int);                                                  \
  template void matmul_backward(S*, S*, S*, const S*, const S*, const S*, int, int, int);          \
  template void embedding_forward(S*, const int32_t*, const S*, const S*, int, int, int, int, int, \
                                  const int32_t*);                                                 \
  template void position_embedding_forward(S*, const S*, int, int, int);                           \
  template void embedding_backward(S*, S*, const S*, const int32_t*, int, int, int, int, int,      \
                                   const int32_t*);                                                \
  template void layernorm_forward(S*, S*, S*, const S*, const S*, const S*, int, int);             \
  template void residual_layernorm_forward(S*, S*, S*, S*, const S*, const S*, const S*, const S*, \
                                           int, int);                                              \
  template void layernorm_backward(S*, S*, S*, const S*, const S*, const S*, const S*, const S*,   \
                                   int, int);                                                      \
  template void gelu_forward(S*, const S*, size_t);                                                \
  template void gelu_backward(S*, const S*, const S*, size_t);                                     \
  template void residual_dropout_forward(S*, const S*, const S*, size_t, float, uint64_t, size_t); \
  template void dropout_backward(S*, const S*, size_t, float, uint64_t, size_t);                   \
  template void attention_forward(S*, S*, const S*, int, int, int, int, float, uint64_t, S*, int,  \
                                  int, int, const int32_t*);                                       \
  template void attention_backward(S*, const S*, const S*, const S*, int, int, int, int, float,    \
                                   uint64_t, S*, int, int, int, const int32_t*);                   \
  template void attention_kv_forward(S*, S*, S*, const S*, const int32_t*, const int32_t*, int,    \
                                     int, int, int, S*, int);                                      \
  template void rmsnorm_forward(S*, S*, const S*, const S*, int, int, float);                      \
  template void residual_rmsnorm_forward(S*, S*, S*, const S*, const S*, const S*, int, int,       \
                                         float);                                                   \
  template void rmsnorm_backward(S*, S*, const S*, const S*, const S*, const S*, int, int);        \
  template void rope_forward(S*, const S*, const S*, const int32_t*, int, int, int, int, int,      \
                             int);                                                                 \
  template void rope_backward(S*, const S*, const S*, const int32_t*, int, int, int, int, int,     \
                              int);                                                                \
  template void swiglu_forward(S*, const S*, int, int);                                            \
  template void swiglu_backward(S*, const S*, const S*, int, int);                                 \
  template void softmax_cross_entropy(S*, S*, const S*, const int32_t*, int, int, float);          \
  template void cross_entropy_shard_max(S*, const S*, int, int);                                   \
  template void cross_entropy_shard_sums(double*, S*, const S*, const S*, const int32_t*, int,     \
                                         int, int);                                                \
  template void cross_entropy_shard_finish(S*, S*, const S*, const S*, const double*, const S*,    \
                                           const int32_t*, int, int, int, float);                  \
  template void adamw_update(S*, const S*, S*, S*, size_t, const AdamWParams&);                    \
  template void adamw_update(const AdamWTensor<S>*, int, const AdamWParams&, S);                   \
  template double sum_squares(const S*, size_t);                                                   \
  template double sum_squares(const S* const*, const size_t*, int);                                \
  template void scale(S*, size_t, S);
LATTICE_INSTANTIATE_OPS(float)
LATTICE_INSTANTIATE_OPS(double)
#undef LATTICE_INSTANTIATE_OPS

// Ring attention's blocks (attention_block.cpp), float and double.
template <typename S>
void attention_block_forward(S* out, S* lse, const S* qkv, const S* kv, const AttentionBlock& block,
                             S* workspace) {
  LATTICE_DISPATCH(attention_block_forward<S>, out, lse, qkv, kv, block, workspace);
}
template <typename S>
void attention_block_backward(S* dqkv, S* dkv, const S* dout, const S* delta, const S* lse,
                              const S* qkv, const S* kv, const AttentionBlock& block,
                              S* workspace) {
  LATTICE_DISPATCH(attention_block_backward<S>, dqkv, dkv, dout, delta, lse, qkv, kv, block,
                   workspace);
}
template void attention_block_forward(float*, float*, const float*, const float*,
                                      const AttentionBlock&, float*);
template void attention_block_forward(double*, double*, const double*, const double*,
                                      const AttentionBlock&, double*);
template void attention_block_backward(float*, float*, const float*, const float*, const float*,
                                       const float*, const float*, const AttentionBlock&, float*);
template void attention_block_backward(double*, double*, const double*, const double*,
                                       const double*, const double*, const double*,
                                       const AttentionBlock&, double*);

}  // namespace lattice::kernels
