// Context parallelism's sequence split (Megatron's get_batch_on_this_cp_rank, per-sequence
// zigzag): a sequence of T rows is cut into 2 CP chunks of T / (2 CP) rows, and CP rank r keeps
// chunks r and 2 CP - 1 - r, in that order, so that every rank has as much causal attention to
// compute as any other (docs/design-notes.md, "context parallelism: ring attention").
// These helpers move (B, T, width) tensors between the whole sequence and one rank's T / CP rows,
// and give each local row's global position (RoPE's position, the causal mask's order).
// Non-goal: Megatron's per-document zigzag of packed sequences (THD): a packed sequence is split
// as one sequence, its documents masked by positions (ring_attention.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "lattice/comm.h"
#include "lattice/status.h"

namespace lattice {

// Ok, or the rule broken: the sequence must split into 2 CP equal chunks.
Status check_context_split(int seq_length, int cp_size);

// The global chunk (of 2 CP) that half `half` (0 or 1) of CP rank cp_rank's rows holds.
inline int cp_chunk(int cp_rank, int cp_size, int half) {
  return half == 0 ? cp_rank : 2 * cp_size - 1 - cp_rank;
}
// The global position of local row t (0 <= t < T / CP) of CP rank cp_rank.
inline int cp_global_row(int t, int T, int cp_rank, int cp_size) {
  const int c = T / (2 * cp_size);
  return cp_chunk(cp_rank, cp_size, t / c) * c + t % c;
}
// The local row of CP rank cp_rank that holds global position t (0 <= t < T), else -1: another
// CP rank holds it (the inverse of cp_global_row).
inline int cp_local_row(int t, int T, int cp_rank, int cp_size) {
  const int c = T / (2 * cp_size), chunk = t / c;
  if (chunk == cp_rank) return t % c;
  if (chunk == 2 * cp_size - 1 - cp_rank) return c + t % c;
  return -1;
}
// positions (T / CP) = the global positions of CP rank cp_rank's rows, ascending.
void cp_positions(int32_t* positions, int T, int cp_rank, int cp_size);

// local (B, T / CP, row_bytes) = CP rank cp_rank's rows of full (B, T, row_bytes).
void cp_split_bytes(void* local, const void* full, int B, int T, size_t row_bytes, int cp_rank,
                    int cp_size);
// full's rows of CP rank cp_rank (B, T, row_bytes) = local (B, T / CP, row_bytes); other rows
// untouched (the inverse of cp_split_bytes).
void cp_unsplit_bytes(void* full, const void* local, int B, int T, size_t row_bytes, int cp_rank,
                      int cp_size);
// full (B, T, row_bytes) on every rank of `cp` = every rank's local rows put back in place: an
// all-gather over the context-parallel group (cp.size() = CP, cp.rank() = the CP rank).
Status cp_gather_bytes(Comm& cp, void* full, const void* local, int B, int T, size_t row_bytes);

// Typed forms: rows of `width` elements.
template <typename E>
void cp_split(E* local, const E* full, int B, int T, size_t width, int cp_rank, int cp_size) {
  cp_split_bytes(local, full, B, T, width * sizeof(E), cp_rank, cp_size);
}
template <typename E>
void cp_unsplit(E* full, const E* local, int B, int T, size_t width, int cp_rank, int cp_size) {
  cp_unsplit_bytes(full, local, B, T, width * sizeof(E), cp_rank, cp_size);
}
template <typename E>
Status cp_gather(Comm& cp, E* full, const E* local, int B, int T, size_t width) {
  return cp_gather_bytes(cp, full, local, B, T, width * sizeof(E));
}

}  // namespace lattice
