// The attention kernels' products (attention.cpp) on register tiles in the including file's ISA
// (Note [CPU dispatch]); private to the CPU kernels.
//
// Note [attention tile GEMM]
// An attention block's products are small (64 query rows against up to T keys, a head of 64)
// and OpenBLAS packs both operands of every call: at T 2048 a fifth of the attention's time was
// its copy routines, the same key rows packed again for every block of 64 queries. Here:
// - A is read in place through a row and a column stride (A or its transpose, no copy), one
//   element per row of a tile broadcast at each step of the sum.
// - B is read a tile's columns (kTileColumns, one vector per column vector) at a time, from a
//   Panels layout: the caller packs K, V and their transposes once per head into panels of
//   kTileColumns columns whose rows follow each other (pack_panels), so that a tile's sum reads
//   one contiguous stream; a small B (a 64-row block of dO or Q) is read in place. Read in place,
//   V's rows (3 C apart) made the AVX2 copy's 16-column tiles run P V at half OpenBLAS's rate
//   (one cache line a row, from L2).
// - A tile of kTileRows rows by kTileVectors vectors of C stays in registers over the whole sum.
// - Causal products skip what the triangle makes zero, a tile at a time: the scores' tiles stop
//   at the last row's diagonal (kColumnsToRow), and the sums over keys (P V, dS K) or over
//   queries (P^T dO, dS^T Q) stop or start at a tile's diagonal (kDepthToRow, kDepthFromRow),
//   where the operand's elements past it are zero.
#pragma once

#include <algorithm>
#include <cstddef>

#include "isa_region.h"

LATTICE_ISA_BEGIN

template <typename T>
struct TileVector;
template <>
struct TileVector<float> {
  typedef float type __attribute__((vector_size(LATTICE_ISA_VEC_BYTES)));
};
template <>
struct TileVector<double> {
  typedef double type __attribute__((vector_size(LATTICE_ISA_VEC_BYTES)));
};

// 6 x 4 accumulators of 32 zmm registers with AVX-512, 6 x 2 of 16 registers below it.
inline constexpr int kTileRows = 6;
inline constexpr int kTileVectors = LATTICE_ISA_VEC_BYTES == 64 ? 4 : 2;
template <typename T>
inline constexpr int kTileLanes = LATTICE_ISA_VEC_BYTES / sizeof(T);
template <typename T>
inline constexpr int kTileColumns = kTileVectors * kTileLanes<T>;

// B (K, N): element (p, c) at b[(c / kTileColumns) chunk + p ld + c % kTileColumns]. Row-major
// B is ld its row stride and chunk kTileColumns; packed panels are ld kTileColumns and chunk a
// panel's size. Whole vectors may be read up to column `readable` of each row (a panel's padding
// makes that every column of its last panel); past it, element by element.
template <typename T>
struct Panels {
  const T* b;
  ptrdiff_t ld, chunk;
  int readable;
  // B's columns from c (a multiple of kTileColumns) on.
  Panels from(int c) const {
    return {b + c / kTileColumns<T> * chunk, ld, chunk, readable - c};
  }
  // B's rows from p on.
  Panels rows_from(int p) const {
    return {b + p * ld, ld, chunk, readable};
  }
};
template <typename T>
Panels<T> row_major(const T* b, ptrdiff_t ld, int readable) {
  return {b, ld, kTileColumns<T>, readable};
}
// The first column of the panel that holds column c: a product over columns [c, n) of packed
// panels runs over [panel_start(c), n) and leaves the columns before c unread.
template <typename T>
int panel_start(int c) {
  return c / kTileColumns<T> * kTileColumns<T>;
}

// Which part of the product the causal triangle leaves out; row r of C is A's row r. shift
// places the diagonal: column (or depth index) r + shift is row r's last (kColumnsToRow,
// kDepthToRow) or first (kDepthFromRow) nonzero one.
struct Triangle {
  enum Kind { kNone, kColumnsToRow, kDepthToRow, kDepthFromRow } kind = kNone;
  int shift = 0;
};

namespace tile_detail {

// The first n elements (the rest zero). A whole vector's copy has a constant size, which the
// compiler makes one load or store; a variable size is a byte loop (it made every tile's
// epilogue cost as much as a third of a 64-step sum).
template <typename V, typename T>
inline V load_vector(const T* p, int n) {
  constexpr int L = sizeof(V) / sizeof(T);
  V v{};
  if (n >= L)
    __builtin_memcpy(&v, p, sizeof(V));
  else if (n > 0)
    __builtin_memcpy(&v, p, n * sizeof(T));
  return v;
}
template <typename V, typename T>
inline void store_vector(T* p, V v, int n) {
  constexpr int L = sizeof(V) / sizeof(T);
  if (n >= L)
    __builtin_memcpy(p, &v, sizeof(V));
  else if (n > 0)
    __builtin_memcpy(p, &v, n * sizeof(T));
}

// C's tile (MR rows, `cols` <= NV vectors of columns) = alpha sum over p in [p0, p1) of A(r, p)
// B[p] + beta C (beta 0: C is not read). B's rows are read as NV whole vectors, or `cols`
// elements where kPartialB.
template <typename T, int MR, int NV, bool kPartialB>
inline void tile(int p0, int p1, const T* a, ptrdiff_t rs, ptrdiff_t cs, const T* b,
                 ptrdiff_t ldb, T alpha, T beta, T* c, ptrdiff_t ldc, int cols) {
  using V = typename TileVector<T>::type;
  constexpr int L = kTileLanes<T>;
  V acc[MR][NV] = {};
  for (int p = p0; p < p1; p++) {
    const T* brow = b + p * ldb;
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      bv[v] = load_vector<V>(brow + v * L, kPartialB ? cols - v * L : L);
    const T* acol = a + p * cs;
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
      const V ar = acol[r * rs] - V{};  // a broadcast (x + 0 would not fold: -0 + 0 is +0)
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) acc[r][v] += ar * bv[v];
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
      const int n = std::min(L, cols - v * L);
      if (n <= 0) break;
      T* cp = c + r * ldc + v * L;
      V out = acc[r][v] * alpha;
      if (beta != T(0)) out += load_vector<V>(cp, n) * beta;
      store_vector(cp, out, n);
    }
}

// One tile of MR rows and cols <= kTileColumns columns; b is the chunk's first column.
template <typename T, int MR>
inline void tile_columns(int p0, int p1, const T* a, ptrdiff_t rs, ptrdiff_t cs,
                         const Panels<T>& b, T alpha, T beta, T* c, ptrdiff_t ldc, int cols) {
  constexpr int L = kTileLanes<T>;
  const int vectors = (cols + L - 1) / L;
  if (vectors * L <= b.readable) {
    // Whole vectors; the stores stop at cols.
    switch (vectors) {
      case 1:
        return tile<T, MR, 1, false>(p0, p1, a, rs, cs, b.b, b.ld, alpha, beta, c, ldc, cols);
      case 2:
        return tile<T, MR, 2, false>(p0, p1, a, rs, cs, b.b, b.ld, alpha, beta, c, ldc, cols);
      case 3:
        if constexpr (kTileVectors >= 3)
          return tile<T, MR, 3, false>(p0, p1, a, rs, cs, b.b, b.ld, alpha, beta, c, ldc, cols);
        break;
      case 4:
        if constexpr (kTileVectors >= 4)
          return tile<T, MR, 4, false>(p0, p1, a, rs, cs, b.b, b.ld, alpha, beta, c, ldc, cols);
        break;
    }
  }
  // B ends inside the last vector: the whole ones first, then that one read element by element.
  const int whole = cols / L * L;
  if (whole > 0) tile_columns<T, MR>(p0, p1, a, rs, cs, b, alpha, beta, c, ldc, whole);
  if (cols > whole)
    tile<T, MR, 1, true>(p0, p1, a, rs, cs, b.b + whole, b.ld, alpha, beta, c + whole, ldc,
                         cols - whole);
}

template <typename T, int MR>
inline void tile_rows(int r0, int N, int K, T alpha, const T* a, ptrdiff_t rs, ptrdiff_t cs,
                      const Panels<T>& b, T beta, T* c, ptrdiff_t ldc, Triangle tri) {
  int p0 = 0, p1 = K, n = N;
  if (tri.kind == Triangle::kColumnsToRow) n = std::clamp(r0 + MR + tri.shift, 0, N);
  if (tri.kind == Triangle::kDepthToRow) p1 = std::clamp(r0 + MR + tri.shift, 0, K);
  if (tri.kind == Triangle::kDepthFromRow) p0 = std::clamp(r0 + tri.shift, 0, K);
  if (p0 > p1) p0 = p1;  // an empty sum: C = beta C
  for (int c0 = 0; c0 < n; c0 += kTileColumns<T>)
    tile_columns<T, MR>(p0, p1, a + r0 * rs, rs, cs, b.from(c0), alpha, beta,
                        c + r0 * ldc + c0, ldc, std::min(kTileColumns<T>, n - c0));
}

}  // namespace tile_detail

// C (M, N) = alpha A (M, K) B (K, N) + beta C (beta 0: C is not read), C row-major (ldc), A's
// element (r, p) at a[r rs + p cs]. With a Triangle, C's elements right of the diagonal
// (kColumnsToRow) are left as they were or written, whichever a tile gives.
template <typename T>
void tile_gemm(int M, int N, int K, T alpha, const T* a, ptrdiff_t rs, ptrdiff_t cs,
               const Panels<T>& b, T beta, T* c, ptrdiff_t ldc, Triangle tri = {}) {
  using tile_detail::tile_rows;
  int r0 = 0;
  for (; r0 + kTileRows <= M; r0 += kTileRows)
    tile_rows<T, kTileRows>(r0, N, K, alpha, a, rs, cs, b, beta, c, ldc, tri);
  switch (M - r0) {
    case 1:
      return tile_rows<T, 1>(r0, N, K, alpha, a, rs, cs, b, beta, c, ldc, tri);
    case 2:
      return tile_rows<T, 2>(r0, N, K, alpha, a, rs, cs, b, beta, c, ldc, tri);
    case 3:
      return tile_rows<T, 3>(r0, N, K, alpha, a, rs, cs, b, beta, c, ldc, tri);
    case 4:
      return tile_rows<T, 4>(r0, N, K, alpha, a, rs, cs, b, beta, c, ldc, tri);
    case 5:
      return tile_rows<T, 5>(r0, N, K, alpha, a, rs, cs, b, beta, c, ldc, tri);
  }
}

// Packs B (K, N) into dst's panels of kTileColumns columns and K rows (N rounded up to
// kTileColumns, times K elements): B's element (p, c) is src[p rs + c cs] (B itself: rs its row
// stride, cs 1; a transpose: rs 1, cs the row stride).
// Columns past N are zero.
template <typename T>
Panels<T> pack_panels(T* dst, const T* src, ptrdiff_t rs, ptrdiff_t cs, int K, int N) {
  constexpr int NR = kTileColumns<T>;
  const ptrdiff_t chunk = static_cast<ptrdiff_t>(K) * NR;
  for (int c0 = 0; c0 < N; c0 += NR) {
    T* panel = dst + c0 / NR * chunk;
    const int w = std::min(NR, N - c0);
    for (int p = 0; p < K; p++) {
      T* row = panel + static_cast<ptrdiff_t>(p) * NR;
      const T* s = src + p * rs + c0 * cs;
      for (int j = 0; j < w; j++) row[j] = s[j * cs];
      std::fill(row + w, row + NR, T(0));
    }
  }
  return {dst, NR, chunk, static_cast<int>((N + NR - 1) / NR * NR)};
}

LATTICE_ISA_END
