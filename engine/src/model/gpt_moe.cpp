// GptModel's MoE layers (gpt.h; docs/models.md#mixture-of-experts): router, routing, the experts'
// GEMMs over contiguous row blocks, the weighted combine, and their backward.
//
// Note [MoE layer]: an MoE layer (ModelConfig::is_moe_layer, Megatron's --moe-layer-freq) keeps
// the dense layer's attention and norms; its MLP is, for ln2's N rows x:
//   logits = x R^T (R: (E, C), no bias); probs = softmax(logits) over all E experts (in G);
//   the k experts of largest logit, weights w = their probs renormalised to sum 1 (Mixtral's
//   rule; Megatron's default, softmax over the top-k logits, gives the same numbers);
//   out[n] = sum_j w[n, j] expert_{route[n, j]}(x[n]), each expert the dense MLP's kind (GELU
//   or SwiGLU, biases as the dense MLP's) of width Fm.
// The routes are permuted expert-major (kernels.h moe_dispatch_plan), so each expert runs two
// plain GEMMs (the op list's matmul) on its contiguous block of rows: a grouped GEMM as a loop.
// The block sizes are read on the host, which on the CPU (the one device with the MoE ops,
// Ops::has_moe) is the device's memory and is ready when the op returns.
// Token dropping (--moe-expert-capacity-factor f): each expert keeps at most
// ceil(N k / E x f) routes, those of largest weight (Megatron's "probs" policy); a dropped
// route adds nothing and its weight is not renormalised away (Megatron's). Load balancing
// (--moe-router-load-balancing-type aux_loss): Megatron's switch_load_balancing_loss_func per
// layer and micro-batch, aux = coeff E / (k N^2) sum_e c_e sum_n probs[n, e] with c_e the routes
// to e before dropping (held constant); its gradient enters as d(grad_scale N aux), so that
// with the trainer's grad_scale = loss_scale / (B T M DP) each micro-batch's aux loss counts
// 1 / (M DP), as Megatron's MoEAuxLossAutoScaler scales it. Recomputation re-runs
// moe_experts_forward (the routing and every expert's output: FC2 included, since the combine's
// backward needs each route's output); moe_combine_forward runs once per forward.
#include <algorithm>
#include <numeric>

#include "model/gpt.h"

namespace lattice {

template <typename A>
void GptModel<A>::moe_experts_forward(int l, const LayerActivations<A>& la, const A* ln2) {
  const int N = N_, C = C_, E = E_, k = k_;
  const LayerParams<A> w = layout_.layer(compute_, l);
  {
    OpTimer timer(*this, Op::kMatmulForward);
    ops_.matmul_forward(moe_logits_, nullptr, ln2, w.router_w, nullptr, N, C, E, Epilogue::kNone);
    ops_.moe_route(la.router_probs, la.route, la.route_weight, moe_logits_, N, E, k);
    ops_.moe_dispatch_plan(la.tokens_per_expert, la.expert_counts, la.route_slot, la.slot_row,
                           la.route, la.route_weight, N, E, k, capacity_);
  }
  const int rows = std::accumulate(la.expert_counts, la.expert_counts + E, 0);
  ops_.moe_gather_rows(la.expert_in, ln2, la.slot_row, rows, C);
  OpTimer timer(*this, Op::kMatmulForward);
  for (int e = 0, r0 = 0; e < E; r0 += la.expert_counts[e++]) {
    const int n = la.expert_counts[e];
    if (n == 0) continue;
    const ExpertParams<A> x = layout_.expert(compute_, l, e);
    const A* in = la.expert_in + static_cast<size_t>(r0) * C;
    if (swiglu_)
      ops_.matmul_forward(la.fc1 + static_cast<size_t>(r0) * upm_, nullptr, in, x.fc1_w, x.fc1_b, n,
                          C, upm_, Epilogue::kNone);
    else  // GELU as the GEMM's epilogue, its input kept in fc1
      ops_.matmul_forward(la.gelu + static_cast<size_t>(r0) * Fm_,
                          la.fc1 + static_cast<size_t>(r0) * Fm_, in, x.fc1_w, x.fc1_b, n, C, Fm_,
                          Epilogue::kGelu);
  }
  if (swiglu_ && rows > 0) ops_.swiglu_forward(la.gelu, la.fc1, rows, Fm_);
  for (int e = 0, r0 = 0; e < E; r0 += la.expert_counts[e++]) {
    const int n = la.expert_counts[e];
    if (n == 0) continue;
    const ExpertParams<A> x = layout_.expert(compute_, l, e);
    ops_.matmul_forward(la.expert_out + static_cast<size_t>(r0) * C, nullptr,
                        la.gelu + static_cast<size_t>(r0) * Fm_, x.fc2_w, x.fc2_b, n, Fm_, C,
                        Epilogue::kNone);
  }
}

template <typename A>
void GptModel<A>::moe_combine_forward(int l, const LayerActivations<A>& la, bool training) {
  OpTimer timer(*this, Op::kMatmulForward);
  ops_.moe_combine(fc2_out_, la.expert_out, la.route_weight, la.route_slot, N_, C_, k_);
  if (training && device_.capabilities().host_addressable) {  // host counts (Note [MoE layer])
    if (moe_load_.empty()) moe_load_.assign(static_cast<size_t>(L_) * E_, 0);
    for (int e = 0; e < E_; e++)
      moe_load_[static_cast<size_t>(l) * E_ + e] += la.tokens_per_expert[e];
  }
  const double coeff = config_.aux_loss_coeff();
  if (coeff <= 0) return;
  ops_.moe_aux_loss(moe_aux_ + l, la.router_probs, la.tokens_per_expert, N_, E_, k_, coeff);
  // The CPU has run the op: its result is host memory (Note [MoE layer]).
  if (training && device_.capabilities().host_addressable) moe_aux_sum_ += moe_aux_[l];
}

template <typename A>
void GptModel<A>::moe_backward(int l, const LayerActivations<A>& la, const A* d_out, A* d_ln2,
                               float grad_scale) {
  const int N = N_, C = C_, E = E_, k = k_;
  const LayerParams<A> w = layout_.layer(compute_, l);
  const LayerParams<G> g = layout_.grad_layer(grads_, l);
  OpTimer timer(*this, Op::kMatmulBackward);
  // d_out is read here alone: d_ln2 (which it may alias) is written after.
  ops_.moe_combine_backward(moe_d_rows_, moe_dweight_, d_out, la.expert_out, la.route_weight,
                            la.route_slot, N, C, k);
  const int rows = std::accumulate(la.expert_counts, la.expert_counts + E, 0);
  for (int e = 0, r0 = 0; e < E; r0 += la.expert_counts[e++]) {
    const int n = la.expert_counts[e];
    if (n == 0) continue;
    const ExpertParams<A> x = layout_.expert(compute_, l, e);
    const ExpertParams<G> gx = layout_.grad_expert(grads_, l, e);
    ops_.matmul_backward(moe_d_act_ + static_cast<size_t>(r0) * Fm_, gx.fc2_w, gx.fc2_b,
                         moe_d_rows_ + static_cast<size_t>(r0) * C,
                         la.gelu + static_cast<size_t>(r0) * Fm_, x.fc2_w, n, Fm_, C);
  }
  A* d_fc1 = swiglu_ ? moe_d_up_ : moe_d_act_;  // (rows, Fm')
  if (rows > 0) {
    if (swiglu_)
      ops_.swiglu_backward(moe_d_up_, la.fc1, moe_d_act_, rows, Fm_);
    else
      ops_.gelu_backward(moe_d_act_, la.fc1, moe_d_act_, static_cast<size_t>(rows) * Fm_);
  }
  for (int e = 0, r0 = 0; e < E; r0 += la.expert_counts[e++]) {
    const int n = la.expert_counts[e];
    if (n == 0) continue;
    const ExpertParams<A> x = layout_.expert(compute_, l, e);
    const ExpertParams<G> gx = layout_.grad_expert(grads_, l, e);
    // d expert_in over d expert_out's rows (each expert reads and writes its own block).
    ops_.matmul_backward(moe_d_rows_ + static_cast<size_t>(r0) * C, gx.fc1_w, gx.fc1_b,
                         d_fc1 + static_cast<size_t>(r0) * upm_,
                         la.expert_in + static_cast<size_t>(r0) * C, x.fc1_w, n, C, upm_);
  }
  // The router: the weights' gradient and the load-balancing loss's (Note [MoE layer]) through
  // the softmax into d logits, then d ln2 = d logits R plus each kept route's d expert_in.
  const double aux_scale = config_.aux_loss_coeff() * static_cast<double>(grad_scale) * N;
  ops_.moe_route_backward(moe_logits_, moe_dweight_, la.router_probs, la.route, la.route_weight,
                          la.tokens_per_expert, N, E, k, aux_scale);
  ops_.matmul_backward(d_ln2, g.router_w, nullptr, moe_logits_, la.ln2, w.router_w, N, C, E);
  ops_.moe_scatter_add_rows(d_ln2, moe_d_rows_, la.route_slot, N, C, k);
}

template <typename A>
double GptModel<A>::moe_aux_loss() {
  if (!moe_aux_ || config_.aux_loss_coeff() <= 0) return 0;
  std::vector<G> host(L_);
  device_.copy(host.data(), moe_aux_, L_ * sizeof(G), CopyKind::kDeviceToHost, compute());
  (void)device_.synchronize(compute());  // an error stays recorded on the device
  double sum = 0;
  for (int l = 0; l < L_; l++)
    if (layout_.is_moe(l)) sum += host[l];
  return sum;
}

template <typename A>
void GptModel<A>::take_moe_load(std::vector<double>& load) {
  const size_t first = static_cast<size_t>(layout_.shard().layer_begin) * E_;
  for (size_t i = 0; i < moe_load_.size(); i++) load.at(first + i) += moe_load_[i];
  std::fill(moe_load_.begin(), moe_load_.end(), 0);
}

template class GptModel<float>;
template class GptModel<double>;
template class GptModel<bf16>;
template class GptModel<fp16>;

}  // namespace lattice
