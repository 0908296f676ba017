// RMSNorm over channels (Llama), optionally fused with the residual add before it, as
// layernorm.cu does for LayerNorm: one warp per row (rmsnorm_kernels.cuh), the squares summed in
// double; the weight gradient as column sums over row blocks in a fixed order (deterministic;
// reduce.cuh's column sums).
// Non-goal: vectorised 128-bit loads (as layernorm.cu: the first measurement decides).
#include "common.cuh"
#include "rmsnorm_kernels.cuh"

namespace lattice::kernels::cuda {
namespace {

template <typename T>
void forward(Context& ctx, T* residual_out, T* out, float* rstd, const T* residual, const T* x,
             const T* weight, int N, int C, float eps, const char* op) {
  const unsigned blocks = (N + kRmsRowsPerBlock - 1) / kRmsRowsPerBlock;
  rmsnorm_forward_kernel<<<blocks, dim3(32, kRmsRowsPerBlock), 0, stream_of(ctx)>>>(
      dev(residual_out), dev(out), rstd, dev(residual), dev(x), dev(weight), N, C, eps);
  check_launch(ctx, op);
}

template <typename T>
void backward(Context& ctx, T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
              const float* rstd, int N, int C) {
  const unsigned blocks = (N + kRmsRowsPerBlock - 1) / kRmsRowsPerBlock;
  rmsnorm_backward_input_kernel<<<blocks, dim3(32, kRmsRowsPerBlock), 0, stream_of(ctx)>>>(
      dev(dinp), dev(dout), dev(inp), dev(weight), rstd, N, C);
  check_launch(ctx, "rmsnorm_backward (dinp)");
  // The column sums split over R row blocks (reduce.cuh), partials in the context's scratch.
  const size_t scratch_floats = kScratchDoubles * sizeof(double) / sizeof(float);
  const int R = column_split(N, C, 1, scratch_floats);
  float* partial = static_cast<size_t>(R) * C <= scratch_floats
                       ? reinterpret_cast<float*>(ctx.impl().scratch)
                       : nullptr;
  const int rows_per_block = (N + R - 1) / R;
  rmsnorm_backward_weight_kernel<<<dim3((C + 31) / 32, R), dim3(32, 8), 0, stream_of(ctx)>>>(
      partial, dweight, dev(dout), dev(inp), rstd, N, C, rows_per_block);
  check_launch(ctx, "rmsnorm_backward (dweight)");
  if (partial) {
    column_totals_kernel<<<(C + 255) / 256, 256, 0, stream_of(ctx)>>>(dweight, nullptr, partial, R,
                                                                      C);
    check_launch(ctx, "rmsnorm_backward (dweight totals)");
  }
}

}  // namespace

void rmsnorm_forward(Context& ctx, float* out, float* rstd, const float* inp, const float* weight,
                     int N, int C, float eps) {
  forward<float>(ctx, nullptr, out, rstd, inp, nullptr, weight, N, C, eps, "rmsnorm_forward");
}
void rmsnorm_forward(Context& ctx, bf16* out, float* rstd, const bf16* inp, const bf16* weight,
                     int N, int C, float eps) {
  forward<bf16>(ctx, nullptr, out, rstd, inp, nullptr, weight, N, C, eps, "rmsnorm_forward");
}
void rmsnorm_forward(Context& ctx, fp16* out, float* rstd, const fp16* inp, const fp16* weight,
                     int N, int C, float eps) {
  forward<fp16>(ctx, nullptr, out, rstd, inp, nullptr, weight, N, C, eps, "rmsnorm_forward");
}
void residual_rmsnorm_forward(Context& ctx, float* residual_out, float* out, float* rstd,
                              const float* residual, const float* x, const float* weight, int N,
                              int C, float eps) {
  forward(ctx, residual_out, out, rstd, residual, x, weight, N, C, eps, "residual_rmsnorm_forward");
}
void residual_rmsnorm_forward(Context& ctx, bf16* residual_out, bf16* out, float* rstd,
                              const bf16* residual, const bf16* x, const bf16* weight, int N, int C,
                              float eps) {
  forward(ctx, residual_out, out, rstd, residual, x, weight, N, C, eps, "residual_rmsnorm_forward");
}
void residual_rmsnorm_forward(Context& ctx, fp16* residual_out, fp16* out, float* rstd,
                              const fp16* residual, const fp16* x, const fp16* weight, int N, int C,
                              float eps) {
  forward(ctx, residual_out, out, rstd, residual, x, weight, N, C, eps, "residual_rmsnorm_forward");
}
void rmsnorm_backward(Context& ctx, float* dinp, float* dweight, const float* dout,
                      const float* inp, const float* weight, const float* rstd, int N, int C) {
  backward(ctx, dinp, dweight, dout, inp, weight, rstd, N, C);
}
void rmsnorm_backward(Context& ctx, bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int N, int C) {
  backward(ctx, dinp, dweight, dout, inp, weight, rstd, N, C);
}
void rmsnorm_backward(Context& ctx, fp16* dinp, float* dweight, const fp16* dout, const fp16* inp,
                      const fp16* weight, const float* rstd, int N, int C) {
  backward(ctx, dinp, dweight, dout, inp, weight, rstd, N, C);
}

}  // namespace lattice::kernels::cuda
