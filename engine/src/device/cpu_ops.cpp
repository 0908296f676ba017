// The CPU's op lists for float and double (ops.h): each op forwards to kernels.h, so it is the
// CPU kernel bit for bit (tests/device/test_ops.cpp checks every op). Where the one signature
// differs from kernels.h: matmul_forward's GELU epilogue is the GEMM followed by gelu_forward
// (what GptModel::layer_forward does), the attention's saved tensor is the kernel's
// probabilities (B, NH, T, T), the multi-tensor optimizer ops loop over their tensors, and
// unscale_and_check is optim/grad_scaling.cpp's function of that name.
#include <cstring>
#include <vector>

#include "device/ops.h"
#include "lattice/kernels.h"
#include "optim/grad_scaling.h"

namespace lattice {
namespace {

template <typename S>
class CpuOps final : public Ops<S> {
 public:
  void matmul_forward(S* out, S* pre_gelu, const S* inp, const S* weight, const S* bias, int N,
                      int C, int OC, Epilogue epilogue) override {
    const bool gelu = epilogue == Epilogue::kGelu;
    S* gemm_out = gelu && pre_gelu ? pre_gelu : out;
    kernels::matmul_forward(gemm_out, inp, weight, bias, N, C, OC);
    if (gelu) kernels::gelu_forward(out, gemm_out, static_cast<size_t>(N) * OC);
  }
  void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,
                       int N, int C, int OC) override {
    kernels::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void add_bias(S* out, const S* bias, int N, int OC) override {
    kernels::add_bias(out, bias, N, OC);
  }

  void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                         int C, int vocab_begin, int vocab_end, const int32_t* positions) override {
    kernels::embedding_forward(out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end, positions);
  }
  void embedding_backward(S* dwte, S* dwpe, const S* dout, const int32_t* tokens, int B, int T,
                          int C, int vocab_begin, int vocab_end,
                          const int32_t* positions) override {
    kernels::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end,
                                positions);
  }

  void layernorm_forward(S* out, S* mean, S* rstd, const S* inp, const S* weight, const S* bias,
                         int N, int C) override {
    kernels::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void residual_layernorm_forward(S* residual_out, S* out, S* mean, S* rstd, const S* residual,
                                  const S* x, const S* weight, const S* bias, int N,
                                  int C) override {
    kernels::residual_layernorm_forward(residual_out, out, mean, rstd, residual, x, weight, bias, N,
                                        C);
  }
  void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,
                          const S* weight, const S* mean, const S* rstd, int N, int C) override {
    kernels::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }

  void rmsnorm_forward(S* out, S* rstd, const S* inp, const S* weight, int N, int C,
                       float eps) override {
    kernels::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void residual_rmsnorm_forward(S* residual_out, S* out, S* rstd, const S* residual, const S* x,
                                const S* weight, int N, int C, float eps) override {
    kernels::residual_rmsnorm_forward(residual_out, out, rstd, residual, x, weight, N, C, eps);
  }
  void rmsnorm_backward(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,
                        const S* rstd, int N, int C) override {
    kernels::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }

  void rope_forward(S* qkv, const S* cos, const S* sin, const int32_t* positions, int N, int T,
                    int NH, int KV, int HS, int rotary_dim) override {
    kernels::rope_forward(qkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
  }
  void rope_backward(S* dqkv, const S* cos, const S* sin, const int32_t* positions, int N, int T,
                     int NH, int KV, int HS, int rotary_dim) override {
    kernels::rope_backward(dqkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
  }

  void swiglu_forward(S* out, const S* inp, int N, int F) override {
    kernels::swiglu_forward(out, inp, N, F);
  }
  void swiglu_backward(S* dinp, const S* inp, const S* dout, int N, int F) override {
    kernels::swiglu_backward(dinp, inp, dout, N, F);
  }

  void gelu_forward(S* out, const S* inp, size_t n) override { kernels::gelu_forward(out, inp, n); }
  void gelu_backward(S* dinp, const S* inp, const S* dout, size_t n) override {
    kernels::gelu_backward(dinp, inp, dout, n);
  }
  void residual_dropout_forward(S* out, const S* residual, const S* x, size_t n, float p,
                                uint64_t key, size_t index_offset) override {
    kernels::residual_dropout_forward(out, residual, x, n, p, key, index_offset);
  }
  void dropout_backward(S* dx, const S* dout, size_t n, float p, uint64_t key,
                        size_t index_offset) override {
    kernels::dropout_backward(dx, dout, n, p, key, index_offset);
  }

  size_t attention_saved_elems(int B, int T, int NH) const override {
    return static_cast<size_t>(B) * NH * T;  // the log-sum-exps (kernels.h)
  }
  size_t attention_workspace_elems(int, int T, int, int HS) const override {
    return kernels::attention_workspace_elems(T, HS) * static_cast<size_t>(kernels::num_threads());
  }
  void attention_forward(S* out, S* saved, const S* qkv, S* workspace, int B, int T, int C, int NH,
                         float p, uint64_t key, int head_offset, int total_heads, int KV,
                         const int32_t* positions) override {
    kernels::attention_forward(out, saved, qkv, B, T, C, NH, p, key, workspace, head_offset,
                               total_heads, KV, positions);
  }
  void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* /*out: unused here*/,
                          const S* saved, S* workspace, int B, int T, int C, int NH, float p,
                          uint64_t key, int head_offset, int total_heads, int KV,
                          const int32_t* positions) override {
    kernels::attention_backward(dqkv, dout, qkv, saved, B, T, C, NH, p, key, workspace, head_offset,
                                total_heads, KV, positions);
  }

  void softmax_cross_entropy(S* losses, S* dlogits, const S* logits, const int32_t* targets, int N,
                             int V, float grad_scale) override {
    kernels::softmax_cross_entropy(losses, dlogits, logits, targets, N, V, grad_scale);
  }
  void cross_entropy_shard_max(S* row_max, const S* logits, int N, int V) override {
    kernels::cross_entropy_shard_max(row_max, logits, N, V);
  }
  void cross_entropy_shard_sums(double* sum_exp, S* target_logit, const S* logits, const S* row_max,
                                const int32_t* targets, int vocab_begin, int N, int V) override {
    kernels::cross_entropy_shard_sums(sum_exp, target_logit, logits, row_max, targets, vocab_begin,
                                      N, V);
  }
  void cross_entropy_shard_finish(S* losses, S* dlogits, const S* logits, const S* row_max,
                                  const double* sum_exp, const S* target_logit,
                                  const int32_t* targets, int vocab_begin, int N, int V,
                                  float grad_scale) override {
    kernels::cross_entropy_shard_finish(losses, dlogits, logits, row_max, sum_exp, target_logit,
                                        targets, vocab_begin, N, V, grad_scale);
  }

  void to_compute(S* dst, const S* src, size_t n) override { copy(dst, src, n); }
  void to_accum(S* dst, const S* src, size_t n) override { copy(dst, src, n); }

  void adamw_update(const AdamWSpan<S>* tensors, int count, const kernels::AdamWParams& p,
                    S grad_scale) override {
    std::vector<kernels::AdamWTensor<S>> all(static_cast<size_t>(count));
    for (int i = 0; i < count; i++) {
      const AdamWSpan<S>& t = tensors[i];
      all[i] = {t.param, t.grad, t.m, t.v, t.n, t.decay};
    }
    // One parallel pass over every tensor (issue 22's multi-tensor step).
    kernels::adamw_update(all.data(), count, p, grad_scale);
    for (int i = 0; i < count; i++)
      if (tensors[i].param_copy) copy(tensors[i].param_copy, tensors[i].param, tensors[i].n);
  }
  void unscale_and_check(S* x, size_t n, S inv_scale, float* found_inf) override {
    if (lattice::unscale_and_check(x, n, static_cast<double>(inv_scale))) *found_inf = 1.0f;
  }
  void sum_squares(double* result, const S* const* tensors, const size_t* sizes,
                   int count) override {
    *result = kernels::sum_squares(tensors, sizes, count);
  }
  void scale(S* x, size_t n, S s) override { kernels::scale(x, n, s); }

  bool has_moe() const override { return true; }
  void moe_route(S* probs, int32_t* route, S* weight, const S* logits, int N, int E,
                 int k) override {
    kernels::moe_route(probs, route, weight, logits, N, E, k);
  }
  void moe_dispatch_plan(int32_t* tokens_per_expert, int32_t* counts, int32_t* route_slot,
                         int32_t* slot_row, const int32_t* route, const S* weight, int N, int E,
                         int k, int capacity) override {
    kernels::moe_dispatch_plan(tokens_per_expert, counts, route_slot, slot_row, route, weight, N, E,
                               k, capacity);
  }
  void moe_gather_rows(S* out, const S* inp, const int32_t* slot_row, int rows, int C) override {
    kernels::moe_gather_rows(out, inp, slot_row, rows, C);
  }
  void moe_scatter_add_rows(S* dinp, const S* d_rows, const int32_t* route_slot, int N, int C,
                            int k) override {
    kernels::moe_scatter_add_rows(dinp, d_rows, route_slot, N, C, k);
  }
  void moe_combine(S* out, const S* expert_out, const S* weight, const int32_t* route_slot, int N,
                   int C, int k) override {
    kernels::moe_combine(out, expert_out, weight, route_slot, N, C, k);
  }
  void moe_combine_backward(S* d_expert_out, S* dweight, const S* dout, const S* expert_out,
                            const S* weight, const int32_t* route_slot, int N, int C,
                            int k) override {
    kernels::moe_combine_backward(d_expert_out, dweight, dout, expert_out, weight, route_slot, N, C,
                                  k);
  }
  void moe_aux_loss(S* loss, const S* probs, const int32_t* tokens_per_expert, int N, int E, int k,
                    double coeff) override {
    kernels::moe_aux_loss(loss, probs, tokens_per_expert, N, E, k, coeff);
  }
  void moe_route_backward(S* dlogits, const S* dweight, const S* probs, const int32_t* route,
                          const S* weight, const int32_t* tokens_per_expert, int N, int E, int k,
                          double aux_scale) override {
    kernels::moe_route_backward(dlogits, dweight, probs, route, weight, tokens_per_expert, N, E, k,
                                aux_scale);
  }

  bool has_ring_attention() const override { return true; }
  size_t attention_block_workspace_elems(int, int, int Tq, int Tk, int HS) const override {
    return kernels::attention_block_workspace_elems(Tq, Tk, HS) *
           static_cast<size_t>(kernels::num_threads());
  }
  void attention_block_forward(S* out, S* lse, const S* qkv, const S* kv,
                               const kernels::AttentionBlock& block, S* workspace) override {
    kernels::attention_block_forward(out, lse, qkv, kv, block, workspace);
  }
  void attention_block_backward(S* dqkv, S* dkv, const S* dout, const S* delta, const S* lse,
                                const S* qkv, const S* kv, const kernels::AttentionBlock& block,
                                S* workspace) override {
    kernels::attention_block_backward(dqkv, dkv, dout, delta, lse, qkv, kv, block, workspace);
  }
  void attention_kv_pack(S* kv, const S* qkv, size_t rows, int NH, int KV, int HS) override {
    kernels::attention_kv_pack(kv, qkv, rows, NH, KV, HS);
  }
  void attention_kv_unpack(S* qkv, const S* kv, size_t rows, int NH, int KV, int HS) override {
    kernels::attention_kv_unpack(qkv, kv, rows, NH, KV, HS);
  }
  void attention_row_dot(S* delta, const S* dout, const S* out, int B, int T, int NH,
                         int HS) override {
    kernels::attention_row_dot(delta, dout, out, B, T, NH, HS);
  }
  void fill(S* x, size_t n, S value) override { kernels::fill(x, n, value); }
  void accumulate(S* acc, const S* x, size_t n) override { kernels::accumulate(acc, x, n); }

  bool has_vision() const override { return true; }
  void patchify_forward(S* cols, const S* img, int B, int Cin, int H, int W, int P) override {
    kernels::patchify_forward(cols, img, B, Cin, H, W, P);
  }
  void patchify_backward(S* dimg, const S* dcols, int B, int Cin, int H, int W, int P) override {
    kernels::patchify_backward(dimg, dcols, B, Cin, H, W, P);
  }
  void activation_forward(S* out, const S* inp, size_t n, kernels::Activation act) override {
    kernels::activation_forward(out, inp, n, act);
  }
  void activation_backward(S* dinp, const S* inp, const S* dout, size_t n,
                           kernels::Activation act) override {
    kernels::activation_backward(dinp, inp, dout, n, act);
  }

 private:
  static void copy(S* dst, const S* src, size_t n) {
    if (dst != src && n > 0) std::memcpy(dst, src, n * sizeof(S));
  }
};

}  // namespace

template <>
Ops<float>& cpu_ops<float>() {
  static CpuOps<float> ops;
  return ops;
}
template <>
Ops<double>& cpu_ops<double>() {
  static CpuOps<double> ops;
  return ops;
}

}  // namespace lattice
