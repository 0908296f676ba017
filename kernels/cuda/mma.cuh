// The warp-wide tensor-core product of the 16-bit attention kernels (attention_mma_kernels.cuh)
// and its fragment loads. mma_16816<DT> is PTX's mma.sync.m16n8k16 with fp32 accumulation on
// bf16 or fp16 inputs: D (16 x 8) += A (16 x 16) B (16 x 8) over one warp, each lane holding
// a fixed part of each fragment (note "fragments" below). Under nvcc the product is the PTX
// instruction; tests/kernels/cuda/host_emulation.h supplies mma_16816 and pack2 on the CPU from the
// same layout, so the kernels' fragment bookkeeping is checked without a GPU.
//
// Note "fragments": lane = 4 g + t (g = lane / 4 in 0..7, t = lane % 4). Each 32-bit register
// holds two 16-bit elements, the lower index in the low half.
//   A (16 x 16, row-major): a[0] = (g, 2t..2t+1), a[1] = (g + 8, 2t..), a[2] = (g, 2t + 8..),
//                           a[3] = (g + 8, 2t + 8..)
//   B (16 x 8, k x n):      b[0] = (k 2t..2t+1, n g), b[1] = (k 2t + 8..2t + 9, n g)
//   C, D (16 x 8, fp32):    c[0], c[1] = (g, 2t), (g, 2t + 1); c[2], c[3] = (g + 8, 2t..)
// A D fragment pair (columns 0-7 and 8-15 of a 16 x 16 result) converted to 16 bits is an A
// fragment: a[0] = pack(d0[0], d0[1]), a[1] = pack(d0[2], d0[3]), a[2], a[3] from d1 likewise.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>
#endif

namespace lattice::kernels::cuda {
namespace {

#ifdef __CUDACC__
template <typename DT>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<DT, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Two floats as a 16-bit pair (round to nearest even), lo in the low half.
template <typename DT>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<DT, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}
#endif

__device__ __forceinline__ uint32_t pair_at(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
__device__ __forceinline__ uint32_t pair_of(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// A fragment of the 16 x 16 tile at `tile` (row-major, `stride` elements per row).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int stride) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint16_t* p = tile + g * stride + 2 * t;
  a[0] = pair_at(p);
  a[1] = pair_at(p + 8 * stride);
  a[2] = pair_at(p + 8);
  a[3] = pair_at(p + 8 * stride + 8);
}

// B fragment (16 k x 8 n) from memory holding it n-major: element (k, n) at tile[n * stride + k]
// (K's rows as the B of Q K^T).
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const uint16_t* tile, int stride) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint16_t* p = tile + g * stride + 2 * t;
  b[0] = pair_at(p);
  b[1] = pair_at(p + 8);
}

// B fragment from memory holding it k-major: element (k, n) at tile[k * stride + n] (V's rows
// as the B of P V). With stride = 8 (mod 64) 16-bit elements the 32 lanes hit 32 banks.
__device__ __forceinline__ void load_b_k_major(uint32_t (&b)[2], const uint16_t* tile, int stride) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint16_t* p = tile + 2 * t * stride + g;
  b[0] = pair_of(p[0], p[stride]);
  b[1] = pair_of(p[8 * stride], p[9 * stride]);
}

// The A fragment of columns 16 kk .. 16 kk + 15 of a row block held as D fragments d[n-tile].
template <typename DT>
__device__ __forceinline__ void a_from_d(uint32_t (&a)[4], const float (&d0)[4],
                                         const float (&d1)[4]) {
  a[0] = pack2<DT>(d0[0], d0[1]);
  a[1] = pack2<DT>(d0[2], d0[3]);
  a[2] = pack2<DT>(d1[0], d1[1]);
  a[3] = pack2<DT>(d1[2], d1[3]);
}

}  // namespace
}  // namespace lattice::kernels::cuda
