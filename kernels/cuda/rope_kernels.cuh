// The RoPE kernel (launchers in rope.cu), kept apart so that tests/kernels/cuda/
// test_kernels_emulated.cpp also runs it on the CPU under host_emulation.h.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#include "common.cuh"
#endif

namespace lattice::kernels::cuda {
namespace {

// In place on qkv (N, (NH + 2 KV) HS), kernels.h's grouped layout: rotates dims [0, R) of the
// NH query heads and KV key heads of every row by the angles of its position (positions (N),
// or n % T when null), value heads untouched; sign +1 the forward rotation, -1 its transpose
// (the backward on dqkv). cos, sin (P, R / 2) fp32. One thread per rotated pair (x[i],
// x[i + R/2]), grid-stride over N (NH + KV) R / 2 of them; fp32 arithmetic, rounded on store.
template <typename T>
__global__ void rope_kernel(T* qkv, const float* cos, const float* sin, const int32_t* positions,
                            int N, int T_, int NH, int KV, int HS, int R, float sign) {
  const int Q = NH / KV, half = R / 2, heads = NH + KV;  // rotated heads per row
  const size_t width = static_cast<size_t>(NH + 2 * KV) * HS;
  const size_t pairs = static_cast<size_t>(N) * heads * half;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < pairs;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    const size_t rest = idx / half;
    const int head = static_cast<int>(rest % heads), n = static_cast<int>(rest / heads);
    // Group g's rotated heads are its Q query heads and then its key head (j = Q).
    const int g = head / (Q + 1), j = head % (Q + 1);
    T* x = qkv + n * width + (static_cast<size_t>(g) * (Q + 2) + j) * HS;
    const size_t p = positions ? static_cast<size_t>(positions[n]) : static_cast<size_t>(n % T_);
    const float c = cos[p * half + i], s = sign * sin[p * half + i];
    const float x1 = to_float(x[i]), x2 = to_float(x[i + half]);
    x[i] = from_float<T>(x1 * c - x2 * s);
    x[i + half] = from_float<T>(x2 * c + x1 * s);
  }
}

}  // namespace
}  // namespace lattice::kernels::cuda
