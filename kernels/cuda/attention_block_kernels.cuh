// The kernels of one ring-attention block (note "block tiles" in attention_block.cu) and the small
// ops around them, kept apart from their launchers so that
// tests/kernels/cuda/test_attention_block_emulated.cpp also runs them on the CPU under
// host_emulation.h. What they read (qkv, kv, dout; row_dot's out) is In = float, __nv_bfloat16 or
// __half (under the emulation dtype.h's bf16 or fp16), widened to fp32 by to_float as it is
// loaded (the identity for float); everything they compute, merge or add into is fp32 (Note [ring
// attention in 16 bits] in ring_attention.cpp).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "attention_kernels.cuh"  // kRows, kTile, kWarps, kRowsPerWarp, dot_rows
#include "lattice/kernels.h"      // AttentionBlock
#include "reduce.cuh"

namespace lattice::kernels::cuda {
namespace {

// The columns of qkv (rows, (NH + 2 KV) HS) in kernels.h's grouped layout and of kv (rows,
// 2 KV HS), the same without the query heads.
template <int HS>
__device__ __forceinline__ size_t block_qkv_width(const AttentionBlock& a) {
  return static_cast<size_t>(a.NH + 2 * a.KV) * HS;
}
template <int HS>
__device__ __forceinline__ size_t block_query_column(const AttentionBlock& a, int h) {
  const int Q = a.NH / a.KV;
  return (static_cast<size_t>(h / Q) * (Q + 2) + h % Q) * HS;
}
template <int HS>
__device__ __forceinline__ size_t block_kv_width(const AttentionBlock& a) {
  return static_cast<size_t>(2 * a.KV) * HS;
}

// The first key position query row i of sequence b sees: its packed document's start, or none.
__device__ __forceinline__ int block_first_visible(const AttentionBlock& a, int b, int i) {
  return a.doc ? a.q_pos[i] - a.doc[static_cast<size_t>(b) * a.Tq + i] : INT_MIN;
}

// Rows [row0, row0 + 32) of sequence b of a (B, T, ld) tensor, columns [col, col + HS), into
// shared memory with row stride `stride`, widened to fp32 and multiplied by `mul`; rows at or
// past row_end zeroed.
template <typename In, int HS>
__device__ void load_block_rows(float* dst, int stride, const In* x, size_t ld, int T_, int b,
                                size_t col, int row0, int row_end, float mul) {
  const In* src = x + static_cast<size_t>(b) * T_ * ld + col;
  for (int idx = threadIdx.x; idx < kRows * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS, row = row0 + r;
    dst[r * stride + d] =
        row < row_end ? to_float(src[static_cast<size_t>(row) * ld + d]) * mul : 0.0f;
  }
}

// Merges keys [k_begin, k_end) of kv into out (B, Tq, NH HS) and lse (B, NH, Tq) for query rows
// [q_begin, q_end). Grid (ceil((q_end - q_begin) / 32), B NH), kWarps warps.
template <typename In, int HS>
__global__ void __launch_bounds__(kWarps * 32)
    attention_block_forward_kernel(float* out, float* lse, const In* qkv, const In* kv,
                                   AttentionBlock a, float scale) {
  constexpr int DPL = HS / 32, KS = HS + 1;
  float* smem = dynamic_shared_floats();
  float* sQ = smem;                                // (32, HS), pre-scaled
  float* sK = sQ + kRows * HS;                     // (32, HS + 1)
  float* sV = sK + kTile * KS;                     // (32, HS)
  int* sKp = reinterpret_cast<int*>(sV + kTile * HS);  // (32) the keys' positions
  const int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
  const int q0 = a.q_begin + static_cast<int>(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t ldk = block_kv_width<HS>(a), k_col = static_cast<size_t>(h / (a.NH / a.KV)) * 2 * HS;
  load_block_rows<In, HS>(sQ, HS, qkv, block_qkv_width<HS>(a), a.Tq, b,
                          block_query_column<HS>(a, h), q0, a.q_end, scale);

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][DPL];
  int qp[kRowsPerWarp], lo[kRowsPerWarp];  // each row's position and first visible key position
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = min(q0 + warp + kWarps * rr, a.q_end - 1);
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
    qp[rr] = a.q_pos[i];
    lo[rr] = block_first_visible(a, b, i);
#pragma unroll
    for (int d = 0; d < DPL; d++) o[rr][d] = 0.0f;
  }
  for (int k0 = a.k_begin; k0 < a.k_end; k0 += kTile) {
    __syncthreads();
    load_block_rows<In, HS>(sK, KS, kv, ldk, a.Tk, b, k_col, k0, a.k_end, 1.0f);
    load_block_rows<In, HS>(sV, HS, kv, ldk, a.Tk, b, k_col + HS, k0, a.k_end, 1.0f);
    if (threadIdx.x < kTile) {
      const int j = k0 + static_cast<int>(threadIdx.x);
      sKp[threadIdx.x] = j < a.k_end ? a.k_pos[j] : INT_MAX;  // past the block: seen by none
    }
    __syncthreads();
    const int n = min(kTile, a.k_end - k0);
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; rr++) {
      const int r = warp + kWarps * rr;
      if (q0 + r >= a.q_end) continue;  // warp-uniform
      const int kp = sKp[lane];
      const bool valid = kp <= qp[rr] && kp >= lo[rr];
      const float s = valid ? dot_rows(sQ + r * HS, sK + lane * KS, HS) : -INFINITY;
      const float tile_max = warp_max(s);
      if (tile_max == -INFINITY) continue;  // no key of this tile is visible to the row
      const float m_new = fmaxf(m[rr], tile_max);
      const float p = valid ? expf(s - m_new) : 0.0f;
      const float correction = expf(m[rr] - m_new);  // 0 on the row's first visible tile
      l[rr] = l[rr] * correction + warp_sum(p);
      m[rr] = m_new;
#pragma unroll
      for (int d = 0; d < DPL; d++) o[rr][d] *= correction;
      for (int jj = 0; jj < n; jj++) {
        const float w = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int d = 0; d < DPL; d++) o[rr][d] += w * sV[jj * HS + lane + 32 * d];
      }
    }
  }
  // The merge (kernels.h): the row's output so far, weight exp(lse), and the block's, weight
  // exp(lse_b), each normalised, in proportion to their weights. Lane 0 reads the old lse and
  // broadcasts it before it writes the new one.
  const size_t C = static_cast<size_t>(a.NH) * HS;
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = q0 + warp + kWarps * rr;
    if (i >= a.q_end || l[rr] == 0.0f) continue;  // warp-uniform; 0: the block has no key for it
    float* lse_i = lse + static_cast<size_t>(bh) * a.Tq + i;
    const float old = __shfl_sync(0xffffffffu, lane == 0 ? *lse_i : 0.0f, 0);
    const float lse_b = m[rr] + logf(l[rr]), inv = 1.0f / l[rr];
    float* dst = out + (static_cast<size_t>(b) * a.Tq + i) * C + static_cast<size_t>(h) * HS;
    if (old == -INFINITY) {
#pragma unroll
      for (int d = 0; d < DPL; d++) dst[lane + 32 * d] = o[rr][d] * inv;
      if (lane == 0) *lse_i = lse_b;
      continue;
    }
    const float merged = fmaxf(old, lse_b) + log1pf(expf(-fabsf(old - lse_b)));
    const float w_old = expf(old - merged), w_new = expf(lse_b - merged) * inv;
#pragma unroll
    for (int d = 0; d < DPL; d++)
      dst[lane + 32 * d] = w_old * dst[lane + 32 * d] + w_new * o[rr][d];
    if (lane == 0) *lse_i = merged;
  }
}

// The block's dq, ADDED to the query columns of dqkv: 32 query rows of head h, the block's key
// tiles streamed. Grid (ceil((q_end - q_begin) / 32), B NH), kWarps warps.
template <typename In, int HS>
__global__ void __launch_bounds__(kWarps * 32)
    attention_block_backward_dq_kernel(float* dqkv, const In* dout, const float* delta,
                                       const float* lse, const In* qkv, const In* kv,
                                       AttentionBlock a, float scale) {
  constexpr int DPL = HS / 32, KS = HS + 1;
  float* smem = dynamic_shared_floats();
  float* sQ = smem;                                    // (32, HS), pre-scaled
  float* sdO = sQ + kRows * HS;                        // (32, HS)
  float* sK = sdO + kRows * HS;                        // (32, HS + 1)
  float* sV = sK + kTile * KS;                         // (32, HS + 1)
  int* sKp = reinterpret_cast<int*>(sV + kTile * KS);  // (32)
  const int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
  const int q0 = a.q_begin + static_cast<int>(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t ld = block_qkv_width<HS>(a), q_col = block_query_column<HS>(a, h);
  const size_t ldk = block_kv_width<HS>(a), k_col = static_cast<size_t>(h / (a.NH / a.KV)) * 2 * HS;
  const size_t C = static_cast<size_t>(a.NH) * HS;
  load_block_rows<In, HS>(sQ, HS, qkv, ld, a.Tq, b, q_col, q0, a.q_end, scale);
  load_block_rows<In, HS>(sdO, HS, dout, C, a.Tq, b, static_cast<size_t>(h) * HS, q0, a.q_end,
                          1.0f);

  float dq[kRowsPerWarp][DPL], L[kRowsPerWarp], D[kRowsPerWarp];
  int qp[kRowsPerWarp], lo[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = min(q0 + warp + kWarps * rr, a.q_end - 1);
    L[rr] = lse[static_cast<size_t>(bh) * a.Tq + i];
    D[rr] = delta[static_cast<size_t>(bh) * a.Tq + i];
    qp[rr] = a.q_pos[i];
    lo[rr] = block_first_visible(a, b, i);
#pragma unroll
    for (int d = 0; d < DPL; d++) dq[rr][d] = 0.0f;
  }
  for (int k0 = a.k_begin; k0 < a.k_end; k0 += kTile) {
    __syncthreads();
    load_block_rows<In, HS>(sK, KS, kv, ldk, a.Tk, b, k_col, k0, a.k_end, 1.0f);
    load_block_rows<In, HS>(sV, KS, kv, ldk, a.Tk, b, k_col + HS, k0, a.k_end, 1.0f);
    if (threadIdx.x < kTile) {
      const int j = k0 + static_cast<int>(threadIdx.x);
      sKp[threadIdx.x] = j < a.k_end ? a.k_pos[j] : INT_MAX;
    }
    __syncthreads();
    const int n = min(kTile, a.k_end - k0);
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; rr++) {
      const int r = warp + kWarps * rr;
      if (q0 + r >= a.q_end || L[rr] == -INFINITY) continue;  // warp-uniform
      const int kp = sKp[lane];
      const bool valid = kp <= qp[rr] && kp >= lo[rr];
      if (warp_max(valid ? 1.0f : 0.0f) == 0.0f) continue;  // no visible key in the tile
      float ds = 0.0f;
      if (valid) {
        const float p = expf(dot_rows(sQ + r * HS, sK + lane * KS, HS) - L[rr]);
        ds = p * (dot_rows(sdO + r * HS, sV + lane * KS, HS) - D[rr]);
      }
      for (int jj = 0; jj < n; jj++) {
        const float w = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
        for (int d = 0; d < DPL; d++) dq[rr][d] += w * sK[jj * KS + lane + 32 * d];
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int i = q0 + warp + kWarps * rr;
    if (i >= a.q_end) continue;
    float* dst = dqkv + (static_cast<size_t>(b) * a.Tq + i) * ld + q_col;
#pragma unroll
    for (int d = 0; d < DPL; d++) dst[lane + 32 * d] += dq[rr][d] * scale;
  }
}

// The block's dk and dv, ADDED to dkv: 32 key rows of group g, each of the group's query heads'
// query tiles streamed in turn into the same registers (each element written by one thread).
// Grid (ceil((k_end - k_begin) / 32), B KV), kWarps warps.
template <typename In, int HS>
__global__ void __launch_bounds__(kWarps * 32)
    attention_block_backward_dkv_kernel(float* dkv, const In* dout, const float* delta,
                                        const float* lse, const In* qkv, const In* kv,
                                        AttentionBlock a, float scale) {
  constexpr int DPL = HS / 32, KS = HS + 1;
  float* smem = dynamic_shared_floats();
  float* sK = smem;                                 // (32, HS)
  float* sV = sK + kRows * HS;                      // (32, HS)
  float* sQ = sV + kRows * HS;                      // (32, HS + 1), pre-scaled
  float* sdO = sQ + kTile * KS;                     // (32, HS + 1)
  float* sL = sdO + kTile * KS;                     // (32)
  float* sD = sL + kTile;                           // (32)
  int* sQp = reinterpret_cast<int*>(sD + kTile);    // (32) the queries' positions
  int* sLo = sQp + kTile;                           // (32) their first visible key positions
  const int Q = a.NH / a.KV, b = blockIdx.y / a.KV, g = blockIdx.y % a.KV;
  const int k0 = a.k_begin + static_cast<int>(blockIdx.x) * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t ld = block_qkv_width<HS>(a), ldk = block_kv_width<HS>(a);
  const size_t k_col = static_cast<size_t>(g) * 2 * HS, C = static_cast<size_t>(a.NH) * HS;
  load_block_rows<In, HS>(sK, HS, kv, ldk, a.Tk, b, k_col, k0, a.k_end, 1.0f);
  load_block_rows<In, HS>(sV, HS, kv, ldk, a.Tk, b, k_col + HS, k0, a.k_end, 1.0f);

  float dk[kRowsPerWarp][DPL], dv[kRowsPerWarp][DPL];
  int kp[kRowsPerWarp];  // each key row's position
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    kp[rr] = a.k_pos[min(k0 + warp + kWarps * rr, a.k_end - 1)];
#pragma unroll
    for (int d = 0; d < DPL; d++) dk[rr][d] = dv[rr][d] = 0.0f;
  }
  for (int h = g * Q; h < (g + 1) * Q; h++) {
    const size_t bh = static_cast<size_t>(b) * a.NH + h, q_col = block_query_column<HS>(a, h);
    for (int q0 = a.q_begin; q0 < a.q_end; q0 += kTile) {
      __syncthreads();
      load_block_rows<In, HS>(sQ, KS, qkv, ld, a.Tq, b, q_col, q0, a.q_end, scale);
      load_block_rows<In, HS>(sdO, KS, dout, C, a.Tq, b, static_cast<size_t>(h) * HS, q0, a.q_end,
                              1.0f);
      if (threadIdx.x < kTile) {
        const int i = q0 + static_cast<int>(threadIdx.x);
        const bool row = i < a.q_end;
        // Past the block, and rows that saw no key at all (lse -inf): visible to no key.
        const float l = row ? lse[bh * a.Tq + i] : -INFINITY;
        sL[threadIdx.x] = l;
        sD[threadIdx.x] = row ? delta[bh * a.Tq + i] : 0.0f;
        sQp[threadIdx.x] = row && l != -INFINITY ? a.q_pos[i] : INT_MIN;
        sLo[threadIdx.x] = row ? block_first_visible(a, b, i) : INT_MAX;
      }
      __syncthreads();
      const int n = min(kTile, a.q_end - q0);
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; rr++) {
        const int r = warp + kWarps * rr;
        if (k0 + r >= a.k_end) continue;  // warp-uniform
        const bool valid = kp[rr] <= sQp[lane] && kp[rr] >= sLo[lane];
        if (warp_max(valid ? 1.0f : 0.0f) == 0.0f) continue;  // no query of the tile sees it
        float p = 0.0f, ds = 0.0f;
        if (valid) {
          p = expf(dot_rows(sK + r * HS, sQ + lane * KS, HS) - sL[lane]);
          ds = p * (dot_rows(sV + r * HS, sdO + lane * KS, HS) - sD[lane]);
        }
        for (int ii = 0; ii < n; ii++) {
          const float wv = __shfl_sync(0xffffffffu, p, ii);
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
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; rr++) {
    const int j = k0 + warp + kWarps * rr;
    if (j >= a.k_end) continue;
    float* dst = dkv + (static_cast<size_t>(b) * a.Tk + j) * ldk + k_col;
#pragma unroll
    for (int d = 0; d < DPL; d++) {
      dst[lane + 32 * d] += dk[rr][d];
      dst[HS + lane + 32 * d] += dv[rr][d];
    }
  }
}

// kv (rows, 2 KV HS) = the key and value columns of qkv (rows, (NH + 2 KV) HS), copied in the
// input type In (what travels the forward's ring), or (unpack, fp32: the gradients) the reverse.
// Grid-stride over kv's elements.
__device__ __forceinline__ size_t kv_source_index(size_t idx, int NH, int KV, int HS) {
  const size_t width = static_cast<size_t>(2 * KV) * HS, row = idx / width;
  const int c = static_cast<int>(idx % width), g = c / (2 * HS), Q = NH / KV;
  return row * (static_cast<size_t>(NH + 2 * KV) * HS) +
         (static_cast<size_t>(g) * (Q + 2) + Q) * HS + c % (2 * HS);
}
template <typename In>
__global__ void attention_kv_pack_kernel(In* kv, const In* qkv, size_t n, int NH, int KV, int HS) {
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x)
    kv[idx] = qkv[kv_source_index(idx, NH, KV, HS)];
}
__global__ void attention_kv_unpack_kernel(float* qkv, const float* kv, size_t n, int NH, int KV,
                                           int HS) {
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x)
    qkv[kv_source_index(idx, NH, KV, HS)] = kv[idx];
}

// delta (B, NH, T) = the dot of dout and out (B, T, NH HS) over each head's HS, widened to fp32:
// one warp a row.
template <typename In>
__global__ void attention_row_dot_kernel(float* delta, const In* dout, const In* out, int B, int T_,
                                         int NH, int HS) {
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  const size_t rows = static_cast<size_t>(B) * NH * T_;
  for (size_t row = blockIdx.x * static_cast<size_t>(warps) + threadIdx.x / 32; row < rows;
       row += static_cast<size_t>(gridDim.x) * warps) {
    const size_t bh = row / T_, i = row % T_, b = bh / NH, h = bh % NH;
    const size_t at = (b * T_ + i) * NH * HS + h * HS;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32) s += to_float(dout[at + d]) * to_float(out[at + d]);
    s = warp_sum(s);
    if (lane == 0) delta[row] = s;
  }
}

__global__ void fill_kernel(float* x, size_t n, float value) {
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[idx] = value;
}
__global__ void accumulate_kernel(float* acc, const float* x, size_t n) {
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x)
    acc[idx] += x[idx];
}

}  // namespace
}  // namespace lattice::kernels::cuda
