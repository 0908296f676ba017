// fp32 <-> bf16 / fp16 conversion (master weights to compute copies, 16-bit results to fp32).
// fp16 overflows to inf (common.cuh's from_float), which the loss scaler must see.
#include "common.cuh"

namespace lattice::kernels::cuda {
namespace {

template <typename To, typename From>
__global__ void convert_kernel(To* dst, const From* src, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = from_float<To>(to_float(src[i]));
}

template <typename To, typename From>
void launch(Context& ctx, To* dst, const From* src, size_t n, const char* op) {
  convert_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dev(dst), dev(src), n);
  check_launch(ctx, op);
}

}  // namespace

void convert(Context& ctx, bf16* dst, const float* src, size_t n) {
  launch(ctx, dst, src, n, "convert (fp32 to bf16)");
}
void convert(Context& ctx, fp16* dst, const float* src, size_t n) {
  launch(ctx, dst, src, n, "convert (fp32 to fp16)");
}
void convert(Context& ctx, float* dst, const bf16* src, size_t n) {
  launch(ctx, dst, src, n, "convert (bf16 to fp32)");
}
void convert(Context& ctx, float* dst, const fp16* src, size_t n) {
  launch(ctx, dst, src, n, "convert (fp16 to fp32)");
}

}  // namespace lattice::kernels::cuda
