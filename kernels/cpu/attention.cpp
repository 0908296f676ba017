// Causal multi-head self-attention over the grouped QKV layout (kernels.h: query heads share
// their group's key and value, read in place). Forward: one (batch, query head) pair per task;
// backward: one (batch, group) pair per task, whose query heads add their key and value gradients
// in turn, so no two threads write the same gradient.
// Rows are processed in blocks of kAttentionRowBlock: block [i0, i1) only multiplies against
// keys/values [0, i1), and its products run tile_gemm.h's register tiles (Note [attention tile
// GEMM]), which skip the upper (masked) triangle a tile at a time. A task first copies its key
// (and, backward, value) head transposed into the workspace, the row-major B of Q K^T and
// dO V^T.
//
// Note [attention keeps log-sum-exps]
// The forward keeps, per query row, only the log-sum-exp of its scores (lse (B, NH, T)), as
// CUDA's flash attention and the ring's block kernel do; the backward recomputes a block's
// probabilities as exp(score - lse) with one more GEMM (Q K^T over the block's rows). Keeping
// the (B, NH, T, T) probabilities instead made the stored activations grow with T^2: 64 MiB a
// layer at B 1, 16 heads, T 1024, 1 GiB at T 4096. A thread's workspace is three blocks of rows
// (probabilities, their dropped-out copy, the score gradients) and the transposed key and value
// head (AttentionWorkspace). The backward runs a head block
// by block, last block first: the last block's dK and dV products cover every key row and write
// them, the earlier ones add to rows [0, i1). The dropout mask is the element's hash (its index
// among all heads' T x T probabilities), so the backward recomputes it as well.
// Packed documents (positions non-null): each row's softmax runs over its own document's keys
// only, [i - positions[i], i], in both directions, and a block's GEMMs start at the first key
// any of its rows sees, skipping earlier documents' keys (as the CUDA kernels skip key tiles).
// Compiled once per ISA (Note [CPU dispatch]); the float softmax rows run explicit vectors.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "attention_workspace.h"
#include "dropout_row.h"
#include "gemm.h"
#include "lattice/dropout_hash.h"
#include "lattice/kernels.h"
#include "softmax_row.h"
#include "tile_gemm.h"

LATTICE_ISA_BEGIN

namespace {
constexpr int kRowBlock = kAttentionRowBlock;
static_assert(kTileColumns<float> <= kAttentionPanelPad + 1 &&
              kTileColumns<double> <= kAttentionPanelPad + 1);

// This thread's part of the workspace (attention_layout): three blocks of rows, ldp apart (a
// power-of-two stride put a column's 64 rows, which the P^T dO and dS^T Q tiles read down, in one
// set of the L1 cache), then room for two (HS, T) panel packings and one (T, HS).
template <typename T>
struct AttentionWorkspace {
  int ldp;
  T *P, *Pd, *dP, *wide1, *wide2, *tall;
  AttentionWorkspace(T* workspace, int T_, int HS) {
    const AttentionLayout l = attention_layout(T_, HS);
    T* ws = workspace + static_cast<size_t>(omp_get_thread_num()) * l.size;
    ldp = l.ldp;
    P = ws, Pd = ws + l.block, dP = ws + 2 * l.block;
    wide1 = ws + l.wide1, wide2 = wide1 + l.wide, tall = ws + l.tall;
  }
};

// The grouped layout's columns (kernels.h): KV groups of Q query heads, a key and a value.
struct GroupedHeads {
  int HS, Q, ld;
  GroupedHeads(int C, int NH, int KV) : HS(C / NH), Q(NH / KV), ld((NH + 2 * KV) * (C / NH)) {}
  size_t query(int h) const { return static_cast<size_t>(h / Q) * (Q + 2) * HS + (h % Q) * HS; }
  size_t key(int g) const { return static_cast<size_t>(g) * (Q + 2) * HS + Q * HS; }
};

// The first key query row i sees: its packed document's start, else 0.
inline int first_key(const int32_t* pos, int i) { return pos ? i - pos[i] : 0; }

// The first key any row of [i0, i1) sees: the block's products cover keys [k0, i1) only, so a
// block of packed documents skips the keys of the documents before its own.
inline int first_key_of_block(const int32_t* pos, int i0, int i1) {
  int k0 = i0;
  for (int i = i0; i < i1; i++) k0 = std::min(k0, first_key(pos, i));
  return k0;
}

// Rows [i0, i1) of one head's probabilities: P (i1 - i0 rows, ldp apart) holds the scaled
// scores Q K^T over keys [k0, i1) (at least up to each row's diagonal); each row becomes its
// softmax over its visible keys (zero elsewhere in [k0, i1)), by normalising (the forward, which
// writes lse) or from lse (the backward).
template <typename T, bool kForward>
void probabilities(T* P, int ldp, int i0, int i1, int k0, const int32_t* pos,
                   std::conditional_t<kForward, T*, const T*> lse) {
  for (int i = i0; i < i1; i++) {
    T* row = P + static_cast<size_t>(i - i0) * ldp;
    const int first = first_key(pos, i), n = i + 1 - first;
    if constexpr (kForward)
      lse[i] = softmax_row(row + first, n);
    else
      exp_minus(row + first, n, lse[i]);
    std::fill(row + k0, row + first, T(0));
    std::fill(row + i + 1, row + i1, T(0));
  }
}

// Rows [i0, i1) of Pd = dropout(P), both (i1 - i0) rows ldp apart over keys [k0, i1), zero
// above the diagonal; the element index that keys the mask is the element's global index among
// all heads' (T, T) probabilities (`base`: the head's first).
template <typename T>
void apply_dropout(T* Pd, const T* P, int ldp, int T_, int i0, int i1, int k0, size_t base,
                   float p, uint64_t key) {
  const uint32_t threshold = dropout_threshold(p);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  for (int i = i0; i < i1; i++) {
    // Row pointers and a size_t index: with int indices into the (T, T) block GCC left the
    // double loop scalar (three 64-bit multiplies per element in the hash).
    const size_t row = base + static_cast<size_t>(i) * T_, n = static_cast<size_t>(i) + 1;
    const T* prow = P + static_cast<size_t>(i - i0) * ldp;
    T* drow = Pd + static_cast<size_t>(i - i0) * ldp;
    if constexpr (std::is_same_v<T, float>) {
      dropout_row(drow + k0, nullptr, prow + k0, n - k0, key, row + k0, threshold, keep_scale);
    } else {
#pragma omp simd
      for (size_t j = static_cast<size_t>(k0); j < n; j++)
        drow[j] = dropout_keep(key, row + j, threshold) ? prow[j] * keep_scale : T(0);
    }
    std::fill(drow + n, drow + i1, T(0));
  }
}
}  // namespace

template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int NH,
                       float dropout_p, uint64_t dropout_key, T* workspace, int head_offset,
                       int total_heads, int kv_heads, const int32_t* positions) {
  if (total_heads <= 0) total_heads = NH;
  const GroupedHeads layout(C, NH, kv_heads > 0 ? kv_heads : NH);
  const int HS = layout.HS, ld = layout.ld;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(HS)));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    const T* row0 = qkv + static_cast<size_t>(b) * T_ * ld;
    const T* q = row0 + layout.query(h);
    const T* k = row0 + layout.key(h / layout.Q);
    const T* v = k + HS;
    T* o = out + static_cast<size_t>(b) * T_ * C + h * HS;
    const AttentionWorkspace<T> ws(workspace, T_, HS);
    const int ldp = ws.ldp;
    const int32_t* pos = positions ? positions + static_cast<size_t>(b) * T_ : nullptr;
    const size_t mask_base = (static_cast<size_t>(b) * total_heads + head_offset + h) * T_ * T_;
    const Panels<T> Kt = pack_panels(ws.wide1, k, 1, ld, HS, T_);  // (HS, T)
    const Panels<T> V = pack_panels(ws.tall, v, ld, 1, T_, HS);    // (T, HS)
    for (int i0 = 0; i0 < T_; i0 += kRowBlock) {
      const int i1 = std::min(T_, i0 + kRowBlock), n = i1 - i0;
      const int k0 = first_key_of_block(pos, i0, i1), w = i1 - k0;  // keys [k0, i1)
      const int ka = panel_start<T>(k0);
      tile_gemm(n, i1 - ka, HS, scale, q + static_cast<size_t>(i0) * ld, ld, 1, Kt.from(ka),
                T(0), ws.P + ka, ldp, {Triangle::kColumnsToRow, i0 - ka});
      probabilities<T, true>(ws.P, ldp, i0, i1, k0, pos, lse + static_cast<size_t>(bh) * T_);
      const T* Pused = ws.P;
      if (dropout_p > 0.0f) {
        apply_dropout(ws.Pd, ws.P, ldp, T_, i0, i1, k0, mask_base, dropout_p, dropout_key);
        Pused = ws.Pd;
      }
      tile_gemm(n, HS, w, T(1), Pused + k0, ldp, 1, V.rows_from(k0), T(0),
                o + static_cast<size_t>(i0) * C, C, {Triangle::kDepthToRow, i0 - k0});
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* lse, int B, int T_, int C,
                        int NH, float dropout_p, uint64_t dropout_key, T* workspace,
                        int head_offset, int total_heads, int kv_heads,
                        const int32_t* positions) {
  if (total_heads <= 0) total_heads = NH;
  const int KV = kv_heads > 0 ? kv_heads : NH;
  const GroupedHeads layout(C, NH, KV);
  const int HS = layout.HS, ld = layout.ld;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(HS)));
  const T keep_scale = static_cast<T>(dropout_p > 0.0f ? 1.0 / (1.0 - dropout_p) : 1.0);
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < B * KV; bg++) {
    const int b = bg / KV, g = bg % KV;
    const T* row0 = qkv + static_cast<size_t>(b) * T_ * ld;
    T* drow0 = dqkv + static_cast<size_t>(b) * T_ * ld;
    const T* k = row0 + layout.key(g);
    const T* v = k + HS;
    T* dk = drow0 + layout.key(g);
    T* dv = dk + HS;
    // The block's probabilities (recomputed), their dropped-out copy, dPd and then dS.
    const AttentionWorkspace<T> ws(workspace, T_, HS);
    const int ldp = ws.ldp;
    T *P = ws.P, *Pd = ws.Pd, *dP = ws.dP;
    const int32_t* pos = positions ? positions + static_cast<size_t>(b) * T_ : nullptr;
    // Packed documents: a block's products start at its first document's keys, so no block
    // need cover every key row; the group's key and value gradients start from zero instead.
    if (pos)
      for (int t = 0; t < T_; t++) {
        std::fill_n(dk + static_cast<size_t>(t) * ld, HS, T(0));
        std::fill_n(dv + static_cast<size_t>(t) * ld, HS, T(0));
      }
    const Panels<T> Kt = pack_panels(ws.wide1, k, 1, ld, HS, T_);  // (HS, T)
    const Panels<T> Vt = pack_panels(ws.wide2, v, 1, ld, HS, T_);  // (HS, T)
    const Panels<T> K = pack_panels(ws.tall, k, ld, 1, T_, HS);    // (T, HS)
    for (int h = g * layout.Q; h < (g + 1) * layout.Q; h++) {
      const size_t mask_base = (static_cast<size_t>(b) * total_heads + head_offset + h) * T_ * T_;
      const T* q = row0 + layout.query(h);
      T* dq = drow0 + layout.query(h);
      const T* l = lse + (static_cast<size_t>(b) * NH + h) * T_;
      const T* dO = dout + static_cast<size_t>(b) * T_ * C + h * HS;
      const int last = (T_ - 1) / kRowBlock * kRowBlock;
      for (int i0 = last; i0 >= 0; i0 -= kRowBlock) {
        const int i1 = std::min(T_, i0 + kRowBlock), n = i1 - i0;
        const int k0 = first_key_of_block(pos, i0, i1), w = i1 - k0;  // keys [k0, i1)
        const size_t kr = static_cast<size_t>(k0) * ld;               // their first row
        // Unpacked, the group's first query head writes dk and dv with the last block, whose
        // products cover every key row [0, T); everything after adds to them.
        const T beta = !pos && h == g * layout.Q && i0 == last ? T(0) : T(1);
        const T* qblock = q + static_cast<size_t>(i0) * ld;
        const int ka = panel_start<T>(k0);
        const Triangle columns{Triangle::kColumnsToRow, i0 - ka},
            to_row{Triangle::kDepthToRow, i0 - k0}, from_row{Triangle::kDepthFromRow, k0 - i0};
        tile_gemm(n, i1 - ka, HS, scale, qblock, ld, 1, Kt.from(ka), T(0), P + ka, ldp, columns);
        probabilities<T, false>(P, ldp, i0, i1, k0, pos, l);
        const T* Pused = P;
        if (dropout_p > 0.0f) {
          apply_dropout(Pd, P, ldp, T_, i0, i1, k0, mask_base, dropout_p, dropout_key);
          Pused = Pd;
        }
        const T* dOblock = dO + static_cast<size_t>(i0) * C;
        // dV[k0, i1) (+)= Pd^T dO[i0:i1] (Pd's block is zero right of the diagonal).
        tile_gemm(w, HS, n, T(1), Pused + k0, 1, ldp, row_major(dOblock, C, HS), beta, dv + kr, ld,
                  from_row);
        // dPd = dO V^T over keys [k0, i1) (from ka).
        tile_gemm(n, i1 - ka, HS, T(1), dOblock, C, 1, Vt.from(ka), T(0), dP + ka, ldp, columns);
        // dS = P * (dP - sum_j P dP) * scale, with dP = dPd * mask / (1 - p). The mask is read
        // off Pd (zero where dropped) instead of hashing every element again: where P is zero
        // Pd is too and the element is taken as dropped, which changes nothing, since dS is P
        // times a finite factor there and P's zero adds nothing to the row's dot product.
        for (int i = i0; i < i1; i++) {
          // The row's keys [k0, i], indexed from k0.
          const int m = i + 1 - k0;
          const T* prow = P + static_cast<size_t>(i - i0) * ldp + k0;
          T* drow = dP + static_cast<size_t>(i - i0) * ldp + k0;
          if (dropout_p > 0.0f) {
            const T* pdrow = Pd + static_cast<size_t>(i - i0) * ldp + k0;
#pragma omp simd
            for (int j = 0; j < m; j++) drow[j] = pdrow[j] != T(0) ? drow[j] * keep_scale : T(0);
          }
          T dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j < m; j++) dot += prow[j] * drow[j];
#pragma omp simd
          for (int j = 0; j < m; j++) drow[j] = prow[j] * (drow[j] - dot) * scale;
          std::fill(drow + m, drow + (i1 - k0), T(0));
        }
        // dQ[i0:i1] = dS K[k0, i1); dK[k0, i1) (+)= dS^T Q[i0:i1].
        tile_gemm(n, HS, w, T(1), dP + k0, ldp, 1, K.rows_from(k0), T(0),
                  dq + static_cast<size_t>(i0) * ld, ld, to_row);
        tile_gemm(w, HS, n, T(1), dP + k0, 1, ldp, row_major(qblock, ld, HS), beta, dk + kr, ld,
                  from_row);
      }
    }
  }
}

template void attention_forward(float*, float*, const float*, int, int, int, int, float, uint64_t,
                                float*, int, int, int, const int32_t*);
template void attention_forward(double*, double*, const double*, int, int, int, int, float,
                                uint64_t, double*, int, int, int, const int32_t*);
template void attention_backward(float*, const float*, const float*, const float*, int, int, int,
                                 int, float, uint64_t, float*, int, int, int, const int32_t*);
template void attention_backward(double*, const double*, const double*, const double*, int, int,
                                 int, int, float, uint64_t, double*, int, int, int,
                                 const int32_t*);

LATTICE_ISA_END
