// The flash-style attention kernels (note "attention tiles" in attention.cu), kept apart
// from their launchers so that tests/kernels/cuda/test_kernels_emulated.cpp can also run them on
// the CPU under a small emulation of threads, warps and shared memory (no GPU needed):
// with nvcc this file includes the real primitives, elsewhere the includer supplies them.
#pragma once

#ifdef __CUDACC__
#include "common.cuh"
#endif
#include "lattice/dropout_hash.h"
#include "reduce.cuh"

namespace lattice::kernels::cuda {
namespace {

constexpr int kRows = 32;  // rows a block owns
constexpr int kTile = 32;  // streamed tile (one per lane)
constexpr int kWarps = 8;  // 4 rows per warp
constexpr int kRowsPerWarp = kRows / kWarps;

struct AttentionArgs {
  int B, T, NH;
  int KV;       // key/value heads (query groups), NH / KV query heads each; NH: GPT-2's layout
  float scale;  // 1 / sqrt(HS), folded into q as it is loaded
  bool dropout;
  uint32_t threshold;
  float keep_scale;
  uint64_t key;
  int head_offset, total_heads;
  const int32_t* positions;  // (B, T) packed documents' positions, or null: plain causal
};

// The first key query i of sequence b sees: the start of its packed document (Note [packed
// sequences]: i - positions[b, i]), or 0. Rows past T see from 0 (they are never stored).
// Documents are contiguous, so first_key never decreases along i: the kernels skip the key
// tiles before their first row's first key and the query tiles past a key block's documents.
__device__ __forceinline__ int first_key(const AttentionArgs& a, int b, int i) {
  return a.positions && i < a.T ? i - a.positions[static_cast<size_t>(b) * a.T + i] : 0;
}

// Index of probability (b, h, i, j) in kernels.h's probs over all heads: the dropout key.
__device__ __forceinline__ bool kept(const AttentionArgs& a, int b, int h, int i, int j) {
  const size_t base =
      (static_cast<size_t>(b) * a.total_heads + a.head_offset + h) * a.T * static_cast<size_t>(a.T);
  return dropout_keep(a.key, base + static_cast<size_t>(i) * a.T + j, a.threshold);
}

// The grouped layout of qkv (B, T, (NH + 2 KV) HS) (kernels.h): group g's columns hold its
// Q = NH / KV query heads, then its key, then its value. Query head h reads group h / Q's key
// and value in place; with KV = NH (Q = 1) this is GPT-2's per-head [q|k|v].
template <int HS>
__device__ __forceinline__ size_t qkv_width(const AttentionArgs& a) {
  return static_cast<size_t>(a.NH + 2 * a.KV) * HS;
}
template <int HS>
__device__ __forceinline__ size_t query_column(const AttentionArgs& a, int h) {
  const int Q = a.NH / a.KV;
  return (static_cast<size_t>(h / Q) * (Q + 2) + h % Q) * HS;
}
template <int HS>  // the value is the next HS columns
__device__ __forceinline__ size_t key_column(const AttentionArgs& a, int g) {
  const int Q = a.NH / a.KV;
  return (static_cast<size_t>(g) * (Q + 2) + Q) * HS;
}

// rows (32, HS) of sequence b's columns [col, col + HS) of qkv (a query, key or value head)
// into shared memory with row stride `stride`, rows past T zeroed, multiplied by `mul`.
template <typename T, int HS>
__device__ void load_rows(float* dst, int stride, const T* qkv, const AttentionArgs& a, int b,
                          size_t col, int row0, float mul) {
  const size_t ld = qkv_width<HS>(a);
  const T* src = qkv + static_cast<size_t>(b) * a.T * ld + col;
  for (int idx = threadIdx.x; idx < kRows * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS, row = row0 + r;
    dst[r * stride + d] = row < a.T ? to_float(src[row * ld + d]) * mul : 0.0f;
  }
}

// rows (32, HS) of a (B, T, C) tensor's head h (out, dout) into shared memory.
template <typename T, int HS>
__device__ void load_head_rows(float* dst, int stride, const T* x, int b, int h, int row0, int T_,
                               int NH) {
  const size_t C = static_cast<size_t>(NH) * HS;
  const T* src = x + static_cast<size_t>(b) * T_ * C + static_cast<size_t>(h) * HS;
  for (int idx = threadIdx.x; idx < kRows * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS, row = row0 + r;
    dst[r * stride + d] = row < T_ ? to_float(src[row * C + d]) : 0.0f;
  }
}

__device__ __forceinline__ float dot_rows(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma unroll 16
  for (int d = 0; d < n; d++) s += a[d] * b[d];
  return s;
}

// out (B, T, C), lse (B, NH, T). Grid (ceil(T/32), B*NH); the heaviest query blocks first.
template <typename T, int HS>
__global__ void __launch_bounds__(kWarps * 32)
    attention_forward_kernel(T* out, float* lse, const T* qkv, AttentionArgs a) {
  constexpr int DPL = HS / 32, KS = HS + 1;
  float* smem = dynamic_shared_floats();
  float* sQ = smem;             // (32, HS), pre-scaled
  float* sK = sQ + kRows * HS;  // (32, HS + 1)
  float* sV = sK + kTile * KS;  // (32, HS)
  const int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t k_col = key_column<HS>(a, h / (a.NH / a.KV));
  load_rows<T, HS>(sQ, HS, qkv, a, b, query_column<HS>(a, h), q0, a.scale);

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][DPL];
  int lo[kRowsPerWarp];  // each row's first key
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
    lo[rr] = first_key(a, b, q0 + warp + kWarps * rr);
#pragma unroll
    for (int d = 0; d < DPL; d++) o[rr][d] = 0.0f;
  }
  const int kv_begin = first_key(a, b, q0) / kTile * kTile, kv_end = min(a.T, q0 + kRows);
  for (int k0 = kv_begin; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    load_rows<T, HS>(sK, KS, qkv, a, b, k_col, k0, 1.0f);
    load_rows<T, HS>(sV, HS, qkv, a, b, k_col + HS, k0, 1.0f);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; rr++) {
      const int r = warp + kWarps * rr, i = q0 + r;
      if (i >= a.T) continue;  // warp-uniform
      const int j = k0 + lane;
      const bool valid = j <= i && j >= lo[rr];
      const float s = valid ? dot_rows(sQ + r * HS, sK + lane * KS, HS) : -INFINITY;
      const float m_new = fmaxf(m[rr], warp_max(s));
      const float p = valid ? expf(s - m_new) : 0.0f;
      // m_new is -inf only while a packed row has met no key of its document yet.
      const float correction = m_new == -INFINITY ? 1.0f : expf(m[rr] - m_new);
      l[rr] = l[rr] * correction + warp_sum(p);
      m[rr] = m_new;
      float pd = p;
      if (a.dropout && valid) pd = kept(a, b, h, i, j) ? p * a.keep_scale : 0.0f;
#pragma unroll
      for (int d = 0; d < DPL; d++) o[rr][d] *= correction;
      const int n = min(kTile, i - k0 + 1);
      for (int jj = 0; jj < n; jj++) {
        const float w = __shfl_sync(0xffffffffu, pd, jj);
#pragma unroll
        for (int d = 0; d < DPL; d++) o[rr][d] += w * sV[jj * HS + lane + 32 * d];
      }
    }
  }
  const size_t C = static_cast<size_t>(a.NH) * HS;
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = q0 + warp + kWarps * rr;
    if (i >= a.T) continue;
    const float inv = 1.0f / l[rr];
    T* dst = out + (static_cast<size_t>(b) * a.T + i) * C + static_cast<size_t>(h) * HS;
#pragma unroll
    for (int d = 0; d < DPL; d++) dst[lane + 32 * d] = from_float<T>(o[rr][d] * inv);
    if (lane == 0) lse[static_cast<size_t>(bh) * a.T + i] = m[rr] + logf(l[rr]);
  }
}

// delta (B, NH, T) = rowsum(dout * out) per head: sum_j P_ij dP_ij of the softmax backward.
template <typename T, int HS>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, int B, int T_,
                                       int NH) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= B * NH * T_) return;
  const int bh = row / T_, i = row % T_, b = bh / NH, h = bh % NH;
  const size_t at = (static_cast<size_t>(b) * T_ + i) * NH * HS + static_cast<size_t>(h) * HS;
  float s = 0.0f;
  for (int d = lane; d < HS; d += 32) s += to_float(dout[at + d]) * to_float(out[at + d]);
  s = warp_sum(s);
  if (lane == 0) delta[row] = s;
}

// dq of dqkv (B, T, (NH + 2 KV) HS): block of 32 query rows of head h, key tiles [0, q0 + 32)
// of its group's key and value.
template <typename T, int HS>
__global__ void __launch_bounds__(kWarps * 32)
    attention_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                 const float* delta, AttentionArgs a) {
  constexpr int DPL = HS / 32, KS = HS + 1;
  float* smem = dynamic_shared_floats();
  float* sQ = smem;              // (32, HS), pre-scaled
  float* sdO = sQ + kRows * HS;  // (32, HS)
  float* sK = sdO + kRows * HS;  // (32, HS + 1)
  float* sV = sK + kTile * KS;   // (32, HS + 1)
  const int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t q_col = query_column<HS>(a, h), k_col = key_column<HS>(a, h / (a.NH / a.KV));
  load_rows<T, HS>(sQ, HS, qkv, a, b, q_col, q0, a.scale);
  load_head_rows<T, HS>(sdO, HS, dout, b, h, q0, a.T, a.NH);

  float dq[kRowsPerWarp][DPL], L[kRowsPerWarp], D[kRowsPerWarp];
  int lo[kRowsPerWarp];  // each row's first key
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = min(q0 + warp + kWarps * rr, a.T - 1);
    L[rr] = lse[static_cast<size_t>(bh) * a.T + i];
    D[rr] = delta[static_cast<size_t>(bh) * a.T + i];
    lo[rr] = first_key(a, b, i);
#pragma unroll
    for (int d = 0; d < DPL; d++) dq[rr][d] = 0.0f;
  }
  const int kv_begin = first_key(a, b, q0) / kTile * kTile, kv_end = min(a.T, q0 + kRows);
  for (int k0 = kv_begin; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    load_rows<T, HS>(sK, KS, qkv, a, b, k_col, k0, 1.0f);
    load_rows<T, HS>(sV, KS, qkv, a, b, k_col + HS, k0, 1.0f);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; rr++) {
      const int r = warp + kWarps * rr, i = q0 + r;
      if (i >= a.T) continue;
      const int j = k0 + lane;
      float ds = 0.0f;
      if (j <= i && j >= lo[rr]) {
        const float p = expf(dot_rows(sQ + r * HS, sK + lane * KS, HS) - L[rr]);
        float dp = dot_rows(sdO + r * HS, sV + lane * KS, HS);
        if (a.dropout) dp = kept(a, b, h, i, j) ? dp * a.keep_scale : 0.0f;
        ds = p * (dp - D[rr]);
      }
      const int n = min(kTile, i - k0 + 1);
      for (int jj = 0; jj < n; jj++) {
        const float w = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
        for (int d = 0; d < DPL; d++) dq[rr][d] += w * sK[jj * KS + lane + 32 * d];
      }
    }
  }
  const size_t ld = qkv_width<HS>(a);
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = q0 + warp + kWarps * rr;
    if (i >= a.T) continue;
    T* dst = dqkv + (static_cast<size_t>(b) * a.T + i) * ld + q_col;
#pragma unroll
    for (int d = 0; d < DPL; d++) dst[lane + 32 * d] = from_float<T>(dq[rr][d] * a.scale);
  }
}

// dk, dv of dqkv (B, T, (NH + 2 KV) HS): block of 32 key rows of group g, whose dk and dv sum
// over the group's Q query heads: each head's query tiles [k0, T) in turn, heads in order, into
// the same registers (deterministic; with Q = 1 the per-head kernel of GPT-2).
template <typename T, int HS>
__global__ void __launch_bounds__(kWarps * 32)
    attention_backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                  const float* delta, AttentionArgs a) {
  constexpr int DPL = HS / 32, KS = HS + 1;
  float* smem = dynamic_shared_floats();
  float* sK = smem;                               // (32, HS)
  float* sV = sK + kRows * HS;                    // (32, HS)
  float* sQ = sV + kRows * HS;                    // (32, HS + 1), pre-scaled
  float* sdO = sQ + kTile * KS;                   // (32, HS + 1)
  float* sL = sdO + kTile * KS;                   // (32)
  float* sD = sL + kTile;                         // (32)
  int* sLo = reinterpret_cast<int*>(sD + kTile);  // (32) the queries' first keys
  const int Q = a.NH / a.KV, b = blockIdx.y / a.KV, g = blockIdx.y % a.KV;
  const int k0 = blockIdx.x * kRows;  // the first blocks have the most query tiles
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t k_col = key_column<HS>(a, g);
  load_rows<T, HS>(sK, HS, qkv, a, b, k_col, k0, 1.0f);
  load_rows<T, HS>(sV, HS, qkv, a, b, k_col + HS, k0, 1.0f);

  float dk[kRowsPerWarp][DPL], dv[kRowsPerWarp][DPL];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++)
#pragma unroll
    for (int d = 0; d < DPL; d++) dk[rr][d] = dv[rr][d] = 0.0f;
  for (int h = g * Q; h < (g + 1) * Q; h++) {
    const int bh = b * a.NH + h;
    const size_t q_col = query_column<HS>(a, h);
    for (int q0 = k0; q0 < a.T; q0 += kTile) {
      if (first_key(a, b, q0) >= k0 + kRows) break;  // later queries are in later documents
      __syncthreads();
      load_rows<T, HS>(sQ, KS, qkv, a, b, q_col, q0, a.scale);
      load_head_rows<T, HS>(sdO, KS, dout, b, h, q0, a.T, a.NH);
      if (threadIdx.x < kTile) {
        const int i = min(q0 + static_cast<int>(threadIdx.x), a.T - 1);
        sL[threadIdx.x] = lse[static_cast<size_t>(bh) * a.T + i];
        sD[threadIdx.x] = delta[static_cast<size_t>(bh) * a.T + i];
        sLo[threadIdx.x] = first_key(a, b, i);
      }
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; rr++) {
        const int r = warp + kWarps * rr, j = k0 + r;
        if (j >= a.T) continue;
        const int i = q0 + lane;
        float pd = 0.0f, ds = 0.0f;
        if (i >= j && i < a.T && j >= sLo[lane]) {
          const float p = expf(dot_rows(sK + r * HS, sQ + lane * KS, HS) - sL[lane]);
          float dp = dot_rows(sV + r * HS, sdO + lane * KS, HS);
          pd = p;
          if (a.dropout) {
            const bool keep = kept(a, b, h, i, j);
            pd = keep ? p * a.keep_scale : 0.0f;
            dp = keep ? dp * a.keep_scale : 0.0f;
          }
          ds = p * (dp - sD[lane]);
        }
        const int first = max(0, j - q0), n = min(kTile, a.T - q0);
        for (int ii = first; ii < n; ii++) {
          const float wv = __shfl_sync(0xffffffffu, pd, ii);
          const float wk = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
          for (int d = 0; d < DPL; d++) {
            dv[rr][d] += wv * sdO[ii * KS + lane + 32 * d];
            dk[rr][d] += wk * sQ[ii * KS + lane + 32 * d];
          }
        }
      }
    }
  }
  const size_t ld = qkv_width<HS>(a);
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int j = k0 + warp + kWarps * rr;
    if (j >= a.T) continue;
    T* dst = dqkv + (static_cast<size_t>(b) * a.T + j) * ld + k_col;
#pragma unroll
    for (int d = 0; d < DPL; d++) {
      dst[lane + 32 * d] = from_float<T>(dk[rr][d]);
      dst[HS + lane + 32 * d] = from_float<T>(dv[rr][d]);
    }
  }
}

}  // namespace
}  // namespace lattice::kernels::cuda
