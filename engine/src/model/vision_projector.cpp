// VisionEncoder's projector (vision_encoder.h): LLaVA-1.5's "mlp2x_gelu", Linear(C, H) - GELU -
// Linear(H, H) over the selected hidden state's patch rows, GELU the exact (erf) form of
// torch.nn.GELU() as LLaVA's. M = B Np rows.
#include "model/vision_encoder.h"

namespace lattice {

template <typename A>
void VisionEncoder<A>::projector_forward() {
  const int M = B_ * Np_, C = C_, H = H_, Ht = Ht_;
  A* P = params_;
  // Under TP linear_1 is split by rows and linear_2 by columns (Note [tower tensor
  // parallelism] in vision_encoder.cpp): this rank's Ht columns, then a partial sum.
  ops_.matmul_forward(p1_, nullptr, features_, tensor(P, proj1_w_), tensor(P, proj1_b_), M, C, Ht,
                      Epilogue::kNone);
  ops_.activation_forward(p1_act_, p1_, static_cast<size_t>(M) * Ht, kernels::Activation::kGeluErf);
  ops_.matmul_forward(out_, nullptr, p1_act_, tensor(P, proj2_w_),
                      row_split_bias(tensor(P, proj2_b_)), M, Ht, H, Epilogue::kNone);
  tp_sum(out_, static_cast<size_t>(M) * H);
}

// Given d_out (M, H): the projector's gradients +=, and with `encoder` d_h_ (N, C) = the
// gradient of the selected hidden state (zero on the class token's rows, which the projector
// does not read), summed over TP.
template <typename A>
void VisionEncoder<A>::projector_backward(const A* d_out, bool encoder) {
  const int M = B_ * Np_, C = C_, H = H_, Ht = Ht_;
  A* P = params_;
  G* Gr = grads_;
  ops_.matmul_backward(d_p_, tensor(Gr, proj2_w_), tensor(Gr, proj2_b_), d_out, p1_act_,
                       tensor(P, proj2_w_), M, Ht, H);
  ops_.activation_backward(d_p_, p1_, d_p_, static_cast<size_t>(M) * Ht,
                           kernels::Activation::kGeluErf);
  if (!encoder) {  // a frozen encoder needs no input gradient
    ops_.matmul_backward(nullptr, tensor(Gr, proj1_w_), tensor(Gr, proj1_b_), d_p_, features_,
                         tensor(P, proj1_w_), M, C, Ht);
    return;
  }
  const size_t MC = static_cast<size_t>(M) * C;
  if (cls_ < 0) {  // the selected state's rows are the features' rows
    ops_.matmul_backward(d_h_, tensor(Gr, proj1_w_), tensor(Gr, proj1_b_), d_p_, features_,
                         tensor(P, proj1_w_), M, C, Ht);
    tp_sum(d_h_, MC);
    return;
  }
  ops_.matmul_backward(d_c_, tensor(Gr, proj1_w_), tensor(Gr, proj1_b_), d_p_, features_,
                       tensor(P, proj1_w_), M, C, Ht);
  tp_sum(d_c_, MC);
  const size_t TC = static_cast<size_t>(T_) * C, NpC = static_cast<size_t>(Np_) * C;
  device_.zero(d_h_, N_ * C * sizeof(A), compute());
  for (int b = 0; b < B_; b++)
    device_.copy(d_h_ + b * TC + C, d_c_ + b * NpC, NpC * sizeof(A), CopyKind::kDeviceToDevice,
                 compute());
}

template void VisionEncoder<float>::projector_forward();
template void VisionEncoder<double>::projector_forward();
template void VisionEncoder<bf16>::projector_forward();
template void VisionEncoder<fp16>::projector_forward();
template void VisionEncoder<float>::projector_backward(const float*, bool);
template void VisionEncoder<double>::projector_backward(const double*, bool);
template void VisionEncoder<bf16>::projector_backward(const bf16*, bool);
template void VisionEncoder<fp16>::projector_backward(const fp16*, bool);

}  // namespace lattice
