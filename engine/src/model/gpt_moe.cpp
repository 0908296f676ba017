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
// The block sizes are read on the host (moe_host_counts): on the CPU the device's memory, ready
// when the op returns; on a GPU a synchronous copy of E ints after the plan and again in the
// backward (the GEMM loop's sizes), as the load-balancing loss is for the trainer's metric.
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
//
// Tensor parallelism (expert TP = TP, Megatron's default): every TP rank runs the router and
// the routing on all N rows (ln2 all-gathered with sequence parallelism), so each holds the
// same routes, weights, counts and aux loss; each expert is split as the dense MLP (fc1
// column-parallel over Fm / t, fc2 row-parallel, its bias added by tp_rank 0 alone), so a
// rank's expert outputs and their combine are partial sums, summed over TP (reduce-scattered
// with sequence parallelism) as the dense fc2's. In backward d out is gathered to all N rows
// on every rank; the route weights' gradient, a dot with the partial outputs, is all-reduced
// before it enters the router, whose d logits are then whole on every rank: the router's and
// fc2 bias's gradients are whole on each rank (not summed over TP), and only tp_rank 0 adds
// the router's share of d ln2 to the partial sum the caller reduces.
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
  const int32_t* counts = moe_host_counts(la);
  const int rows = std::accumulate(counts, counts + E, 0);
  ops_.moe_gather_rows(la.expert_in, ln2, la.slot_row, rows, C);
  OpTimer timer(*this, Op::kMatmulForward);
  for (int e = 0, r0 = 0; e < E; r0 += counts[e++]) {
    const int n = counts[e];
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
  for (int e = 0, r0 = 0; e < E; r0 += counts[e++]) {
    const int n = counts[e];
    if (n == 0) continue;
    const ExpertParams<A> x = layout_.expert(compute_, l, e);
    ops_.matmul_forward(la.expert_out + static_cast<size_t>(r0) * C, nullptr,
                        la.gelu + static_cast<size_t>(r0) * Fm_, x.fc2_w,
                        tp_rank_ == 0 ? x.fc2_b : nullptr, n, Fm_, C, Epilogue::kNone);
  }
}

template <typename A>
void GptModel<A>::moe_combine_forward(int l, const LayerActivations<A>& la, bool training) {
  // All N rows, partial over TP: in fc2_out_, or in full_ before the reduce-scatter.
  A* combined = sp_ ? full_ : fc2_out_;
  {
    OpTimer timer(*this, Op::kMatmulForward);
    ops_.moe_combine(combined, la.expert_out, la.route_weight, la.route_slot, N_, C_, k_);
  }
  reduce_rows(combined, fc2_out_);
  OpTimer timer(*this, Op::kMatmulForward);
  if (training && device_.capabilities().host_addressable) {  // host counts (Note [MoE layer])
    if (moe_load_.empty()) moe_load_.assign(static_cast<size_t>(L_) * E_, 0);
    for (int e = 0; e < E_; e++)
      moe_load_[static_cast<size_t>(l) * E_ + e] += la.tokens_per_expert[e];
  }
  const double coeff = config_.aux_loss_coeff();
  if (coeff <= 0) return;
  ops_.moe_aux_loss(moe_aux_ + l, la.router_probs, la.tokens_per_expert, N_, E_, k_, coeff);
  if (!training) return;
  // The CPU has run the op: its result is host memory; a GPU's is copied (Note [MoE layer]).
  if (device_.capabilities().host_addressable) {
    moe_aux_sum_ += moe_aux_[l];
    return;
  }
  G aux = 0;
  device_.copy(&aux, moe_aux_ + l, sizeof(G), CopyKind::kDeviceToHost, compute());
  if (device_.synchronize(compute())) moe_aux_sum_ += aux;  // an error stays recorded
}

template <typename A>
const int32_t* GptModel<A>::moe_host_counts(const LayerActivations<A>& la) {
  if (device_.capabilities().host_addressable) return la.expert_counts;
  moe_counts_host_.assign(E_, 0);
  device_.copy(moe_counts_host_.data(), la.expert_counts, E_ * sizeof(int32_t),
               CopyKind::kDeviceToHost, compute());
  // A failed device (its error stays recorded) runs no expert rather than garbage sizes.
  if (!device_.synchronize(compute())) moe_counts_host_.assign(E_, 0);
  return moe_counts_host_.data();
}

template <typename A>
void GptModel<A>::moe_backward(int l, const LayerActivations<A>& la, const A* d_out, A* d_ln2,
                               float grad_scale) {
  const int N = N_, C = C_, E = E_, k = k_;
  const LayerParams<A> w = layout_.layer(compute_, l);
  const LayerParams<G> g = layout_.grad_layer(grads_, l);
  OpTimer timer(*this, Op::kMatmulBackward);
  // d_out is read here alone: d_ln2 (which it may alias, as its gathered rows) is written after.
  const A* d_rows = gather_rows(d_out, full_);
  ops_.moe_combine_backward(moe_d_rows_, moe_dweight_, d_rows, la.expert_out, la.route_weight,
                            la.route_slot, N, C, k);
  if (t_ > 1)  // each rank's dot with its partial expert outputs
    tp_all_reduce(moe_dweight_, static_cast<size_t>(N) * k, dtype_of<G>(), ReduceOp::kSum);
  const int32_t* counts = moe_host_counts(la);
  const int rows = std::accumulate(counts, counts + E, 0);
  for (int e = 0, r0 = 0; e < E; r0 += counts[e++]) {
    const int n = counts[e];
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
  for (int e = 0, r0 = 0; e < E; r0 += counts[e++]) {
    const int n = counts[e];
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
  const A* ln2 = gather_rows(la.ln2, gathered_);
  ops_.matmul_backward(tp_rank_ == 0 ? d_ln2 : nullptr, g.router_w, nullptr, moe_logits_, ln2,
                       w.router_w, N, C, E);
  if (tp_rank_ != 0) device_.zero(d_ln2, static_cast<size_t>(N) * C * sizeof(A), compute());
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
