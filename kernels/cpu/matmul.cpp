// Linear layers as GEMM: out = inp @ weight^T + bias, weights stored (out, in) as Megatron.
// The float GEMMs run on OpenBLAS or oneDNN, chosen per shape (Note [fp32 GEMM choice]).
#include <omp.h>

#include <algorithm>
#include <vector>

#include "gemm.h"
#include "lattice/kernels.h"
#include "parallel.h"

LATTICE_ISA_BEGIN

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  if (N == 1) {
    // One row (a decoding step at batch 1): BLAS's GEMV streams the weights once, where GEMM
    // with M = 1 packs them first; 2-3x faster here (docs/inference.md "Figures").
    if (bias) std::copy(bias, bias + OC, out);
    cpu::gemv(false, OC, C, T(1), weight, C, inp, bias ? T(1) : T(0), out);
    return;
  }
  // Note [bias rows]: the rows start as the bias, filled inside the GEMM's own bands.
  cpu::linear_gemm(false, true, N, OC, C, T(1), inp, C, weight, C, T(0), out, OC, bias);
}

// dbias (OC) += the sum of dout's N rows. Each thread sums one band of rows (the static
// partition, so a split GEMM's band is read on the thread whose cache holds it) into its own
// partial, and the partials are added in thread order (a fixed order for a thread count).
template <typename T>
void add_column_sums(T* dbias, const T* dout, int N, int OC) {
  const int threads = size_t(N) * OC >= cpu::kMinParallelWork ? num_threads() : 1;
  std::vector<T> partial(static_cast<size_t>(threads) * OC, T(0));  // (threads, OC)
#pragma omp parallel num_threads(threads)
  {
    T* p = partial.data() + static_cast<size_t>(omp_get_thread_num()) * OC;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const T* row = dout + static_cast<size_t>(n) * OC;
#pragma omp simd
      for (int i = 0; i < OC; i++) p[i] += row[i];
    }
  }
  for (int t = 0; t < threads; t++) {
    const T* p = partial.data() + static_cast<size_t>(t) * OC;
#pragma omp simd
    for (int i = 0; i < OC; i++) dbias[i] += p[i];
  }
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  if (dinp) cpu::linear_gemm(false, false, N, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C);
  if (dweight) cpu::linear_gemm(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

template <typename T>
void add_bias(T* out, const T* bias, int N, int OC) {
#pragma omp parallel for schedule(static) if (size_t(N) * OC >= cpu::kMinParallelWork)
  for (int n = 0; n < N; n++) {
    T* o = out + static_cast<size_t>(n) * OC;
#pragma omp simd
    for (int i = 0; i < OC; i++) o[i] += bias[i];
  }
}

template void add_bias(float*, const float*, int, int);
template void add_bias(double*, const double*, int, int);
template void matmul_forward(float*, const float*, const float*, const float*, int, int, int);
template void matmul_forward(double*, const double*, const double*, const double*, int, int, int);
template void matmul_backward(float*, float*, float*, const float*, const float*, const float*, int,
                              int, int);
template void matmul_backward(double*, double*, double*, const double*, const double*,
                              const double*, int, int, int);

LATTICE_ISA_END
