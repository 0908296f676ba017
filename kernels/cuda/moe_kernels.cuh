// The mixture-of-experts kernels (launchers in moe.cu; kernels.h's moe_* ops, Note [MoE layer] in
// engine/src/model/gpt_moe.cpp), kept apart so that tests/kernels/cuda/test_kernels_emulated.cpp
// also runs them on the CPU under host_emulation.h.
//
// Note [deterministic MoE kernels]: every kernel gives the CPU ops' (kernels/cpu/moe.cpp) numbers,
// not merely close ones: each sum is formed by one thread in the CPU's order and precision
// (double where the CPU uses double; a product and the sum it enters written with __fmul_rn /
// __fadd_rn or their double twins, which nvcc does not fuse into an FMA as it would a * b + c),
// and no float atomics. The
// dispatch plan is the CPU's exactly: one block per expert scans the routes in token order (a
// block-wide prefix sum of "kept" flags per chunk), and the capacity drop keeps the routes of
// the `capacity` largest keys (weight, then lower route index: the CPU's stable sort) by
// finding the capacity-th largest key bit by bit, 64 block-wide counts. The only difference
// left is the device's exp(double) against the host's (at most an ulp of a double, which the
// float results round away nearly always).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#include "common.cuh"
#endif

namespace lattice::kernels::cuda {
namespace {

inline constexpr int kMoePlanThreads = 256;  // the dispatch plan's block (at most this many)

// probs (N, E) = softmax(logits) in double; route (N, k) = the top-k experts by logit (ties: the
// lower expert), weight (N, k) = their probs renormalised over the k. One thread per token.
template <typename T>
__global__ void moe_route_kernel(float* probs, int32_t* route, float* weight, const T* logits,
                                 int N, int E, int k) {
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
    const T* z = logits + static_cast<size_t>(n) * E;
    float* p = probs + static_cast<size_t>(n) * E;
    double max = to_float(z[0]);
    for (int e = 1; e < E; e++) {
      const double v = to_float(z[e]);
      max = max < v ? v : max;
    }
    double sum = 0;
    for (int e = 0; e < E; e++) sum += exp(to_float(z[e]) - max);
    for (int e = 0; e < E; e++) p[e] = static_cast<float>(exp(to_float(z[e]) - max) / sum);
    // The j-th pick is the first expert, in the order (logit descending, id ascending), after
    // the (j-1)-th: the CPU's partial sort under that total order.
    int32_t* r = route + static_cast<size_t>(n) * k;
    double top = 0;
    for (int j = 0, prev = -1; j < k; j++) {
      int best = -1;
      for (int e = 0; e < E; e++) {
        const float ze = to_float(z[e]);
        if (prev >= 0) {
          const float zp = to_float(z[prev]);
          if (!(zp > ze || (zp == ze && prev < e))) continue;  // not after prev
        }
        if (best < 0) {
          best = e;
        } else {
          const float zb = to_float(z[best]);
          if (ze > zb || (ze == zb && e < best)) best = e;
        }
      }
      r[j] = best;
      prev = best;
      top += exp(to_float(z[best]) - max);
    }
    for (int j = 0; j < k; j++)
      weight[static_cast<size_t>(n) * k + j] =
          static_cast<float>(exp(to_float(z[r[j]]) - max) / top);
  }
}

// The block's sum of v; every thread gets it. buf: kMoePlanThreads ints of shared memory.
__device__ __forceinline__ int moe_block_sum(int v, int* buf) {
  const int t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) buf[t] += buf[t + half];
    __syncthreads();
  }
  const int total = buf[0];
  __syncthreads();
  return total;
}

// The inclusive prefix sum of v over the block's threads (Hillis-Steele); *total the block's
// sum. buf: kMoePlanThreads ints of shared memory.
__device__ __forceinline__ int moe_block_scan(int v, int* buf, int* total) {
  const int t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (int offset = 1; offset < static_cast<int>(blockDim.x); offset *= 2) {
    const int add = t >= offset ? buf[t - offset] : 0;
    __syncthreads();
    buf[t] += add;
    __syncthreads();
  }
  const int mine = buf[t];
  *total = buf[blockDim.x - 1];
  __syncthreads();
  return mine;
}

// The order in which the capacity drop keeps routes, as one 64-bit key (larger: kept first):
// the weight's bits made monotone, then the lower route index.
__device__ __forceinline__ unsigned long long moe_drop_key(float w, int nj) {
  uint32_t bits;
  memcpy(&bits, &w, sizeof bits);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<unsigned long long>(bits) << 32) | (0xffffffffu - static_cast<uint32_t>(nj));
}

// Block e (grid E, blockDim a power of two <= kMoePlanThreads): tokens_per_expert[e], counts[e]
// and, when e overflows `capacity` (> 0), threshold[e] = the capacity-th largest drop key of its
// routes (the kept ones are those at or above it; keys are distinct).
__global__ void moe_plan_count_kernel(int32_t* tokens_per_expert, int32_t* counts,
                                      unsigned long long* threshold, const int32_t* route,
                                      const float* weight, int NK, int capacity) {
  __shared__ int buf[kMoePlanThreads];
  const int e = blockIdx.x;
  int mine = 0;
  for (int i = threadIdx.x; i < NK; i += blockDim.x) mine += route[i] == e;
  const int total = moe_block_sum(mine, buf);
  const bool drop = capacity > 0 && total > capacity;
  if (threadIdx.x == 0) {
    tokens_per_expert[e] = total;
    counts[e] = drop ? capacity : total;
  }
  if (!drop) return;  // the same for the whole block
  unsigned long long at_least = 0;  // every bit decided so far: count(key >= at_least) >= capacity
  for (int bit = 63; bit >= 0; bit--) {
    const unsigned long long candidate = at_least | (1ull << bit);
    int above = 0;
    for (int i = threadIdx.x; i < NK; i += blockDim.x)
      above += route[i] == e && moe_drop_key(weight[i], i) >= candidate;
    if (moe_block_sum(above, buf) >= capacity) at_least = candidate;
  }
  if (threadIdx.x == 0) threshold[e] = at_least;
}

// Block e: its kept routes' slots, from sum(counts[< e]) on in route (= token) order:
// route_slot[nj] = the slot or -1 (dropped), slot_row[slot] = nj / k.
__global__ void moe_plan_assign_kernel(int32_t* route_slot, int32_t* slot_row,
                                       const int32_t* tokens_per_expert, const int32_t* counts,
                                       const unsigned long long* threshold, const int32_t* route,
                                       const float* weight, int NK, int k, int capacity) {
  __shared__ int buf[kMoePlanThreads];
  const int e = blockIdx.x;
  int base = 0;
  for (int x = 0; x < e; x++) base += counts[x];
  const bool drop = capacity > 0 && tokens_per_expert[e] > capacity;
  const unsigned long long at_least = drop ? threshold[e] : 0;
  for (int start = 0; start < NK; start += blockDim.x) {
    const int i = start + threadIdx.x;
    const bool mine = i < NK && route[i] == e;
    const bool keep = mine && (!drop || moe_drop_key(weight[i], i) >= at_least);
    int chunk = 0;
    const int rank = moe_block_scan(keep ? 1 : 0, buf, &chunk);
    if (mine) route_slot[i] = keep ? base + rank - 1 : -1;
    if (keep) slot_row[base + rank - 1] = i / k;
    base += chunk;
  }
}

// out (rows, C): row s = inp's row slot_row[s].
template <typename T>
__global__ void moe_gather_rows_kernel(T* out, const T* inp, const int32_t* slot_row, int rows,
                                       int C) {
  const size_t n = static_cast<size_t>(rows) * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = inp[static_cast<size_t>(slot_row[i / C]) * C + i % C];
}

// dinp (N, C) += each kept route's row of d_rows, routes in order j (one thread per element).
template <typename T>
__global__ void moe_scatter_add_rows_kernel(T* dinp, const T* d_rows, const int32_t* route_slot,
                                            int N, int C, int k) {
  const size_t n_all = static_cast<size_t>(N) * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n_all;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = i / C, c = i % C;
    float d = to_float(dinp[i]);
    for (int j = 0; j < k; j++) {
      const int32_t s = route_slot[n * k + j];
      if (s >= 0) d = __fadd_rn(d, to_float(d_rows[static_cast<size_t>(s) * C + c]));
    }
    dinp[i] = from_float<T>(d);
  }
}

// out (N, C) = sum over the kept routes j of weight[n, j] expert_out[route_slot[n, j]].
template <typename T>
__global__ void moe_combine_kernel(T* out, const T* expert_out, const float* weight,
                                   const int32_t* route_slot, int N, int C, int k) {
  const size_t n_all = static_cast<size_t>(N) * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n_all;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t n = i / C, c = i % C;
    float o = 0.0f;
    for (int j = 0; j < k; j++) {
      const int32_t s = route_slot[n * k + j];
      if (s < 0) continue;
      o = __fadd_rn(o, __fmul_rn(weight[n * k + j],
                                 to_float(expert_out[static_cast<size_t>(s) * C + c])));
    }
    out[i] = from_float<T>(o);
  }
}

// dweight (N, k) = dout[n] . expert_out[route_slot[n, j]] in double, c in order; 0 where
// dropped. One thread per route.
template <typename T>
__global__ void moe_combine_dweight_kernel(float* dweight, const T* dout, const T* expert_out,
                                           const int32_t* route_slot, int N, int C, int k) {
  for (int nj = blockIdx.x * blockDim.x + threadIdx.x; nj < N * k; nj += gridDim.x * blockDim.x) {
    const int32_t s = route_slot[nj];
    if (s < 0) {
      dweight[nj] = 0.0f;
      continue;
    }
    const T* d = dout + static_cast<size_t>(nj / k) * C;
    const T* y = expert_out + static_cast<size_t>(s) * C;
    double dot = 0;  // float x float is exact in double: an FMA gives the same sum
    for (int c = 0; c < C; c++)
      dot += static_cast<double>(to_float(d[c])) * static_cast<double>(to_float(y[c]));
    dweight[nj] = static_cast<float>(dot);
  }
}

// d_expert_out's row route_slot[n, j] = weight[n, j] dout[n] for each kept route.
template <typename T>
__global__ void moe_combine_d_rows_kernel(T* d_expert_out, const T* dout, const float* weight,
                                          const int32_t* route_slot, int N, int C, int k) {
  const size_t n_all = static_cast<size_t>(N) * k * C;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n_all;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t nj = i / C, c = i % C;
    const int32_t s = route_slot[nj];
    if (s < 0) continue;
    d_expert_out[static_cast<size_t>(s) * C + c] =
        from_float<T>(__fmul_rn(weight[nj], to_float(dout[nj / k * C + c])));
  }
}

// column (E) = sum over n of probs[n, e] in double, n in order (one thread per expert).
__global__ void moe_aux_columns_kernel(double* column, const float* probs, int N, int E) {
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < E; e += gridDim.x * blockDim.x) {
    double sum = 0;
    for (int n = 0; n < N; n++) sum += probs[static_cast<size_t>(n) * E + e];
    column[e] = sum;
  }
}

// *loss = coeff E / (k N^2) sum_e column[e] tokens_per_expert[e] (one thread, e in order).
__global__ void moe_aux_total_kernel(float* loss, const double* column,
                                     const int32_t* tokens_per_expert, int N, int E, int k,
                                     double coeff) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double sum = 0;
  for (int e = 0; e < E; e++) sum = __dadd_rn(sum, __dmul_rn(column[e], tokens_per_expert[e]));
  *loss = static_cast<float>(sum * coeff * E / (static_cast<double>(k) * N * N));
}

// dlogits (N, E): the aux loss's gradient through the softmax over all experts plus the
// weights' through the softmax over the k chosen, each element summed in the CPU's order (its
// float result, then + the chosen route's float term) and stored once. One thread per token.
template <typename T>
__global__ void moe_route_backward_kernel(T* dlogits, const float* dweight, const float* probs,
                                          const int32_t* route, const float* weight,
                                          const int32_t* tokens_per_expert, int N, int E, int k,
                                          double aux_scale) {
  const double per_count = aux_scale * E / (static_cast<double>(k) * N * N);
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
    const float* p = probs + static_cast<size_t>(n) * E;
    const float* w = weight + static_cast<size_t>(n) * k;
    const float* dw = dweight + static_cast<size_t>(n) * k;
    const int32_t* r = route + static_cast<size_t>(n) * k;
    double mean = 0;
    for (int e = 0; e < E; e++)
      mean = __dadd_rn(mean, __dmul_rn(p[e] * per_count, tokens_per_expert[e]));
    double wdw = 0;
    for (int j = 0; j < k; j++) wdw += static_cast<double>(w[j]) * dw[j];
    for (int e = 0; e < E; e++) {
      const double g = __dadd_rn(__dmul_rn(per_count, tokens_per_expert[e]), -mean);
      float dz = static_cast<float>(per_count == 0 ? 0 : p[e] * g);
      for (int j = 0; j < k; j++)
        if (r[j] == e) dz = __fadd_rn(dz, static_cast<float>(w[j] * (dw[j] - wdw)));
      dlogits[static_cast<size_t>(n) * E + e] = from_float<T>(dz);
    }
  }
}

}  // namespace
}  // namespace lattice::kernels::cuda
