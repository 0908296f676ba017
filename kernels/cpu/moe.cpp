// The mixture-of-experts routing ops of kernels.h: plain host code, compiled once (not per ISA:
// O(N E) and O(N k C) work beside the experts' O(N k C F) GEMMs). Sums are formed in double.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "lattice/dtype.h"
#include "lattice/kernels.h"

namespace lattice::kernels {

template <typename S>
void moe_route(S* probs, int32_t* route, S* weight, const S* logits, int N, int E, int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const S* z = logits + static_cast<size_t>(n) * E;
    S* p = probs + static_cast<size_t>(n) * E;
    double max = z[0];
    for (int e = 1; e < E; e++) max = std::max(max, static_cast<double>(z[e]));
    double sum = 0;
    for (int e = 0; e < E; e++) sum += std::exp(z[e] - max);
    for (int e = 0; e < E; e++) p[e] = static_cast<S>(std::exp(z[e] - max) / sum);
    // Top-k by logit (the softmax is monotone), ties to the lower expert: a partial sort of
    // the expert ids.
    std::vector<int32_t> ids(E);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    // Renormalised over the k: exp(z_i - max) / sum over the k of exp(z_j - max).
    double top = 0;
    for (int j = 0; j < k; j++) top += std::exp(z[ids[j]] - max);
    for (int j = 0; j < k; j++) {
      route[static_cast<size_t>(n) * k + j] = ids[j];
      weight[static_cast<size_t>(n) * k + j] = static_cast<S>(std::exp(z[ids[j]] - max) / top);
    }
  }
}

template <typename S>
void moe_dispatch_plan(int32_t* tokens_per_expert, int32_t* counts, int32_t* route_slot,
                       int32_t* slot_row, const int32_t* route, const S* weight, int N, int E,
                       int k, int capacity) {
  // Each expert's routes (n, j) in token order.
  std::vector<std::vector<int32_t>> routes(E);
  for (int n = 0; n < N; n++)
    for (int j = 0; j < k; j++) routes[route[static_cast<size_t>(n) * k + j]].push_back(n * k + j);
  std::fill(route_slot, route_slot + static_cast<size_t>(N) * k, -1);
  int32_t next = 0;
  for (int e = 0; e < E; e++) {
    std::vector<int32_t>& r = routes[e];
    tokens_per_expert[e] = static_cast<int32_t>(r.size());
    if (capacity > 0 && static_cast<int>(r.size()) > capacity) {
      // Keep the `capacity` largest weights (ties: the lower token), then back to token order.
      std::stable_sort(r.begin(), r.end(),
                       [&](int32_t a, int32_t b) { return weight[a] > weight[b]; });
      r.resize(capacity);
      std::sort(r.begin(), r.end());
    }
    counts[e] = static_cast<int32_t>(r.size());
    for (int32_t nj : r) {
      route_slot[nj] = next;
      slot_row[next++] = nj / k;
    }
  }
}

template <typename S>
void moe_gather_rows(S* out, const S* inp, const int32_t* slot_row, int rows, int C) {
#pragma omp parallel for schedule(static)
  for (int s = 0; s < rows; s++)
    std::copy_n(inp + static_cast<size_t>(slot_row[s]) * C, C, out + static_cast<size_t>(s) * C);
}

template <typename S>
void moe_scatter_add_rows(S* dinp, const S* d_rows, const int32_t* route_slot, int N, int C,
                          int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    S* d = dinp + static_cast<size_t>(n) * C;
    for (int j = 0; j < k; j++) {
      const int32_t s = route_slot[static_cast<size_t>(n) * k + j];
      if (s < 0) continue;
      const S* r = d_rows + static_cast<size_t>(s) * C;
      for (int c = 0; c < C; c++) d[c] += r[c];
    }
  }
}

template <typename S>
void moe_combine(S* out, const S* expert_out, const S* weight, const int32_t* route_slot, int N,
                 int C, int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    S* o = out + static_cast<size_t>(n) * C;
    std::fill(o, o + C, S(0));
    for (int j = 0; j < k; j++) {
      const size_t nj = static_cast<size_t>(n) * k + j;
      if (route_slot[nj] < 0) continue;
      const S w = weight[nj];
      const S* y = expert_out + static_cast<size_t>(route_slot[nj]) * C;
      for (int c = 0; c < C; c++) o[c] += w * y[c];
    }
  }
}

template <typename S>
void moe_combine_backward(S* d_expert_out, S* dweight, const S* dout, const S* expert_out,
                          const S* weight, const int32_t* route_slot, int N, int C, int k) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const S* d = dout + static_cast<size_t>(n) * C;
    for (int j = 0; j < k; j++) {
      const size_t nj = static_cast<size_t>(n) * k + j;
      const int32_t s = route_slot[nj];
      if (s < 0) {
        dweight[nj] = 0;
        continue;
      }
      const S* y = expert_out + static_cast<size_t>(s) * C;
      S* dy = d_expert_out + static_cast<size_t>(s) * C;
      double dot = 0;
      for (int c = 0; c < C; c++) {
        dot += static_cast<double>(d[c]) * y[c];
        dy[c] = weight[nj] * d[c];
      }
      dweight[nj] = static_cast<S>(dot);
    }
  }
}

template <typename S>
void moe_aux_loss(S* loss, const S* probs, const int32_t* tokens_per_expert, int N, int E, int k,
                  double coeff) {
  double sum = 0;
  for (int e = 0; e < E; e++) {
    double column = 0;
    for (int n = 0; n < N; n++) column += probs[static_cast<size_t>(n) * E + e];
    sum += column * tokens_per_expert[e];
  }
  *loss = static_cast<S>(sum * coeff * E / (static_cast<double>(k) * N * N));
}

template <typename S>
void moe_route_backward(S* dlogits, const S* dweight, const S* probs, const int32_t* route,
                        const S* weight, const int32_t* tokens_per_expert, int N, int E, int k,
                        double aux_scale) {
  // d aux / d probs[n, e] = aux_scale E / (k N^2) tokens_per_expert[e], the same for every n.
  const double per_count = aux_scale * E / (static_cast<double>(k) * N * N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    S* dz = dlogits + static_cast<size_t>(n) * E;
    const S* p = probs + static_cast<size_t>(n) * E;
    // The aux loss through the softmax over all experts: p_e (g_e - sum_e' p_e' g_e').
    double mean = 0;
    for (int e = 0; e < E; e++) mean += p[e] * per_count * tokens_per_expert[e];
    for (int e = 0; e < E; e++)
      dz[e] = static_cast<S>(per_count == 0 ? 0 : p[e] * (per_count * tokens_per_expert[e] - mean));
    // The weights are the softmax over the k chosen logits: w_j (dw_j - sum_m w_m dw_m).
    const S* w = weight + static_cast<size_t>(n) * k;
    const S* dw = dweight + static_cast<size_t>(n) * k;
    double wdw = 0;
    for (int j = 0; j < k; j++) wdw += static_cast<double>(w[j]) * dw[j];
    for (int j = 0; j < k; j++)
      dz[route[static_cast<size_t>(n) * k + j]] += static_cast<S>(w[j] * (dw[j] - wdw));
  }
}

#define LATTICE_MOE_INSTANTIATE(S)                                                              \
  template void moe_route(S*, int32_t*, S*, const S*, int, int, int);                           \
  template void moe_dispatch_plan(int32_t*, int32_t*, int32_t*, int32_t*, const int32_t*,       \
                                  const S*, int, int, int, int);                                \
  template void moe_gather_rows(S*, const S*, const int32_t*, int, int);                        \
  template void moe_scatter_add_rows(S*, const S*, const int32_t*, int, int, int);              \
  template void moe_combine(S*, const S*, const S*, const int32_t*, int, int, int);             \
  template void moe_combine_backward(S*, S*, const S*, const S*, const S*, const int32_t*, int, \
                                     int, int);                                                 \
  template void moe_aux_loss(S*, const S*, const int32_t*, int, int, int, double);              \
  template void moe_route_backward(S*, const S*, const S*, const int32_t*, const S*,            \
                                   const int32_t*, int, int, int, double);
LATTICE_MOE_INSTANTIATE(float)
LATTICE_MOE_INSTANTIATE(double)
#undef LATTICE_MOE_INSTANTIATE
// The 16-bit lists' row gather (engine/src/device/cpu_ops_16bit.cpp): it moves rows only.
template void moe_gather_rows(bf16*, const bf16*, const int32_t*, int, int);
template void moe_gather_rows(fp16*, const fp16*, const int32_t*, int, int);

}  // namespace lattice::kernels
