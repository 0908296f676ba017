// Blockwise attention with a log-sum-exp merge (kernels.h's attention_block_forward / _backward):
// the compute of ring attention (Note [ring attention], engine/src/parallel/ring_attention.cpp)
// and of the vision tower, one block of queries against one ring step's keys and values at a
// time, kAttentionRowBlock query rows at a time (a thread's workspace holds two such rows' blocks
// of scores, not the whole Tq x Tk). Nothing of size T x T outlives a call: the forward keeps
// each row's output and log-sum-exp, the backward recomputes the probabilities from them.
// The block's key positions ascend (kernels.h), so the keys a query row sees are one range of
// them, found by binary search; a row block's products cover the union of its rows' ranges only
// (the causal diagonal's upper part, and keys of earlier packed documents, are skipped), and its
// softmax rows run softmax_row.h's vectors, its products tile_gemm.h's register tiles on the
// task's keys and values packed once (Note [attention tile GEMM]; no causal skipping inside a
// range: the rows' ranges need not follow a diagonal). Forward: one (batch, query head) pair per
// task; backward: one (batch, key/value head) pair per task, whose query heads add to the key
// and value gradients in turn, so no two threads write the same element. Non-goals: dropout,
// 16-bit types.
// Compiled once per ISA (Note [CPU dispatch]).
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "attention_workspace.h"
#include "isa_region.h"
#include "lattice/kernels.h"
#include "softmax_row.h"
#include "tile_gemm.h"

LATTICE_ISA_BEGIN

namespace {

// The columns of qkv (grouped layout: KV groups of Q query heads, a key and a value) and of kv
// (the same without query heads).
struct BlockLayout {
  int HS, Q, ld, ldk, C;
  explicit BlockLayout(const AttentionBlock& b)
      : HS(b.HS),
        Q(b.NH / b.KV),
        ld((b.NH + 2 * b.KV) * b.HS),
        ldk(2 * b.KV * b.HS),
        C(b.NH * b.HS) {}
  size_t query(int h) const { return static_cast<size_t>(h / Q) * (Q + 2) * HS + (h % Q) * HS; }
  size_t key(int g) const { return static_cast<size_t>(g) * 2 * HS; }
};

// The first key position query row i of sequence b may see (its packed document's start).
int first_visible(const AttentionBlock& blk, int b, int i) {
  if (!blk.doc) return INT_MIN;
  return blk.q_pos[i] - blk.doc[static_cast<size_t>(b) * blk.Tq + i];
}

// The keys [jl, jh) of the block's kp[0, nk) that a query at position qp sees, keys of positions
// [first, qp]: one range, the positions ascending. Empty: jh <= jl.
struct KeyRange {
  int jl = 0, jh = 0;
  bool empty() const { return jh <= jl; }
};
KeyRange visible_keys(const int32_t* kp, int nk, int qp, int first) {
  const int jl = static_cast<int>(std::lower_bound(kp, kp + nk, first) - kp);
  const int jh = static_cast<int>(std::upper_bound(kp, kp + nk, qp) - kp);
  return {jl, jh};
}

// The key ranges of query rows [r0, r0 + n) of sequence b (range[0, n)) and the union of the
// non-empty ones, [lo, hi) (empty: no row sees a key of the block).
KeyRange row_block_keys(const AttentionBlock& blk, int b, int r0, int n, KeyRange* range) {
  const int32_t* kp = blk.k_pos + blk.k_begin;
  const int nk = blk.k_end - blk.k_begin;
  KeyRange all{nk, 0};
  for (int i = 0; i < n; i++) {
    range[i] = visible_keys(kp, nk, blk.q_pos[r0 + i], first_visible(blk, b, r0 + i));
    if (range[i].empty()) continue;
    all.jl = std::min(all.jl, range[i].jl);
    all.jh = std::max(all.jh, range[i].jh);
  }
  return all;
}

// This thread's part of the workspace (attention_block_layout): two blocks of rows of the
// block's keys, ldp apart, the rows' outputs and log-sum-exps, then room for two (HS, Tk) panel
// packings and one (Tk, HS).
template <typename T>
struct BlockWorkspace {
  int ldp;
  size_t rows;
  T *P, *dP, *ob, *wide1, *wide2, *tall;
  BlockWorkspace(T* workspace, const AttentionBlock& blk) {
    const AttentionLayout l = attention_block_layout(blk.Tq, blk.Tk, blk.HS);
    T* ws = workspace + static_cast<size_t>(omp_get_thread_num()) * l.size;
    ldp = l.ldp, rows = l.rows;
    P = ws, dP = ws + l.block, ob = ws + 2 * l.block;
    wide1 = ws + l.wide1, wide2 = wide1 + l.wide, tall = ws + l.tall;
  }
};

}  // namespace

template <typename T>
void attention_block_forward(T* out, T* lse, const T* qkv, const T* kv, const AttentionBlock& blk,
                             T* workspace) {
  const int nq = blk.q_end - blk.q_begin, nk = blk.k_end - blk.k_begin;
  if (nq <= 0 || nk <= 0) return;
  const BlockLayout L(blk);
  const int HS = L.HS;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(HS)));
  const T neg_inf = -std::numeric_limits<T>::infinity();
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < blk.B * blk.NH; bh++) {
    const int b = bh / blk.NH, h = bh % blk.NH;
    const T* k = kv + (static_cast<size_t>(b) * blk.Tk + blk.k_begin) * L.ldk + L.key(h / L.Q);
    const T* v = k + HS;
    const BlockWorkspace<T> ws(workspace, blk);
    const int ldp = ws.ldp;
    T* P = ws.P;    // (rows, nk), rows ldp apart
    T* ob = ws.ob;  // (rows, HS) the rows' output over the block's keys
    T* lse_b = ob + ws.rows * HS;  // (rows) their log-sum-exp
    const Panels<T> Kt = pack_panels(ws.wide1, k, 1, L.ldk, HS, nk);  // (HS, nk)
    const Panels<T> V = pack_panels(ws.tall, v, L.ldk, 1, nk, HS);    // (nk, HS)
    KeyRange range[kAttentionRowBlock];
    for (int c0 = 0; c0 < nq; c0 += kAttentionRowBlock) {
      const int n = std::min(kAttentionRowBlock, nq - c0), r0 = blk.q_begin + c0;
      const KeyRange all = row_block_keys(blk, b, r0, n, range);
      if (all.empty()) continue;  // no row sees a key here: nothing to merge
      const int lo = all.jl, w = all.jh - all.jl, la = panel_start<T>(lo);
      const T* q = qkv + (static_cast<size_t>(b) * blk.Tq + r0) * L.ld + L.query(h);
      tile_gemm(n, all.jh - la, HS, scale, q, L.ld, 1, Kt.from(la), T(0), P + la, ldp);
      for (int i = 0; i < n; i++) {
        T* row = P + static_cast<size_t>(i) * ldp;
        const KeyRange r = range[i];
        if (r.empty()) {
          std::fill(row + lo, row + all.jh, T(0));
          lse_b[i] = neg_inf;
          continue;
        }
        lse_b[i] = softmax_row(row + r.jl, r.jh - r.jl);
        std::fill(row + lo, row + r.jl, T(0));
        std::fill(row + r.jh, row + all.jh, T(0));
      }
      tile_gemm(n, HS, w, T(1), P + lo, ldp, 1, V.rows_from(lo), T(0), ob, HS);
      // Merge: the rows' outputs so far (weights exp(lse_old)) and the block's (exp(lse_b)),
      // each normalised, combine in proportion to their weights.
      for (int i = 0; i < n; i++) {
        if (lse_b[i] == neg_inf) continue;
        const int r = r0 + i;
        T* o = out + (static_cast<size_t>(b) * blk.Tq + r) * L.C + static_cast<size_t>(h) * HS;
        T& l = lse[(static_cast<size_t>(b) * blk.NH + h) * blk.Tq + r];
        const T* obi = ob + static_cast<size_t>(i) * HS;
        if (l == neg_inf) {
          std::copy(obi, obi + HS, o);
          l = lse_b[i];
          continue;
        }
        const T hi = std::max(l, lse_b[i]);
        const T merged = hi + std::log1p(std::exp(-std::abs(l - lse_b[i])));
        const T w_old = std::exp(l - merged), w_new = std::exp(lse_b[i] - merged);
        for (int d = 0; d < HS; d++) o[d] = w_old * o[d] + w_new * obi[d];
        l = merged;
      }
    }
  }
}

template <typename T>
void attention_block_backward(T* dqkv, T* dkv, const T* dout, const T* delta, const T* lse,
                              const T* qkv, const T* kv, const AttentionBlock& blk, T* workspace) {
  const int nq = blk.q_end - blk.q_begin, nk = blk.k_end - blk.k_begin;
  if (nq <= 0 || nk <= 0) return;
  const BlockLayout L(blk);
  const int HS = L.HS;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(HS)));
  const T neg_inf = -std::numeric_limits<T>::infinity();
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < blk.B * blk.KV; bg++) {
    const int b = bg / blk.KV, g = bg % blk.KV;
    const size_t k_off = (static_cast<size_t>(b) * blk.Tk + blk.k_begin) * L.ldk + L.key(g);
    const T* k = kv + k_off;
    const T* v = k + HS;
    T* dk = dkv + k_off;
    T* dv = dk + HS;
    const BlockWorkspace<T> ws(workspace, blk);
    const int ldp = ws.ldp;
    T* P = ws.P;    // (rows, nk), rows ldp apart
    T* dP = ws.dP;  // (rows, nk), then dS
    const Panels<T> Kt = pack_panels(ws.wide1, k, 1, L.ldk, HS, nk);  // (HS, nk)
    const Panels<T> Vt = pack_panels(ws.wide2, v, 1, L.ldk, HS, nk);  // (HS, nk)
    const Panels<T> K = pack_panels(ws.tall, k, L.ldk, 1, nk, HS);    // (nk, HS)
    KeyRange range[kAttentionRowBlock];
    for (int h = g * L.Q; h < (g + 1) * L.Q; h++) {
      for (int c0 = 0; c0 < nq; c0 += kAttentionRowBlock) {
        const int n = std::min(kAttentionRowBlock, nq - c0), r0 = blk.q_begin + c0;
        const size_t q_row0 = static_cast<size_t>(b) * blk.Tq + r0;
        const T* q = qkv + q_row0 * L.ld + L.query(h);
        T* dq = dqkv + q_row0 * L.ld + L.query(h);
        const T* dO = dout + q_row0 * L.C + static_cast<size_t>(h) * HS;
        const size_t stat0 = (static_cast<size_t>(b) * blk.NH + h) * blk.Tq + r0;
        const KeyRange all = row_block_keys(blk, b, r0, n, range);
        if (all.empty()) continue;  // no row sees a key here: nothing to add
        const int lo = all.jl, w = all.jh - all.jl, la = panel_start<T>(lo);
        const size_t kr = static_cast<size_t>(lo) * L.ldk;  // the range's first key row
        // P = the probabilities of the block's keys, recomputed from the final log-sum-exp.
        tile_gemm(n, all.jh - la, HS, scale, q, L.ld, 1, Kt.from(la), T(0), P + la, ldp);
        for (int i = 0; i < n; i++) {
          T* row = P + static_cast<size_t>(i) * ldp;
          const KeyRange r = range[i];
          const T l = lse[stat0 + i];
          if (r.empty() || l == neg_inf) {
            std::fill(row + lo, row + all.jh, T(0));
            continue;
          }
          exp_minus(row + r.jl, r.jh - r.jl, l);
          std::fill(row + lo, row + r.jl, T(0));
          std::fill(row + r.jh, row + all.jh, T(0));
        }
        // dV += P^T dO; dP = dO V^T, over the range's keys.
        tile_gemm(w, HS, n, T(1), P + lo, 1, ldp, row_major(dO, L.C, HS), T(1), dv + kr, L.ldk);
        tile_gemm(n, all.jh - la, HS, T(1), dO, L.C, 1, Vt.from(la), T(0), dP + la, ldp);
        // dS = P * (dP - delta) * scale: delta = sum over every key of P dP, all ring steps.
        for (int i = 0; i < n; i++) {
          const T* prow = P + static_cast<size_t>(i) * ldp + lo;
          T* drow = dP + static_cast<size_t>(i) * ldp + lo;
          const T d = delta[stat0 + i];
#pragma omp simd
          for (int j = 0; j < w; j++) drow[j] = prow[j] * (drow[j] - d) * scale;
        }
        // dQ += dS K; dK += dS^T Q, over the range's keys.
        tile_gemm(n, HS, w, T(1), dP + lo, ldp, 1, K.rows_from(lo), T(1), dq, L.ld);
        tile_gemm(w, HS, n, T(1), dP + lo, 1, ldp, row_major(q, L.ld, HS), T(1), dk + kr, L.ldk);
      }
    }
  }
}

template void attention_block_forward(float*, float*, const float*, const float*,
                                      const AttentionBlock&, float*);
template void attention_block_forward(double*, double*, const double*, const double*,
                                      const AttentionBlock&, double*);
template void attention_block_backward(float*, float*, const float*, const float*, const float*,
                                       const float*, const float*, const AttentionBlock&, float*);
template void attention_block_backward(double*, double*, const double*, const double*,
                                       const double*, const double*, const double*,
                                       const AttentionBlock&, double*);

LATTICE_ISA_END
