// GELU, tanh approximation (kernels.h), element-wise in fp32 whatever the storage type.
#include "common.cuh"

namespace lattice::kernels::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    out[i] = from_float<T>(0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x))));
  }
}

// dinp (n) = dout * gelu'(inp)
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    const float th = tanhf(kSqrt2OverPi * (x + kCubic * x * x * x));
    const float sech2 = 1.0f - th * th;
    const float grad =
        0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    dinp[i] = from_float<T>(grad * to_float(dout[i]));
  }
}

template <typename T>
void forward(Context& ctx, T* out, const T* inp, size_t n) {
  gelu_forward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dev(out), dev(inp), n);
  check_launch(ctx, "gelu_forward");
}

template <typename T>
void backward(Context& ctx, T* dinp, const T* inp, const T* dout, size_t n) {
  gelu_backward_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dev(dinp), dev(inp),
                                                                       dev(dout), n);
  check_launch(ctx, "gelu_backward");
}

}  // namespace

void gelu_forward(Context& ctx, float* out, const float* inp, size_t n) {
  forward(ctx, out, inp, n);
}
void gelu_forward(Context& ctx, bf16* out, const bf16* inp, size_t n) {
  forward(ctx, out, inp, n);
}
void gelu_forward(Context& ctx, fp16* out, const fp16* inp, size_t n) {
  forward(ctx, out, inp, n);
}
void gelu_backward(Context& ctx, float* dinp, const float* inp, const float* dout, size_t n) {
  backward(ctx, dinp, inp, dout, n);
}
void gelu_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, size_t n) {
  backward(ctx, dinp, inp, dout, n);
}
void gelu_backward(Context& ctx, fp16* dinp, const fp16* inp, const fp16* dout, size_t n) {
  backward(ctx, dinp, inp, dout, n);
}

}  // namespace lattice::kernels::cuda
