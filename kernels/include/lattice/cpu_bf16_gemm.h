// bf16 GEMMs on the CPU for --bf16 (Note [bf16 GEMMs], kernels/cpu/README.md): oneDNN's matmul
// on bf16 inputs with fp32 accumulation, where the build has oneDNN (-DLATTICE_WITH_ONEDNN) and
// the CPU has AVX512_BF16 or AMX-BF16. The CPU's bf16 op list (engine/src/device/
// cpu_ops_16bit.cpp) calls it for its linear layers; elsewhere it keeps the float GEMM on
// widened copies.
#pragma once

#include <string>

#include "lattice/dtype.h"

namespace lattice::kernels {

// How the CPU's bf16 op list runs its GEMMs: through oneDNN's bf16 matmul, or OpenBLAS's sgemm
// on widened (fp32) copies of the bf16 operands. none: neither is offered to users (--bf16 on
// the CPU is refused), which is the default where oneDNN cannot run bf16 on this CPU.
enum class Bf16Gemm { none, onednn, widened };

// "none", "onednn", "widened".
const char* bf16_gemm_name(Bf16Gemm path);

// Empty when this build has oneDNN and the CPU has AVX512_BF16 or AMX-BF16 (cpuid, and the
// AVX-512 register state saved by the OS); otherwise the reason, one clause.
std::string onednn_bf16_missing();

// The path in use. Until set_bf16_gemm is called: LATTICE_CPU_BF16_GEMM=onednn|widened|auto
// (auto or unset: onednn where onednn_bf16_missing() is empty, else none). An onednn request
// that cannot be served gives none and is reported once on stderr.
Bf16Gemm bf16_gemm();
// Makes the bf16 op list use `path`; false (and nothing changes) for onednn where it cannot run.
// Not to be called while kernels run on other threads.
bool set_bf16_gemm(Bf16Gemm path);
// Empty when LATTICE_CPU_BF16_GEMM is unset or names a path this machine runs; else a sentence
// naming the variable, its value and why (what lattice train reports before training).
std::string bf16_gemm_env_error();

// C (M, N) = op(A) (M, K) @ op(B) (K, N) + beta C, row-major with leading dimensions; A and B
// bf16, C float; the products are exact in fp32 and summed in fp32 (cuBLASLt's bf16 contract
// with CUBLAS_COMPUTE_32F). beta is 0 or 1. Only when onednn_bf16_missing() is empty; threads
// as set_num_threads.
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc);

}  // namespace lattice::kernels
