// GptModel's LoRA adapters (Note [LoRA] in model/param_layout.h): y = W x + s B A dropout(x),
// s = alpha / r, composed from the op list's GEMMs, dropout and residual add, so every backend
// runs it without kernels of its own. The layer passes (gpt_layer.cpp) call lora_forward right
// after a target's GEMM (before GELU, RoPE, or the row-parallel sum) and lora_backward right
// after its backward GEMM.
#include <type_traits>

#include "model/gpt.h"

namespace lattice {

template <typename A>
void GptModel<A>::lora_scale(A* x, size_t n) {
  const G s = static_cast<G>(config_.lora_scale());
  if constexpr (std::is_same_v<A, G>) {
    ops_.scale(x, n, s);
  } else {
    ops_.to_accum(lora_hg_, x, n);
    ops_.scale(lora_hg_, n, s);
    ops_.to_compute(x, lora_hg_, n);
  }
}

template <typename A>
void GptModel<A>::lora_forward(A* out, const A* x, const A* a, const A* b, int K, int OC, int layer,
                               int linear) {
  if (!a) return;
  OpTimer timer(*this, Op::kMatmulForward);
  const size_t NK = static_cast<size_t>(N_) * K, Nr = static_cast<size_t>(N_) * lora_r_;
  const uint64_t key = lora_dropout_key(dropout_seed_, layout_.shard().layer_begin + layer, linear);
  const A* xd = x;
  if (p_lora_ > 0) {
    ops_.residual_dropout_forward(lora_x_, nullptr, x, NK, p_lora_, key, 0);
    xd = lora_x_;
  }
  ops_.matmul_forward(lora_h_, nullptr, xd, a, nullptr, N_, K, lora_r_, Epilogue::kNone);
  lora_scale(lora_h_, Nr);
  ops_.matmul_forward(lora_y_, nullptr, lora_h_, b, nullptr, N_, lora_r_, OC, Epilogue::kNone);
  ops_.residual_dropout_forward(out, out, lora_y_, static_cast<size_t>(N_) * OC, 0.0f, 0, 0);
}

template <typename A>
void GptModel<A>::lora_backward(A* dx, G* ga, G* gb, const A* dy, const A* x, const A* a,
                                const A* b, int K, int OC, int layer, int linear) {
  if (!a) return;  // queued inside the caller's kMatmulBackward timer
  const size_t NK = static_cast<size_t>(N_) * K, Nr = static_cast<size_t>(N_) * lora_r_;
  const uint64_t key = lora_dropout_key(dropout_seed_, layout_.shard().layer_begin + layer, linear);
  const A* xd = x;
  if (p_lora_ > 0) {  // the forward's mask again
    ops_.residual_dropout_forward(lora_x_, nullptr, x, NK, p_lora_, key, 0);
    xd = lora_x_;
  }
  ops_.matmul_forward(lora_h_, nullptr, xd, a, nullptr, N_, K, lora_r_, Epilogue::kNone);
  lora_scale(lora_h_, Nr);  // s h
  // d(s h) = dy B; gb += dy^T (s h)
  ops_.matmul_backward(lora_dh_, gb, nullptr, dy, lora_h_, b, N_, lora_r_, OC);
  lora_scale(lora_dh_, Nr);  // dh
  // d dropout(x) = dh A; ga += dh^T dropout(x)
  ops_.matmul_backward(lora_dx_, ga, nullptr, lora_dh_, xd, a, N_, K, lora_r_);
  if (p_lora_ > 0) ops_.dropout_backward(lora_dx_, lora_dx_, NK, p_lora_, key, 0);
  ops_.residual_dropout_forward(dx, dx, lora_dx_, NK, 0.0f, 0, 0);
}

template class GptModel<float>;
template class GptModel<double>;
template class GptModel<bf16>;
template class GptModel<fp16>;

}  // namespace lattice
