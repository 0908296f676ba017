// The CUDA op list (lattice/cuda_kernels.h) on the host, for test_gpu_model_on_host: the fp32
// ops run the CPU kernels of kernels.h on host memory, so engine/src/gpu/gpu_model.cpp (compiled
// into the test against host_cuda/cuda_runtime_api.h) runs its whole data flow without a
// device, tensor-parallel reductions included (all_reduce_on_stream over the CPU communicator
// it is given). The kernels themselves are checked against the CPU by tests/cuda/test_cuda_*.
// bf16 and fp16 ops run the same CPU kernels on widened copies, rounding their results back.
// Not emulated: the compute stream (every op runs when called). The pipeline's point-to-point
// streams are host_cuda/'s: a send is a non-blocking send of the CPU communicator that the
// stream's next operation completes first (16-bit messages travel as their bits, as NCCL
// moves them). The attention's probabilities (the CPU op's saved tensor, which the GPU op
// replaces by its log-sum-exp) are kept here, keyed by the lse buffer.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <vector>

#include "lattice/cuda_kernels.h"
#include "lattice/kernels.h"
#include "parallel/nccl_comm.h"

namespace lattice::kernels::cuda {

struct Context::Impl {};

std::unique_ptr<Context> Context::create(std::string*) {
  return std::unique_ptr<Context>(new Context(std::make_unique<Impl>()));
}
Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Context::~Context() = default;
Stream Context::stream() const {
  return nullptr;
}
std::string Context::synchronize() {
  return error_;
}

namespace {

// 16-bit tensors as the device stores them: widened to fp32 for the CPU op and its results
// rounded back with cuda_kernels.h's host conversions (the device too computes in fp32 between
// 16-bit loads and stores; summation orders differ).
float widen(bf16 x) {
  return from_bf16(x);
}
float widen(fp16 x) {
  return from_fp16(x);
}
template <typename H>
H narrow(float x);
template <>
bf16 narrow<bf16>(float x) {
  return to_bf16(x);
}
template <>
fp16 narrow<fp16>(float x) {
  return to_fp16(x);
}
// (n) widened; empty when p is null.
template <typename H>
std::vector<float> wide(const H* p, size_t n) {
  std::vector<float> v(p ? n : 0);
  for (size_t i = 0; i < v.size(); i++) v[i] = widen(p[i]);
  return v;
}
template <typename H>
void store(H* dst, const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); i++) dst[i] = narrow<H>(v[i]);
}
const float* data_or_null(const std::vector<float>& v) {
  return v.empty() ? nullptr : v.data();
}

// The CPU attention's probabilities of the forward whose lse buffer is the key.
std::map<const float*, std::vector<float>>& saved_probs() {
  static std::map<const float*, std::vector<float>> probs;
  return probs;
}

std::vector<float> attention_workspace(int T) {
  return std::vector<float>(attention_workspace_elems(T) * num_threads());
}

}  // namespace

void matmul_forward(Context&, float* out, float* pre_gelu, const float* inp, const float* weight,
                    const float* bias, int N, int C, int OC, bool gelu) {
  float* gemm_out = gelu && pre_gelu ? pre_gelu : out;
  kernels::matmul_forward(gemm_out, inp, weight, bias, N, C, OC);
  if (gelu) kernels::gelu_forward(out, gemm_out, static_cast<size_t>(N) * OC);
}
void matmul_backward(Context&, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  kernels::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void add_bias(Context&, float* out, const float* bias, int N, int OC) {
  kernels::add_bias(out, bias, N, OC);
}

void layernorm_forward(Context&, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  kernels::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}
void residual_layernorm_forward(Context&, float* residual_out, float* out, float* mean, float* rstd,
                                const float* residual, const float* x, const float* weight,
                                const float* bias, int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  for (size_t i = 0; i < n; i++) residual_out[i] = residual[i] + x[i];
  kernels::layernorm_forward(out, mean, rstd, residual_out, weight, bias, N, C);
}
void layernorm_backward(Context&, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  kernels::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void gelu_backward(Context&, float* dinp, const float* inp, const float* dout, size_t n) {
  kernels::gelu_backward(dinp, inp, dout, n);
}

void embedding_forward(Context&, float* out, const int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C, int vocab_begin, int vocab_end) {
  kernels::embedding_forward(out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end);
}
void embedding_backward(Context&, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin,
                        int vocab_end) {
  kernels::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end);
}

void residual_dropout_forward(Context&, float* out, const float* residual, const float* x, size_t n,
                              float p, uint64_t key, size_t index_offset) {
  kernels::residual_dropout_forward(out, residual, x, n, p, key, index_offset);
}
void dropout_backward(Context&, float* dx, const float* dout, size_t n, float p, uint64_t key,
                      size_t index_offset) {
  kernels::dropout_backward(dx, dout, n, p, key, index_offset);
}
namespace {
template <typename H>
void residual_dropout_forward_16(H* out, const H* residual, const H* x, size_t n, float p,
                                 uint64_t key, size_t index_offset) {
  const std::vector<float> r = wide(residual, n), xs = wide(x, n);
  std::vector<float> o(n);
  kernels::residual_dropout_forward(o.data(), residual ? r.data() : nullptr, xs.data(), n, p, key,
                                    index_offset);
  store(out, o);
}
template <typename H>
void dropout_backward_16(H* dx, const H* dout, size_t n, float p, uint64_t key,
                         size_t index_offset) {
  std::vector<float> d = wide(dout, n);
  kernels::dropout_backward(d.data(), d.data(), n, p, key, index_offset);
  store(dx, d);
}
}  // namespace
void residual_dropout_forward(Context&, bf16* out, const bf16* residual, const bf16* x, size_t n,
                              float p, uint64_t key, size_t index_offset) {
  residual_dropout_forward_16(out, residual, x, n, p, key, index_offset);
}
void residual_dropout_forward(Context&, fp16* out, const fp16* residual, const fp16* x, size_t n,
                              float p, uint64_t key, size_t index_offset) {
  residual_dropout_forward_16(out, residual, x, n, p, key, index_offset);
}
void dropout_backward(Context&, bf16* dx, const bf16* dout, size_t n, float p, uint64_t key,
                      size_t index_offset) {
  dropout_backward_16(dx, dout, n, p, key, index_offset);
}
void dropout_backward(Context&, fp16* dx, const fp16* dout, size_t n, float p, uint64_t key,
                      size_t index_offset) {
  dropout_backward_16(dx, dout, n, p, key, index_offset);
}

size_t attention_workspace_floats(int, int, int) {
  return 1;
}
void attention_forward(Context&, float* out, float* lse, const float* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                       int total_heads) {
  std::vector<float>& probs = saved_probs()[lse];
  probs.assign(static_cast<size_t>(B) * NH * T * T, 0.0f);
  std::vector<float> workspace = attention_workspace(T);
  kernels::attention_forward(out, probs.data(), qkv, B, T, C, NH, dropout_p, dropout_key,
                             workspace.data(), head_offset, total_heads);
}
void attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float*, const float* lse, float*, int B, int T, int C, int NH,
                        float dropout_p, uint64_t dropout_key, int head_offset, int total_heads) {
  const auto it = saved_probs().find(lse);
  if (it == saved_probs().end()) {
    ctx.record_error("attention_backward without its forward");
    return;
  }
  std::vector<float> workspace = attention_workspace(T);
  kernels::attention_backward(dqkv, dout, qkv, it->second.data(), B, T, C, NH, dropout_p,
                              dropout_key, workspace.data(), head_offset, total_heads);
}

void softmax_cross_entropy(Context&, float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int N, int V, float grad_scale) {
  kernels::softmax_cross_entropy(losses, dlogits, logits, targets, N, V, grad_scale);
}
void cross_entropy_shard_max(Context&, float* row_max, const float* logits, int N, int V) {
  kernels::cross_entropy_shard_max(row_max, logits, N, V);
}
void cross_entropy_shard_sums(Context&, double* sum_exp, float* target_logit, const float* logits,
                              const float* row_max, const int32_t* targets, int vocab_begin, int N,
                              int V) {
  kernels::cross_entropy_shard_sums(sum_exp, target_logit, logits, row_max, targets, vocab_begin, N,
                                    V);
}
void cross_entropy_shard_finish(Context&, float* losses, float* dlogits, const float* logits,
                                const float* row_max, const double* sum_exp,
                                const float* target_logit, const int32_t* targets, int vocab_begin,
                                int N, int V, float grad_scale) {
  kernels::cross_entropy_shard_finish(losses, dlogits, logits, row_max, sum_exp, target_logit,
                                      targets, vocab_begin, N, V, grad_scale);
}

// AdamW and the norm (gpu_adamw.cpp, for test_gpu_optimizer_on_host): kernels.h's AdamW on
// each descriptor, the gradient scaled first as the device kernel scales it.
void adamw_update(Context&, const AdamWTensor* tensors, int count, const AdamWParams& p,
                  float grad_scale) {
  for (int i = 0; i < count; i++) {
    const AdamWTensor& t = tensors[i];
    std::vector<float> g(t.grad, t.grad + t.n);
    for (float& x : g) x *= grad_scale;
    AdamWParams q = p;
    q.weight_decay = t.decay ? p.weight_decay : 0.0f;
    kernels::adamw_update(t.param, g.data(), t.m, t.v, t.n, q);
    const std::vector<float> updated(t.param, t.param + t.n);
    if (t.param_copy.type == ComputeCopy::Type::kBf16)
      store(static_cast<bf16*>(t.param_copy.data), updated);
    else if (t.param_copy.type == ComputeCopy::Type::kFp16)
      store(static_cast<fp16*>(t.param_copy.data), updated);
  }
}
void sum_squares(Context&, double* result, const float* const* tensors, const size_t* sizes,
                 int count) {
  double sum = 0;
  for (int i = 0; i < count; i++) sum += kernels::sum_squares(tensors[i], sizes[i]);
  *result = sum;
}
std::string set_device(int) {
  return "";
}

// ---- bf16 and fp16: the fp32 ops above on widened copies ----------------------------------
namespace {

template <typename H>
void matmul_forward_16(Context& ctx, H* out, H* pre_gelu, const H* inp, const H* weight,
                       const H* bias, int N, int C, int OC, bool gelu) {
  const size_t n = static_cast<size_t>(N) * OC;
  const std::vector<float> i = wide(inp, static_cast<size_t>(N) * C),
                           w = wide(weight, static_cast<size_t>(OC) * C), b = wide(bias, OC);
  std::vector<float> pre(n), act(gelu ? n : 0);
  matmul_forward(ctx, gelu ? act.data() : pre.data(), gelu ? pre.data() : nullptr, i.data(),
                 w.data(), data_or_null(b), N, C, OC, gelu);
  if (gelu && pre_gelu) store(pre_gelu, pre);
  store(out, gelu ? act : pre);
}

template <typename H>
void matmul_backward_16(Context& ctx, H* dinp, float* dweight, float* dbias, const H* dout,
                        const H* inp, const H* weight, int N, int C, int OC) {
  const std::vector<float> d = wide(dout, static_cast<size_t>(N) * OC),
                           i = wide(inp, static_cast<size_t>(N) * C),
                           w = wide(weight, static_cast<size_t>(OC) * C);
  std::vector<float> di(dinp ? static_cast<size_t>(N) * C : 0);
  matmul_backward(ctx, dinp ? di.data() : nullptr, dweight, dbias, d.data(), i.data(), w.data(), N,
                  C, OC);
  if (dinp) store(dinp, di);
}

template <typename H>
void add_bias_16(Context& ctx, H* out, const H* bias, int N, int OC) {
  std::vector<float> o = wide(out, static_cast<size_t>(N) * OC);
  const std::vector<float> b = wide(bias, OC);
  add_bias(ctx, o.data(), b.data(), N, OC);
  store(out, o);
}

template <typename H>
void residual_layernorm_forward_16(Context& ctx, H* residual_out, H* out, float* mean, float* rstd,
                                   const H* residual, const H* x, const H* weight, const H* bias,
                                   int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  std::vector<float> sum = wide(residual, n);
  if (x) {  // the stored (rounded) sum is what the kernel normalises
    const std::vector<float> xs = wide(x, n);
    for (size_t i = 0; i < n; i++) sum[i] += xs[i];
    store(residual_out, sum);
    sum = wide(residual_out, n);
  }
  const std::vector<float> w = wide(weight, C), b = wide(bias, C);
  std::vector<float> o(n);
  layernorm_forward(ctx, o.data(), mean, rstd, sum.data(), w.data(), b.data(), N, C);
  store(out, o);
}

template <typename H>
void layernorm_backward_16(Context& ctx, H* dinp, float* dweight, float* dbias, const H* dout,
                           const H* inp, const H* weight, const float* mean, const float* rstd,
                           int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  std::vector<float> di = wide(dinp, n);
  const std::vector<float> d = wide(dout, n), i = wide(inp, n), w = wide(weight, C);
  layernorm_backward(ctx, di.data(), dweight, dbias, d.data(), i.data(), w.data(), mean, rstd, N,
                     C);
  store(dinp, di);
}

template <typename H>
void gelu_backward_16(Context& ctx, H* dinp, const H* inp, const H* dout, size_t n) {
  const std::vector<float> i = wide(inp, n), d = wide(dout, n);
  std::vector<float> di(n);
  gelu_backward(ctx, di.data(), i.data(), d.data(), n);
  store(dinp, di);
}

template <typename H>
void embedding_forward_16(Context& ctx, H* out, const int32_t* tokens, const H* wte, const H* wpe,
                          int B, int T, int C, int vocab_begin, int vocab_end) {
  int rows = 0;  // the rows of wte the tokens read (its size is not passed)
  for (int i = 0; i < B * T; i++)
    if (tokens[i] >= vocab_begin && tokens[i] < vocab_end)
      rows = std::max(rows, tokens[i] - vocab_begin + 1);
  const std::vector<float> te = wide(wte, static_cast<size_t>(rows) * C),
                           pe = wide(wpe, static_cast<size_t>(T) * C);
  std::vector<float> o(static_cast<size_t>(B) * T * C);
  embedding_forward(ctx, o.data(), tokens, te.data(), data_or_null(pe), B, T, C, vocab_begin,
                    vocab_end);
  store(out, o);
}

template <typename H>
void attention_forward_16(Context& ctx, H* out, float* lse, const H* qkv, int B, int T, int C,
                          int NH, float dropout_p, uint64_t key, int head_offset, int total_heads) {
  const size_t n = static_cast<size_t>(B) * T * C;
  const std::vector<float> q = wide(qkv, 3 * n);
  std::vector<float> o(n);
  attention_forward(ctx, o.data(), lse, q.data(), B, T, C, NH, dropout_p, key, head_offset,
                    total_heads);
  store(out, o);
}

template <typename H>
void attention_backward_16(Context& ctx, H* dqkv, const H* dout, const H* qkv, const H* out,
                           const float* lse, float* workspace, int B, int T, int C, int NH,
                           float dropout_p, uint64_t key, int head_offset, int total_heads) {
  const size_t n = static_cast<size_t>(B) * T * C;
  const std::vector<float> d = wide(dout, n), q = wide(qkv, 3 * n), o = wide(out, n);
  std::vector<float> dq(3 * n);
  attention_backward(ctx, dq.data(), d.data(), q.data(), o.data(), lse, workspace, B, T, C, NH,
                     dropout_p, key, head_offset, total_heads);
  store(dqkv, dq);
}

}  // namespace

void matmul_forward(Context& ctx, bf16* out, bf16* pre_gelu, const bf16* inp, const bf16* weight,
                    const bf16* bias, int N, int C, int OC, bool gelu) {
  matmul_forward_16(ctx, out, pre_gelu, inp, weight, bias, N, C, OC, gelu);
}
void matmul_forward(Context& ctx, fp16* out, fp16* pre_gelu, const fp16* inp, const fp16* weight,
                    const fp16* bias, int N, int C, int OC, bool gelu) {
  matmul_forward_16(ctx, out, pre_gelu, inp, weight, bias, N, C, OC, gelu);
}
void matmul_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC) {
  matmul_backward_16(ctx, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void matmul_backward(Context& ctx, fp16* dinp, float* dweight, float* dbias, const fp16* dout,
                     const fp16* inp, const fp16* weight, int N, int C, int OC) {
  matmul_backward_16(ctx, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void add_bias(Context& ctx, bf16* out, const bf16* bias, int N, int OC) {
  add_bias_16(ctx, out, bias, N, OC);
}
void add_bias(Context& ctx, fp16* out, const fp16* bias, int N, int OC) {
  add_bias_16(ctx, out, bias, N, OC);
}
void layernorm_forward(Context& ctx, bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int N, int C) {
  residual_layernorm_forward_16<bf16>(ctx, nullptr, out, mean, rstd, inp, nullptr, weight, bias, N,
                                      C);
}
void layernorm_forward(Context& ctx, fp16* out, float* mean, float* rstd, const fp16* inp,
                       const fp16* weight, const fp16* bias, int N, int C) {
  residual_layernorm_forward_16<fp16>(ctx, nullptr, out, mean, rstd, inp, nullptr, weight, bias, N,
                                      C);
}
void residual_layernorm_forward(Context& ctx, bf16* residual_out, bf16* out, float* mean,
                                float* rstd, const bf16* residual, const bf16* x,
                                const bf16* weight, const bf16* bias, int N, int C) {
  residual_layernorm_forward_16(ctx, residual_out, out, mean, rstd, residual, x, weight, bias, N,
                                C);
}
void residual_layernorm_forward(Context& ctx, fp16* residual_out, fp16* out, float* mean,
                                float* rstd, const fp16* residual, const fp16* x,
                                const fp16* weight, const fp16* bias, int N, int C) {
  residual_layernorm_forward_16(ctx, residual_out, out, mean, rstd, residual, x, weight, bias, N,
                                C);
}
void layernorm_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean, const float* rstd,
                        int N, int C) {
  layernorm_backward_16(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void layernorm_backward(Context& ctx, fp16* dinp, float* dweight, float* dbias, const fp16* dout,
                        const fp16* inp, const fp16* weight, const float* mean, const float* rstd,
                        int N, int C) {
  layernorm_backward_16(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void gelu_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, size_t n) {
  gelu_backward_16(ctx, dinp, inp, dout, n);
}
void gelu_backward(Context& ctx, fp16* dinp, const fp16* inp, const fp16* dout, size_t n) {
  gelu_backward_16(ctx, dinp, inp, dout, n);
}
void embedding_forward(Context& ctx, bf16* out, const int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C, int vocab_begin, int vocab_end) {
  embedding_forward_16(ctx, out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end);
}
void embedding_forward(Context& ctx, fp16* out, const int32_t* tokens, const fp16* wte,
                       const fp16* wpe, int B, int T, int C, int vocab_begin, int vocab_end) {
  embedding_forward_16(ctx, out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end);
}
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const bf16* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin,
                        int vocab_end) {
  const std::vector<float> d = wide(dout, static_cast<size_t>(B) * T * C);
  embedding_backward(ctx, dwte, dwpe, d.data(), tokens, B, T, C, vocab_begin, vocab_end);
}
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const fp16* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin,
                        int vocab_end) {
  const std::vector<float> d = wide(dout, static_cast<size_t>(B) * T * C);
  embedding_backward(ctx, dwte, dwpe, d.data(), tokens, B, T, C, vocab_begin, vocab_end);
}
void attention_forward(Context& ctx, bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                       int total_heads) {
  attention_forward_16(ctx, out, lse, qkv, B, T, C, NH, dropout_p, dropout_key, head_offset,
                       total_heads);
}
void attention_forward(Context& ctx, fp16* out, float* lse, const fp16* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                       int total_heads) {
  attention_forward_16(ctx, out, lse, qkv, B, T, C, NH, dropout_p, dropout_key, head_offset,
                       total_heads);
}
void attention_backward(Context& ctx, bf16* dqkv, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, float* workspace, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                        int total_heads) {
  attention_backward_16(ctx, dqkv, dout, qkv, out, lse, workspace, B, T, C, NH, dropout_p,
                        dropout_key, head_offset, total_heads);
}
void attention_backward(Context& ctx, fp16* dqkv, const fp16* dout, const fp16* qkv,
                        const fp16* out, const float* lse, float* workspace, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                        int total_heads) {
  attention_backward_16(ctx, dqkv, dout, qkv, out, lse, workspace, B, T, C, NH, dropout_p,
                        dropout_key, head_offset, total_heads);
}
void convert(Context&, bf16* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = to_bf16(src[i]);
}
void convert(Context&, fp16* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = to_fp16(src[i]);
}
void convert(Context&, float* dst, const bf16* src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = from_bf16(src[i]);
}
void convert(Context&, float* dst, const fp16* src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = from_fp16(src[i]);
}

}  // namespace lattice::kernels::cuda

namespace lattice {

// The CPU communicator stands in for NCCL: the operation happens when it is queued. The CPU
// communicator takes every DType (comm.h): 16-bit sums in fp32 rounded once (NCCL adds in the
// 16-bit type), 16-bit rows and messages moved as their bits.
Status all_reduce_on_stream(Comm& comm, void* data, size_t count, DType type, ReduceOp op,
                            CUstream_st*) {
  return comm.all_reduce(data, count, type, op);
}

// Sequence parallelism's row exchanges, done when queued as all_reduce_on_stream.
Status all_gather_on_stream(Comm& comm, const void* send, void* recv, size_t count, DType type,
                            CUstream_st*) {
  return comm.all_gather(send, recv, std::vector<size_t>(comm.size(), count), type);
}

Status reduce_scatter_on_stream(Comm& comm, const void* send, void* recv, size_t count, DType type,
                                CUstream_st*) {
  return comm.reduce_scatter(send, recv, std::vector<size_t>(comm.size(), count), type);
}

// NCCL's order on the host: the stream's previous operation completes before this one starts;
// the send itself stays in flight until the stream's next operation or an event waits for it.
Status send_on_stream(Comm& comm, const void* data, size_t count, DType type, int peer,
                      CUstream_st* stream) {
  stream->complete();
  stream->pending = comm.isend(data, count, type, peer, 0);
  stream->pending_seq = ++stream->issued;
  return Status::ok();
}

Status recv_on_stream(Comm& comm, void* data, size_t count, DType type, int peer,
                      CUstream_st* stream) {
  stream->complete();
  ++stream->issued;
  return comm.recv(data, count, type, peer, 0);
}

}  // namespace lattice
