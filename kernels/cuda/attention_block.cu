// The blocks of context-parallel ring attention on CUDA (engine/src/parallel/ring_attention.cpp,
// Note [ring attention]) with the semantics of kernels.h's attention_block_forward / _backward:
// one block of queries against one ring step's keys and values, merged into each row's output
// and log-sum-exp by the online softmax; the backward recomputes the probabilities from the final
// log-sum-exp and ADDS its gradients. What the blocks read (qkv, kv, dout; row_dot's out) is fp32,
// bf16 or fp16, widened as it is loaded; what they merge or add into (out, lse, dqkv, dkv, delta)
// is fp32 (Note [ring attention in 16 bits] in ring_attention.cpp): one template per op, for the
// three input types. Head sizes 64 and 128. Every pointer of AttentionBlock (q_pos, k_pos, doc)
// is device memory.
//
// Note "block tiles": the layout of attention.cu's note "attention tiles" (32 rows a block, 8
// warps of 4 rows, the other side streamed in tiles of 32 through shared memory, lane j owning
// element j of the tile), with the causal test j <= i replaced by the block's mask on global
// positions: key j is visible to query i when k_pos[j] <= q_pos[i] and, with doc, k_pos[j] >=
// q_pos[i] - doc[b, i]. The positions of a ring block need not be contiguous (a rank's two
// half-chunks), so no tile is skipped by index; a warp skips a tile in which none of its row's
// pairs is visible (one warp_max), so the masked half of a diagonal block costs loads only.
// Every input type runs these fp32 CUDA-core tiles (attention.cu's tensor-core tiles are not used
// here). As in attention.cu, dq and dk/dv are separate kernels: every gradient element is added to
// by one thread (deterministic, no atomics); a dk/dv block sums its group's query heads in order.
// No workspace: the kernels write out, lse, dqkv and dkv in place.
#include <cmath>
#include <string>

#include "attention_block_kernels.cuh"
#include "common.cuh"

namespace lattice::kernels::cuda {
namespace {

constexpr int kOpThreads = 256;

// Launches kernel with `floats` of dynamic shared memory (above the 48 KiB default: opt in).
template <typename Kernel, typename... Args>
void launch_tiles(Context& ctx, const char* op, Kernel kernel, dim3 grid, size_t floats,
                  Args... args) {
  const size_t bytes = floats * sizeof(float);
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(bytes));
  kernel<<<grid, kWarps * 32, bytes, stream_of(ctx)>>>(args...);
  check_launch(ctx, op);
}

// Whether the block is one the kernels handle; records the reason in ctx when not.
bool supported(Context& ctx, const char* op, const AttentionBlock& a) {
  std::string why;
  if (a.KV <= 0 || a.NH % a.KV != 0)
    why = std::to_string(a.KV) + " key/value heads do not divide " + std::to_string(a.NH) +
          " query heads";
  else if (a.HS != 64 && a.HS != 128)
    why = "head size " + std::to_string(a.HS) + " is not supported; the CUDA attention handles " +
          "64 and 128";
  else if (a.q_begin < 0 || a.q_end > a.Tq || a.k_begin < 0 || a.k_end > a.Tk)
    why = "rows [" + std::to_string(a.q_begin) + ", " + std::to_string(a.q_end) + ") of " +
          std::to_string(a.Tq) + " queries or [" + std::to_string(a.k_begin) + ", " +
          std::to_string(a.k_end) + ") of " + std::to_string(a.Tk) + " keys are out of range";
  if (why.empty()) return true;
  ctx.record_error(std::string(op) + ": " + why);
  return false;
}

float scale_of(int HS) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(HS)));
}

// In: float, or the device type of a 16-bit input (common.cuh's Device).
template <typename In, int HS>
void forward(Context& ctx, float* out, float* lse, const In* qkv, const In* kv,
             const AttentionBlock& a) {
  const dim3 grid((a.q_end - a.q_begin + kRows - 1) / kRows, a.B * a.NH);
  launch_tiles(ctx, "attention_block_forward", attention_block_forward_kernel<In, HS>, grid,
               kRows * HS + kTile * (HS + 1) + kTile * HS + kTile, out, lse, qkv, kv, a,
               scale_of(HS));
}

template <typename In, int HS>
void backward(Context& ctx, float* dqkv, float* dkv, const In* dout, const float* delta,
              const float* lse, const In* qkv, const In* kv, const AttentionBlock& a) {
  const dim3 q_grid((a.q_end - a.q_begin + kRows - 1) / kRows, a.B * a.NH);
  launch_tiles(ctx, "attention_block_backward (dq)", attention_block_backward_dq_kernel<In, HS>,
               q_grid, 2 * kRows * HS + 2 * kTile * (HS + 1) + kTile, dqkv, dout, delta, lse, qkv,
               kv, a, scale_of(HS));
  const dim3 k_grid((a.k_end - a.k_begin + kRows - 1) / kRows, a.B * a.KV);
  launch_tiles(ctx, "attention_block_backward (dk, dv)",
               attention_block_backward_dkv_kernel<In, HS>, k_grid,
               2 * kRows * HS + 2 * kTile * (HS + 1) + 4 * kTile, dkv, dout, delta, lse, qkv, kv, a,
               scale_of(HS));
}

// The public overloads' bodies; T: float, bf16 or fp16 (dtype.h's storage types).
template <typename T>
void block_forward(Context& ctx, float* out, float* lse, const T* qkv, const T* kv,
                   const AttentionBlock& block) {
  if (block.B <= 0 || block.q_end <= block.q_begin || block.k_end <= block.k_begin) return;
  if (!supported(ctx, "attention_block_forward", block)) return;
  if (block.HS == 64)
    forward<typename Device<T>::type, 64>(ctx, out, lse, dev(qkv), dev(kv), block);
  else
    forward<typename Device<T>::type, 128>(ctx, out, lse, dev(qkv), dev(kv), block);
}

template <typename T>
void block_backward(Context& ctx, float* dqkv, float* dkv, const T* dout, const float* delta,
                    const float* lse, const T* qkv, const T* kv, const AttentionBlock& block) {
  if (block.B <= 0 || block.q_end <= block.q_begin || block.k_end <= block.k_begin) return;
  if (!supported(ctx, "attention_block_backward", block)) return;
  using DT = typename Device<T>::type;
  if (block.HS == 64)
    backward<DT, 64>(ctx, dqkv, dkv, dev(dout), delta, lse, dev(qkv), dev(kv), block);
  else
    backward<DT, 128>(ctx, dqkv, dkv, dev(dout), delta, lse, dev(qkv), dev(kv), block);
}

template <typename T>
void kv_pack(Context& ctx, T* kv, const T* qkv, size_t rows, int NH, int KV, int HS) {
  const size_t n = rows * 2 * KV * HS;
  if (n == 0) return;
  attention_kv_pack_kernel<<<blocks_for(n, kOpThreads), kOpThreads, 0, stream_of(ctx)>>>(
      dev(kv), dev(qkv), n, NH, KV, HS);
  check_launch(ctx, "attention_kv_pack");
}

template <typename T>
void row_dot(Context& ctx, float* delta, const T* dout, const T* out, int B, int T_, int NH,
             int HS) {
  const size_t rows = static_cast<size_t>(B) * NH * T_;
  if (rows == 0) return;
  attention_row_dot_kernel<<<blocks_for(rows, kOpThreads / 32), kOpThreads, 0, stream_of(ctx)>>>(
      delta, dev(dout), dev(out), B, T_, NH, HS);
  check_launch(ctx, "attention_row_dot");
}

}  // namespace

size_t attention_block_workspace_floats(int /*B*/, int /*NH*/, int /*Tq*/, int /*Tk*/,
                                        int /*HS*/) {
  return 0;  // note "block tiles": none needed
}

void attention_block_forward(Context& ctx, float* out, float* lse, const float* qkv,
                             const float* kv, const AttentionBlock& block, float* /*workspace*/) {
  block_forward(ctx, out, lse, qkv, kv, block);
}
void attention_block_forward(Context& ctx, float* out, float* lse, const bf16* qkv, const bf16* kv,
                             const AttentionBlock& block, float* /*workspace*/) {
  block_forward(ctx, out, lse, qkv, kv, block);
}
void attention_block_forward(Context& ctx, float* out, float* lse, const fp16* qkv, const fp16* kv,
                             const AttentionBlock& block, float* /*workspace*/) {
  block_forward(ctx, out, lse, qkv, kv, block);
}

void attention_block_backward(Context& ctx, float* dqkv, float* dkv, const float* dout,
                              const float* delta, const float* lse, const float* qkv,
                              const float* kv, const AttentionBlock& block, float* /*workspace*/) {
  block_backward(ctx, dqkv, dkv, dout, delta, lse, qkv, kv, block);
}
void attention_block_backward(Context& ctx, float* dqkv, float* dkv, const bf16* dout,
                              const float* delta, const float* lse, const bf16* qkv, const bf16* kv,
                              const AttentionBlock& block, float* /*workspace*/) {
  block_backward(ctx, dqkv, dkv, dout, delta, lse, qkv, kv, block);
}
void attention_block_backward(Context& ctx, float* dqkv, float* dkv, const fp16* dout,
                              const float* delta, const float* lse, const fp16* qkv, const fp16* kv,
                              const AttentionBlock& block, float* /*workspace*/) {
  block_backward(ctx, dqkv, dkv, dout, delta, lse, qkv, kv, block);
}

void attention_kv_pack(Context& ctx, float* kv, const float* qkv, size_t rows, int NH, int KV,
                       int HS) {
  kv_pack(ctx, kv, qkv, rows, NH, KV, HS);
}
void attention_kv_pack(Context& ctx, bf16* kv, const bf16* qkv, size_t rows, int NH, int KV,
                       int HS) {
  kv_pack(ctx, kv, qkv, rows, NH, KV, HS);
}
void attention_kv_pack(Context& ctx, fp16* kv, const fp16* qkv, size_t rows, int NH, int KV,
                       int HS) {
  kv_pack(ctx, kv, qkv, rows, NH, KV, HS);
}

void attention_kv_unpack(Context& ctx, float* qkv, const float* kv, size_t rows, int NH, int KV,
                         int HS) {
  const size_t n = rows * 2 * KV * HS;
  if (n == 0) return;
  attention_kv_unpack_kernel<<<blocks_for(n, kOpThreads), kOpThreads, 0, stream_of(ctx)>>>(
      qkv, kv, n, NH, KV, HS);
  check_launch(ctx, "attention_kv_unpack");
}

void attention_row_dot(Context& ctx, float* delta, const float* dout, const float* out, int B,
                       int T, int NH, int HS) {
  row_dot(ctx, delta, dout, out, B, T, NH, HS);
}
void attention_row_dot(Context& ctx, float* delta, const bf16* dout, const bf16* out, int B, int T,
                       int NH, int HS) {
  row_dot(ctx, delta, dout, out, B, T, NH, HS);
}
void attention_row_dot(Context& ctx, float* delta, const fp16* dout, const fp16* out, int B, int T,
                       int NH, int HS) {
  row_dot(ctx, delta, dout, out, B, T, NH, HS);
}

void fill(Context& ctx, float* x, size_t n, float value) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n, kOpThreads), kOpThreads, 0, stream_of(ctx)>>>(x, n, value);
  check_launch(ctx, "fill");
}

void accumulate(Context& ctx, float* acc, const float* x, size_t n) {
  if (n == 0) return;
  accumulate_kernel<<<blocks_for(n, kOpThreads), kOpThreads, 0, stream_of(ctx)>>>(acc, x, n);
  check_launch(ctx, "accumulate");
}

}  // namespace lattice::kernels::cuda
