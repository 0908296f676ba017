// The CUDA op list (lattice/cuda_kernels.h) on the host, for test_gpu_optimizer_on_host: each op
// calls the CPU device's op list of its type (device/ops.h cpu_ops: float forwards to kernels.h;
// bf16 and fp16 run the float kernels on widened copies, cpu_ops_16bit.cpp), so
// engine/src/gpu/grad_reducer.cpp (compiled into the test against host_cuda/cuda_runtime_api.h)
// runs without a device. The GPU model, pipeline and AdamW no longer need it: they run on the
// CPU device itself (steps 6 and 7 of docs/one-engine.md); step 8 retires this file. The kernels
// themselves are checked against the CPU by tests/cuda/test_cuda_*. Not emulated: the compute
// stream (every op runs when called). The attention's probabilities (the CPU op's saved tensor,
// which the GPU op replaces by its log-sum-exp) are kept here, keyed by the lse buffer.
#include <cuda_runtime_api.h>

#include <map>
#include <vector>

#include "device/ops.h"
#include "lattice/cuda_kernels.h"
#include "lattice/kernels.h"

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
std::string set_device(int) {
  return "";
}

namespace {

template <typename A>
Ops<A>& ops() {
  return cpu_ops<A>();
}
Epilogue epilogue(bool gelu) {
  return gelu ? Epilogue::kGelu : Epilogue::kNone;
}

// The CPU attention's probabilities of the forward whose lse buffer is the key.
std::map<const float*, std::vector<float>>& saved_probs() {
  static std::map<const float*, std::vector<float>> probs;
  return probs;
}

template <typename A>
void host_attention_forward(A* out, float* lse, const A* qkv, int B, int T, int C, int NH,
                            float dropout_p, uint64_t dropout_key, int head_offset,
                            int total_heads) {
  std::vector<float>& probs = saved_probs()[lse];
  probs.assign(ops<A>().attention_saved_elems(B, T, NH), 0.0f);
  std::vector<float> workspace(ops<A>().attention_workspace_elems(B, T, NH));
  ops<A>().attention_forward(out, probs.data(), qkv, workspace.data(), B, T, C, NH, dropout_p,
                             dropout_key, head_offset, total_heads);
}

template <typename A>
void host_attention_backward(Context& ctx, A* dqkv, const A* dout, const A* qkv, const A* out,
                             const float* lse, int B, int T, int C, int NH, float dropout_p,
                             uint64_t dropout_key, int head_offset, int total_heads) {
  const auto it = saved_probs().find(lse);
  if (it == saved_probs().end()) {
    ctx.record_error("attention_backward without its forward");
    return;
  }
  std::vector<float> workspace(ops<A>().attention_workspace_elems(B, T, NH));
  ops<A>().attention_backward(dqkv, dout, qkv, out, it->second.data(), workspace.data(), B, T, C,
                              NH, dropout_p, dropout_key, head_offset, total_heads);
}

}  // namespace

// Every op that cuda_kernels.h declares for the compute type A (float, bf16, fp16), as a call
// of ops<A>().
#define LATTICE_HOST_OPS(A)                                                                        \
  void matmul_forward(Context&, A* out, A* pre_gelu, const A* inp, const A* weight, const A* bias, \
                      int N, int C, int OC, bool gelu) {                                           \
    ops<A>().matmul_forward(out, pre_gelu, inp, weight, bias, N, C, OC, epilogue(gelu));           \
  }                                                                                                \
  void matmul_backward(Context&, A* dinp, float* dweight, float* dbias, const A* dout,             \
                       const A* inp, const A* weight, int N, int C, int OC) {                      \
    ops<A>().matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);                   \
  }                                                                                                \
  void add_bias(Context&, A* out, const A* bias, int N, int OC) {                                  \
    ops<A>().add_bias(out, bias, N, OC);                                                           \
  }                                                                                                \
  void layernorm_forward(Context&, A* out, float* mean, float* rstd, const A* inp,                 \
                         const A* weight, const A* bias, int N, int C) {                           \
    ops<A>().layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);                          \
  }                                                                                                \
  void residual_layernorm_forward(Context&, A* residual_out, A* out, float* mean, float* rstd,     \
                                  const A* residual, const A* x, const A* weight, const A* bias,   \
                                  int N, int C) {                                                  \
    ops<A>().residual_layernorm_forward(residual_out, out, mean, rstd, residual, x, weight, bias,  \
                                        N, C);                                                     \
  }                                                                                                \
  void layernorm_backward(Context&, A* dinp, float* dweight, float* dbias, const A* dout,          \
                          const A* inp, const A* weight, const float* mean, const float* rstd,     \
                          int N, int C) {                                                          \
    ops<A>().layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);        \
  }                                                                                                \
  void gelu_forward(Context&, A* out, const A* inp, size_t n) {                                    \
    ops<A>().gelu_forward(out, inp, n);                                                            \
  }                                                                                                \
  void gelu_backward(Context&, A* dinp, const A* inp, const A* dout, size_t n) {                   \
    ops<A>().gelu_backward(dinp, inp, dout, n);                                                    \
  }                                                                                                \
  void embedding_forward(Context&, A* out, const int32_t* tokens, const A* wte, const A* wpe,      \
                         int B, int T, int C, int vocab_begin, int vocab_end) {                    \
    ops<A>().embedding_forward(out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end);            \
  }                                                                                                \
  void embedding_backward(Context&, float* dwte, float* dwpe, const A* dout,                       \
                          const int32_t* tokens, int B, int T, int C, int vocab_begin,             \
                          int vocab_end) {                                                         \
    ops<A>().embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end);        \
  }                                                                                                \
  void residual_dropout_forward(Context&, A* out, const A* residual, const A* x, size_t n,         \
                                float p, uint64_t key, size_t index_offset) {                      \
    ops<A>().residual_dropout_forward(out, residual, x, n, p, key, index_offset);                  \
  }                                                                                                \
  void dropout_backward(Context&, A* dx, const A* dout, size_t n, float p, uint64_t key,           \
                        size_t index_offset) {                                                     \
    ops<A>().dropout_backward(dx, dout, n, p, key, index_offset);                                  \
  }                                                                                                \
  void attention_forward(Context&, A* out, float* lse, const A* qkv, int B, int T, int C, int NH,  \
                         float dropout_p, uint64_t dropout_key, int head_offset,                   \
                         int total_heads) {                                                        \
    host_attention_forward(out, lse, qkv, B, T, C, NH, dropout_p, dropout_key, head_offset,        \
                           total_heads);                                                           \
  }                                                                                                \
  void attention_backward(Context& ctx, A* dqkv, const A* dout, const A* qkv, const A* out,        \
                          const float* lse, float*, int B, int T, int C, int NH, float dropout_p,  \
                          uint64_t dropout_key, int head_offset, int total_heads) {                \
    host_attention_backward(ctx, dqkv, dout, qkv, out, lse, B, T, C, NH, dropout_p, dropout_key,   \
                            head_offset, total_heads);                                             \
  }
LATTICE_HOST_OPS(float)
LATTICE_HOST_OPS(bf16)
LATTICE_HOST_OPS(fp16)
#undef LATTICE_HOST_OPS

// The workspace lives in host_attention_backward; the model's buffer only has to exist.
size_t attention_workspace_floats(int, int, int) {
  return 1;
}

void softmax_cross_entropy(Context&, float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int N, int V, float grad_scale) {
  ops<float>().softmax_cross_entropy(losses, dlogits, logits, targets, N, V, grad_scale);
}
void cross_entropy_shard_max(Context&, float* row_max, const float* logits, int N, int V) {
  ops<float>().cross_entropy_shard_max(row_max, logits, N, V);
}
void cross_entropy_shard_sums(Context&, double* sum_exp, float* target_logit, const float* logits,
                              const float* row_max, const int32_t* targets, int vocab_begin, int N,
                              int V) {
  ops<float>().cross_entropy_shard_sums(sum_exp, target_logit, logits, row_max, targets,
                                        vocab_begin, N, V);
}
void cross_entropy_shard_finish(Context&, float* losses, float* dlogits, const float* logits,
                                const float* row_max, const double* sum_exp,
                                const float* target_logit, const int32_t* targets, int vocab_begin,
                                int N, int V, float grad_scale) {
  ops<float>().cross_entropy_shard_finish(losses, dlogits, logits, row_max, sum_exp, target_logit,
                                          targets, vocab_begin, N, V, grad_scale);
}

void convert(Context&, bf16* dst, const float* src, size_t n) {
  ops<bf16>().to_compute(dst, src, n);
}
void convert(Context&, fp16* dst, const float* src, size_t n) {
  ops<fp16>().to_compute(dst, src, n);
}
void convert(Context&, float* dst, const bf16* src, size_t n) {
  ops<bf16>().to_accum(dst, src, n);
}
void convert(Context&, float* dst, const fp16* src, size_t n) {
  ops<fp16>().to_accum(dst, src, n);
}

}  // namespace lattice::kernels::cuda
