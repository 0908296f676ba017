// Row-major GEMM over cblas for float and double; private to the CPU kernels.
#pragma once

#include <cblas.h>

#include "lattice/cpu_gemm.h"

namespace lattice::kernels::cpu {

// C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, all row-major with leading dims.
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                 int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// The linear layers' GEMMs (matmul.cpp): float on the library chosen per shape (OpenBLAS or
// oneDNN, Note [fp32 GEMM choice], README.md), double on OpenBLAS's dgemm. Same contract as gemm.
inline void linear_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                        const float* A, int lda, const float* B, int ldb, float beta, float* C,
                        int ldc) {
  gemm_f32(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void linear_gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha,
                        const double* A, int lda, const double* B, int ldb, double beta, double* C,
                        int ldc) {
  gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// y (M) = alpha * op(A) x + beta * y, A (rows, cols) row-major.
inline void gemv(bool trans, int rows, int cols, float alpha, const float* A, int lda,
                 const float* x, float beta, float* y) {
  cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, rows, cols, alpha, A, lda, x, 1,
              beta, y, 1);
}
inline void gemv(bool trans, int rows, int cols, double alpha, const double* A, int lda,
                 const double* x, double beta, double* y) {
  cblas_dgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, rows, cols, alpha, A, lda, x, 1,
              beta, y, 1);
}

}  // namespace lattice::kernels::cpu
