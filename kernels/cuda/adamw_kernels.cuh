// The loss scaler's overflow test (launcher in adamw.cu), kept apart so that
// tests/kernels/cuda/test_kernels_emulated.cpp also runs it on the CPU under host_emulation.h.
#pragma once

#ifdef __CUDACC__
#include "common.cuh"
#endif
#include "reduce.cuh"

namespace lattice::kernels::cuda {
namespace {

#ifndef __CUDACC__
using std::isfinite;  // host emulation: <cmath>'s; nvcc has its own for device code
#endif

// x (n) *= inv_scale over a grid-stride walk; *found_inf (1) = 1 when an element is or becomes
// inf or NaN, written once per block that saw one (the same value: no order needed), left as
// it is otherwise. The CPU's optim/grad_scaling.cpp unscale_and_check, element for element.
__global__ void unscale_and_check_kernel(float* x, size_t n, float inv_scale, float* found_inf) {
  float bad = 0.0f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = x[i] * inv_scale;
    x[i] = v;
    if (!isfinite(v)) bad = 1.0f;
  }
  bad = block_sum(bad);  // every thread reaches it: no early return above
  if (threadIdx.x == 0 && bad > 0.0f) *found_inf = 1.0f;
}

}  // namespace
}  // namespace lattice::kernels::cuda
