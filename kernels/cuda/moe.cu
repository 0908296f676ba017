// The mixture-of-experts ops (kernels.h's moe_*; cuda_kernels.h): launchers of moe_kernels.cuh.
// Deterministic and equal to the CPU's (Note [deterministic MoE kernels]). The per-token and
// per-route kernels give one thread a row's sequential sums, as the CPU does: small work next to
// the experts' GEMMs (O(N E) and O(N k C)), traded for bit-for-bit agreement.
// Non-goals: a fused grouped GEMM (the experts run as a loop of cuBLASLt GEMMs over their row
// blocks, engine/src/model/gpt_moe.cpp), and a faster plan for very many experts (the plan runs
// one block per expert, each scanning all N k routes).
#include "common.cuh"
#include "moe_kernels.cuh"

namespace lattice::kernels::cuda {

template <typename T>
void moe_route(Context& ctx, float* probs, int32_t* route, float* weight, const T* logits, int N,
               int E, int k) {
  if (N == 0) return;
  moe_route_kernel<<<blocks_for(N, 128), 128, 0, stream_of(ctx)>>>(probs, route, weight,
                                                                    dev(logits), N, E, k);
  check_launch(ctx, "moe_route");
}

void moe_dispatch_plan(Context& ctx, int32_t* tokens_per_expert, int32_t* counts,
                       int32_t* route_slot, int32_t* slot_row, const int32_t* route,
                       const float* weight, int N, int E, int k, int capacity) {
  static_assert(kScratchDoubles * sizeof(double) >= 4096 * sizeof(unsigned long long));
  if (E > 4096) {
    ctx.record_error("moe_dispatch_plan: " + std::to_string(E) +
                     " experts; the plan's scratch holds thresholds for 4096");
    return;
  }
  if (E == 0) return;
  auto* threshold = reinterpret_cast<unsigned long long*>(ctx.impl().scratch);
  const int NK = N * k;
  moe_plan_count_kernel<<<E, kMoePlanThreads, 0, stream_of(ctx)>>>(
      tokens_per_expert, counts, threshold, route, weight, NK, capacity);
  check_launch(ctx, "moe_dispatch_plan (counts)");
  moe_plan_assign_kernel<<<E, kMoePlanThreads, 0, stream_of(ctx)>>>(
      route_slot, slot_row, tokens_per_expert, counts, threshold, route, weight, NK, k, capacity);
  check_launch(ctx, "moe_dispatch_plan (slots)");
}

template <typename T>
void moe_gather_rows(Context& ctx, T* out, const T* inp, const int32_t* slot_row, int rows, int C) {
  const size_t n = static_cast<size_t>(rows) * C;
  if (n == 0) return;
  moe_gather_rows_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(dev(out), dev(inp),
                                                                          slot_row, rows, C);
  check_launch(ctx, "moe_gather_rows");
}

template <typename T>
void moe_scatter_add_rows(Context& ctx, T* dinp, const T* d_rows, const int32_t* route_slot, int N,
                          int C, int k) {
  const size_t n = static_cast<size_t>(N) * C;
  if (n == 0) return;
  moe_scatter_add_rows_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
      dev(dinp), dev(d_rows), route_slot, N, C, k);
  check_launch(ctx, "moe_scatter_add_rows");
}

template <typename T>
void moe_combine(Context& ctx, T* out, const T* expert_out, const float* weight,
                 const int32_t* route_slot, int N, int C, int k) {
  const size_t n = static_cast<size_t>(N) * C;
  if (n == 0) return;
  moe_combine_kernel<<<blocks_for(n, 256), 256, 0, stream_of(ctx)>>>(
      dev(out), dev(expert_out), weight, route_slot, N, C, k);
  check_launch(ctx, "moe_combine");
}

template <typename T>
void moe_combine_backward(Context& ctx, T* d_expert_out, float* dweight, const T* dout,
                          const T* expert_out, const float* weight, const int32_t* route_slot,
                          int N, int C, int k) {
  const size_t routes = static_cast<size_t>(N) * k;
  if (routes == 0) return;
  moe_combine_dweight_kernel<<<blocks_for(routes, 128), 128, 0, stream_of(ctx)>>>(
      dweight, dev(dout), dev(expert_out), route_slot, N, C, k);
  check_launch(ctx, "moe_combine_backward (dweight)");
  if (C == 0) return;
  moe_combine_d_rows_kernel<<<blocks_for(routes * C, 256), 256, 0, stream_of(ctx)>>>(
      dev(d_expert_out), dev(dout), weight, route_slot, N, C, k);
  check_launch(ctx, "moe_combine_backward (rows)");
}

void moe_aux_loss(Context& ctx, float* loss, const float* probs, const int32_t* tokens_per_expert,
                  int N, int E, int k, double coeff) {
  if (E > kScratchDoubles) {
    ctx.record_error("moe_aux_loss: " + std::to_string(E) + " experts; the scratch holds " +
                     std::to_string(kScratchDoubles));
    return;
  }
  double* column = ctx.impl().scratch;
  if (E > 0) {
    moe_aux_columns_kernel<<<blocks_for(E, 128), 128, 0, stream_of(ctx)>>>(column, probs, N, E);
    check_launch(ctx, "moe_aux_loss (columns)");
  }
  moe_aux_total_kernel<<<1, 1, 0, stream_of(ctx)>>>(loss, column, tokens_per_expert, N, E, k,
                                                     coeff);
  check_launch(ctx, "moe_aux_loss");
}

template <typename T>
void moe_route_backward(Context& ctx, T* dlogits, const float* dweight, const float* probs,
                        const int32_t* route, const float* weight,
                        const int32_t* tokens_per_expert, int N, int E, int k, double aux_scale) {
  if (N == 0) return;
  moe_route_backward_kernel<<<blocks_for(N, 128), 128, 0, stream_of(ctx)>>>(
      dev(dlogits), dweight, probs, route, weight, tokens_per_expert, N, E, k, aux_scale);
  check_launch(ctx, "moe_route_backward");
}

#define LATTICE_CUDA_MOE_INSTANTIATE(T)                                                           \
  template void moe_route(Context&, float*, int32_t*, float*, const T*, int, int, int);           \
  template void moe_gather_rows(Context&, T*, const T*, const int32_t*, int, int);                \
  template void moe_scatter_add_rows(Context&, T*, const T*, const int32_t*, int, int, int);      \
  template void moe_combine(Context&, T*, const T*, const float*, const int32_t*, int, int, int); \
  template void moe_combine_backward(Context&, T*, float*, const T*, const T*, const float*,      \
                                     const int32_t*, int, int, int);                              \
  template void moe_route_backward(Context&, T*, const float*, const float*, const int32_t*,      \
                                   const float*, const int32_t*, int, int, int, double);
LATTICE_CUDA_MOE_INSTANTIATE(float)
LATTICE_CUDA_MOE_INSTANTIATE(bf16)
LATTICE_CUDA_MOE_INSTANTIATE(fp16)
#undef LATTICE_CUDA_MOE_INSTANTIATE

}  // namespace lattice::kernels::cuda
