// The vision encoder's own ops (kernels.h's patchify_* and activation_*; ../cpu/vision.cpp is
// the reference) on fp32, bf16 and fp16 tensors: the im2col of a stride = kernel convolution and
// CLIP's quick_gelu and the exact GELU, each a thread per element in a grid-stride loop
// (vision_kernels.cuh). Both patchify passes are gathers (every output element reads the one
// input element it comes from), so the backward needs no atomics and is deterministic; they
// copy elements, so a 16-bit patchify is exact. The activations compute in fp32 and round once.
#include "common.cuh"
#include "vision_kernels.cuh"

namespace lattice::kernels::cuda {
namespace {

template <typename T>
void patchify_fwd(Context& ctx, T* cols, const T* img, int B, int Cin, int H, int W, int P) {
  const size_t n = static_cast<size_t>(B) * Cin * H * W;  // = B Np Cin P P
  if (n == 0) return;
  patchify_forward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dev(cols), dev(img), B,
                                                                          Cin, H, W, P);
  check_launch(ctx, "patchify_forward");
}

template <typename T>
void patchify_bwd(Context& ctx, T* dimg, const T* dcols, int B, int Cin, int H, int W, int P) {
  const size_t n = static_cast<size_t>(B) * Cin * H * W;
  if (n == 0) return;
  patchify_backward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dev(dimg), dev(dcols), B,
                                                                           Cin, H, W, P);
  check_launch(ctx, "patchify_backward");
}

template <typename T>
void activation_fwd(Context& ctx, T* out, const T* inp, size_t n, Activation act) {
  if (n == 0) return;
  activation_forward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
      dev(out), dev(inp), n, act == Activation::kQuickGelu);
  check_launch(ctx, "activation_forward");
}

template <typename T>
void activation_bwd(Context& ctx, T* dinp, const T* inp, const T* dout, size_t n, Activation act) {
  if (n == 0) return;
  activation_backward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
      dev(dinp), dev(inp), dev(dout), n, act == Activation::kQuickGelu);
  check_launch(ctx, "activation_backward");
}

}  // namespace

void patchify_forward(Context& ctx, float* cols, const float* img, int B, int Cin, int H, int W,
                      int P) {
  patchify_fwd(ctx, cols, img, B, Cin, H, W, P);
}
void patchify_forward(Context& ctx, bf16* cols, const bf16* img, int B, int Cin, int H, int W,
                      int P) {
  patchify_fwd(ctx, cols, img, B, Cin, H, W, P);
}
void patchify_forward(Context& ctx, fp16* cols, const fp16* img, int B, int Cin, int H, int W,
                      int P) {
  patchify_fwd(ctx, cols, img, B, Cin, H, W, P);
}

void patchify_backward(Context& ctx, float* dimg, const float* dcols, int B, int Cin, int H, int W,
                       int P) {
  patchify_bwd(ctx, dimg, dcols, B, Cin, H, W, P);
}
void patchify_backward(Context& ctx, bf16* dimg, const bf16* dcols, int B, int Cin, int H, int W,
                       int P) {
  patchify_bwd(ctx, dimg, dcols, B, Cin, H, W, P);
}
void patchify_backward(Context& ctx, fp16* dimg, const fp16* dcols, int B, int Cin, int H, int W,
                       int P) {
  patchify_bwd(ctx, dimg, dcols, B, Cin, H, W, P);
}

void activation_forward(Context& ctx, float* out, const float* inp, size_t n, Activation act) {
  activation_fwd(ctx, out, inp, n, act);
}
void activation_forward(Context& ctx, bf16* out, const bf16* inp, size_t n, Activation act) {
  activation_fwd(ctx, out, inp, n, act);
}
void activation_forward(Context& ctx, fp16* out, const fp16* inp, size_t n, Activation act) {
  activation_fwd(ctx, out, inp, n, act);
}

void activation_backward(Context& ctx, float* dinp, const float* inp, const float* dout, size_t n,
                         Activation act) {
  activation_bwd(ctx, dinp, inp, dout, n, act);
}
void activation_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, size_t n,
                         Activation act) {
  activation_bwd(ctx, dinp, inp, dout, n, act);
}
void activation_backward(Context& ctx, fp16* dinp, const fp16* inp, const fp16* dout, size_t n,
                         Activation act) {
  activation_bwd(ctx, dinp, inp, dout, n, act);
}

}  // namespace lattice::kernels::cuda
