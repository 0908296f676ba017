// context_split.h: the load-balanced split of a sequence over the context-parallel group.
#include "parallel/context_split.h"

#include <cassert>
#include <cstring>
#include <string>
#include <vector>

namespace lattice {

Status check_context_split(int seq_length, int cp_size) {
  if (cp_size < 1)
    return Status::invalid_argument("--context-parallel-size " + std::to_string(cp_size) +
                                    " must be at least 1");
  if (seq_length > 0 && seq_length % (2 * cp_size) == 0) return Status::ok();
  return Status::invalid_argument(
      "--seq-length " + std::to_string(seq_length) + " is not divisible by 2 x " +
      "--context-parallel-size " + std::to_string(cp_size) + " (= " + std::to_string(2 * cp_size) +
      "): context parallelism cuts each sequence into 2 x CP equal chunks");
}

void cp_positions(int32_t* positions, int T, int cp_rank, int cp_size) {
  for (int t = 0; t < T / cp_size; t++) positions[t] = cp_global_row(t, T, cp_rank, cp_size);
}

namespace {

// Calls copy(local_offset, full_offset, bytes) for each of the rank's 2 B runs of c rows.
template <typename Copy>
void for_each_run(int B, int T, size_t row_bytes, int cp_rank, int cp_size, Copy copy) {
  assert(check_context_split(T, cp_size).is_ok() && cp_rank >= 0 && cp_rank < cp_size);
  const int c = T / (2 * cp_size), Tl = T / cp_size;
  const size_t run = static_cast<size_t>(c) * row_bytes;
  for (int b = 0; b < B; b++)
    for (int half = 0; half < 2; half++) {
      const size_t local_row = static_cast<size_t>(b) * Tl + half * c;
      const size_t full_row =
          static_cast<size_t>(b) * T + static_cast<size_t>(cp_chunk(cp_rank, cp_size, half)) * c;
      copy(local_row * row_bytes, full_row * row_bytes, run);
    }
}

}  // namespace

void cp_split_bytes(void* local, const void* full, int B, int T, size_t row_bytes, int cp_rank,
                    int cp_size) {
  for_each_run(B, T, row_bytes, cp_rank, cp_size, [&](size_t lo, size_t fo, size_t n) {
    std::memcpy(static_cast<char*>(local) + lo, static_cast<const char*>(full) + fo, n);
  });
}

void cp_unsplit_bytes(void* full, const void* local, int B, int T, size_t row_bytes, int cp_rank,
                      int cp_size) {
  for_each_run(B, T, row_bytes, cp_rank, cp_size, [&](size_t lo, size_t fo, size_t n) {
    std::memcpy(static_cast<char*>(full) + fo, static_cast<const char*>(local) + lo, n);
  });
}

Status cp_gather_bytes(Comm& cp, void* full, const void* local, int B, int T, size_t row_bytes) {
  if (Status s = check_context_split(T, cp.size()); !s) return s;
  const size_t local_bytes = static_cast<size_t>(B) * (T / cp.size()) * row_bytes;
  std::vector<char> all(local_bytes * cp.size());
  const std::vector<size_t> counts(cp.size(), local_bytes);
  if (Status s = cp.all_gather(local, all.data(), counts, DType::kUInt8); !s) return s;
  for (int r = 0; r < cp.size(); r++)
    cp_unsplit_bytes(full, all.data() + local_bytes * r, B, T, row_bytes, r, cp.size());
  return Status::ok();
}

}  // namespace lattice
