// RMSNorm kernels (launchers in rmsnorm.cu), kept apart so that tests/kernels/cuda/
// test_kernels_emulated.cpp also runs them on the CPU under host_emulation.h. Same shape as
// layernorm_kernels.cuh: one warp per row, the weight gradient as reduce.cuh's column sums.
#pragma once

#ifdef __CUDACC__
#include "common.cuh"
#endif
#include "reduce.cuh"

namespace lattice::kernels::cuda {
namespace {

constexpr int kRmsRowsPerBlock = 8;  // one warp each

// residual_out (N, C) = residual + x when x is non-null (else residual_out is unused and
// residual is the input); out (N, C) = in * rstd * weight (C); rstd (N) = 1 / sqrt(mean(in^2) +
// eps). The squares are summed in double, as kernels.h's RMSNorm: one row's sum over C is
// C / 32 double additions per lane and a double warp sum, nothing beside the row's memory
// traffic on the GPUs this targets (sm_80, sm_90). The fused variant normalises the stored
// (rounded) sum, so it equals the add followed by the plain forward bit for bit.
template <typename T>
__global__ void rmsnorm_forward_kernel(T* residual_out, T* out, float* rstd, const T* residual,
                                       const T* x, const T* weight, int N, int C, float eps) {
  const int row = blockIdx.x * kRmsRowsPerBlock + threadIdx.y, lane = threadIdx.x;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  double squares = 0.0;
  for (int c = lane; c < C; c += 32) {
    float v = to_float(residual[base + c]);
    if (x) {
      v += to_float(x[base + c]);
      residual_out[base + c] = from_float<T>(v);
      v = to_float(residual_out[base + c]);  // normalise what is stored (16-bit rounding)
    }
    squares += static_cast<double>(v) * v;
  }
  const T* in = x ? residual_out : residual;
  const float s = static_cast<float>(1.0 / sqrt(warp_sum(squares) / C + eps));
  for (int c = lane; c < C; c += 32)
    out[base + c] = from_float<T>(to_float(in[base + c]) * s * to_float(weight[c]));
  if (lane == 0) rstd[row] = s;
}

// dinp (N, C) += (w d - xhat mean(w d xhat)) rstd with xhat = x rstd, one warp per row.
template <typename T>
__global__ void rmsnorm_backward_input_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                              const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRmsRowsPerBlock + threadIdx.y, lane = threadIdx.x;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const float s = rstd[row];
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32)
    dot += to_float(weight[c]) * to_float(dout[base + c]) * to_float(inp[base + c]) * s;
  dot = warp_sum(dot) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = to_float(inp[base + c]) * s;
    const float g = (to_float(weight[c]) * to_float(dout[base + c]) - xhat * dot) * s;
    dinp[base + c] = from_float<T>(to_float(dinp[base + c]) + g);
  }
}

// Stage 1 of dweight (C) += sum_n xhat d (reduce.cuh's column sums, one term): rows
// [blockIdx.y * rows_per_block, +rows_per_block) of 32 columns, 8 row lanes, into partial
// (gridDim.y x C), or straight into dweight when partial is null.
template <typename T>
__global__ void rmsnorm_backward_weight_kernel(float* partial, float* dweight, const T* dout,
                                               const T* inp, const float* rstd, int N, int C,
                                               int rows_per_block) {
  __shared__ float pw[8][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  const int row0 = blockIdx.y * rows_per_block, row1 = min(N, row0 + rows_per_block);
  float sw = 0.0f;
  if (col < C) {
    for (int row = row0 + threadIdx.y; row < row1; row += 8) {
      const size_t i = static_cast<size_t>(row) * C + col;
      sw += to_float(inp[i]) * rstd[row] * to_float(dout[i]);
    }
  }
  pw[threadIdx.y][threadIdx.x] = sw;
  __syncthreads();
  if (threadIdx.y == 0 && col < C) {
    float tw = 0.0f;
    for (int i = 0; i < 8; i++) tw += pw[i][threadIdx.x];
    if (partial)
      partial[static_cast<size_t>(blockIdx.y) * C + col] = tw;
    else
      dweight[col] += tw;
  }
}

}  // namespace
}  // namespace lattice::kernels::cuda
