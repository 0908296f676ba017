// The vision encoder's kernels (launchers in vision.cu), kept apart so that tests/kernels/cuda/
// test_kernels_emulated.cpp also runs them on the CPU under host_emulation.h. T is float,
// __nv_bfloat16 or __half: patchify copies elements (no rounding), the activations compute in
// fp32 and round once to T (for float, no conversion at all).
#pragma once

#include <cmath>

#ifdef __CUDACC__
#include "common.cuh"
#endif

namespace lattice::kernels::cuda {
namespace {

constexpr float kQuickGeluAlpha = 1.702f;
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// cols (B, (H / P) (W / P), Cin P P)[b, py (W / P) + px, (c P + ky) P + kx] =
// img (B, Cin, H, W)[b, c, py P + ky, px P + kx]: a thread per column element.
template <typename T>
__global__ void patchify_forward_kernel(T* cols, const T* img, int B, int Cin, int H, int W,
                                        int P) {
  const int gw = W / P, np = (H / P) * gw, K = Cin * P * P;
  const size_t n = static_cast<size_t>(B) * np * K;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / K;
    const int col = static_cast<int>(i % K);
    const size_t b = row / np;
    const int patch = static_cast<int>(row % np), py = patch / gw, px = patch % gw;
    const int c = col / (P * P), ky = (col / P) % P, kx = col % P;
    cols[i] = img[((b * Cin + c) * H + static_cast<size_t>(py) * P + ky) * W +
                  static_cast<size_t>(px) * P + kx];
  }
}

// dimg (B, Cin, H, W) = the inverse permutation of dcols: a thread per image element reads its
// one column element (every pixel is in exactly one patch: H and W are multiples of P).
template <typename T>
__global__ void patchify_backward_kernel(T* dimg, const T* dcols, int B, int Cin, int H, int W,
                                         int P) {
  const int gw = W / P, np = (H / P) * gw, K = Cin * P * P;
  const size_t n = static_cast<size_t>(B) * Cin * H * W;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int x = static_cast<int>(i % W), y = static_cast<int>((i / W) % H);
    const size_t bc = i / (static_cast<size_t>(W) * H);
    const int c = static_cast<int>(bc % Cin);
    const size_t b = bc / Cin;
    const int py = y / P, ky = y % P, px = x / P, kx = x % P;
    const size_t row = b * np + static_cast<size_t>(py) * gw + px;
    dimg[i] = dcols[row * K + (static_cast<size_t>(c) * P + ky) * P + kx];
  }
}

// out (n) = x sigmoid(1.702 x) (quick) or 0.5 x (1 + erf(x / sqrt 2)) (exact); may alias.
template <typename T>
__global__ void activation_forward_kernel(T* out, const T* inp, size_t n, bool quick) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    out[i] = from_float<T>(quick ? x * (1.0f / (1.0f + expf(-kQuickGeluAlpha * x)))
                                 : 0.5f * x * (1.0f + erff(x * kInvSqrt2)));
  }
}

// dinp (n) = dout * act'(inp): s + a x s (1 - s) with s = sigmoid(a x), or Phi(x) + x phi(x).
// dinp may alias dout (each thread reads its dout element before writing it), not inp.
template <typename T>
__global__ void activation_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n,
                                           bool quick) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    float grad;
    if (quick) {
      const float s = 1.0f / (1.0f + expf(-kQuickGeluAlpha * x));
      grad = s + kQuickGeluAlpha * x * s * (1.0f - s);
    } else {
      grad = 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
    }
    dinp[i] = from_float<T>(grad * to_float(dout[i]));
  }
}

}  // namespace
}  // namespace lattice::kernels::cuda
