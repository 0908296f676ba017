// The CUDA op lists (ops.h) for float, bf16 and fp16: each op forwards to kernels::cuda
// (cuda_kernels.h) on the device's Context, whose stream is the compute stream and whose error
// is the device's. Where the one signature differs from cuda_kernels.h: the attention's saved
// tensor is the log-sum-exp (B, NH, T) and its forward takes no workspace; the conversions
// between A and float are copies for A = float. Every list has every op, the MoE, ring attention
// and vision encoder ops included. Built only into lattice_engine_gpu; compiled here, never yet
// run on a GPU (tests/device/test_cuda_op_list.cpp checks it against the CPU's lists where a
// device is lent).
#include <cuda_runtime_api.h>

#include <type_traits>
#include <vector>

#include "device/ops.h"
#include "lattice/cuda_kernels.h"

namespace lattice {
namespace {

namespace cu = kernels::cuda;

template <typename A>
class CudaOps final : public Ops<A> {
  static_assert(std::is_same_v<accum_t<A>, float>, "the CUDA kernels accumulate in float");

 public:
  using G = float;
  explicit CudaOps(cu::Context& ctx) : ctx_(ctx) {}

  void matmul_forward(A* out, A* pre_gelu, const A* inp, const A* weight, const A* bias, int N,
                      int C, int OC, Epilogue epilogue) override {
    cu::matmul_forward(ctx_, out, pre_gelu, inp, weight, bias, N, C, OC,
                       epilogue == Epilogue::kGelu);
  }
  void matmul_backward(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                       const A* weight, int N, int C, int OC) override {
    cu::matmul_backward(ctx_, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void add_bias(A* out, const A* bias, int N, int OC) override {
    cu::add_bias(ctx_, out, bias, N, OC);
  }

  void embedding_forward(A* out, const int32_t* tokens, const A* wte, const A* wpe, int B, int T,
                         int C, int vocab_begin, int vocab_end, const int32_t* positions) override {
    cu::embedding_forward(ctx_, out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end, positions);
  }
  void embedding_backward(float* dwte, float* dwpe, const A* dout, const int32_t* tokens, int B,
                          int T, int C, int vocab_begin, int vocab_end,
                          const int32_t* positions) override {
    cu::embedding_backward(ctx_, dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end,
                           positions);
  }

  void layernorm_forward(A* out, float* mean, float* rstd, const A* inp, const A* weight,
                         const A* bias, int N, int C) override {
    cu::layernorm_forward(ctx_, out, mean, rstd, inp, weight, bias, N, C);
  }
  void residual_layernorm_forward(A* residual_out, A* out, float* mean, float* rstd,
                                  const A* residual, const A* x, const A* weight, const A* bias,
                                  int N, int C) override {
    cu::residual_layernorm_forward(ctx_, residual_out, out, mean, rstd, residual, x, weight, bias,
                                   N, C);
  }
  void layernorm_backward(A* dinp, float* dweight, float* dbias, const A* dout, const A* inp,
                          const A* weight, const float* mean, const float* rstd, int N,
                          int C) override {
    cu::layernorm_backward(ctx_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }

  void rmsnorm_forward(A* out, float* rstd, const A* inp, const A* weight, int N, int C,
                       float eps) override {
    cu::rmsnorm_forward(ctx_, out, rstd, inp, weight, N, C, eps);
  }
  void residual_rmsnorm_forward(A* residual_out, A* out, float* rstd, const A* residual, const A* x,
                                const A* weight, int N, int C, float eps) override {
    cu::residual_rmsnorm_forward(ctx_, residual_out, out, rstd, residual, x, weight, N, C, eps);
  }
  void rmsnorm_backward(A* dinp, float* dweight, const A* dout, const A* inp, const A* weight,
                        const float* rstd, int N, int C) override {
    cu::rmsnorm_backward(ctx_, dinp, dweight, dout, inp, weight, rstd, N, C);
  }

  void rope_forward(A* qkv, const float* cos, const float* sin, const int32_t* positions, int N,
                    int T, int NH, int KV, int HS, int rotary_dim) override {
    cu::rope_forward(ctx_, qkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
  }
  void rope_backward(A* dqkv, const float* cos, const float* sin, const int32_t* positions, int N,
                     int T, int NH, int KV, int HS, int rotary_dim) override {
    cu::rope_backward(ctx_, dqkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
  }

  void swiglu_forward(A* out, const A* inp, int N, int F) override {
    cu::swiglu_forward(ctx_, out, inp, N, F);
  }
  void swiglu_backward(A* dinp, const A* inp, const A* dout, int N, int F) override {
    cu::swiglu_backward(ctx_, dinp, inp, dout, N, F);
  }

  void gelu_forward(A* out, const A* inp, size_t n) override {
    cu::gelu_forward(ctx_, out, inp, n);
  }
  void gelu_backward(A* dinp, const A* inp, const A* dout, size_t n) override {
    cu::gelu_backward(ctx_, dinp, inp, dout, n);
  }
  void residual_dropout_forward(A* out, const A* residual, const A* x, size_t n, float p,
                                uint64_t key, size_t index_offset) override {
    cu::residual_dropout_forward(ctx_, out, residual, x, n, p, key, index_offset);
  }
  void dropout_backward(A* dx, const A* dout, size_t n, float p, uint64_t key,
                        size_t index_offset) override {
    cu::dropout_backward(ctx_, dx, dout, n, p, key, index_offset);
  }

  size_t attention_saved_elems(int B, int T, int NH) const override {
    return static_cast<size_t>(B) * NH * T;
  }
  size_t attention_workspace_elems(int B, int T, int NH, int /*HS*/) const override {
    return cu::attention_workspace_floats(B, T, NH);
  }
  void attention_forward(A* out, float* saved, const A* qkv, float* /*workspace: backward only*/,
                         int B, int T, int C, int NH, float p, uint64_t key, int head_offset,
                         int total_heads, int KV, const int32_t* positions) override {
    cu::attention_forward(ctx_, out, saved, qkv, B, T, C, NH, p, key, head_offset, total_heads, KV,
                          positions);
  }
  void attention_backward(A* dqkv, const A* dout, const A* qkv, const A* out, const float* saved,
                          float* workspace, int B, int T, int C, int NH, float p, uint64_t key,
                          int head_offset, int total_heads, int KV,
                          const int32_t* positions) override {
    cu::attention_backward(ctx_, dqkv, dout, qkv, out, saved, workspace, B, T, C, NH, p, key,
                           head_offset, total_heads, KV, positions);
  }

  void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                             const int32_t* targets, int N, int V, float grad_scale) override {
    cu::softmax_cross_entropy(ctx_, losses, dlogits, logits, targets, N, V, grad_scale);
  }
  void cross_entropy_shard_max(float* row_max, const float* logits, int N, int V) override {
    cu::cross_entropy_shard_max(ctx_, row_max, logits, N, V);
  }
  void cross_entropy_shard_sums(double* sum_exp, float* target_logit, const float* logits,
                                const float* row_max, const int32_t* targets, int vocab_begin,
                                int N, int V) override {
    cu::cross_entropy_shard_sums(ctx_, sum_exp, target_logit, logits, row_max, targets, vocab_begin,
                                 N, V);
  }
  void cross_entropy_shard_finish(float* losses, float* dlogits, const float* logits,
                                  const float* row_max, const double* sum_exp,
                                  const float* target_logit, const int32_t* targets,
                                  int vocab_begin, int N, int V, float grad_scale) override {
    cu::cross_entropy_shard_finish(ctx_, losses, dlogits, logits, row_max, sum_exp, target_logit,
                                   targets, vocab_begin, N, V, grad_scale);
  }

  // Mixture of experts (moe.cu): A for the logits and rows, float for the rest; the counts stay
  // on the device (GptModel copies them to the host, Note [MoE layer]).
  bool has_moe() const override { return true; }
  void moe_route(float* probs, int32_t* route, float* weight, const A* logits, int N, int E,
                 int k) override {
    cu::moe_route(ctx_, probs, route, weight, logits, N, E, k);
  }
  void moe_dispatch_plan(int32_t* tokens_per_expert, int32_t* counts, int32_t* route_slot,
                         int32_t* slot_row, const int32_t* route, const float* weight, int N, int E,
                         int k, int capacity) override {
    cu::moe_dispatch_plan(ctx_, tokens_per_expert, counts, route_slot, slot_row, route, weight, N,
                          E, k, capacity);
  }
  void moe_gather_rows(A* out, const A* inp, const int32_t* slot_row, int rows, int C) override {
    cu::moe_gather_rows(ctx_, out, inp, slot_row, rows, C);
  }
  void moe_scatter_add_rows(A* dinp, const A* d_rows, const int32_t* route_slot, int N, int C,
                            int k) override {
    cu::moe_scatter_add_rows(ctx_, dinp, d_rows, route_slot, N, C, k);
  }
  void moe_combine(A* out, const A* expert_out, const float* weight, const int32_t* route_slot,
                   int N, int C, int k) override {
    cu::moe_combine(ctx_, out, expert_out, weight, route_slot, N, C, k);
  }
  void moe_combine_backward(A* d_expert_out, float* dweight, const A* dout, const A* expert_out,
                            const float* weight, const int32_t* route_slot, int N, int C,
                            int k) override {
    cu::moe_combine_backward(ctx_, d_expert_out, dweight, dout, expert_out, weight, route_slot, N,
                             C, k);
  }
  void moe_aux_loss(float* loss, const float* probs, const int32_t* tokens_per_expert, int N, int E,
                    int k, double coeff) override {
    cu::moe_aux_loss(ctx_, loss, probs, tokens_per_expert, N, E, k, coeff);
  }
  void moe_route_backward(A* dlogits, const float* dweight, const float* probs,
                          const int32_t* route, const float* weight,
                          const int32_t* tokens_per_expert, int N, int E, int k,
                          double aux_scale) override {
    cu::moe_route_backward(ctx_, dlogits, dweight, probs, route, weight, tokens_per_expert, N, E, k,
                           aux_scale);
  }

  // Ring attention (attention_block.cu): every list; the 16-bit ones read their inputs in A and
  // merge into G (ops.h).
  bool has_ring_attention() const override { return true; }
  size_t attention_block_workspace_elems(int B, int NH, int Tq, int Tk, int HS) const override {
    return cu::attention_block_workspace_floats(B, NH, Tq, Tk, HS);
  }
  void attention_block_forward(G* out, G* lse, const A* qkv, const A* kv,
                               const kernels::AttentionBlock& block, G* workspace) override {
    cu::attention_block_forward(ctx_, out, lse, qkv, kv, block, workspace);
  }
  void attention_block_backward(G* dqkv, G* dkv, const A* dout, const G* delta, const G* lse,
                                const A* qkv, const A* kv, const kernels::AttentionBlock& block,
                                G* workspace) override {
    cu::attention_block_backward(ctx_, dqkv, dkv, dout, delta, lse, qkv, kv, block, workspace);
  }
  void attention_kv_pack(A* kv, const A* qkv, size_t rows, int NH, int KV, int HS) override {
    cu::attention_kv_pack(ctx_, kv, qkv, rows, NH, KV, HS);
  }
  void attention_kv_unpack(G* qkv, const G* kv, size_t rows, int NH, int KV, int HS) override {
    cu::attention_kv_unpack(ctx_, qkv, kv, rows, NH, KV, HS);
  }
  void attention_row_dot(G* delta, const A* dout, const A* out, int B, int T, int NH,
                         int HS) override {
    cu::attention_row_dot(ctx_, delta, dout, out, B, T, NH, HS);
  }
  void fill(G* x, size_t n, G value) override { cu::fill(ctx_, x, n, value); }
  void accumulate(G* acc, const G* x, size_t n) override { cu::accumulate(ctx_, acc, x, n); }

  // The vision encoder's ops (vision.cu): every list; the 16-bit patchify copies elements and
  // the 16-bit activations compute in fp32 and round once.
  bool has_vision() const override { return true; }
  void patchify_forward(A* cols, const A* img, int B, int Cin, int H, int W, int P) override {
    cu::patchify_forward(ctx_, cols, img, B, Cin, H, W, P);
  }
  void patchify_backward(A* dimg, const A* dcols, int B, int Cin, int H, int W, int P) override {
    cu::patchify_backward(ctx_, dimg, dcols, B, Cin, H, W, P);
  }
  void activation_forward(A* out, const A* inp, size_t n, kernels::Activation act) override {
    cu::activation_forward(ctx_, out, inp, n, act);
  }
  void activation_backward(A* dinp, const A* inp, const A* dout, size_t n,
                           kernels::Activation act) override {
    cu::activation_backward(ctx_, dinp, inp, dout, n, act);
  }

  void to_compute(A* dst, const float* src, size_t n) override {
    if constexpr (std::is_same_v<A, float>)
      copy(dst, src, n);
    else
      cu::convert(ctx_, dst, src, n);
  }
  void to_accum(float* dst, const A* src, size_t n) override {
    if constexpr (std::is_same_v<A, float>)
      copy(dst, src, n);
    else
      cu::convert(ctx_, dst, src, n);
  }

  void adamw_update(const AdamWSpan<A>* tensors, int count, const kernels::AdamWParams& p,
                    float grad_scale) override {
    std::vector<cu::AdamWTensor> t(static_cast<size_t>(count));
    for (int i = 0; i < count; i++) {
      const AdamWSpan<A>& s = tensors[i];
      t[i].param = s.param;
      t[i].grad = s.grad;
      t[i].m = s.m;
      t[i].v = s.v;
      if constexpr (!std::is_same_v<A, float>) t[i].param_copy = cu::ComputeCopy(s.param_copy);
      t[i].n = s.n;
      t[i].decay = s.decay;
    }
    cu::adamw_update(ctx_, t.data(), count, p, grad_scale);
  }
  void unscale_and_check(float* x, size_t n, float inv_scale, float* found_inf) override {
    cu::unscale_and_check(ctx_, x, n, inv_scale, found_inf);
  }
  void sum_squares(double* result, const float* const* tensors, const size_t* sizes,
                   int count) override {
    cu::sum_squares(ctx_, result, tensors, sizes, count);
  }
  void scale(float* x, size_t n, float s) override { cu::scale(ctx_, x, n, s); }

 private:
  // dst (n) = src on the compute stream; an error is the Context's.
  void copy(float* dst, const float* src, size_t n) {
    if (dst == src || n == 0) return;
    const cudaError_t rc =
        cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, ctx_.stream());
    if (rc != cudaSuccess)
      ctx_.record_error(std::string("cudaMemcpyAsync (op list copy): ") + cudaGetErrorString(rc));
  }

  cu::Context& ctx_;
};

}  // namespace

template <typename A>
std::unique_ptr<Ops<A>> make_cuda_ops(kernels::cuda::Context& ctx) {
  return std::make_unique<CudaOps<A>>(ctx);
}
template std::unique_ptr<Ops<float>> make_cuda_ops<float>(kernels::cuda::Context&);
template std::unique_ptr<Ops<bf16>> make_cuda_ops<bf16>(kernels::cuda::Context&);
template std::unique_ptr<Ops<fp16>> make_cuda_ops<fp16>(kernels::cuda::Context&);

}  // namespace lattice
