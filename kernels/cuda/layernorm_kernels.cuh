// LayerNorm kernels (launchers in layernorm.cu), kept apart so that tests/kernels/cuda/
// test_kernels_emulated.cpp also runs them on the CPU under host_emulation.h.
#pragma once

#ifdef __CUDACC__
#include "common.cuh"
#endif
#include "reduce.cuh"

namespace lattice::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp each

// residual_out (N, C) = residual + x when x is non-null (else residual_out is the input);
// out (N, C) = layernorm(residual_out); mean, rstd (N).
template <typename T>
__global__ void layernorm_forward_kernel(T* residual_out, T* out, float* mean, float* rstd,
                                         const T* residual, const T* x, const T* weight,
                                         const T* bias, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y, lane = threadIdx.x;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float v = to_float(residual[base + c]);
    if (x) {
      v += to_float(x[base + c]);
      residual_out[base + c] = from_float<T>(v);
      v = to_float(residual_out[base + c]);  // normalise what is stored (16-bit rounding)
    }
    sum += v;
  }
  const T* in = x ? residual_out : residual;
  const float m = warp_sum(sum) / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_float(in[base + c]) - m;
    var += d * d;
  }
  const float s = rsqrtf(warp_sum(var) / C + static_cast<float>(kLayerNormEps));
  for (int c = lane; c < C; c += 32) {
    const float xhat = (to_float(in[base + c]) - m) * s;
    out[base + c] = from_float<T>(xhat * to_float(weight[c]) + to_float(bias[c]));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp (N, C) += (w d - mean(w d) - xhat mean(w d xhat)) rstd, one warp per row.
template <typename T>
__global__ void layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp,
                                                const T* weight, const float* mean,
                                                const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.y, lane = threadIdx.x;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (to_float(inp[base + c]) - m) * s;
    const float dn = to_float(weight[c]) * to_float(dout[base + c]);
    dnorm_mean += dn;
    dnorm_norm_mean += dn * xhat;
  }
  dnorm_mean = warp_sum(dnorm_mean) / C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (to_float(inp[base + c]) - m) * s;
    const float dn = to_float(weight[c]) * to_float(dout[base + c]);
    const float g = (dn - dnorm_mean - xhat * dnorm_norm_mean) * s;
    dinp[base + c] = from_float<T>(to_float(dinp[base + c]) + g);
  }
}

// Stage 1 of dweight (C) += sum_n xhat d, dbias (C) += sum_n d (reduce.cuh's column sums):
// rows [blockIdx.y * rows_per_block, +rows_per_block) of 32 columns, 8 row lanes, into
// partial (2 terms x gridDim.y x C), or straight into dweight / dbias when partial is null.
template <typename T>
__global__ void layernorm_backward_params_kernel(float* partial, float* dweight, float* dbias,
                                                 const T* dout, const T* inp, const float* mean,
                                                 const float* rstd, int N, int C,
                                                 int rows_per_block) {
  __shared__ float pw[8][33], pb[8][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  const int row0 = blockIdx.y * rows_per_block, row1 = min(N, row0 + rows_per_block);
  float sw = 0.0f, sb = 0.0f;
  if (col < C) {
    for (int row = row0 + threadIdx.y; row < row1; row += 8) {
      const size_t i = static_cast<size_t>(row) * C + col;
      const float d = to_float(dout[i]);
      sw += (to_float(inp[i]) - mean[row]) * rstd[row] * d;
      sb += d;
    }
  }
  pw[threadIdx.y][threadIdx.x] = sw;
  pb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && col < C) {
    float tw = 0.0f, tb = 0.0f;
    for (int i = 0; i < 8; i++) {
      tw += pw[i][threadIdx.x];
      tb += pb[i][threadIdx.x];
    }
    if (partial) {
      partial[static_cast<size_t>(blockIdx.y) * C + col] = tw;
      partial[static_cast<size_t>(gridDim.y + blockIdx.y) * C + col] = tb;
    } else {
      dweight[col] += tw;
      dbias[col] += tb;
    }
  }
}

}  // namespace
}  // namespace lattice::kernels::cuda
