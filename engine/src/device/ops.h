// The op list of one compute type A on a device (docs/one-engine.md 3.3, issue 21): the one
// signature per op that the model, the optimizer and the loop are to call on every backend.
// Semantics, shapes and gradient conventions are kernels.h's (parameter gradients ACCUMULATED,
// activation gradients WRITTEN, layernorm_backward's dinp +=); the backends: CpuOps (cpu_ops.cpp,
// float and double, forwarding to kernels.h), the CPU's 16-bit lists (cpu_ops_16bit.cpp, the
// same kernels on widened copies, for tests of the 16-bit data flow) and CudaOps (cuda_ops.cpp,
// float, bf16 and fp16, forwarding to kernels::cuda). Until step 6 of the plan nothing in the
// engine calls it. Non-goals: inference's attention_kv_forward (a CPU kernel outside this list),
// position_embedding_forward (the model adds positions with add_bias).
//
// Streams: every op is queued on its device's compute stream (device.h). On the CPU it has run
// when the call returns; on CUDA pointers are device memory and results are there once the
// stream has been synchronised. Errors of queued ops are the device's (Device::error()).
//
// Types: A is the compute type of activations, weights' compute copy and activation gradients;
// G = accum_t<A> is the type of master weights, parameter gradients, optimizer moments,
// LayerNorm statistics, the attention's saved tensor and workspace, and cross-entropy logits
// (Megatron's fp32 main grads; float for float, bf16 and fp16, double for double).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "lattice/dtype.h"
#include "lattice/kernels.h"

namespace lattice {

namespace kernels::cuda {
class Context;
}

template <typename A>
using accum_t = std::conditional_t<std::is_same_v<A, double>, double, float>;

// Where an op that merges or adds in G (the block attention's output and gradients) writes on
// behalf of a caller's buffer in A: that buffer itself when A is G, else the G `scratch`, which
// the caller rounds into its buffer once with to_compute (Note [ring attention in 16 bits]).
template <typename A>
accum_t<A>* merged_in_accum(A* caller, accum_t<A>* scratch) {
  if constexpr (std::is_same_v<A, accum_t<A>>)
    return caller;
  else
    return scratch;
}

// One parameter tensor of a multi-tensor AdamW step (kernels.h's adamw_update on each).
template <typename A>
struct AdamWSpan {
  using G = accum_t<A>;
  G* param = nullptr;       // (n) master weights
  const G* grad = nullptr;  // (n)
  G* m = nullptr;           // (n) first moment
  G* v = nullptr;           // (n) second moment
  A* param_copy = nullptr;  // (n) when set: receives the updated parameter rounded to A (the
                            // compute copy of 16-bit runs); null: none
  size_t n = 0;
  bool decay = true;  // false: no weight decay (biases and norms, as Megatron)
};

// What matmul_forward applies to the GEMM's result: nothing, or GELU (tanh form).
enum class Epilogue { kNone, kGelu };

template <typename A>
class Ops {
 public:
  using G = accum_t<A>;

  virtual ~Ops() = default;
  Ops(const Ops&) = delete;
  Ops& operator=(const Ops&) = delete;

  // ---- linear layers ----------------------------------------------------------------------------
  // out (N, OC) = epilogue(inp (N, C) @ weight (OC, C)^T + bias (OC)); bias may be null. With
  // kGelu, pre_gelu (N, OC), when non-null, receives the GEMM's result (gelu_backward's input);
  // CUDA needs OC % 8 == 0 then (capabilities().mlp_slice_multiple).
  virtual void matmul_forward(A* out, A* pre_gelu, const A* inp, const A* weight, const A* bias,
                              int N, int C, int OC, Epilogue epilogue) = 0;
  // dinp (N, C) = dout (N, OC) @ weight (OC, C), skipped when null;
  // dweight (OC, C) += dout^T @ inp; dbias (OC) += column sums of dout (each skipped when null).
  virtual void matmul_backward(A* dinp, G* dweight, G* dbias, const A* dout, const A* inp,
                               const A* weight, int N, int C, int OC) = 0;
  // out (N, OC) += bias (OC) on every row.
  virtual void add_bias(A* out, const A* bias, int N, int OC) = 0;

  // ---- embedding
  // ---------------------------------------------------------------------------------- out (B, T,
  // C) = wte[tokens (B, T)] + wpe[p], wpe may be null; wte holds vocabulary rows [vocab_begin,
  // vocab_end), other tokens give zero rows (kernels.h). p = positions (B, T) of packed
  // documents (Note [packed sequences], docs/models.md), or t when positions is null.
  virtual void embedding_forward(A* out, const int32_t* tokens, const A* wte, const A* wpe, int B,
                                 int T, int C, int vocab_begin, int vocab_end,
                                 const int32_t* positions) = 0;
  // dwte (V, C) += scatter of dout (B, T, C) by token; dwpe (T, C) += scatter by position (t when
  // positions is null: dout summed over the batch); either may be null.
  virtual void embedding_backward(G* dwte, G* dwpe, const A* dout, const int32_t* tokens, int B,
                                  int T, int C, int vocab_begin, int vocab_end,
                                  const int32_t* positions) = 0;

  // ---- LayerNorm
  // ---------------------------------------------------------------------------------- out (N, C) =
  // (inp - mean) * rstd * weight (C) + bias (C); mean, rstd (N) saved.
  virtual void layernorm_forward(A* out, G* mean, G* rstd, const A* inp, const A* weight,
                                 const A* bias, int N, int C) = 0;
  // residual_out (N, C) = residual + x (both (N, C)), then out, mean, rstd = layernorm_forward
  // of residual_out as stored. residual_out may alias residual.
  virtual void residual_layernorm_forward(A* residual_out, A* out, G* mean, G* rstd,
                                          const A* residual, const A* x, const A* weight,
                                          const A* bias, int N, int C) = 0;
  // dinp (N, C) += ... (the residual stream's gradient); dweight (C) += ...; dbias (C) += ...
  virtual void layernorm_backward(A* dinp, G* dweight, G* dbias, const A* dout, const A* inp,
                                  const A* weight, const G* mean, const G* rstd, int N, int C) = 0;

  // ---- RMSNorm (kernels.h; rstd in G)
  // ------------------------------------------------------------
  virtual void rmsnorm_forward(A* out, G* rstd, const A* inp, const A* weight, int N, int C,
                               float eps) = 0;
  virtual void residual_rmsnorm_forward(A* residual_out, A* out, G* rstd, const A* residual,
                                        const A* x, const A* weight, int N, int C, float eps) = 0;
  // dinp (N, C) += ...; dweight (C) += ...
  virtual void rmsnorm_backward(A* dinp, G* dweight, const A* dout, const A* inp, const A* weight,
                                const G* rstd, int N, int C) = 0;

  // ---- RoPE (kernels.h; the tables (positions, rotary_dim / 2) in G; row n at positions[n], a
  // packed document's position in training, or n % T when null)
  // -----------------------------
  virtual void rope_forward(A* qkv, const G* cos, const G* sin, const int32_t* positions, int N,
                            int T, int NH, int KV, int HS, int rotary_dim) = 0;
  virtual void rope_backward(A* dqkv, const G* cos, const G* sin, const int32_t* positions, int N,
                             int T, int NH, int KV, int HS, int rotary_dim) = 0;

  // ---- SwiGLU (kernels.h): out (N, F) from inp (N, 2F); dinp (N, 2F) given dout (N, F) ----------
  virtual void swiglu_forward(A* out, const A* inp, int N, int F) = 0;
  virtual void swiglu_backward(A* dinp, const A* inp, const A* dout, int N, int F) = 0;

  // ---- GELU, dropout
  // ------------------------------------------------------------------------------ out (n) =
  // gelu(inp (n)), tanh form; may alias. dinp (n) = dout * gelu'(inp); may alias dout.
  virtual void gelu_forward(A* out, const A* inp, size_t n) = 0;
  virtual void gelu_backward(A* dinp, const A* inp, const A* dout, size_t n) = 0;
  // out (n) = residual (n, may be null) + dropout(x (n)); the counter-based mask of kernels.h.
  virtual void residual_dropout_forward(A* out, const A* residual, const A* x, size_t n, float p,
                                        uint64_t key, size_t index_offset) = 0;
  // dx (n) = the mask applied to dout (n); may alias.
  virtual void dropout_backward(A* dx, const A* dout, size_t n, float p, uint64_t key,
                                size_t index_offset) = 0;

  // ---- attention
  // ---------------------------------------------------------------------------------- Elements of
  // the tensor attention_forward saves for the backward: the log-sum-exps (B, NH, T) on every
  // device (Note [attention keeps log-sum-exps] in kernels/cpu/attention.cpp).
  virtual size_t attention_saved_elems(int B, int T, int NH) const = 0;
  // Elements of the workspace both directions take (the CPU: per thread, for the thread count
  // at the call; size it again after kernels::set_num_threads).
  virtual size_t attention_workspace_elems(int B, int T, int NH, int HS) const = 0;
  // Causal self-attention over qkv (B, T, (NH + 2 KV) HS) in kernels.h's grouped layout (KV
  // key/value heads, each read by NH / KV query heads; KV = NH is GPT-2's per-head [q|k|v]) into
  // out (B, T, C), C = NH HS; saved (attention_saved_elems), workspace
  // (attention_workspace_elems). Query heads [head_offset, head_offset + NH) of total_heads (0:
  // NH); dropout p on the probabilities. positions (B, T), when non-null: query t sees keys
  // [t - positions[t], t] only, its own packed document (Note [packed sequences]); null: all of
  // [0, t].
  virtual void attention_forward(A* out, G* saved, const A* qkv, G* workspace, int B, int T, int C,
                                 int NH, float p, uint64_t key, int head_offset, int total_heads,
                                 int KV, const int32_t* positions) = 0;
  // dqkv (B, T, (NH + 2 KV) HS) given dout (B, T, C), the forward's qkv, out and saved; positions
  // as the forward's.
  virtual void attention_backward(A* dqkv, const A* dout, const A* qkv, const A* out,
                                  const G* saved, G* workspace, int B, int T, int C, int NH,
                                  float p, uint64_t key, int head_offset, int total_heads, int KV,
                                  const int32_t* positions) = 0;

  // ---- cross-entropy (logits in G)
  // ---------------------------------------------------------------- losses (N) = -log
  // softmax(logits (N, V))[target]; dlogits (N, V), when non-null, = (softmax - onehot) *
  // grad_scale and may alias logits. A negative target (kernels::kIgnoreIndex, an SFT masked
  // token) gives loss 0 and a zero dlogits row, in every implementation.
  virtual void softmax_cross_entropy(G* losses, G* dlogits, const G* logits, const int32_t* targets,
                                     int N, int V, float grad_scale) = 0;
  // The vocabulary-parallel passes of kernels.h; the caller reduces between them.
  virtual void cross_entropy_shard_max(G* row_max, const G* logits, int N, int V) = 0;
  virtual void cross_entropy_shard_sums(double* sum_exp, G* target_logit, const G* logits,
                                        const G* row_max, const int32_t* targets, int vocab_begin,
                                        int N, int V) = 0;
  virtual void cross_entropy_shard_finish(G* losses, G* dlogits, const G* logits, const G* row_max,
                                          const double* sum_exp, const G* target_logit,
                                          const int32_t* targets, int vocab_begin, int N, int V,
                                          float grad_scale) = 0;

  // ---- conversions
  // -------------------------------------------------------------------------------- dst (n) = src
  // rounded to A (a copy when A == G); dst (n) = src widened to G (likewise).
  virtual void to_compute(A* dst, const G* src, size_t n) = 0;
  virtual void to_accum(G* dst, const A* src, size_t n) = 0;

  // ---- optimizer
  // ---------------------------------------------------------------------------------- kernels.h's
  // multi-tensor adamw_update on `count` tensors (a host array), weight decay off where decay is
  // false, each gradient multiplied by grad_scale on its way in (clipping folded in; the
  // gradients are not written), then each param_copy refreshed.
  virtual void adamw_update(const AdamWSpan<A>* tensors, int count, const kernels::AdamWParams& p,
                            G grad_scale) = 0;
  // Loss scaling's overflow test (Megatron's _amp_foreach_non_finite_check_and_unscale_):
  // x (n) *= inv_scale; *found_inf (1 float, device memory) = 1 when any element is or becomes
  // inf or NaN, left as it is otherwise, so several calls add up to one flag.
  virtual void unscale_and_check(G* x, size_t n, G inv_scale, float* found_inf) = 0;
  // result (1 double, device memory) = sum of x^2 over `count` tensors (host arrays of pointers
  // and sizes), in a fixed order: deterministic for a device and thread count.
  virtual void sum_squares(double* result, const G* const* tensors, const size_t* sizes,
                           int count) = 0;
  // x (n) *= s
  virtual void scale(G* x, size_t n, G s) = 0;

  // ---- mixture of experts (kernels.h's moe_* ops; logits and rows in A, probabilities, weights
  // and the loss in G) -----------------------------------------------------------------------
  // Whether this list has them: every list of the CPU and of CUDA (the CPU's 16-bit ones on
  // widened rows). Elsewhere GptModel::create refuses an MoE model, so the defaults below, which
  // throw std::logic_error, are never reached.
  virtual bool has_moe() const { return false; }
  virtual void moe_route(G* /*probs*/, int32_t* /*route*/, G* /*weight*/, const A* /*logits*/,
                         int /*N*/, int /*E*/, int /*k*/) {
    no_moe();
  }
  // The plan's counts are device memory: a caller reading them on the host copies them when the
  // device's memory is not host memory (GptModel::moe_host_counts).
  virtual void moe_dispatch_plan(int32_t* /*tokens_per_expert*/, int32_t* /*counts*/,
                                 int32_t* /*route_slot*/, int32_t* /*slot_row*/,
                                 const int32_t* /*route*/, const G* /*weight*/, int /*N*/,
                                 int /*E*/, int /*k*/, int /*capacity*/) {
    no_moe();
  }
  virtual void moe_gather_rows(A* /*out*/, const A* /*inp*/, const int32_t* /*slot_row*/,
                               int /*rows*/, int /*C*/) {
    no_moe();
  }
  virtual void moe_scatter_add_rows(A* /*dinp*/, const A* /*d_rows*/, const int32_t* /*route_slot*/,
                                    int /*N*/, int /*C*/, int /*k*/) {
    no_moe();
  }
  virtual void moe_combine(A* /*out*/, const A* /*expert_out*/, const G* /*weight*/,
                           const int32_t* /*route_slot*/, int /*N*/, int /*C*/, int /*k*/) {
    no_moe();
  }
  virtual void moe_combine_backward(A* /*d_expert_out*/, G* /*dweight*/, const A* /*dout*/,
                                    const A* /*expert_out*/, const G* /*weight*/,
                                    const int32_t* /*route_slot*/, int /*N*/, int /*C*/,
                                    int /*k*/) {
    no_moe();
  }
  virtual void moe_aux_loss(G* /*loss*/, const G* /*probs*/, const int32_t* /*tokens_per_expert*/,
                            int /*N*/, int /*E*/, int /*k*/, double /*coeff*/) {
    no_moe();
  }
  virtual void moe_route_backward(A* /*dlogits*/, const G* /*dweight*/, const G* /*probs*/,
                                  const int32_t* /*route*/, const G* /*weight*/,
                                  const int32_t* /*tokens_per_expert*/, int /*N*/, int /*E*/,
                                  int /*k*/, double /*aux_scale*/) {
    no_moe();
  }

  // ---- ring attention (context parallelism; parallel/ring_attention.h, Note [ring attention])
  // kernels.h's attention_block_* and the ring's data movement. What the forward reads (qkv, the
  // travelling keys and values, dout and the final out) is in A; what the blocks merge or add
  // into (out, lse, dqkv, dkv, delta, the workspace) is in G, so a 16-bit ring rounds once, at
  // its end, as a 16-bit attention kernel rounds its output (Note [ring attention in 16 bits]).
  // Whether this list has them: every list of the CPU and of CUDA. Elsewhere GptModel::create
  // refuses CP > 1 first, so the defaults below, which throw std::logic_error, are never
  // reached. Every pointer is device memory, AttentionBlock's q_pos, k_pos and doc included.
  virtual bool has_ring_attention() const { return false; }
  // Elements of G of the workspace both block directions take (the CPU: per thread, for the
  // thread count at the call).
  virtual size_t attention_block_workspace_elems(int /*B*/, int /*NH*/, int /*Tq*/, int /*Tk*/,
                                                 int /*HS*/) const {
    no_ring();
  }
  virtual void attention_block_forward(G* /*out*/, G* /*lse*/, const A* /*qkv*/, const A* /*kv*/,
                                       const kernels::AttentionBlock& /*block*/, G* /*workspace*/) {
    no_ring();
  }
  virtual void attention_block_backward(G* /*dqkv*/, G* /*dkv*/, const A* /*dout*/,
                                        const G* /*delta*/, const G* /*lse*/, const A* /*qkv*/,
                                        const A* /*kv*/, const kernels::AttentionBlock& /*block*/,
                                        G* /*workspace*/) {
    no_ring();
  }
  // kv (rows, 2 KV HS) = qkv's key and value columns, in A (what travels the forward's ring);
  // unpack, in G, puts the gradients of those columns back into dqkv.
  virtual void attention_kv_pack(A* /*kv*/, const A* /*qkv*/, size_t /*rows*/, int /*NH*/,
                                 int /*KV*/, int /*HS*/) {
    no_ring();
  }
  virtual void attention_kv_unpack(G* /*qkv*/, const G* /*kv*/, size_t /*rows*/, int /*NH*/,
                                   int /*KV*/, int /*HS*/) {
    no_ring();
  }
  virtual void attention_row_dot(G* /*delta*/, const A* /*dout*/, const A* /*out*/, int /*B*/,
                                 int /*T*/, int /*NH*/, int /*HS*/) {
    no_ring();
  }
  // x (n) = value; acc (n) += x (n).
  virtual void fill(G* /*x*/, size_t /*n*/, G /*value*/) { no_ring(); }
  virtual void accumulate(G* /*acc*/, const G* /*x*/, size_t /*n*/) { no_ring(); }

  // ---- vision encoder (kernels.h's patchify_* and activation_*; model/vision_encoder.h)
  // Whether this list has them: every list of the CPU and of CUDA (the 16-bit ones compute the
  // activations in fp32 and round once). Elsewhere VisionEncoder::create refuses, so the
  // defaults below, which throw std::logic_error, are never reached.
  virtual bool has_vision() const { return false; }
  // cols (B, (H / P) (W / P), Cin P P) = the patches of img (B, Cin, H, W); dimg the inverse.
  virtual void patchify_forward(A* /*cols*/, const A* /*img*/, int /*B*/, int /*Cin*/, int /*H*/,
                                int /*W*/, int /*P*/) {
    no_vision();
  }
  virtual void patchify_backward(A* /*dimg*/, const A* /*dcols*/, int /*B*/, int /*Cin*/, int /*H*/,
                                 int /*W*/, int /*P*/) {
    no_vision();
  }
  // out (n) = act(inp (n)) (quick_gelu or exact GELU); dinp (n) = dout * act'(inp).
  virtual void activation_forward(A* /*out*/, const A* /*inp*/, size_t /*n*/,
                                  kernels::Activation /*act*/) {
    no_vision();
  }
  virtual void activation_backward(A* /*dinp*/, const A* /*inp*/, const A* /*dout*/, size_t /*n*/,
                                   kernels::Activation /*act*/) {
    no_vision();
  }

 protected:
  Ops() = default;

 private:
  [[noreturn]] static void no_moe() {
    throw std::logic_error("MoE ops called on an op list without them (GptModel::create refuses)");
  }
  [[noreturn]] static void no_vision() {
    throw std::logic_error(
        "vision ops called on an op list without them (VisionEncoder::create refuses)");
  }
  [[noreturn]] static void no_ring() {
    throw std::logic_error(
        "ring attention ops called on an op list without them (GptModel::create refuses)");
  }
};

// The CPU's op lists, one per compute type, process-wide (they hold no state): float and
// double forward to kernels.h (cpu_ops.cpp); bf16 and fp16 run the float kernels on widened
// copies and round their results (cpu_ops_16bit.cpp), bf16's GEMMs on oneDNN's bf16 matmul
// where kernels::bf16_gemm() says so; for tests of the 16-bit data flow, and for --bf16 runs
// where the CPU has bf16 GEMMs (cpu_capabilities()). Every op has run when it returns.
template <typename A>
Ops<A>& cpu_ops();
template <>
Ops<float>& cpu_ops<float>();
template <>
Ops<double>& cpu_ops<double>();
template <>
Ops<bf16>& cpu_ops<bf16>();
template <>
Ops<fp16>& cpu_ops<fp16>();
// The most bytes the 16-bit lists' widened copies held on the calling thread (taken, in use or
// kept for reuse) since the last call (tests).
size_t widened_high_water();

// The CUDA op list of compute type A (float, bf16, fp16) over `ctx`, its stream the device's
// compute stream. Defined in cuda_ops.cpp, so only lattice_engine_gpu's users may call it.
template <typename A>
std::unique_ptr<Ops<A>> make_cuda_ops(kernels::cuda::Context& ctx);

}  // namespace lattice
