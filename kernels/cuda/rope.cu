// Rotary position embedding (kernels.h's RoPE, Hugging Face's rotate_half form) in place on the
// query and key heads of the grouped QKV activation, and its backward (the transposed rotation,
// in place on dqkv). Element-wise: one thread per rotated pair (rope_kernels.cuh), the fp32
// angle tables read as they are, bf16 and fp16 widened to fp32 and rounded once on store.
// Non-goal: fusing the rotation into the QKV GEMM's epilogue or into attention's loads.
#include "common.cuh"
#include "rope_kernels.cuh"

namespace lattice::kernels::cuda {
namespace {

template <typename T>
void apply(Context& ctx, T* qkv, const float* cos, const float* sin, const int32_t* positions,
           int N, int T_, int NH, int KV, int HS, int rotary_dim, float sign, const char* op) {
  if (KV <= 0 || NH % KV != 0 || rotary_dim % 2 != 0 || rotary_dim > HS) {
    ctx.record_error(std::string(op) + ": NH " + std::to_string(NH) + ", KV " + std::to_string(KV) +
                     ", HS " + std::to_string(HS) + ", rotary_dim " + std::to_string(rotary_dim) +
                     ": KV must divide NH and rotary_dim be even and at most HS");
    return;
  }
  const size_t pairs = static_cast<size_t>(N) * (NH + KV) * (rotary_dim / 2);
  if (pairs == 0) return;
  rope_kernel<<<blocks_for(pairs, 256), 256, 0, stream_of(ctx)>>>(dev(qkv), cos, sin, positions, N,
                                                                  T_, NH, KV, HS, rotary_dim, sign);
  check_launch(ctx, op);
}

}  // namespace

void rope_forward(Context& ctx, float* qkv, const float* cos, const float* sin,
                  const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim) {
  apply(ctx, qkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim, 1.0f, "rope_forward");
}
void rope_backward(Context& ctx, float* dqkv, const float* cos, const float* sin,
                   const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim) {
  apply(ctx, dqkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim, -1.0f, "rope_backward");
}
void rope_forward(Context& ctx, bf16* qkv, const float* cos, const float* sin,
                  const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim) {
  apply(ctx, qkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim, 1.0f, "rope_forward");
}
void rope_backward(Context& ctx, bf16* dqkv, const float* cos, const float* sin,
                   const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim) {
  apply(ctx, dqkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim, -1.0f, "rope_backward");
}
void rope_forward(Context& ctx, fp16* qkv, const float* cos, const float* sin,
                  const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim) {
  apply(ctx, qkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim, 1.0f, "rope_forward");
}
void rope_backward(Context& ctx, fp16* dqkv, const float* cos, const float* sin,
                   const int32_t* positions, int N, int T, int NH, int KV, int HS, int rotary_dim) {
  apply(ctx, dqkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim, -1.0f, "rope_backward");
}

}  // namespace lattice::kernels::cuda
