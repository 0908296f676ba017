// The SwiGLU kernels (launchers in swiglu.cu), kept apart so that tests/kernels/cuda/
// test_kernels_emulated.cpp also runs them on the CPU under host_emulation.h.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#include "common.cuh"
#endif

namespace lattice::kernels::cuda {
namespace {

// out (N, F) = silu(gate) * up over inp (N, 2F) = gate | up per row; grid-stride over N F.
template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int N, int F) {
  const size_t n_out = static_cast<size_t>(N) * F;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n_out;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = idx / F, f = idx % F, at = n * 2 * F + f;
    const float g = to_float(inp[at]), u = to_float(inp[at + F]);
    out[idx] = from_float<T>(g / (1.0f + expf(-g)) * u);
  }
}

// dinp (N, 2F): d gate = dout up silu'(g), silu'(g) = sig(g) (1 + g (1 - sig(g))); d up = dout
// silu(g). dinp may not alias inp.
template <typename T>
__global__ void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int N, int F) {
  const size_t n_out = static_cast<size_t>(N) * F;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < n_out;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = idx / F, f = idx % F, at = n * 2 * F + f;
    const float g = to_float(inp[at]), u = to_float(inp[at + F]), d = to_float(dout[idx]);
    const float sig = 1.0f / (1.0f + expf(-g));
    dinp[at] = from_float<T>(d * u * sig * (1.0f + g * (1.0f - sig)));
    dinp[at + F] = from_float<T>(d * g * sig);
  }
}

}  // namespace
}  // namespace lattice::kernels::cuda
