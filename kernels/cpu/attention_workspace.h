// The attention kernels' per-thread workspaces (attention.cpp, attention_block.cpp), whose sizes
// kernels.h's attention_workspace_elems and attention_block_workspace_elems give (dispatch.cpp);
// private to the CPU kernels. Three blocks of
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

// A thread's part of an attention kernel's workspace, in elements from its start: `blocks`
// blocks of min(Tq, kAttentionRowBlock) probability rows of Tk keys, ldp apart; `extra`
// elements; then room for two (HS, Tk) panel packings (wide1, wide1 + wide) and one (Tk, HS)
// (tall); `size` in all. The sizes kernels.h reports and the kernels' pointers both come from
// here.
struct AttentionLayout {
  int ldp;
  size_t rows, block, wide, wide1, tall, size;
  AttentionLayout(int Tq, int Tk, int HS, int blocks, size_t extra)
      : ldp(attention_probability_stride(Tk)),
        rows(static_cast<size_t>(std::min(Tq, kAttentionRowBlock))),
        block(rows * ldp),
        wide(static_cast<size_t>(HS) * (Tk + kAttentionPanelPad)),
        wide1(blocks * block + extra),
        tall(wide1 + 2 * wide),
        size(tall + static_cast<size_t>(Tk) * (HS + kAttentionPanelPad)) {}
};

// The causal kernel's (attention.cpp): the probabilities, their dropped-out copy and the score
// gradients.
inline AttentionLayout attention_layout(int T, int HS) {
  return AttentionLayout(T, T, HS, 3, 0);
}

// The block kernel's (attention_block.cpp): the probabilities and the score gradients, then the
// rows' outputs over the block (HS) and their log-sum-exps.
inline AttentionLayout attention_block_layout(int Tq, int Tk, int HS) {
  const size_t rows = static_cast<size_t>(std::min(Tq, kAttentionRowBlock));
  return AttentionLayout(Tq, Tk, HS, 2, rows * (HS + 1));
}

}  // namespace lattice::kernels::cpu
