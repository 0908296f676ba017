// LayerNorm over channels, optionally fused with the residual add before it (the pre-LN
// block: residual += branch; x = ln(residual)). One warp per row with two-pass statistics in
// fp32; the weight/bias gradients are column sums over row blocks in a fixed order
// (deterministic; reduce.cuh's column sums).
// Non-goal: vectorised 128-bit loads (the first measurement decides whether they pay).
#include "common.cuh"
#include "layernorm_kernels.cuh"

namespace lattice::kernels::cuda {
namespace {

template <typename T>
void forward(Context& ctx, T* residual_out, T* out, float* mean, float* rstd, const T* residual,
             const T* x, const T* weight, const T* bias, int N, int C, const char* op) {
  const unsigned blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  layernorm_forward_kernel<<<blocks, dim3(32, kRowsPerBlock), 0, stream_of(ctx)>>>(
      dev(residual_out), dev(out), mean, rstd, dev(residual), dev(x), dev(weight), dev(bias), N, C);
  check_launch(ctx, op);
}

template <typename T>
void backward(Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
              const T* weight, const float* mean, const float* rstd, int N, int C) {
  const unsigned blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  layernorm_backward_input_kernel<<<blocks, dim3(32, kRowsPerBlock), 0, stream_of(ctx)>>>(
      dev(dinp), dev(dout), dev(inp), dev(weight), mean, rstd, N, C);
  check_launch(ctx, "layernorm_backward (dinp)");
  // The column sums split over R row blocks (reduce.cuh), partials in the context's scratch.
  const size_t scratch_floats = kScratchDoubles * sizeof(double) / sizeof(float);
  const int R = column_split(N, C, 2, scratch_floats);
  float* partial = 2 * static_cast<size_t>(R) * C <= scratch_floats
                       ? reinterpret_cast<float*>(ctx.impl().scratch)
                       : nullptr;
  const int rows_per_block = (N + R - 1) / R;
  layernorm_backward_params_kernel<<<dim3((C + 31) / 32, R), dim3(32, 8), 0, stream_of(ctx)>>>(
      partial, dweight, dbias, dev(dout), dev(inp), mean, rstd, N, C, rows_per_block);
  check_launch(ctx, "layernorm_backward (dweight, dbias)");
  if (partial) {
    column_totals_kernel<<<(C + 255) / 256, 256, 0, stream_of(ctx)>>>(dweight, dbias, partial, R,
                                                                      C);
    check_launch(ctx, "layernorm_backward (dweight, dbias totals)");
  }
}

}  // namespace

void layernorm_forward(Context& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  forward<float>(ctx, nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C,
                 "layernorm_forward");
}
void layernorm_forward(Context& ctx, bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int N, int C) {
  forward<bf16>(ctx, nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C,
                "layernorm_forward");
}
void layernorm_forward(Context& ctx, fp16* out, float* mean, float* rstd, const fp16* inp,
                       const fp16* weight, const fp16* bias, int N, int C) {
  forward<fp16>(ctx, nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C,
                "layernorm_forward");
}
void residual_layernorm_forward(Context& ctx, float* residual_out, float* out, float* mean,
                                float* rstd, const float* residual, const float* x,
                                const float* weight, const float* bias, int N, int C) {
  forward(ctx, residual_out, out, mean, rstd, residual, x, weight, bias, N, C,
          "residual_layernorm_forward");
}
void residual_layernorm_forward(Context& ctx, bf16* residual_out, bf16* out, float* mean,
                                float* rstd, const bf16* residual, const bf16* x,
                                const bf16* weight, const bf16* bias, int N, int C) {
  forward(ctx, residual_out, out, mean, rstd, residual, x, weight, bias, N, C,
          "residual_layernorm_forward");
}
void residual_layernorm_forward(Context& ctx, fp16* residual_out, fp16* out, float* mean,
                                float* rstd, const fp16* residual, const fp16* x,
                                const fp16* weight, const fp16* bias, int N, int C) {
  forward(ctx, residual_out, out, mean, rstd, residual, x, weight, bias, N, C,
          "residual_layernorm_forward");
}
void layernorm_backward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  backward(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void layernorm_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean, const float* rstd,
                        int N, int C) {
  backward(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void layernorm_backward(Context& ctx, fp16* dinp, float* dweight, float* dbias, const fp16* dout,
                        const fp16* inp, const fp16* weight, const float* mean, const float* rstd,
                        int N, int C) {
  backward(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

}  // namespace lattice::kernels::cuda
