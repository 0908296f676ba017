// SwiGLU (kernels.h; Llama's gated MLP): out = silu(gate) * up over the (gate | up) halves of
// each row of FC1's output, and its backward; element-wise in fp32 whatever the storage type
// (swiglu_kernels.cuh).
// Non-goal: fusing it into FC1's GEMM epilogue (cuBLASLt has no gated epilogue).
#include "common.cuh"
#include "swiglu_kernels.cuh"

namespace lattice::kernels::cuda {
namespace {

template <typename T>
void forward(Context& ctx, T* out, const T* inp, int N, int F) {
  const size_t n = static_cast<size_t>(N) * F;
  if (n == 0) return;
  swiglu_forward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dev(out), dev(inp), N, F);
  check_launch(ctx, "swiglu_forward");
}

template <typename T>
void backward(Context& ctx, T* dinp, const T* inp, const T* dout, int N, int F) {
  const size_t n = static_cast<size_t>(N) * F;
  if (n == 0) return;
  swiglu_backward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dev(dinp), dev(inp),
                                                                         dev(dout), N, F);
  check_launch(ctx, "swiglu_backward");
}

}  // namespace

void swiglu_forward(Context& ctx, float* out, const float* inp, int N, int F) {
  forward(ctx, out, inp, N, F);
}
void swiglu_backward(Context& ctx, float* dinp, const float* inp, const float* dout, int N, int F) {
  backward(ctx, dinp, inp, dout, N, F);
}
void swiglu_forward(Context& ctx, bf16* out, const bf16* inp, int N, int F) {
  forward(ctx, out, inp, N, F);
}
void swiglu_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, int N, int F) {
  backward(ctx, dinp, inp, dout, N, F);
}
void swiglu_forward(Context& ctx, fp16* out, const fp16* inp, int N, int F) {
  forward(ctx, out, inp, N, F);
}
void swiglu_backward(Context& ctx, fp16* dinp, const fp16* inp, const fp16* dout, int N, int F) {
  backward(ctx, dinp, inp, dout, N, F);
}

}  // namespace lattice::kernels::cuda
