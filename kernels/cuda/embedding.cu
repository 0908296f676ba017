// Token + position embedding and its backward. The backward gives each thread one channel
// and walks the tokens in order, exactly as the CPU op does: deterministic, no atomics, and
// the same summation order. Non-goal for now: llm.c's sorted-bucket backward (faster for
// large B*T; measure first).
// positions (B, T), when given, replace t as the row of wpe (packed documents, kernels.h); the
// wpe gradient then scatters like the token one: one thread per channel, tokens in order.
#include "common.cuh"

namespace lattice::kernels::cuda {
namespace {

// out (B*T, C) = wte[tokens - vocab_begin] (+ wpe[p]); rows of other ranks' tokens are zero;
// p = positions[bt], or t when positions is null.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         const int32_t* positions, int BT, int T_, int C,
                                         int vocab_begin, int vocab_end) {
  const size_t total = static_cast<size_t>(BT) * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int bt = static_cast<int>(i / C), c = static_cast<int>(i % C);
    const int token = tokens[bt];
    float v = 0.0f;
    if (token >= vocab_begin && token < vocab_end) {
      v = to_float(wte[static_cast<size_t>(token - vocab_begin) * C + c]);
      if (wpe) {
        const int t = positions ? positions[bt] : bt % T_;
        v += to_float(wpe[static_cast<size_t>(t) * C + c]);
      }
    }
    out[i] = from_float<T>(v);
  }
}

// out (B*T, C) += wpe[t]
__global__ void position_embedding_kernel(float* out, const float* wpe, int BT, int T_, int C) {
  const size_t total = static_cast<size_t>(BT) * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int bt = static_cast<int>(i / C), c = static_cast<int>(i % C);
    out[i] += wpe[static_cast<size_t>(bt % T_) * C + c];
  }
}

// dwte (V, C) += dout rows scattered by token; one thread per channel, tokens in order.
template <typename T>
__global__ void embedding_backward_wte_kernel(float* dwte, const T* dout, const int32_t* tokens,
                                              int BT, int C, int vocab_begin, int vocab_end) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int bt = 0; bt < BT; bt++) {
    const int token = tokens[bt];
    if (token < vocab_begin || token >= vocab_end) continue;
    dwte[static_cast<size_t>(token - vocab_begin) * C + c] +=
        to_float(dout[static_cast<size_t>(bt) * C + c]);
  }
}

// dwpe (T, C) += sum over b of dout (B, T, C); one thread per (t, c).
template <typename T>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const T* dout, int B, int T_, int C) {
  const size_t total = static_cast<size_t>(T_) * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float sum = dwpe[i];
    for (int b = 0; b < B; b++) sum += to_float(dout[static_cast<size_t>(b) * total + i]);
    dwpe[i] = sum;
  }
}

// dwpe (T, C) += dout rows scattered by positions (B*T); one thread per channel, tokens in order.
template <typename T>
__global__ void embedding_backward_wpe_packed_kernel(float* dwpe, const T* dout,
                                                     const int32_t* positions, int BT, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int bt = 0; bt < BT; bt++)
    dwpe[static_cast<size_t>(positions[bt]) * C + c] +=
        to_float(dout[static_cast<size_t>(bt) * C + c]);
}

template <typename T>
void forward(Context& ctx, T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int T_,
             int C, int vocab_begin, int vocab_end, const int32_t* positions) {
  const size_t total = static_cast<size_t>(B) * T_ * C;
  embedding_forward_kernel<<<blocks_for(total, 256), 256, 0, stream_of(ctx)>>>(
      dev(out), tokens, dev(wte), dev(wpe), positions, B * T_, T_, C, vocab_begin, vocab_end);
  check_launch(ctx, "embedding_forward");
}

template <typename T>
void backward(Context& ctx, float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int B,
              int T_, int C, int vocab_begin, int vocab_end, const int32_t* positions) {
  if (dwte) {
    embedding_backward_wte_kernel<<<(C + 127) / 128, 128, 0, stream_of(ctx)>>>(
        dwte, dev(dout), tokens, B * T_, C, vocab_begin, vocab_end);
    check_launch(ctx, "embedding_backward (dwte)");
  }
  if (dwpe && positions) {
    embedding_backward_wpe_packed_kernel<<<(C + 127) / 128, 128, 0, stream_of(ctx)>>>(
        dwpe, dev(dout), positions, B * T_, C);
    check_launch(ctx, "embedding_backward (dwpe)");
  } else if (dwpe) {
    const size_t total = static_cast<size_t>(T_) * C;
    embedding_backward_wpe_kernel<<<blocks_for(total, 256), 256, 0, stream_of(ctx)>>>(
        dwpe, dev(dout), B, T_, C);
    check_launch(ctx, "embedding_backward (dwpe)");
  }
}

}  // namespace

void embedding_forward(Context& ctx, float* out, const int32_t* tokens, const float* wte,
                       const float* wpe, int B, int T, int C, int vocab_begin, int vocab_end,
                       const int32_t* positions) {
  forward(ctx, out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end, positions);
}
void embedding_forward(Context& ctx, bf16* out, const int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C, int vocab_begin, int vocab_end,
                       const int32_t* positions) {
  forward(ctx, out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end, positions);
}
void embedding_forward(Context& ctx, fp16* out, const int32_t* tokens, const fp16* wte,
                       const fp16* wpe, int B, int T, int C, int vocab_begin, int vocab_end,
                       const int32_t* positions) {
  forward(ctx, out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end, positions);
}
void position_embedding_forward(Context& ctx, float* out, const float* wpe, int B, int T, int C) {
  const size_t total = static_cast<size_t>(B) * T * C;
  position_embedding_kernel<<<blocks_for(total, 256), 256, 0, stream_of(ctx)>>>(out, wpe, B * T, T,
                                                                                C);
  check_launch(ctx, "position_embedding_forward");
}
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const float* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin, int vocab_end,
                        const int32_t* positions) {
  backward(ctx, dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end, positions);
}
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const bf16* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin, int vocab_end,
                        const int32_t* positions) {
  backward(ctx, dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end, positions);
}
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const fp16* dout,
                        const int32_t* tokens, int B, int T, int C, int vocab_begin, int vocab_end,
                        const int32_t* positions) {
  backward(ctx, dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end, positions);
}

}  // namespace lattice::kernels::cuda
