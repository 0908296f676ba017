// The vision encoder's own kernels (kernels.h: patchify_*, activation_*): the im2col of a
// stride = kernel convolution and the activations CLIP and LLaVA use. Plain host code compiled
// once, not per ISA: a permutation and O(n) elementwise maps beside the GEMMs and attention.
// Each element's result is independent of the thread count.
#include <cmath>

#include "lattice/dtype.h"
#include "lattice/kernels.h"

namespace lattice::kernels {
namespace {

// Below this many elements a loop stays on the calling thread (parallel.h's kMinParallelWork).
constexpr size_t kMinParallelElems = size_t{1} << 15;
constexpr double kQuickGeluAlpha = 1.702;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// Calls f(col_index, pixel_index) for every element of the patch matrix (B, Np, Cin P P).
template <typename F>
void for_each_patch_element(int B, int Cin, int H, int W, int P, F f) {
  const int gw = W / P, np = (H / P) * gw, K = Cin * P * P;
  const size_t rows = static_cast<size_t>(B) * np;
#pragma omp parallel for schedule(static) if (rows * K >= kMinParallelElems)
  for (size_t row = 0; row < rows; row++) {
    const size_t b = row / np;
    const int patch = static_cast<int>(row % np), py = patch / gw, px = patch % gw;
    for (int c = 0; c < Cin; c++)
      for (int ky = 0; ky < P; ky++) {
        const size_t col = row * K + (static_cast<size_t>(c) * P + ky) * P;
        const size_t pix = ((b * Cin + c) * H + static_cast<size_t>(py) * P + ky) * W +
                           static_cast<size_t>(px) * P;
        for (int kx = 0; kx < P; kx++) f(col + kx, pix + kx);
      }
  }
}

template <typename S>
S sigmoid(S x) {
  return S(1) / (S(1) + std::exp(-x));
}

}  // namespace

template <typename S>
void patchify_forward(S* cols, const S* img, int B, int Cin, int H, int W, int P) {
  for_each_patch_element(B, Cin, H, W, P, [&](size_t col, size_t pix) { cols[col] = img[pix]; });
}

template <typename S>
void patchify_backward(S* dimg, const S* dcols, int B, int Cin, int H, int W, int P) {
  for_each_patch_element(B, Cin, H, W, P, [&](size_t col, size_t pix) { dimg[pix] = dcols[col]; });
}

template <typename S>
void activation_forward(S* out, const S* inp, size_t n, Activation act) {
  const S a = static_cast<S>(kQuickGeluAlpha), r2 = static_cast<S>(kInvSqrt2);
#pragma omp parallel for schedule(static) if (n >= kMinParallelElems)
  for (size_t i = 0; i < n; i++) {
    const S x = inp[i];
    out[i] =
        act == Activation::kQuickGelu ? x * sigmoid(a * x) : S(0.5) * x * (S(1) + std::erf(x * r2));
  }
}

template <typename S>
void activation_backward(S* dinp, const S* inp, const S* dout, size_t n, Activation act) {
  const S a = static_cast<S>(kQuickGeluAlpha), r2 = static_cast<S>(kInvSqrt2),
          r2pi = static_cast<S>(kInvSqrt2Pi);
#pragma omp parallel for schedule(static) if (n >= kMinParallelElems)
  for (size_t i = 0; i < n; i++) {
    const S x = inp[i];
    S grad;
    if (act == Activation::kQuickGelu) {
      const S s = sigmoid(a * x);
      grad = s + a * x * s * (S(1) - s);
    } else {  // Phi(x) + x phi(x)
      grad = S(0.5) * (S(1) + std::erf(x * r2)) + x * r2pi * std::exp(S(-0.5) * x * x);
    }
    dinp[i] = grad * dout[i];
  }
}

template void patchify_forward(float*, const float*, int, int, int, int, int);
template void patchify_forward(double*, const double*, int, int, int, int, int);
template void patchify_backward(float*, const float*, int, int, int, int, int);
template void patchify_backward(double*, const double*, int, int, int, int, int);
// A 16-bit tower's patches (both directions move elements only).
template void patchify_forward(bf16*, const bf16*, int, int, int, int, int);
template void patchify_forward(fp16*, const fp16*, int, int, int, int, int);
template void patchify_backward(bf16*, const bf16*, int, int, int, int, int);
template void patchify_backward(fp16*, const fp16*, int, int, int, int, int);
template void activation_forward(float*, const float*, size_t, Activation);
template void activation_forward(double*, const double*, size_t, Activation);
template void activation_backward(float*, const float*, const float*, size_t, Activation);
template void activation_backward(double*, const double*, const double*, size_t, Activation);

}  // namespace lattice::kernels
