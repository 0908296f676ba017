// The CUDA op list (lattice/cuda_kernels.h) on the host, for test_gpu_model_on_host: the fp32
// ops run the CPU kernels of kernels.h on host memory, so engine/src/gpu/gpu_model.cpp (compiled
// into the test against host_cuda/cuda_runtime_api.h) runs its whole data flow without a
// device, tensor-parallel reductions included (all_reduce_on_stream over the CPU communicator
// it is given). The kernels themselves are checked against the CPU by tests/cuda/test_cuda_*.
// Not emulated: bf16 ops (they record an error), attention dropout, the compute stream (every
// op runs when called). The pipeline's point-to-point streams are host_cuda/'s: a send is a
// non-blocking send of the CPU communicator that the stream's next operation completes first. The
// attention's probabilities (the CPU op's saved tensor, which the GPU op replaces by its
// log-sum-exp) are kept here, keyed by the lse buffer.
#include <cuda_runtime_api.h>

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

void no_bf16(Context& ctx) {
  ctx.record_error("bf16 ops are not emulated on the host");
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
void matmul_forward(Context& ctx, bf16*, bf16*, const bf16*, const bf16*, const bf16*, int, int,
                    int, bool) {
  no_bf16(ctx);
}
void matmul_backward(Context&, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  kernels::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void matmul_backward(Context& ctx, bf16*, float*, float*, const bf16*, const bf16*, const bf16*,
                     int, int, int) {
  no_bf16(ctx);
}
void add_bias(Context&, float* out, const float* bias, int N, int OC) {
  kernels::add_bias(out, bias, N, OC);
}
void add_bias(Context& ctx, bf16*, const bf16*, int, int) {
  no_bf16(ctx);
}

void layernorm_forward(Context&, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  kernels::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_forward(Context& ctx, bf16*, float*, float*, const bf16*, const bf16*, const bf16*,
                       int, int) {
  no_bf16(ctx);
}
void residual_layernorm_forward(Context&, float* residual_out, float* out, float* mean, float* rstd,
                                const float* residual, const float* x, const float* weight,
                                const float* bias, int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  for (size_t i = 0; i < n; i++) residual_out[i] = residual[i] + x[i];
  kernels::layernorm_forward(out, mean, rstd, residual_out, weight, bias, N, C);
}
void residual_layernorm_forward(Context& ctx, bf16*, bf16*, float*, float*, const bf16*,
                                const bf16*, const bf16*, const bf16*, int, int) {
  no_bf16(ctx);
}
void layernorm_backward(Context&, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  kernels::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void layernorm_backward(Context& ctx, bf16*, float*, float*, const bf16*, const bf16*, const bf16*,
                        const float*, const float*, int, int) {
  no_bf16(ctx);
}

void gelu_backward(Context&, float* dinp, const float* inp, const float* dout, size_t n) {
  kernels::gelu_backward(dinp, inp, dout, n);
}
void gelu_backward(Context& ctx, bf16*, const bf16*, const bf16*, size_t) {
  no_bf16(ctx);
}

void embedding_forward(Context&, float* out, const int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C, int vocab_begin, int vocab_end) {
  kernels::embedding_forward(out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end);
}
void embedding_forward(Context& ctx, bf16*, const int32_t*, const bf16*, const bf16*, int, int, int,
                       int, int) {
  no_bf16(ctx);
}
void embedding_backward(Context&, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin,
                        int vocab_end) {
  kernels::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end);
}
void embedding_backward(Context& ctx, float*, float*, const bf16*, const int32_t*, int, int, int,
                        int, int) {
  no_bf16(ctx);
}

size_t attention_workspace_floats(int, int, int) {
  return 1;
}
void attention_forward(Context& ctx, float* out, float* lse, const float* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                       int total_heads) {
  if (dropout_p != 0.0f) ctx.record_error("attention dropout is not emulated on the host");
  std::vector<float>& probs = saved_probs()[lse];
  probs.assign(static_cast<size_t>(B) * NH * T * T, 0.0f);
  std::vector<float> workspace = attention_workspace(T);
  kernels::attention_forward(out, probs.data(), qkv, B, T, C, NH, 0.0f, dropout_key,
                             workspace.data(), head_offset, total_heads);
}
void attention_forward(Context& ctx, bf16*, float*, const bf16*, int, int, int, int, float,
                       uint64_t, int, int) {
  no_bf16(ctx);
}
void attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float*, const float* lse, float*, int B, int T, int C, int NH, float,
                        uint64_t dropout_key, int head_offset, int total_heads) {
  const auto it = saved_probs().find(lse);
  if (it == saved_probs().end()) {
    ctx.record_error("attention_backward without its forward");
    return;
  }
  std::vector<float> workspace = attention_workspace(T);
  kernels::attention_backward(dqkv, dout, qkv, it->second.data(), B, T, C, NH, 0.0f, dropout_key,
                              workspace.data(), head_offset, total_heads);
}
void attention_backward(Context& ctx, bf16*, const bf16*, const bf16*, const bf16*, const float*,
                        float*, int, int, int, int, float, uint64_t, int, int) {
  no_bf16(ctx);
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

void convert(Context& ctx, bf16*, const float*, size_t) {
  no_bf16(ctx);
}
void convert(Context& ctx, float*, const bf16*, size_t) {
  no_bf16(ctx);
}

}  // namespace lattice::kernels::cuda

namespace lattice {

// The CPU communicator stands in for NCCL: the reduction happens when it is queued.
Status all_reduce_on_stream(Comm& comm, void* data, size_t count, DeviceDType type, ReduceOp op,
                            CUstream_st*) {
  if (type == DeviceDType::kBFloat16)
    return Status::invalid_argument("bf16 reductions are not emulated on the host");
  const DType host = type == DeviceDType::kFloat32 ? DType::kFloat32 : DType::kFloat64;
  return comm.all_reduce(data, count, host, op);
}

namespace {
Result<DType> host_type(DeviceDType type) {
  if (type == DeviceDType::kBFloat16)
    return Status::invalid_argument("bf16 messages are not emulated on the host");
  return type == DeviceDType::kFloat32 ? DType::kFloat32 : DType::kFloat64;
}
}  // namespace

// NCCL's order on the host: the stream's previous operation completes before this one starts;
// the send itself stays in flight until the stream's next operation or an event waits for it.
Status send_on_stream(Comm& comm, const void* data, size_t count, DeviceDType type, int peer,
                      CUstream_st* stream) {
  Result<DType> host = host_type(type);
  if (!host) return host.status();
  stream->complete();
  stream->pending = comm.isend(data, count, *host, peer, 0);
  stream->pending_seq = ++stream->issued;
  return Status::ok();
}

Status recv_on_stream(Comm& comm, void* data, size_t count, DeviceDType type, int peer,
                      CUstream_st* stream) {
  Result<DType> host = host_type(type);
  if (!host) return host.status();
  stream->complete();
  ++stream->issued;
  return comm.recv(data, count, *host, peer, 0);
}

}  // namespace lattice
