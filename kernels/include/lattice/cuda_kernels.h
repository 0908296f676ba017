// The op list of kernels.h on a CUDA device (kernels/cuda/, one .cu file per op, kernels first,
// launchers last). Same shapes, layouts and gradient conventions as kernels.h: parameter
// gradients are ACCUMULATED (+=), activation gradients WRITTEN (=) except layernorm's dinp
// (+=, the residual stream). Every op is checked against its CPU op by tests/kernels/cuda/.
// No CUDA header is needed to include this file (CPU code includes it): a stream is the
// opaque CUstream_st* that cudaStream_t names, bf16 and fp16 are dtype.h's 16-bit storage types.
//
// Precision: the float ops compute in fp32 (no TF32). The bf16 and fp16 ops read and write
// 16-bit activations and compute in fp32; parameter gradients of 16-bit ops are fp32
// (Megatron's fp32 main grads). Every bf16 op has an fp16 twin (one template in the .cu
// file). Non-goals here: attention_kv_forward (inference), head sizes other than 64 and 128,
// 16-bit cross-entropy logits.
//
// Errors: ops are asynchronous on the Context's stream and return nothing. A failed launch,
// a cuBLASLt error or a violated precondition (unsupported head size) is recorded in the
// Context (the first one wins); Context::synchronize() waits and returns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lattice/dtype.h"
#include "lattice/kernels.h"

struct CUstream_st;

namespace lattice::kernels::cuda {

using Stream = CUstream_st*;  // == cudaStream_t

// The 16-bit storage types and their host conversions live in lattice/dtype.h (one DType for
// host and device buffers); the op list names them here too, as cuda::bf16 and cuda::fp16.
using lattice::bf16;
using lattice::fp16;
using lattice::from_bf16;
using lattice::from_fp16;
using lattice::to_bf16;
using lattice::to_fp16;

// ---- runtime -----------------------------------------------------------------------------
// Devices this process can use; 0 when there is no driver, no device or no permission
// (never throws, never aborts).
int device_count();
std::string device_name(int device);
// Selects the device for the calling thread; returns an error message or "".
std::string set_device(int device);

// Plain device memory for tests and benchmarks (the engine uses the caching allocator).
// The copies and the fill synchronise the whole device: complete when they return.
void* device_malloc(size_t bytes);  // nullptr when out of memory
void device_free(void* ptr);
void copy_to_device(void* dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* src, size_t bytes);
// Fills bytes with 0xff: every float, double, bf16 and fp16 element reads as NaN (test
// poisoning).
void fill_nan(void* ptr, size_t bytes);
// (free, total) bytes of the current device.
void memory_info(size_t* free_bytes, size_t* total_bytes);

// Everything an op needs besides its tensors: a stream, a cuBLASLt handle with its workspace,
// and a scratch buffer for two-pass reductions. Thread safety: a Context is used by one
// thread at a time; ops on one Context run in call order.
class Context {
 public:
  // A new non-blocking stream on the current device. Returns null and sets *error on failure.
  static std::unique_ptr<Context> create(std::string* error);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Stream stream() const;
  // Waits for every op issued so far; returns the first recorded error or "" .
  std::string synchronize();
  // The first error recorded by an op since creation (does not wait).
  const std::string& error() const { return error_; }
  void record_error(const std::string& message) {
    if (error_.empty()) error_ = message;
  }

  struct Impl;  // kernels/cuda/context.cuh
  Impl& impl() { return *impl_; }

 private:
  explicit Context(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string error_;
};

// Milliseconds between two points on ctx's stream, for benchmarks.
class StreamTimer {
 public:
  explicit StreamTimer(Context& ctx);
  ~StreamTimer();
  void start();
  float stop_ms();  // waits for the stream

 private:
  Context& ctx_;
  void* start_ = nullptr;  // cudaEvent_t
  void* stop_ = nullptr;
};

// ---- matmul.cu (cuBLASLt, fp32 accumulate) -------------------------------------------------
// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), bias may be null. With gelu the
// GELU (tanh) epilogue is fused; pre_gelu (N, OC), when non-null, receives its input for the
// backward (gelu_backward(dinp, pre_gelu, dout)). Requires OC % 8 == 0 when pre_gelu is set.
void matmul_forward(Context& ctx, float* out, float* pre_gelu, const float* inp,
                    const float* weight, const float* bias, int N, int C, int OC, bool gelu);
void matmul_forward(Context& ctx, bf16* out, bf16* pre_gelu, const bf16* inp, const bf16* weight,
                    const bf16* bias, int N, int C, int OC, bool gelu);
void matmul_forward(Context& ctx, fp16* out, fp16* pre_gelu, const fp16* inp, const fp16* weight,
                    const fp16* bias, int N, int C, int OC, bool gelu);
// dinp (N, C) = dout (N, OC) @ weight (OC, C)      (skipped when dinp is null)
// dweight (OC, C) += dout^T @ inp;  dbias (OC) += column sums of dout (each skipped when null)
void matmul_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC);
void matmul_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC);
void matmul_backward(Context& ctx, fp16* dinp, float* dweight, float* dbias, const fp16* dout,
                     const fp16* inp, const fp16* weight, int N, int C, int OC);
// out (N, OC) += bias (OC) on every row.
void add_bias(Context& ctx, float* out, const float* bias, int N, int OC);
void add_bias(Context& ctx, bf16* out, const bf16* bias, int N, int OC);
void add_bias(Context& ctx, fp16* out, const fp16* bias, int N, int OC);

// ---- layernorm.cu ---------------------------------------------------------------------------
// out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) fp32 are saved.
void layernorm_forward(Context& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C);
void layernorm_forward(Context& ctx, bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int N, int C);
void layernorm_forward(Context& ctx, fp16* out, float* mean, float* rstd, const fp16* inp,
                       const fp16* weight, const fp16* bias, int N, int C);
// Fused residual add + LayerNorm: residual_out (N, C) = residual (N, C) + x (N, C), then
// out = layernorm(residual_out). residual_out may alias residual.
void residual_layernorm_forward(Context& ctx, float* residual_out, float* out, float* mean,
                                float* rstd, const float* residual, const float* x,
                                const float* weight, const float* bias, int N, int C);
void residual_layernorm_forward(Context& ctx, bf16* residual_out, bf16* out, float* mean,
                                float* rstd, const bf16* residual, const bf16* x,
                                const bf16* weight, const bf16* bias, int N, int C);
void residual_layernorm_forward(Context& ctx, fp16* residual_out, fp16* out, float* mean,
                                float* rstd, const fp16* residual, const fp16* x,
                                const fp16* weight, const fp16* bias, int N, int C);
// dinp (N, C) += ... (the residual stream's gradient: the residual add's backward is this
// accumulation), dweight (C) += ..., dbias (C) += ...
void layernorm_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);
void layernorm_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean, const float* rstd,
                        int N, int C);
void layernorm_backward(Context& ctx, fp16* dinp, float* dweight, float* dbias, const fp16* dout,
                        const fp16* inp, const fp16* weight, const float* mean, const float* rstd,
                        int N, int C);

// ---- rmsnorm.cu (kernels.h's RMSNorm; rstd (N) fp32) -----------------------------------------
void rmsnorm_forward(Context& ctx, float* out, float* rstd, const float* inp, const float* weight,
                     int N, int C, float eps);
void rmsnorm_forward(Context& ctx, bf16* out, float* rstd, const bf16* inp, const bf16* weight,
                     int N, int C, float eps);
void rmsnorm_forward(Context& ctx, fp16* out, float* rstd, const fp16* inp, const fp16* weight,
                     int N, int C, float eps);
// Fused residual add + RMSNorm; residual_out may alias residual.
void residual_rmsnorm_forward(Context& ctx, float* residual_out, float* out, float* rstd,
                              const float* residual, const float* x, const float* weight, int N,
                              int C, float eps);
void residual_rmsnorm_forward(Context& ctx, bf16* residual_out, bf16* out, float* rstd,
                              const bf16* residual, const bf16* x, const bf16* weight, int N, int C,
                              float eps);
void residual_rmsnorm_forward(Context& ctx, fp16* residual_out, fp16* out, float* rstd,
                              const fp16* residual, const fp16* x, const fp16* weight, int N, int C,
                              float eps);
// dinp (N, C) += ..., dweight (C) += ...
void rmsnorm_backward(Context& ctx, float* dinp, float* dweight, const float* dout,
                      const float* inp, const float* weight, const float* rstd, int N, int C);
void rmsnorm_backward(Context& ctx, bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int N, int C);
void rmsnorm_backward(Context& ctx, fp16* dinp, float* dweight, const fp16* dout, const fp16* inp,
                      const fp16* weight, const float* rstd, int N, int C);

// ---- rope.cu (kernels.h's RoPE on the grouped QKV layout; tables (P, rotary_dim / 2) fp32) ------
void rope_forward(Context& ctx, float* qkv, const float* cos, const float* sin,
                  const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim);
void rope_backward(Context& ctx, float* dqkv, const float* cos, const float* sin,
                   const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim);
void rope_forward(Context& ctx, bf16* qkv, const float* cos, const float* sin,
                  const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim);
void rope_backward(Context& ctx, bf16* dqkv, const float* cos, const float* sin,
                   const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim);
void rope_forward(Context& ctx, fp16* qkv, const float* cos, const float* sin,
                  const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim);
void rope_backward(Context& ctx, fp16* dqkv, const float* cos, const float* sin,
                   const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim);

// ---- swiglu.cu (kernels.h's SwiGLU: out (N, F) from inp (N, 2F) = gate | up) --------------------
void swiglu_forward(Context& ctx, float* out, const float* inp, int N, int F);
void swiglu_backward(Context& ctx, float* dinp, const float* inp, const float* dout, int N, int F);
void swiglu_forward(Context& ctx, bf16* out, const bf16* inp, int N, int F);
void swiglu_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, int N, int F);
void swiglu_forward(Context& ctx, fp16* out, const fp16* inp, int N, int F);
void swiglu_backward(Context& ctx, fp16* dinp, const fp16* inp, const fp16* dout, int N, int F);

// ---- gelu.cu --------------------------------------------------------------------------------
// out (n) = gelu(inp) (tanh form); out may alias inp. dinp (n) = dout * gelu'(inp), may alias.
void gelu_forward(Context& ctx, float* out, const float* inp, size_t n);
void gelu_forward(Context& ctx, bf16* out, const bf16* inp, size_t n);
void gelu_forward(Context& ctx, fp16* out, const fp16* inp, size_t n);
void gelu_backward(Context& ctx, float* dinp, const float* inp, const float* dout, size_t n);
void gelu_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, size_t n);
void gelu_backward(Context& ctx, fp16* dinp, const fp16* inp, const fp16* dout, size_t n);

// ---- embedding.cu ---------------------------------------------------------------------------
// out (B, T, C) = wte[tokens] + wpe[p]; vocabulary-parallel rows as kernels.h; wpe may be null;
// p = positions[b, t] (B, T, device memory) of packed documents, or t when positions is null.
void embedding_forward(Context& ctx, float* out, const int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C, int vocab_begin = 0,
                       int vocab_end = 1 << 30, const int32_t* positions = nullptr);
void embedding_forward(Context& ctx, bf16* out, const int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C, int vocab_begin = 0,
                       int vocab_end = 1 << 30, const int32_t* positions = nullptr);
void embedding_forward(Context& ctx, fp16* out, const int32_t* tokens, const fp16* wte,
                       const fp16* wpe, int B, int T, int C, int vocab_begin = 0,
                       int vocab_end = 1 << 30, const int32_t* positions = nullptr);
// out (B, T, C) += wpe[t]
void position_embedding_forward(Context& ctx, float* out, const float* wpe, int B, int T, int C);
// dwte (V, C) += scatter of dout by token, dwpe (T, C) += dout summed over the batch (scattered
// by position when positions is given); either may be null. Deterministic: every element sums
// its tokens in token order, as on the CPU.
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin = 0,
                        int vocab_end = 1 << 30, const int32_t* positions = nullptr);
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const bf16* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin = 0,
                        int vocab_end = 1 << 30, const int32_t* positions = nullptr);
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const fp16* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin = 0,
                        int vocab_end = 1 << 30, const int32_t* positions = nullptr);

// ---- residual.cu ----------------------------------------------------------------------------
// kernels.h's residual_dropout_forward / dropout_backward with the same counter-based mask;
// out may alias residual or x, dx may alias dout. bf16, fp16: fp32 arithmetic, rounded on
// store.
void residual_dropout_forward(Context& ctx, float* out, const float* residual, const float* x,
                              size_t n, float p, uint64_t key, size_t index_offset = 0);
void residual_dropout_forward(Context& ctx, bf16* out, const bf16* residual, const bf16* x,
                              size_t n, float p, uint64_t key, size_t index_offset = 0);
void residual_dropout_forward(Context& ctx, fp16* out, const fp16* residual, const fp16* x,
                              size_t n, float p, uint64_t key, size_t index_offset = 0);
void dropout_backward(Context& ctx, float* dx, const float* dout, size_t n, float p, uint64_t key,
                      size_t index_offset = 0);
void dropout_backward(Context& ctx, bf16* dx, const bf16* dout, size_t n, float p, uint64_t key,
                      size_t index_offset = 0);
void dropout_backward(Context& ctx, fp16* dx, const fp16* dout, size_t n, float p, uint64_t key,
                      size_t index_offset = 0);

// ---- attention.cu (flash-style: online softmax over key tiles in shared memory) -------------
// Causal self-attention over qkv (B, T, (NH + 2 KV) HS) in kernels.h's grouped layout (kv_heads
// 0: KV = NH, the per-head [q|k|v]); out (B, T, C), C = NH HS.
// lse (B, NH, T) fp32 receives each row's log-sum-exp of the scaled scores; together with
// out it replaces kernels.h's probs (B, NH, T, T), which is never formed. Dropout on the
// probabilities draws kernels.h's mask (keyed by the element's index in the full probs).
// HS = C / NH must be 64 or 128 and kv_heads divide NH (else an error is recorded).
// positions (B, T, device memory), when non-null: query t sees keys [t - positions[b, t], t],
// its own packed document (kernels.h); the backward takes the forward's positions.
void attention_forward(Context& ctx, float* out, float* lse, const float* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset = 0,
                       int total_heads = 0, int kv_heads = 0, const int32_t* positions = nullptr);
void attention_forward(Context& ctx, bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset = 0,
                       int total_heads = 0, int kv_heads = 0, const int32_t* positions = nullptr);
void attention_forward(Context& ctx, fp16* out, float* lse, const fp16* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset = 0,
                       int total_heads = 0, int kv_heads = 0, const int32_t* positions = nullptr);
// dqkv (B, T, (NH + 2 KV) HS) = gradient of qkv given dout (B, T, C), the forward's out and lse.
// workspace: attention_workspace_floats(B, T, NH) floats.
size_t attention_workspace_floats(int B, int T, int NH);
void attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float* out, const float* lse, float* workspace, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, int head_offset = 0,
                        int total_heads = 0, int kv_heads = 0, const int32_t* positions = nullptr);
void attention_backward(Context& ctx, bf16* dqkv, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, float* workspace, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, int head_offset = 0,
                        int total_heads = 0, int kv_heads = 0, const int32_t* positions = nullptr);
void attention_backward(Context& ctx, fp16* dqkv, const fp16* dout, const fp16* qkv,
                        const fp16* out, const float* lse, float* workspace, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, int head_offset = 0,
                        int total_heads = 0, int kv_heads = 0, const int32_t* positions = nullptr);

// ---- attention_block.cu: the blocks of the context-parallel ring (engine/src/parallel/
// ring_attention.cpp, Note [ring attention]) with kernels.h's semantics of AttentionBlock,
// attention_block_forward / attention_block_backward, on device memory: every pointer,
// including block.q_pos, block.k_pos and block.doc, is device memory. Queued on ctx's stream.
// What the blocks read (qkv, kv, dout; row_dot's out) is fp32, bf16 or fp16, widened as it is
// loaded; what they merge or add into (out, lse, dqkv, dkv, delta) is fp32 (Note [ring attention
// in 16 bits] in ring_attention.cpp). HS 64 or 128 and KV dividing NH (else an error is
// recorded). The kernels need no workspace (attention_block_workspace_floats is 0; a null
// workspace is fine).
size_t attention_block_workspace_floats(int B, int NH, int Tq, int Tk, int HS);
void attention_block_forward(Context& ctx, float* out, float* lse, const float* qkv,
                             const float* kv, const kernels::AttentionBlock& block,
                             float* workspace);
void attention_block_forward(Context& ctx, float* out, float* lse, const bf16* qkv, const bf16* kv,
                             const kernels::AttentionBlock& block, float* workspace);
void attention_block_forward(Context& ctx, float* out, float* lse, const fp16* qkv, const fp16* kv,
                             const kernels::AttentionBlock& block, float* workspace);
void attention_block_backward(Context& ctx, float* dqkv, float* dkv, const float* dout,
                              const float* delta, const float* lse, const float* qkv,
                              const float* kv, const kernels::AttentionBlock& block,
                              float* workspace);
void attention_block_backward(Context& ctx, float* dqkv, float* dkv, const bf16* dout,
                              const float* delta, const float* lse, const bf16* qkv, const bf16* kv,
                              const kernels::AttentionBlock& block, float* workspace);
void attention_block_backward(Context& ctx, float* dqkv, float* dkv, const fp16* dout,
                              const float* delta, const float* lse, const fp16* qkv, const fp16* kv,
                              const kernels::AttentionBlock& block, float* workspace);
// kv (rows, 2 KV HS) = the key and value columns of qkv (rows, (NH + 2 KV) HS), grouped layout
// (group g: Q = NH / KV query heads, then its key, then its value).
void attention_kv_pack(Context& ctx, float* kv, const float* qkv, size_t rows, int NH, int KV,
                       int HS);
void attention_kv_pack(Context& ctx, bf16* kv, const bf16* qkv, size_t rows, int NH, int KV,
                       int HS);
void attention_kv_pack(Context& ctx, fp16* kv, const fp16* qkv, size_t rows, int NH, int KV,
                       int HS);
// The key and value columns of qkv = kv; qkv's query columns untouched (fp32: the gradients).
void attention_kv_unpack(Context& ctx, float* qkv, const float* kv, size_t rows, int NH, int KV,
                         int HS);
// delta (B, NH, T) = per row and head, the dot of dout and out (B, T, NH HS) over HS.
void attention_row_dot(Context& ctx, float* delta, const float* dout, const float* out, int B,
                       int T, int NH, int HS);
void attention_row_dot(Context& ctx, float* delta, const bf16* dout, const bf16* out, int B, int T,
                       int NH, int HS);
void attention_row_dot(Context& ctx, float* delta, const fp16* dout, const fp16* out, int B, int T,
                       int NH, int HS);
// x (n) = value.
void fill(Context& ctx, float* x, size_t n, float value);
// acc (n) += x (n).
void accumulate(Context& ctx, float* acc, const float* x, size_t n);

// ---- cross_entropy.cu (fp32 logits) ---------------------------------------------------------
// kernels.h's fused softmax + cross-entropy and its vocabulary-parallel passes; the caller
// all-reduces row_max (max) and sum_exp, target_logit (sum) between the passes. Row sums in
// double, as on the CPU. A negative target (kIgnoreIndex) gives loss 0 and a zero dlogits row.
void softmax_cross_entropy(Context& ctx, float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int N, int V, float grad_scale);
void cross_entropy_shard_max(Context& ctx, float* row_max, const float* logits, int N, int V);
void cross_entropy_shard_sums(Context& ctx, double* sum_exp, float* target_logit,
                              const float* logits, const float* row_max, const int32_t* targets,
                              int vocab_begin, int N, int V);
void cross_entropy_shard_finish(Context& ctx, float* losses, float* dlogits, const float* logits,
                                const float* row_max, const double* sum_exp,
                                const float* target_logit, const int32_t* targets, int vocab_begin,
                                int N, int V, float grad_scale);

// ---- adamw.cu (multi-tensor AdamW, global norm, scaling) -------------------------------------
// The 16-bit compute copy of fp32 parameters that AdamW writes after its update: a bf16 or an
// fp16 array, or none (default; fp32 compute reads the master weights themselves).
struct ComputeCopy {
  enum class Type : uint8_t { kNone, kBf16, kFp16 };
  ComputeCopy() = default;
  ComputeCopy(bf16* p) : data(p), type(p ? Type::kBf16 : Type::kNone) {}  // NOLINT: implicit
  ComputeCopy(fp16* p) : data(p), type(p ? Type::kFp16 : Type::kNone) {}  // NOLINT: implicit
  // The copy of the elements from `offset` on (none stays none).
  ComputeCopy at(size_t offset) const {
    ComputeCopy c = *this;
    if (data) c.data = static_cast<char*>(data) + 2 * offset;  // both types are 2 bytes
    return c;
  }
  void* data = nullptr;
  Type type = Type::kNone;
};

// One parameter tensor of a multi-tensor step: fp32 master param, grad and moments (n each);
// param_copy (n), when set, receives the updated parameter rounded to its type (the compute
// copy). decay false: no weight decay (biases and norms, as Megatron).
struct AdamWTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  ComputeCopy param_copy;
  size_t n = 0;
  bool decay = true;
};
// kernels.h's adamw_update on every tensor (host array of count descriptors) in few launches;
// each grad is multiplied by grad_scale first (loss-scale unscaling and clipping in one).
void adamw_update(Context& ctx, const AdamWTensor* tensors, int count, const AdamWParams& p,
                  float grad_scale = 1.0f);
// result (1 double, device) = sum of x^2 over every tensor (host arrays of count pointers and
// sizes), in a fixed order: deterministic for a given device.
void sum_squares(Context& ctx, double* result, const float* const* tensors, const size_t* sizes,
                 int count);
// Convenience: one tensor, waits and returns the sum to the host.
double sum_squares(Context& ctx, const float* x, size_t n);
// x (n) *= s
void scale(Context& ctx, float* x, size_t n, float s);
// x (n) *= inv_scale; *found_inf (1 float, device) = 1 when any element is or becomes inf or
// NaN, left as it is otherwise (the loss scaler's overflow test, as kernels.h has none).
void unscale_and_check(Context& ctx, float* x, size_t n, float inv_scale, float* found_inf);

// ---- moe.cu (kernels.h's mixture-of-experts ops; Note [deterministic MoE kernels]) ---------
// Same arguments as kernels.h's moe_* with S split in two: T (float, bf16 or fp16; instantiated
// in moe.cu) for the logits and the token rows, float for probabilities, weights and the loss.
// Every result equals the CPU op's on the same (widened) inputs, the dispatch plan exactly.
// All device memory; moe_dispatch_plan and moe_aux_loss use the Context's scratch until the
// next op on its stream. The counts stay on the device: a caller reading them on the host
// copies them (GptModel does, Note [MoE layer]).
template <typename T>
void moe_route(Context& ctx, float* probs, int32_t* route, float* weight, const T* logits, int N,
               int E, int k);
void moe_dispatch_plan(Context& ctx, int32_t* tokens_per_expert, int32_t* counts,
                       int32_t* route_slot, int32_t* slot_row, const int32_t* route,
                       const float* weight, int N, int E, int k, int capacity);
template <typename T>
void moe_gather_rows(Context& ctx, T* out, const T* inp, const int32_t* slot_row, int rows, int C);
template <typename T>
void moe_scatter_add_rows(Context& ctx, T* dinp, const T* d_rows, const int32_t* route_slot, int N,
                          int C, int k);
template <typename T>
void moe_combine(Context& ctx, T* out, const T* expert_out, const float* weight,
                 const int32_t* route_slot, int N, int C, int k);
template <typename T>
void moe_combine_backward(Context& ctx, T* d_expert_out, float* dweight, const T* dout,
                          const T* expert_out, const float* weight, const int32_t* route_slot,
                          int N, int C, int k);
void moe_aux_loss(Context& ctx, float* loss, const float* probs, const int32_t* tokens_per_expert,
                  int N, int E, int k, double coeff);
template <typename T>
void moe_route_backward(Context& ctx, T* dlogits, const float* dweight, const float* probs,
                        const int32_t* route, const float* weight, const int32_t* tokens_per_expert,
                        int N, int E, int k, double aux_scale);

// ---- vision.cu (kernels.h's vision encoder ops) ---------------------------------------------
// cols (B, (H / P) (W / P), Cin P P) = the patches of img (B, Cin, H, W), H and W multiples of P;
// dimg = the inverse permutation of dcols, written (a gather per pixel: deterministic). The
// 16-bit patchify copies elements (exact).
void patchify_forward(Context& ctx, float* cols, const float* img, int B, int Cin, int H, int W,
                      int P);
void patchify_forward(Context& ctx, bf16* cols, const bf16* img, int B, int Cin, int H, int W,
                      int P);
void patchify_forward(Context& ctx, fp16* cols, const fp16* img, int B, int Cin, int H, int W,
                      int P);
void patchify_backward(Context& ctx, float* dimg, const float* dcols, int B, int Cin, int H, int W,
                       int P);
void patchify_backward(Context& ctx, bf16* dimg, const bf16* dcols, int B, int Cin, int H, int W,
                       int P);
void patchify_backward(Context& ctx, fp16* dimg, const fp16* dcols, int B, int Cin, int H, int W,
                       int P);
// out (n) = act(inp), may alias; dinp (n) = dout * act'(inp), may alias dout (not inp). The
// 16-bit ones compute in fp32 and round once.
void activation_forward(Context& ctx, float* out, const float* inp, size_t n, Activation act);
void activation_forward(Context& ctx, bf16* out, const bf16* inp, size_t n, Activation act);
void activation_forward(Context& ctx, fp16* out, const fp16* inp, size_t n, Activation act);
void activation_backward(Context& ctx, float* dinp, const float* inp, const float* dout, size_t n,
                         Activation act);
void activation_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, size_t n,
                         Activation act);
void activation_backward(Context& ctx, fp16* dinp, const fp16* inp, const fp16* dout, size_t n,
                         Activation act);

// ---- convert.cu -----------------------------------------------------------------------------
// dst (n) = src rounded to bf16 or fp16 / widened to fp32.
void convert(Context& ctx, bf16* dst, const float* src, size_t n);
void convert(Context& ctx, fp16* dst, const float* src, size_t n);
void convert(Context& ctx, float* dst, const bf16* src, size_t n);
void convert(Context& ctx, float* dst, const fp16* src, size_t n);

}  // namespace lattice::kernels::cuda
