// Causal self-attention, flash-style: scores are formed one key tile at a time with an online
// softmax, so nothing of size T x T is ever stored; the forward keeps each row's log-sum-exp
// (lse) and the backward recomputes the probabilities from it (FlashAttention-2's recipe).
// bf16 and fp16 tensors run on tensor cores (attention_mma_kernels.cuh, note "mma tiles");
// fp32 tensors, and 16-bit views whose rows do not start on 16 bytes, run the fp32 CUDA-core
// kernels of attention_kernels.cuh (note "attention tiles" below). Both keep the CPU's dropout
// mask and write every gradient element from one thread (deterministic, no atomics).
// Grouped-query attention (kv_heads = KV < NH): query head h reads its group h / (NH / KV)'s key
// and value where they lie in qkv (never copied per query head); the dk/dv pass runs one block
// per group and key block, which sums the group's query heads in order (note "attention
// tiles", last paragraph).
// Packed documents (positions non-null, Note [packed sequences]): a query sees its own
// document's keys only; blocks skip the key tiles before their first query's document and, in
// the dk/dv pass, the query tiles after their keys' documents, so a sequence of short documents
// costs less than a plain causal one. Null positions: the plain causal kernels, unchanged.
// Non-goals: head sizes other than 64 and 128, sliding windows.
//
// Note "attention tiles": a block owns 32 rows (queries in the forward and the dq pass, keys
// in the dk/dv pass) with 8 warps of 4 rows each. The other side is streamed through shared
// memory in tiles of 32, lane j of a warp handling element j of the tile: its score is a dot
// product of a broadcast row against a padded (HS + 1) shared row, so the 32 lanes hit 32
// banks. Products with the value / key tiles then broadcast each lane's weight with a
// shuffle, each lane owning HS / 32 output dimensions. Everything is computed in fp32; bf16
// and fp16 tensors are widened when loaded. The dq pass and the dk/dv pass are separate kernels, so
// every gradient element is written by one thread: deterministic, no atomics.
// With query groups, a dk/dv block owns 32 key rows of one group and streams the query tiles of
// each of the group's query heads in turn into the same accumulators: a key's gradient is the sum
// over its group's heads in a fixed order, still written once. The price: B KV instead of B NH
// rows of blocks, each with Q = NH / KV heads' work (fewer, longer blocks at small KV).
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "attention_kernels.cuh"
#include "attention_mma_kernels.cuh"
#include "common.cuh"

namespace lattice::kernels::cuda {
namespace {

AttentionArgs make_args(int B, int T_, int NH, int KV, int HS, float dropout_p, uint64_t key,
                        int head_offset, int total_heads, const int32_t* positions) {
  AttentionArgs a{};
  a.positions = positions;
  a.B = B, a.T = T_, a.NH = NH, a.KV = KV;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(HS)));
  a.dropout = dropout_p > 0.0f;
  a.threshold = dropout_threshold(dropout_p);
  a.keep_scale = a.dropout ? static_cast<float>(1.0 / (1.0 - dropout_p)) : 1.0f;
  a.key = key;
  a.head_offset = head_offset;
  a.total_heads = total_heads > 0 ? total_heads : NH;
  return a;
}

// Launches kernel with `floats` of dynamic shared memory (above the 48 KiB default: opt in).
template <typename Kernel, typename... Args>
void launch(Context& ctx, const char* op, Kernel kernel, dim3 grid, size_t floats, Args... args) {
  const size_t bytes = floats * sizeof(float);
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
  kernel<<<grid, kWarps * 32, bytes, stream_of(ctx)>>>(args...);
  check_launch(ctx, op);
}

bool supported(Context& ctx, const char* op, int C, int NH, int KV) {
  const int HS = C / NH;
  if (KV <= 0 || NH % KV != 0) {
    ctx.record_error(std::string(op) + ": " + std::to_string(KV) +
                     " key/value heads do not divide " + std::to_string(NH) + " query heads");
    return false;
  }
  if (C % NH == 0 && (HS == 64 || HS == 128)) return true;
  ctx.record_error(std::string(op) + ": head size " + std::to_string(HS) + " (C " +
                   std::to_string(C) + " / NH " + std::to_string(NH) +
                   ") is not supported; the CUDA attention handles 64 and 128");
  return false;
}

// 16-bit tensors whose rows start on 16 bytes take the tensor-core kernels
// (attention_mma_kernels.cuh); fp32 and unaligned views the fp32 kernels above.
bool aligned16(std::initializer_list<const void*> tensors) {
  for (const void* p : tensors)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Launches kernel with `elems` 16-bit elements of dynamic shared memory, 4 warps.
template <typename Kernel, typename... Args>
void launch_mma(Context& ctx, const char* op, Kernel kernel, dim3 grid, size_t elems,
                Args... args) {
  const size_t bytes = elems * sizeof(uint16_t);
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
  kernel<<<grid, mma_tiles::kBlockWarps * 32, bytes, stream_of(ctx)>>>(args...);
  check_launch(ctx, op);
}

template <typename T, int HS>
void forward(Context& ctx, T* out, float* lse, const T* qkv, const AttentionArgs& a) {
  using DT = typename Device<T>::type;
  if constexpr (!std::is_same_v<T, float>) {
    if (aligned16({out, qkv})) {
      const dim3 grid((a.T + mma_tiles::kBlockRows - 1) / mma_tiles::kBlockRows, a.B * a.NH);
      launch_mma(ctx, "attention_forward", attention_forward_mma_kernel<DT, HS>, grid,
                 mma_tiles::forward_elems<HS>(), dev(out), lse, dev(qkv), a);
      return;
    }
  }
  const dim3 grid((a.T + kRows - 1) / kRows, a.B * a.NH);
  launch(ctx, "attention_forward", attention_forward_kernel<DT, HS>, grid,
         kRows * HS + kTile * (HS + 1) + kTile * HS, dev(out), lse, dev(qkv), a);
}

template <typename T, int HS>
void backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
              float* delta, const AttentionArgs& a) {
  using DT = typename Device<T>::type;
  const int rows = a.B * a.NH * a.T;
  attention_delta_kernel<DT, HS><<<(rows + kWarps - 1) / kWarps, kWarps * 32, 0, stream_of(ctx)>>>(
      delta, dev(dout), dev(out), a.B, a.T, a.NH);
  check_launch(ctx, "attention_backward (delta)");
  if constexpr (!std::is_same_v<T, float>) {
    if (aligned16({dqkv, dout, qkv})) {
      const dim3 grid((a.T + mma_tiles::kBlockRows - 1) / mma_tiles::kBlockRows, a.B * a.NH);
      launch_mma(ctx, "attention_backward (dq)", attention_backward_dq_mma_kernel<DT, HS>, grid,
                 mma_tiles::dq_elems<HS>(), dev(dqkv), dev(dout), dev(qkv), lse,
                 static_cast<const float*>(delta), a);
      const dim3 kv_grid(grid.x, a.B * a.KV);  // one block per group and key block
      launch_mma(ctx, "attention_backward (dk, dv)", attention_backward_dkv_mma_kernel<DT, HS>,
                 kv_grid, mma_tiles::dkv_elems<HS>(), dev(dqkv), dev(dout), dev(qkv), lse,
                 static_cast<const float*>(delta), a);
      return;
    }
  }
  const dim3 grid((a.T + kRows - 1) / kRows, a.B * a.NH);
  launch(ctx, "attention_backward (dq)", attention_backward_dq_kernel<DT, HS>, grid,
         2 * kRows * HS + 2 * kTile * (HS + 1), dev(dqkv), dev(dout), dev(qkv), lse,
         static_cast<const float*>(delta), a);
  launch(ctx, "attention_backward (dk, dv)", attention_backward_dkv_kernel<DT, HS>,
         dim3(grid.x, a.B * a.KV), 2 * kRows * HS + 2 * kTile * (HS + 1) + 3 * kTile, dev(dqkv),
         dev(dout), dev(qkv), lse, static_cast<const float*>(delta), a);
}

template <typename T>
void forward_any(Context& ctx, T* out, float* lse, const T* qkv, int B, int T_, int C, int NH,
                 float dropout_p, uint64_t key, int head_offset, int total_heads, int kv_heads,
                 const int32_t* positions) {
  const int KV = kv_heads > 0 ? kv_heads : NH;
  if (!supported(ctx, "attention_forward", C, NH, KV)) return;
  const int HS = C / NH;
  const AttentionArgs a =
      make_args(B, T_, NH, KV, HS, dropout_p, key, head_offset, total_heads, positions);
  if (HS == 64)
    forward<T, 64>(ctx, out, lse, qkv, a);
  else
    forward<T, 128>(ctx, out, lse, qkv, a);
}

template <typename T>
void backward_any(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out,
                  const float* lse, float* workspace, int B, int T_, int C, int NH, float dropout_p,
                  uint64_t key, int head_offset, int total_heads, int kv_heads,
                  const int32_t* positions) {
  const int KV = kv_heads > 0 ? kv_heads : NH;
  if (!supported(ctx, "attention_backward", C, NH, KV)) return;
  const int HS = C / NH;
  const AttentionArgs a =
      make_args(B, T_, NH, KV, HS, dropout_p, key, head_offset, total_heads, positions);
  if (HS == 64)
    backward<T, 64>(ctx, dqkv, dout, qkv, out, lse, workspace, a);
  else
    backward<T, 128>(ctx, dqkv, dout, qkv, out, lse, workspace, a);
}

}  // namespace

size_t attention_workspace_floats(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T;
}

void attention_forward(Context& ctx, float* out, float* lse, const float* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                       int total_heads, int kv_heads, const int32_t* positions) {
  forward_any(ctx, out, lse, qkv, B, T, C, NH, dropout_p, dropout_key, head_offset, total_heads,
              kv_heads, positions);
}
void attention_forward(Context& ctx, bf16* out, float* lse, const bf16* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                       int total_heads, int kv_heads, const int32_t* positions) {
  forward_any(ctx, out, lse, qkv, B, T, C, NH, dropout_p, dropout_key, head_offset, total_heads,
              kv_heads, positions);
}
void attention_forward(Context& ctx, fp16* out, float* lse, const fp16* qkv, int B, int T, int C,
                       int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                       int total_heads, int kv_heads, const int32_t* positions) {
  forward_any(ctx, out, lse, qkv, B, T, C, NH, dropout_p, dropout_key, head_offset, total_heads,
              kv_heads, positions);
}
void attention_backward(Context& ctx, float* dqkv, const float* dout, const float* qkv,
                        const float* out, const float* lse, float* workspace, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                        int total_heads, int kv_heads, const int32_t* positions) {
  backward_any(ctx, dqkv, dout, qkv, out, lse, workspace, B, T, C, NH, dropout_p, dropout_key,
               head_offset, total_heads, kv_heads, positions);
}
void attention_backward(Context& ctx, bf16* dqkv, const bf16* dout, const bf16* qkv,
                        const bf16* out, const float* lse, float* workspace, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                        int total_heads, int kv_heads, const int32_t* positions) {
  backward_any(ctx, dqkv, dout, qkv, out, lse, workspace, B, T, C, NH, dropout_p, dropout_key,
               head_offset, total_heads, kv_heads, positions);
}
void attention_backward(Context& ctx, fp16* dqkv, const fp16* dout, const fp16* qkv,
                        const fp16* out, const float* lse, float* workspace, int B, int T, int C,
                        int NH, float dropout_p, uint64_t dropout_key, int head_offset,
                        int total_heads, int kv_heads, const int32_t* positions) {
  backward_any(ctx, dqkv, dout, qkv, out, lse, workspace, B, T, C, NH, dropout_p, dropout_key,
               head_offset, total_heads, kv_heads, positions);
}

}  // namespace lattice::kernels::cuda
