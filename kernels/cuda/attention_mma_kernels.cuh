// The 16-bit (bf16, fp16) attention kernels on tensor cores: FlashAttention-2's recipe as the
// fp32 kernels of attention_kernels.cuh follow it (online softmax, only lse kept, the
// backward's dq pass apart from its dk/dv pass so that every gradient element is written by
// one thread, no atomics), with the products done by mma.sync (mma.cuh) instead of one lane
// per score. See the note "mma tiles" below. Like attention_kernels.cuh this header also
// compiles on the CPU under tests/kernels/cuda/host_emulation.h.
//
// Note "mma tiles": a block of 4 warps owns 64 rows, 16 per warp (queries in the forward and
// the dq pass, keys in the dk/dv pass). The other side streams through shared memory in tiles
// (64 keys; 32 queries in the dk/dv pass, whose warps hold two HS-wide accumulators). Tiles
// are stored as loaded, 16-bit and row-major with 8 elements of padding per row, so both the
// row-major and the k-major fragment loads hit 32 banks (mma.cuh). Scores stay in registers
// as fp32 D fragments, are masked, exponentiated in base 2 (the scale folded with log2 e) and
// rounded to 16 bits only as the A operand of the next product (P V, dS K, P^T dO, dS^T Q), as
// FlashAttention does. Dropout uses the CPU's mask (kept() of attention_kernels.cuh).
// Non-goals: wgmma / TMA (Hopper's asynchronous path), skipping the masked half of diagonal
// tiles, head sizes other than 64 and 128.
#pragma once

#include "attention_kernels.cuh"
#include "mma.cuh"

namespace lattice::kernels::cuda {
namespace {

namespace mma_tiles {
constexpr int kBlockWarps = 4;
constexpr int kBlockRows = 16 * kBlockWarps;  // rows a block owns
constexpr int kKeys = 64;                     // key tile of the forward and the dq pass
constexpr int kQueries = 32;                  // query tile of the dk/dv pass
constexpr int kPad = 8;                       // 16-bit elements of padding per shared row
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared 16-bit elements of each kernel for head size HS (the launchers' dynamic size).
template <int HS>
constexpr int forward_elems() {
  return (kBlockRows + 2 * kKeys) * (HS + kPad);
}
template <int HS>
constexpr int dq_elems() {
  return (2 * kBlockRows + 2 * kKeys) * (HS + kPad);
}
template <int HS>
constexpr int dkv_elems() {  // + lse, delta (floats) and first keys (ints) of the query tile
  return (2 * kBlockRows + 2 * kQueries) * (HS + kPad) + 6 * kQueries;
}
}  // namespace mma_tiles

struct alignas(16) Pack8 {  // eight 16-bit elements, one 16-byte load
  uint32_t w[4];
};

// `rows` rows from row0 of a row-major 16-bit tensor (row stride ld, row 0 at src) into shared
// memory (row stride HS + kPad), rows past T zeroed.
template <int HS>
__device__ __forceinline__ void copy_rows(uint16_t* dst, const uint16_t* src, size_t ld, int row0,
                                          int rows, int T_) {
  constexpr int kChunks = HS / 8, S = HS + mma_tiles::kPad;
  for (int c = threadIdx.x; c < rows * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * 8, row = row0 + r;
    Pack8 v{};
    if (row < T_) v = *reinterpret_cast<const Pack8*>(src + static_cast<size_t>(row) * ld + col);
    *reinterpret_cast<Pack8*>(dst + r * S + col) = v;
  }
}

// Sequence b's columns [col, col + HS) of qkv (B, T, (NH + 2 KV) HS) (a query, key or value
// head: attention_kernels.cuh's query_column, key_column), as 16-bit bits.
template <typename T, int HS>
__device__ __forceinline__ const uint16_t* qkv_head(const T* qkv, const AttentionArgs& a, int b,
                                                    size_t col) {
  return reinterpret_cast<const uint16_t*>(qkv) + static_cast<size_t>(b) * a.T * qkv_width<HS>(a) +
         col;
}

// s[nt] += A1 B1^T and dp[nt] += A2 B2^T over HS, where A1 and A2 are this warp's 16 rows
// (row-major, HS wide) and B1, B2 hold NT tiles of 8 rows each (n-major): the score and its
// gradient's products of both backward passes (S = Q K^T and dP = dO V^T in the dq pass, their
// transposes in the dk/dv pass), in one loop so the two products' loads overlap.
template <typename T, int HS, int NT>
__device__ __forceinline__ void paired_products(float (&s)[NT][4], float (&dp)[NT][4],
                                                const uint16_t* a1, const uint16_t* a2,
                                                const uint16_t* b1, const uint16_t* b2) {
  constexpr int S = HS + mma_tiles::kPad;
#pragma unroll
  for (int ks = 0; ks < HS / 16; ks++) {
    uint32_t x1[4], x2[4];
    load_a(x1, a1 + ks * 16, S);
    load_a(x2, a2 + ks * 16, S);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      uint32_t y1[2], y2[2];
      load_b(y1, b1 + nt * 8 * S + ks * 16, S);
      load_b(y2, b2 + nt * 8 * S + ks * 16, S);
      mma_16816<T>(s[nt], x1, y1);
      mma_16816<T>(dp[nt], x2, y2);
    }
  }
}

// out (B, T, C), lse (B, NH, T). Grid (ceil(T/64), B*NH), the heaviest query blocks first.
template <typename T, int HS>
__global__ void __launch_bounds__(mma_tiles::kBlockWarps * 32)
    attention_forward_mma_kernel(T* out, float* lse, const T* qkv, AttentionArgs a) {
  using namespace mma_tiles;
  constexpr int S = HS + kPad, NT = kKeys / 8, ND = HS / 8;
  uint16_t* sQ = reinterpret_cast<uint16_t*>(dynamic_shared_floats());
  uint16_t* sK = sQ + kBlockRows * S;
  uint16_t* sV = sK + kKeys * S;
  const int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBlockRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const size_t ld = qkv_width<HS>(a), k_col = key_column<HS>(a, h / (a.NH / a.KV));
  copy_rows<HS>(sQ, qkv_head<T, HS>(qkv, a, b, query_column<HS>(a, h)), ld, q0, kBlockRows, a.T);

  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const int lo[2] = {first_key(a, b, row[0]), first_key(a, b, row[1])};  // first keys
  const float scale2 = a.scale * kLog2e;                                 // scores in base 2
  float o[ND][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int kv_begin = first_key(a, b, q0) / kKeys * kKeys, kv_end = min(a.T, q0 + kBlockRows);
  for (int k0 = kv_begin; k0 < kv_end; k0 += kKeys) {
    __syncthreads();
    copy_rows<HS>(sK, qkv_head<T, HS>(qkv, a, b, k_col), ld, k0, kKeys, a.T);
    copy_rows<HS>(sV, qkv_head<T, HS>(qkv, a, b, k_col + HS), ld, k0, kKeys, a.T);
    __syncthreads();
    float s[NT][4] = {};
#pragma unroll
    for (int ks = 0; ks < HS / 16; ks++) {
      uint32_t qa[4];
      load_a(qa, sQ + warp * 16 * S + ks * 16, S);
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        uint32_t kb[2];
        load_b(kb, sK + nt * 8 * S + ks * 16, S);
        mma_16816<T>(s[nt], qa, kb);
      }
    }
    float m_new[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int col = k0 + nt * 8 + 2 * t + (e & 1);
        s[nt][e] = col <= row[e / 2] && col >= lo[e / 2] ? s[nt][e] * scale2 : -INFINITY;
        m_new[e / 2] = fmaxf(m_new[e / 2], s[nt][e]);
      }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {  // the row's 4 lanes agree on its maximum
      m_new[r] = fmaxf(m_new[r], __shfl_xor_sync(0xffffffffu, m_new[r], 1));
      m_new[r] = fmaxf(m_new[r], __shfl_xor_sync(0xffffffffu, m_new[r], 2));
      // m_new is -inf only while a packed row has met no key of its document yet.
      correction[r] = m_new[r] == -INFINITY ? 1.0f : exp2f(m[r] - m_new[r]);
      m[r] = m_new[r];
      l[r] *= correction[r];
    }
#pragma unroll
    for (int nd = 0; nd < ND; nd++)
#pragma unroll
      for (int e = 0; e < 4; e++) o[nd][e] *= correction[e / 2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float p = s[nt][e] == -INFINITY ? 0.0f : exp2f(s[nt][e] - m[e / 2]);
        l[e / 2] += p;  // this lane's share; the row's lanes are summed at the end
        s[nt][e] = p;
        if (a.dropout && p > 0.0f)
          s[nt][e] =
              kept(a, b, h, row[e / 2], k0 + nt * 8 + 2 * t + (e & 1)) ? p * a.keep_scale : 0.0f;
      }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; kk++) {
      uint32_t pa[4];
      a_from_d<T>(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int nd = 0; nd < ND; nd++) {
        uint32_t vb[2];
        load_b_k_major(vb, sV + kk * 16 * S + nd * 8, S);
        mma_16816<T>(o[nd], pa, vb);
      }
    }
  }
  const size_t C = static_cast<size_t>(a.NH) * HS;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    if (row[r] >= a.T) continue;
    const float inv = 1.0f / l[r];
    uint16_t* dst = reinterpret_cast<uint16_t*>(out) + (static_cast<size_t>(b) * a.T + row[r]) * C +
                    static_cast<size_t>(h) * HS + 2 * t;
#pragma unroll
    for (int nd = 0; nd < ND; nd++)
      *reinterpret_cast<uint32_t*>(dst + nd * 8) =
          pack2<T>(o[nd][2 * r] * inv, o[nd][2 * r + 1] * inv);
    if (t == 0) lse[static_cast<size_t>(bh) * a.T + row[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// dq of dqkv (B, T, (NH + 2 KV) HS): block of 64 query rows of head h, key tiles [0, q0 + 64)
// of its group's key and value. delta from attention_delta_kernel.
template <typename T, int HS>
__global__ void __launch_bounds__(mma_tiles::kBlockWarps * 32)
    attention_backward_dq_mma_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                     const float* delta, AttentionArgs a) {
  using namespace mma_tiles;
  constexpr int S = HS + kPad, NT = kKeys / 8, ND = HS / 8;
  uint16_t* sQ = reinterpret_cast<uint16_t*>(dynamic_shared_floats());
  uint16_t* sdO = sQ + kBlockRows * S;
  uint16_t* sK = sdO + kBlockRows * S;
  uint16_t* sV = sK + kKeys * S;
  const int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBlockRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const size_t ld = qkv_width<HS>(a), C = static_cast<size_t>(a.NH) * HS;
  const size_t q_col = query_column<HS>(a, h), k_col = key_column<HS>(a, h / (a.NH / a.KV));
  copy_rows<HS>(sQ, qkv_head<T, HS>(qkv, a, b, q_col), ld, q0, kBlockRows, a.T);
  copy_rows<HS>(sdO,
                reinterpret_cast<const uint16_t*>(dout) + static_cast<size_t>(b) * a.T * C +
                    static_cast<size_t>(h) * HS,
                C, q0, kBlockRows, a.T);

  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float L[2], D[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const size_t at = static_cast<size_t>(bh) * a.T + min(row[r], a.T - 1);
    L[r] = lse[at] * kLog2e;
    D[r] = delta[at];
  }
  const int lo[2] = {first_key(a, b, row[0]), first_key(a, b, row[1])};  // first keys
  const float scale2 = a.scale * kLog2e;
  float dq[ND][4] = {};
  const int kv_begin = first_key(a, b, q0) / kKeys * kKeys, kv_end = min(a.T, q0 + kBlockRows);
  for (int k0 = kv_begin; k0 < kv_end; k0 += kKeys) {
    __syncthreads();
    copy_rows<HS>(sK, qkv_head<T, HS>(qkv, a, b, k_col), ld, k0, kKeys, a.T);
    copy_rows<HS>(sV, qkv_head<T, HS>(qkv, a, b, k_col + HS), ld, k0, kKeys, a.T);
    __syncthreads();
    float s[NT][4] = {}, dp[NT][4] = {};
    paired_products<T, HS, NT>(s, dp, sQ + warp * 16 * S, sdO + warp * 16 * S, sK, sV);
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {  // s becomes dS
        const int i = row[e / 2], j = k0 + nt * 8 + 2 * t + (e & 1);
        float ds = 0.0f;
        if (j <= i && j >= lo[e / 2]) {
          const float p = exp2f(s[nt][e] * scale2 - L[e / 2]);
          float dpv = dp[nt][e];
          if (a.dropout) dpv = kept(a, b, h, i, j) ? dpv * a.keep_scale : 0.0f;
          ds = p * (dpv - D[e / 2]);
        }
        s[nt][e] = ds;
      }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; kk++) {
      uint32_t dsa[4];
      a_from_d<T>(dsa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int nd = 0; nd < ND; nd++) {
        uint32_t kb[2];
        load_b_k_major(kb, sK + kk * 16 * S + nd * 8, S);
        mma_16816<T>(dq[nd], dsa, kb);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    if (row[r] >= a.T) continue;
    uint16_t* dst = reinterpret_cast<uint16_t*>(dqkv) +
                    (static_cast<size_t>(b) * a.T + row[r]) * ld + q_col + 2 * t;
#pragma unroll
    for (int nd = 0; nd < ND; nd++)
      *reinterpret_cast<uint32_t*>(dst + nd * 8) =
          pack2<T>(dq[nd][2 * r] * a.scale, dq[nd][2 * r + 1] * a.scale);
  }
}

// dk, dv of dqkv (B, T, (NH + 2 KV) HS): block of 64 key rows of one group, whose dk and dv sum
// over the group's Q query heads: each head's query tiles [k0, T) in turn, heads in order, into
// the same accumulators (deterministic; with Q = 1 the per-head kernel of GPT-2).
template <typename T, int HS>
__global__ void __launch_bounds__(mma_tiles::kBlockWarps * 32)
    attention_backward_dkv_mma_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                      const float* delta, AttentionArgs a) {
  using namespace mma_tiles;
  constexpr int S = HS + kPad, NT = kQueries / 8, ND = HS / 8;
  uint16_t* sK = reinterpret_cast<uint16_t*>(dynamic_shared_floats());
  uint16_t* sV = sK + kBlockRows * S;
  uint16_t* sQ = sV + kBlockRows * S;
  uint16_t* sdO = sQ + kQueries * S;
  float* sL = reinterpret_cast<float*>(sdO + kQueries * S);  // lse, base 2
  float* sD = sL + kQueries;
  int* sLo = reinterpret_cast<int*>(sD + kQueries);  // the queries' first keys
  const int Q = a.NH / a.KV, b = blockIdx.y / a.KV, group = blockIdx.y % a.KV;
  const int k0 = blockIdx.x * kBlockRows;  // the first blocks have the most query tiles
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const size_t ld = qkv_width<HS>(a), C = static_cast<size_t>(a.NH) * HS;
  const size_t k_col = key_column<HS>(a, group);
  copy_rows<HS>(sK, qkv_head<T, HS>(qkv, a, b, k_col), ld, k0, kBlockRows, a.T);
  copy_rows<HS>(sV, qkv_head<T, HS>(qkv, a, b, k_col + HS), ld, k0, kBlockRows, a.T);

  const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  const float scale2 = a.scale * kLog2e;
  float dk[ND][4] = {}, dv[ND][4] = {};
  for (int h = group * Q; h < (group + 1) * Q; h++) {
    const int bh = b * a.NH + h;
    const uint16_t* q_head = qkv_head<T, HS>(qkv, a, b, query_column<HS>(a, h));
    const uint16_t* dout_head = reinterpret_cast<const uint16_t*>(dout) +
                                static_cast<size_t>(b) * a.T * C + static_cast<size_t>(h) * HS;
    for (int q0 = k0; q0 < a.T; q0 += kQueries) {
      if (first_key(a, b, q0) >= k0 + kBlockRows) break;  // later queries: later documents
      __syncthreads();
      copy_rows<HS>(sQ, q_head, ld, q0, kQueries, a.T);
      copy_rows<HS>(sdO, dout_head, C, q0, kQueries, a.T);
      if (threadIdx.x < kQueries) {
        const int i = q0 + static_cast<int>(threadIdx.x);
        const size_t at = static_cast<size_t>(bh) * a.T + min(i, a.T - 1);
        sL[threadIdx.x] = i < a.T ? lse[at] * kLog2e : INFINITY;  // p = 0 past T
        sD[threadIdx.x] = i < a.T ? delta[at] : 0.0f;
        sLo[threadIdx.x] = first_key(a, b, i);
      }
      __syncthreads();
      float s[NT][4] = {}, dp[NT][4] = {};  // S^T and dP^T: this warp's keys x the query tile
      paired_products<T, HS, NT>(s, dp, sK + warp * 16 * S, sV + warp * 16 * S, sQ, sdO);
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {  // s becomes P^T (dropped out), dp becomes dS^T
          const int j = key[e / 2], c = nt * 8 + 2 * t + (e & 1), i = q0 + c;
          float p = 0.0f, ds = 0.0f;
          if (i >= j && j >= sLo[c]) {
            p = exp2f(s[nt][e] * scale2 - sL[c]);
            float dpv = dp[nt][e];
            if (a.dropout && i < a.T) {
              const bool keep = kept(a, b, h, i, j);
              dpv = keep ? dpv * a.keep_scale : 0.0f;
              ds = p * (dpv - sD[c]);
              p = keep ? p * a.keep_scale : 0.0f;
            } else {
              ds = p * (dpv - sD[c]);
            }
          }
          s[nt][e] = p;
          dp[nt][e] = ds;
        }
#pragma unroll
      for (int kk = 0; kk < kQueries / 16; kk++) {
        uint32_t pa[4], dsa[4];
        a_from_d<T>(pa, s[2 * kk], s[2 * kk + 1]);
        a_from_d<T>(dsa, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
        for (int nd = 0; nd < ND; nd++) {
          uint32_t db[2], qb[2];
          load_b_k_major(db, sdO + kk * 16 * S + nd * 8, S);
          load_b_k_major(qb, sQ + kk * 16 * S + nd * 8, S);
          mma_16816<T>(dv[nd], pa, db);
          mma_16816<T>(dk[nd], dsa, qb);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    if (key[r] >= a.T) continue;
    uint16_t* dst = reinterpret_cast<uint16_t*>(dqkv) +
                    (static_cast<size_t>(b) * a.T + key[r]) * ld + k_col + 2 * t;
#pragma unroll
    for (int nd = 0; nd < ND; nd++) {
      *reinterpret_cast<uint32_t*>(dst + nd * 8) =
          pack2<T>(dk[nd][2 * r] * a.scale, dk[nd][2 * r + 1] * a.scale);
      *reinterpret_cast<uint32_t*>(dst + HS + nd * 8) = pack2<T>(dv[nd][2 * r], dv[nd][2 * r + 1]);
    }
  }
}

}  // namespace
}  // namespace lattice::kernels::cuda
