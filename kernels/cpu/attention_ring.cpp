// The data movement of context parallelism's ring attention (kernels.h: attention_kv_pack,
// attention_kv_unpack, attention_row_dot, fill, accumulate; engine/src/parallel/ring_attention.cpp,
// Note [ring attention]). Plain host code compiled once, not per ISA: copies and O(n) sums beside
// the blocks' O(T^2) work. Each element's result is independent of the thread count.
#include <algorithm>

#include "lattice/dtype.h"
#include "lattice/kernels.h"

namespace lattice::kernels {
namespace {

// Below this many elements a loop stays on the calling thread (parallel.h's kMinParallelWork).
constexpr size_t kMinParallelElems = size_t{1} << 15;

}  // namespace

template <typename S>
void attention_kv_pack(S* kv, const S* qkv, size_t rows, int NH, int KV, int HS) {
  // A group's value follows its key, so each group is one run of 2 HS.
  const size_t Q = static_cast<size_t>(NH / KV), ld = static_cast<size_t>(NH + 2 * KV) * HS,
               ldk = 2 * static_cast<size_t>(KV) * HS;
#pragma omp parallel for schedule(static) if (rows * ldk >= kMinParallelElems)
  for (size_t row = 0; row < rows; row++)
    for (int g = 0; g < KV; g++) {
      const S* src = qkv + row * ld + (g * (Q + 2) + Q) * HS;
      std::copy(src, src + 2 * HS, kv + row * ldk + static_cast<size_t>(g) * 2 * HS);
    }
}

template <typename S>
void attention_kv_unpack(S* qkv, const S* kv, size_t rows, int NH, int KV, int HS) {
  const size_t Q = static_cast<size_t>(NH / KV), ld = static_cast<size_t>(NH + 2 * KV) * HS,
               ldk = 2 * static_cast<size_t>(KV) * HS;
#pragma omp parallel for schedule(static) if (rows * ldk >= kMinParallelElems)
  for (size_t row = 0; row < rows; row++)
    for (int g = 0; g < KV; g++) {
      const S* src = kv + row * ldk + static_cast<size_t>(g) * 2 * HS;
      std::copy(src, src + 2 * HS, qkv + row * ld + (g * (Q + 2) + Q) * HS);
    }
}

template <typename S>
void attention_row_dot(S* delta, const S* dout, const S* out, int B, int T, int NH, int HS) {
  const size_t rows = static_cast<size_t>(B) * T, C = static_cast<size_t>(NH) * HS;
#pragma omp parallel for schedule(static) if (rows * C >= kMinParallelElems)
  for (size_t row = 0; row < rows; row++)
    for (int h = 0; h < NH; h++) {
      const S* d = dout + row * C + static_cast<size_t>(h) * HS;
      const S* o = out + row * C + static_cast<size_t>(h) * HS;
      S dot = 0;
      for (int i = 0; i < HS; i++) dot += d[i] * o[i];
      delta[(row / T * NH + h) * T + row % T] = dot;
    }
}

template <typename S>
void fill(S* x, size_t n, S value) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelElems)
  for (size_t i = 0; i < n; i++) x[i] = value;
}

template <typename S>
void accumulate(S* acc, const S* x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelElems)
  for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

#define LATTICE_INSTANTIATE_RING_OPS(S)                                        \
  template void attention_kv_pack(S*, const S*, size_t, int, int, int);        \
  template void attention_kv_unpack(S*, const S*, size_t, int, int, int);      \
  template void attention_row_dot(S*, const S*, const S*, int, int, int, int); \
  template void fill(S*, size_t, S);                                           \
  template void accumulate(S*, const S*, size_t);
LATTICE_INSTANTIATE_RING_OPS(float)
LATTICE_INSTANTIATE_RING_OPS(double)
#undef LATTICE_INSTANTIATE_RING_OPS
// A 16-bit ring sends its keys and values in the compute type (Note [ring attention in 16 bits]
// in engine/src/parallel/ring_attention.cpp): packing only moves elements.
template void attention_kv_pack(bf16*, const bf16*, size_t, int, int, int);
template void attention_kv_pack(fp16*, const fp16*, size_t, int, int, int);

}  // namespace lattice::kernels
