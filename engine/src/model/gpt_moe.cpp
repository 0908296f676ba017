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
// The block sizes are read on the host once per forward (moe_host_counts, into
// la.expert_counts_host, which the backward and its all-to-alls reuse): on the CPU the device's
// memory, ready when the op returns; on a GPU a synchronous copy of the (EP, E) ints after the
// plan (and the count exchange). A training forward's load-balancing loss (the trainer's metric)
// and routes per expert (the Studio's load) reach the host likewise, by one more wait.
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
//
// Note [MoE with context parallelism]: a CP rank holds N of the sequence's N_g = CP N rows.
// Routing is per token, so only the load-balancing loss couples the ranks: one process's
// coeff E / (k N_g^2) sum_e c_e sum_n probs[n, e] has the sequence's counts c_e (the ranks'
// tokens_per_expert summed over CP after the dispatch plan, as Megatron all-reduces them) and
// sums probs over all N_g rows. Each rank computes the part of its own rows (the op at coeff /
// CP^2, its N being the rank's); the trainer sums the parts over ranks, and each rank's
// gradient is one process's for its rows. Token dropping's capacity stays per rank's N tokens
// (Megatron's), so with a capacity factor CP > 1 keeps other routes than one process.
//
// Note [expert parallelism] (--expert-model-parallel-size EP, Megatron's alltoall token
// dispatcher): EP rank p holds experts [p E/EP, (p+1) E/EP) (ParamLayout, Note [MoE layout]);
// the rest of the layer is whole on every EP rank. Routing, the dispatch plan, token dropping
// and the load-balancing loss run per rank on its own N tokens over all E experts, as at EP 1.
// The permuted rows (expert-major over all E) then go to their experts' owners: the ranks
// all-gather their (E) kept counts over the EP group, all_to_all sends each owner its experts'
// block, and the owner regroups what it got (source-rank major) expert-major over its own
// experts (each expert's rows from rank 0, then rank 1, ...), runs its experts' GEMMs there and
// sends the outputs back by the reverse all_to_all into expert_out, in this rank's permuted
// order, where the combine reads them unchanged. Backward mirrors it: d expert_out goes to the
// experts as the rows did, d expert_in comes back. Every row meets the same expert weights and
// the same arithmetic as at EP 1 (a GEMM row depends on its own input row only), so the
// outputs are bit for bit those of one process; an expert's weight gradient sums its rows in
// another order (rank by rank), summed over the expert-data group afterwards (GradReducer).
// The all-to-alls run on the EP communicator of this rank's TP coordinate (per TP rank), so
// tensor parallelism inside each expert composes with them. The exchange and the all-to-alls
// are queued on the compute stream (NCCL on a GPU, Note [CPU stream order] on the CPU) and the
// regrouping is device copies, so any device runs them; only the counts are read on the host
// (after one copy where device memory is not host memory, Note [MoE layer]), as the all-to-all's
// sizes and the GEMM loop's must be.
//
// Note [expert tensor parallelism 1] (--expert-tensor-parallel-size 1 under TP t > 1,
// ModelShard::experts_whole; Megatron's alltoall dispatcher with expert TP 1): attention stays
// tensor-parallel, every expert is whole on its rank (E / EP of them, Fm = the whole width),
// and the MoE layer runs on this TP rank's Nm = N / t rows: with sequence parallelism the rows
// it holds, else rows [tp_rank Nm, + Nm) of the N every TP rank holds. Each token is routed once
// in its TP group, and the EP group (Megatron's expert grid: ETP 1 makes it stride 1, so it
// spans TP ranks) moves it to its expert as above. The layer's output rows are whole: the
// combine writes them into fc2_out_ (sequence parallelism) or all-gathers them over TP, so
// there is no TP sum; backward takes the same rows of d out and writes whole rows of d ln2
// (all-gathered without sequence parallelism) where the dense path reduces partial ones.
// What stays per TP rank: the router's weight gradient covers this rank's rows (summed over TP
// as a sequence-parallel gradient, ParamTensor::sequence_parallel_grad), and the load-balancing
// loss treats the TP ranks' rows as parts of the sequence, as context parallelism does (route
// counts summed over TP and CP, N_g = CP t Nm; Megatron sums them over its TP x CP group); token
// dropping's capacity is per rank's Nm tokens (Megatron's per local tokens). The experts'
// gradients are summed over the expert-data group, which now includes TP ranks.
//
// Note [expert tensor parallelism e] (--expert-tensor-parallel-size e strictly between 1 and
// TP t, e dividing t; ModelShard::moe_row_parts = t / e): Megatron's expert grid makes the e
// consecutive TP ranks [g e, (g + 1) e) expert-TP group g (GptModel::etp_comm_), and its ranks
// together route that group's Nm = N e / t rows [g Nm, + Nm) of the N (the tokens Megatron's
// ranks hold with sequence parallelism, all-gathered over the expert-TP group). Every rank of
// the group runs the router and routing on those rows (the TP all-gather of sequence
// parallelism brings them, as at expert TP = TP), so it holds the group's routes; each expert
// is split over the group as the dense MLP over TP (fc1 rows, fc2 columns, fc2's bias added by
// expert-TP rank 0), the route weights' gradient summed over the group alone. The combined rows
// are partial over the group: written at rows [g Nm, + Nm) of an N-row buffer whose other rows
// are zero, the dense path's TP sum (reduce-scatter with sequence parallelism) adds the group's
// partials and nothing else, so every row is whole afterwards; backward zero-pads d ln2 alike.
// Per group, as ETP 1 per rank: the router's gradient (written by expert-TP rank 0, summed over
// TP), the route counts (rank 0's summed over TP and CP) and the load-balancing loss (N_g = CP
// (t / e) Nm; the trainer counts expert-TP rank 0's part), token dropping's capacity (per group's
// Nm tokens: Megatron's ranks drop per their N / t). EP's all-to-alls run between the ranks of
// one expert-TP coordinate (Megatron's EP group), each expert's slice meeting its rows there;
// the experts' gradients are summed over the expert-data group, which spans the TP groups' rows.
#include <algorithm>
#include <numeric>

#include "model/gpt.h"

namespace lattice {

template <typename A>
void GptModel<A>::moe_experts_forward(int l, const LayerActivations<A>& la, const A* ln2) {
  const int N = Nm_, C = C_, E = E_, k = k_;  // ln2: (Nm, C), moe_input's
  const LayerParams<A> w = layout_.layer(compute_, l);
  {
    OpTimer timer(*this, Op::kMatmulForward);
    ops_.matmul_forward(moe_logits_, nullptr, ln2, w.router_w, nullptr, N, C, E, Epilogue::kNone);
    ops_.moe_route(la.router_probs, la.route, la.route_weight, moe_logits_, N, E, k);
    ops_.moe_dispatch_plan(la.tokens_per_expert, la.expert_counts, la.route_slot, la.slot_row,
                           la.route, la.route_weight, N, E, k, capacity_);
  }
  // Note [MoE with context parallelism]: the load-balancing loss counts the sequence's routes.
  if (cp_ > 1)
    if (Status s =
            cp_comm_->all_reduce(la.tokens_per_expert, E, DType::kInt32, ReduceOp::kSum, compute());
        !s)
      record_comm_error("context-parallel all-reduce of the experts' route counts", s);
  // Note [expert tensor parallelism 1]: the TP ranks' rows are parts of the sequence too; with
  // [expert tensor parallelism e] the groups' rows, each group's counted by its rank 0.
  if (moe_rows_split_ || moe_grouped_) {
    if (etp_rank_ != 0) device_.zero(la.tokens_per_expert, E * sizeof(int32_t), compute());
    tp_all_reduce(la.tokens_per_expert, E, DType::kInt32, ReduceOp::kSum);
  }
  // Note [expert parallelism]: every EP rank's kept counts, for the all-to-all's sizes.
  if (ep_ > 1)
    if (Status s = ep_comm_->all_gather(la.expert_counts, la.expert_counts_all, E, DType::kInt32,
                                        compute());
        !s)
      ep_comm_->abort("expert-parallel count exchange failed: " + s.message(), 1);
  const int32_t* all = moe_host_counts(la);                       // (EP, E)
  const int32_t* kept = all + static_cast<size_t>(ep_rank_) * E;  // this rank's rows per expert
  const int mine = std::accumulate(kept, kept + E, 0);
  ops_.moe_gather_rows(ep_ > 1 ? moe_send_ : la.expert_in, ln2, la.slot_row, mine, C);
  if (ep_ > 1) moe_dispatch(la, moe_send_, la.expert_in);
  // This rank's experts and their rows (EP 1: every expert, the permuted rows themselves).
  const std::vector<int> counts = moe_local_counts(all);
  const int rows = std::accumulate(counts.begin(), counts.end(), 0);
  A* out = ep_ > 1 ? moe_local_ : la.expert_out;
  OpTimer timer(*this, Op::kMatmulForward);
  for (int e = 0, r0 = 0; e < El_; r0 += counts[e++]) {
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
  for (int e = 0, r0 = 0; e < El_; r0 += counts[e++]) {
    const int n = counts[e];
    if (n == 0) continue;
    const ExpertParams<A> x = layout_.expert(compute_, l, e);
    ops_.matmul_forward(out + static_cast<size_t>(r0) * C, nullptr,
                        la.gelu + static_cast<size_t>(r0) * Fm_, x.fc2_w,
                        etp_rank_ == 0 ? x.fc2_b : nullptr, n, Fm_, C, Epilogue::kNone);
  }
  if (ep_ > 1) moe_undispatch(la, moe_local_, la.expert_out);
}

template <typename A>
std::vector<int> GptModel<A>::moe_local_counts(const int32_t* counts) const {
  std::vector<int> local(El_, 0);  // at EP 1: counts itself
  for (int e = 0; e < El_; e++) {
    for (int p = 0; p < ep_; p++) local[e] += counts[static_cast<size_t>(p) * E_ + ep_first_ + e];
  }
  return local;
}

namespace {
// Note [expert parallelism]: the all-to-all's blocks. Rank `me` sends rank p the rows of p's
// experts (counts[me][p El .. (p+1) El), contiguous in its expert-major order) and receives
// from p the rows p routed to its own experts; within a received block, expert by expert.
// counts: (EP, E) every rank's kept rows per expert; C: row width (elements).
struct ExpertBlocks {
  std::vector<size_t> send, recv;  // (EP) elements
};
ExpertBlocks expert_blocks(const int32_t* counts, int ep, int me, int E, int C) {
  const int El = E / ep;
  ExpertBlocks b{std::vector<size_t>(ep, 0), std::vector<size_t>(ep, 0)};
  for (int p = 0; p < ep; p++)
    for (int e = 0; e < El; e++) {
      b.send[p] += static_cast<size_t>(counts[static_cast<size_t>(me) * E + p * El + e]) * C;
      b.recv[p] += static_cast<size_t>(counts[static_cast<size_t>(p) * E + me * El + e]) * C;
    }
  return b;
}

// Between the all-to-all's order of this rank's experts' rows (source rank major, then expert)
// and the experts' order (expert major, then source rank): row blocks copied one by one on the
// device's stream (on the CPU a memcpy each). counts: on the host. to_experts: the first
// direction.
template <typename A>
void regroup(Device& device, Stream& stream, const int32_t* counts, int ep, int me, int E, int C,
             const A* from, A* to, bool to_experts) {
  const int El = E / ep;
  // Each (source p, expert e) block's first row in both orders.
  std::vector<size_t> by_source(static_cast<size_t>(ep) * El), by_expert(by_source.size());
  size_t row = 0;
  for (int p = 0; p < ep; p++)
    for (int e = 0; e < El; e++) {
      by_source[static_cast<size_t>(p) * El + e] = row;
      row += counts[static_cast<size_t>(p) * E + me * El + e];
    }
  row = 0;
  for (int e = 0; e < El; e++)
    for (int p = 0; p < ep; p++) {
      by_expert[static_cast<size_t>(p) * El + e] = row;
      row += counts[static_cast<size_t>(p) * E + me * El + e];
    }
  for (int p = 0; p < ep; p++)
    for (int e = 0; e < El; e++) {
      const size_t n = counts[static_cast<size_t>(p) * E + me * El + e];
      const size_t i = static_cast<size_t>(p) * El + e;
      const size_t src = to_experts ? by_source[i] : by_expert[i];
      const size_t dst = to_experts ? by_expert[i] : by_source[i];
      if (n > 0)
        device.copy(to + dst * C, from + src * C, n * C * sizeof(A), CopyKind::kDeviceToDevice,
                    stream);
    }
}
}  // namespace

// A failed all-to-all ends the job: the EP ranks could not agree on the rows otherwise.
template <typename A>
void GptModel<A>::moe_dispatch(const LayerActivations<A>& la, const A* mine, A* local) {
  const int32_t* counts = la.expert_counts_host;  // (EP, E), the forward's
  const ExpertBlocks b = expert_blocks(counts, ep_, ep_rank_, E_, C_);
  if (Status s = ep_comm_->all_to_all(mine, b.send, moe_recv_, b.recv, dtype_of<A>(), compute());
      !s)
    ep_comm_->abort("expert-parallel token dispatch failed: " + s.message(), 1);
  regroup(device_, compute(), counts, ep_, ep_rank_, E_, C_, moe_recv_, local, true);
}

template <typename A>
void GptModel<A>::moe_undispatch(const LayerActivations<A>& la, const A* local, A* mine) {
  const int32_t* counts = la.expert_counts_host;
  const ExpertBlocks b = expert_blocks(counts, ep_, ep_rank_, E_, C_);
  regroup(device_, compute(), counts, ep_, ep_rank_, E_, C_, local, moe_recv_, false);
  if (Status s = ep_comm_->all_to_all(moe_recv_, b.recv, mine, b.send, dtype_of<A>(), compute());
      !s)
    ep_comm_->abort("expert-parallel token combine failed: " + s.message(), 1);
}

template <typename A>
void GptModel<A>::moe_combine_forward(int l, const LayerActivations<A>& la, bool training) {
  // All N rows, partial over TP: in fc2_out_, or in full_ before the reduce-scatter. Whole
  // experts (Note [expert tensor parallelism 1]): this rank's Nm rows, whole: fc2_out_'s own
  // with sequence parallelism, else all-gathered into fc2_out_. Note [expert tensor parallelism
  // e]: the group's Nm rows of the N, partial over the group, the other rows zero.
  A* combined = moe_rows_split_ ? (sp_ ? fc2_out_ : moe_rows_) : sp_ ? full_ : fc2_out_;
  {
    OpTimer timer(*this, Op::kMatmulForward);
    A* rows = combined;  // the routed rows' place in it
    if (moe_grouped_) {
      device_.zero(combined, static_cast<size_t>(N_) * C_ * sizeof(A), compute());
      rows += moe_row0_ * C_;
    }
    ops_.moe_combine(rows, la.expert_out, la.route_weight, la.route_slot, Nm_, C_, k_);
  }
  if (!moe_rows_split_)
    reduce_rows(combined, fc2_out_);  // the groups' rows with expert TP e
  else if (!sp_)
    moe_all_gather_rows(moe_rows_, fc2_out_);
  OpTimer timer(*this, Op::kMatmulForward);
  const double coeff = config_.aux_loss_coeff();
  // Under CP: the sequence's counts, this rank's probabilities, N_g = CP N (the note above);
  // with whole experts N_g = CP t Nm, with expert TP e N_g = CP (t / e) Nm.
  const double parts = static_cast<double>(cp_) * (t_ / etp_);
  if (coeff > 0)
    ops_.moe_aux_loss(moe_aux_ + l, la.router_probs, la.tokens_per_expert, Nm_, E_, k_,
                      coeff / (parts * parts));
  if (!training) return;
  // On the host (Note [MoE layer]): the routes per expert for moe_load_ (under CP the
  // sequence's, counted by CP rank 0 alone) and the aux loss for the trainer's metric. The CPU
  // has run the ops, their results are host memory; a GPU's are copied, with one wait.
  const bool count_load = cp_rank_ == 0;
  const int32_t* routes = la.tokens_per_expert;  // (E)
  const G* aux = moe_aux_ + l;
  G aux_host = 0;
  if (!device_.capabilities().host_addressable && (count_load || coeff > 0)) {
    if (count_load) {
      moe_routes_host_.resize(E_);
      device_.copy(moe_routes_host_.data(), routes, E_ * sizeof(int32_t), CopyKind::kDeviceToHost,
                   compute());
      routes = moe_routes_host_.data();
    }
    if (coeff > 0) {
      device_.copy(&aux_host, aux, sizeof(G), CopyKind::kDeviceToHost, compute());
      aux = &aux_host;
    }
    if (!device_.synchronize(compute())) return;  // the error stays recorded
  }
  if (count_load) {
    if (moe_load_.empty()) moe_load_.assign(static_cast<size_t>(L_) * E_, 0);
    for (int e = 0; e < E_; e++) moe_load_[static_cast<size_t>(l) * E_ + e] += routes[e];
  }
  if (coeff > 0) moe_aux_sum_ += *aux;
}

template <typename A>
const int32_t* GptModel<A>::moe_host_counts(const LayerActivations<A>& la) {
  if (device_.capabilities().host_addressable) return la.expert_counts_host;  // the buffer
  const size_t n = static_cast<size_t>(ep_) * E_;
  device_.copy(la.expert_counts_host, ep_ > 1 ? la.expert_counts_all : la.expert_counts,
               n * sizeof(int32_t), CopyKind::kDeviceToHost, compute());
  if (Status s = device_.synchronize(compute()); !s) {
    // A failed device (its error stays recorded) runs no expert rather than garbage sizes; with
    // EP the ranks' all-to-all sizes would no longer agree, so the job ends.
    if (ep_ > 1)
      ep_comm_->abort("expert-parallel counts could not reach the host: " + s.message(), 1);
    std::fill(la.expert_counts_host, la.expert_counts_host + n, 0);
  }
  return la.expert_counts_host;
}

template <typename A>
bool GptModel<A>::moe_backward(int l, const LayerActivations<A>& la, const A* d_out, A* d_ln2,
                               float grad_scale) {
  const int N = Nm_, C = C_, E = E_, k = k_;
  const LayerParams<A> w = layout_.layer(compute_, l);
  const LayerParams<G> g = layout_.grad_layer(grads_, l);
  OpTimer timer(*this, Op::kMatmulBackward);
  // d_out is read here alone: d_ln2 (which it may alias, as its gathered rows) is written after.
  const A* d_rows = moe_input(d_out, full_);
  ops_.moe_combine_backward(moe_d_rows_, moe_dweight_, d_rows, la.expert_out, la.route_weight,
                            la.route_slot, N, C, k);
  // Each rank's dot with its partial expert outputs, summed over the ranks that split the
  // experts: TP, or the expert-TP group (Note [expert tensor parallelism e]).
  if (moe_grouped_) {
    OpTimer comm(*this, Op::kTensorParallelComm);
    if (Status s = etp_comm_->all_reduce(moe_dweight_, static_cast<size_t>(N) * k, dtype_of<G>(),
                                         ReduceOp::kSum, compute());
        !s)
      record_comm_error("expert-tensor-parallel all-reduce of the route weights' gradient", s);
  } else if (t_ > 1 && !moe_rows_split_) {
    tp_all_reduce(moe_dweight_, static_cast<size_t>(N) * k, dtype_of<G>(), ReduceOp::kSum);
  }
  // Note [expert parallelism]: d expert_out to this rank's experts (EP 1: in place), by the
  // counts the forward read (no copy, no wait).
  A* d_expert = moe_d_rows_;
  if (ep_ > 1) {
    moe_dispatch(la, moe_d_rows_, moe_local_);
    d_expert = moe_local_;
  }
  const std::vector<int> counts = moe_local_counts(la.expert_counts_host);
  const int rows = std::accumulate(counts.begin(), counts.end(), 0);
  for (int e = 0, r0 = 0; e < El_; r0 += counts[e++]) {
    const int n = counts[e];
    if (n == 0) continue;
    const ExpertParams<A> x = layout_.expert(compute_, l, e);
    const ExpertParams<G> gx = layout_.grad_expert(grads_, l, e);
    ops_.matmul_backward(moe_d_act_ + static_cast<size_t>(r0) * Fm_, gx.fc2_w, gx.fc2_b,
                         d_expert + static_cast<size_t>(r0) * C,
                         la.gelu + static_cast<size_t>(r0) * Fm_, x.fc2_w, n, Fm_, C);
  }
  A* d_fc1 = swiglu_ ? moe_d_up_ : moe_d_act_;  // (rows, Fm')
  if (rows > 0) {
    if (swiglu_)
      ops_.swiglu_backward(moe_d_up_, la.fc1, moe_d_act_, rows, Fm_);
    else
      ops_.gelu_backward(moe_d_act_, la.fc1, moe_d_act_, static_cast<size_t>(rows) * Fm_);
  }
  for (int e = 0, r0 = 0; e < El_; r0 += counts[e++]) {
    const int n = counts[e];
    if (n == 0) continue;
    const ExpertParams<A> x = layout_.expert(compute_, l, e);
    const ExpertParams<G> gx = layout_.grad_expert(grads_, l, e);
    // d expert_in over d expert_out's rows (each expert reads and writes its own block).
    ops_.matmul_backward(d_expert + static_cast<size_t>(r0) * C, gx.fc1_w, gx.fc1_b,
                         d_fc1 + static_cast<size_t>(r0) * upm_,
                         la.expert_in + static_cast<size_t>(r0) * C, x.fc1_w, n, C, upm_);
  }
  // d expert_in back to the ranks whose rows they are, in their permuted order.
  if (ep_ > 1) moe_undispatch(la, moe_local_, moe_d_rows_);
  // The router: the weights' gradient and the load-balancing loss's (Note [MoE layer]) through
  // the softmax into d logits, then d ln2 = d logits R plus each kept route's d expert_in.
  // (Under CP, N_g = CP N: the op's 1 / N^2 times N_l^2 / N_g gives one process's 1 / N_g;
  // with whole experts N_g = CP t Nm likewise, with expert TP e CP (t / e) Nm.)
  const double parts = static_cast<double>(cp_) * (t_ / etp_);
  const double aux_scale = config_.aux_loss_coeff() * static_cast<double>(grad_scale) * N / parts;
  ops_.moe_route_backward(moe_logits_, moe_dweight_, la.router_probs, la.route, la.route_weight,
                          la.tokens_per_expert, N, E, k, aux_scale);
  const A* ln2 = moe_input(la.ln2, gathered_);
  // Whole experts: this rank's rows of d ln2 are whole (its router share included), written
  // into d_c_ directly with sequence parallelism, else gathered there from moe_rows_. Expert TP
  // e: the group's rows of the partial N, the other groups' rows zero; its expert-TP rank 0
  // alone adds the router's share and writes the router's gradient (partial per group).
  A* d_mine = moe_rows_split_ ? (sp_ ? d_c_ : moe_rows_) : d_ln2 + moe_row0_ * C;
  if (moe_grouped_) device_.zero(d_ln2, static_cast<size_t>(N_) * C * sizeof(A), compute());
  const bool router_share = etp_rank_ == 0;
  G* d_router = moe_grouped_ && !router_share ? nullptr : g.router_w;
  if (router_share || d_router)
    ops_.matmul_backward(router_share ? d_mine : nullptr, d_router, nullptr, moe_logits_, ln2,
                         w.router_w, N, C, E);
  if (!router_share && !moe_grouped_)
    device_.zero(d_mine, static_cast<size_t>(N) * C * sizeof(A), compute());
  ops_.moe_scatter_add_rows(d_mine, moe_d_rows_, la.route_slot, N, C, k);
  if (moe_rows_split_ && !sp_) moe_all_gather_rows(moe_rows_, d_c_);
  return moe_rows_split_;
}

template <typename A>
const A* GptModel<A>::moe_input(const A* held, A* full) {
  // All N rows; with expert TP e (Note [expert tensor parallelism e]) the group's Nm of them.
  if (!moe_rows_split_) return gather_rows(held, full) + moe_row0_ * C_;
  // Sequence parallelism holds exactly this rank's rows; else all N, of which they are a slice.
  return sp_ ? held : held + moe_row0_ * C_;
}

template <typename A>
void GptModel<A>::moe_all_gather_rows(const A* mine, A* all) {
  OpTimer timer(*this, Op::kTensorParallelComm);
  if (Status s =
          tp_->all_gather(mine, all, static_cast<size_t>(Nm_) * C_, dtype_of<A>(), compute());
      !s)
    record_comm_error("tensor-parallel all-gather of the MoE layer's rows", s);
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
