// Linear layers as GEMM: out = inp @ weight^T + bias, weights stored (out, in) as Megatron.
// The float GEMMs run on OpenBLAS or oneDNN, chosen per shape (Note [fp32 GEMM choice]).
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
  T beta = 0;
  if (bias) {
#pragma omp parallel for schedule(static) if (size_t(N) * OC >= cpu::kMinParallelWork)
    for (int n = 0; n < N; n++) std::copy(bias, bias + OC, out + static_cast<size_t>(n) * OC);
    beta = 1;
  }
  cpu::linear_gemm(false, true, N, OC, C, T(1), inp, C, weight, C, beta, out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  if (dinp) cpu::linear_gemm(false, false, N, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C);
  if (dweight) cpu::linear_gemm(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  if (dbias) {
    thread_local std::vector<T> ones;
    if (ones.size() < static_cast<size_t>(N)) ones.assign(N, T(1));
    cpu::gemv(true, N, OC, T(1), dout, OC, ones.data(), T(1), dbias);
  }
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
