// The op list of lattice/kernels.h as one ISA's namespace defines it (the op files, compiled
// once per ISA: Note [CPU dispatch]); private to the CPU kernels. dispatch.cpp includes this
// file once per ISA with LATTICE_ISA_OPS_NS naming the namespace, so there is no include guard.
// Signatures are kernels.h's without the default arguments; one that drifts fails to link.
#include <cstddef>
#include <cstdint>

#include "lattice/kernels.h"

namespace lattice::kernels::cpu::LATTICE_ISA_OPS_NS {

int vector_bytes();  // vector_width.cpp

template <typename S>
void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int C, int OC);
template <typename S>
void add_bias(S* out, const S* bias, int N, int OC);
template <typename S>
void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                     int N, int C, int OC);
template <typename S>
void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                       int C, int vocab_begin, int vocab_end, const int32_t* positions);
template <typename S>
void position_embedding_forward(S* out, const S* wpe, int B, int T, int C);
template <typename S>
void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T, int C,
                        int vocab_begin, int vocab_end, const int32_t* positions);
template <typename S>
void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                       int N, int C);
template <typename S>
void residual_layernorm_forward(S* residual_out, S* out, S* mean, S* rstd, const S* residual,
                                const S* x, const S* weight, const S* bias, int N, int C);
template <typename S>
void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                        const S* mean, const S* rstd, int N, int C);
template <typename S>
void rmsnorm_forward(S* out, S* rstd, const S* inp, const S* weight, int N, int C, float eps);
template <typename S>
void residual_rmsnorm_forward(S* residual_out, S* out, S* rstd, const S* residual, const S* x,
                              const S* weight, int N, int C, float eps);
template <typename S>
void rmsnorm_backward(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,
                      const S* rstd, int N, int C);
template <typename S>
void rope_forward(S* qkv, const S* cos, const S* sin, const int32_t* positions, int N, int T,
                  int NH, int KV, int HS, int rotary_dim);
template <typename S>
void rope_backward(S* dqkv, const S* cos, const S* sin, const int32_t* positions, int N, int T,
                   int NH, int KV, int HS, int rotary_dim);
template <typename S>
void swiglu_forward(S* out, const S* inp, int N, int F);
template <typename S>
void swiglu_backward(S* dinp, const S* inp, const S* dout, int N, int F);
template <typename S>
void gelu_forward(S* out, const S* inp, size_t n);
template <typename S>
void gelu_backward(S* dinp, const S* inp, const S* dout, size_t n);
template <typename S>
void residual_dropout_forward(S* out, const S* residual, const S* x, size_t n, float p,
                              uint64_t key, size_t index_offset);
template <typename S>
void dropout_backward(S* dx, const S* dout, size_t n, float p, uint64_t key, size_t index_offset);
template <typename S>
void attention_forward(S* out, S* lse, const S* qkv, int B, int T, int C, int NH, float dropout_p,
                       uint64_t dropout_key, S* workspace, int head_offset, int total_heads,
                       int kv_heads, const int32_t* positions);
template <typename S>
void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* lse, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, S* workspace,
                        int head_offset, int total_heads, int kv_heads, const int32_t* positions);
template <typename S>
void attention_kv_forward(S* out, S* k_cache, S* v_cache, const S* qkv, const int32_t* slots,
                          const int32_t* positions, int M, int NH, int HS, int max_T, S* workspace,
                          int kv_heads);
template <typename S>
void attention_block_forward(S* out, S* lse, const S* qkv, const S* kv, const AttentionBlock& block,
                             S* workspace);
template <typename S>
void attention_block_backward(S* dqkv, S* dkv, const S* dout, const S* delta, const S* lse,
                              const S* qkv, const S* kv, const AttentionBlock& block, S* workspace);
template <typename S>
void softmax_cross_entropy(S* losses, S* dlogits, const S* logits, const int32_t* targets, int N,
                           int V, float grad_scale);
template <typename S>
void cross_entropy_shard_max(S* row_max, const S* logits, int N, int V);
template <typename S>
void cross_entropy_shard_sums(double* sum_exp, S* target_logit, const S* logits, const S* row_max,
                              const int32_t* targets, int vocab_begin, int N, int V);
template <typename S>
void cross_entropy_shard_finish(S* losses, S* dlogits, const S* logits, const S* row_max,
                                const double* sum_exp, const S* target_logit,
                                const int32_t* targets, int vocab_begin, int N, int V,
                                float grad_scale);
template <typename S>
void adamw_update(S* param, const S* grad, S* m, S* v, size_t n, const AdamWParams& p);
template <typename S>
void adamw_update(const AdamWTensor<S>* tensors, int count, const AdamWParams& p, S grad_scale);
template <typename S>
double sum_squares(const S* x, size_t n);
template <typename S>
double sum_squares(const S* const* tensors, const size_t* sizes, int count);
template <typename S>
void scale(S* x, size_t n, S s);

}  // namespace lattice::kernels::cpu::LATTICE_ISA_OPS_NS
