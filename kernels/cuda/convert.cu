// fp32 <-> bf16 conversion (master weights to compute copies, bf16 results to fp32).
#include "common.cuh"

namespace lattice::kernels::cuda {
namespace {

template <typename To, typename From>
__global__ void convert_kernel(To* dst, const From* src, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = from_float<To>(to_float(src[i]));
}

}  // namespace

void convert(Context& ctx, bf16* dst, const float* src, size_t n) {
  convert_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dev(dst), src, n);
  check_launch(ctx, "convert (fp32 to bf16)");
}
void convert(Context& ctx, float* dst, const bf16* src, size_t n) {
  convert_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dst, dev(src), n);
  check_launch(ctx, "convert (bf16 to fp32)");
}

}  // namespace lattice::kernels::cuda
