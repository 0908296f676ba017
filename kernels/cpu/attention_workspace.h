// The causal attention's per-thread workspace (attention.cpp), whose size kernels.h's
// attention_workspace_elems gives (dispatch.cpp); private to the CPU kernels. Three blocks of
// min(T, kAttentionRowBlock) rows of probabilities, rows attention_probability_stride(T) apart;
// then a head's keys and values packed into tile_gemm.h's panels: two (HS, T) operands (K^T,
// and V^T in the backward) and one (T, HS) (V in the forward, K in the backward).
#pragma once

#include <algorithm>
#include <cstddef>

#include "lattice/kernels.h"

namespace lattice::kernels::cpu {

// Columns a panel packing adds past an operand's last (at most kTileColumns - 1 of tile_gemm.h,
// which attention.cpp checks).
inline constexpr int kAttentionPanelPad = 64;

// T rounded up to 16 elements, plus 16: never a multiple of a large power of two, so that the 64
// rows of a probability block, which the P^T dO and dS^T Q tiles read down a column, fall in
// different sets of the L1 cache (at T 2048 a stride of T put them all in one, and those tiles
// ran from L2).
inline int attention_probability_stride(int T) {
  return (T + 15) / 16 * 16 + 16;
}

inline size_t attention_workspace_size(int T, int HS) {
  const size_t rows = static_cast<size_t>(std::min(T, kAttentionRowBlock));
  return 3 * rows * attention_probability_stride(T) +
         2 * static_cast<size_t>(HS) * (T + kAttentionPanelPad) +
         static_cast<size_t>(T) * (HS + kAttentionPanelPad);
}

// The block kernel's (attention_block.cpp): two blocks of probability rows (Tk keys, stride
// attention_probability_stride), the rows' outputs over the block (HS) and their log-sum-exps,
// then the keys and values packed as the causal kernel's.
inline size_t attention_block_workspace_size(int Tq, int Tk, int HS) {
  const size_t rows = static_cast<size_t>(std::min(Tq, kAttentionRowBlock));
  return 2 * rows * attention_probability_stride(Tk) + rows * (HS + 1) +
         2 * static_cast<size_t>(HS) * (Tk + kAttentionPanelPad) +
         static_cast<size_t>(Tk) * (HS + kAttentionPanelPad);
}

}  // namespace lattice::kernels::cpu
