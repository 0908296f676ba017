// The fp32 GEMMs of the CPU's linear layers (Note [fp32 GEMM choice], kernels/cpu/README.md):
// by default (auto) each shape runs the way that ran it fastest when it was first seen on this
// machine: OpenBLAS's sgemm or oneDNN's dnnl_sgemm, each either one call on all threads or split
// (C's rows cut into one band per thread, a single-threaded call per band). No way wins every
// shape of a training step (docs/benchmarks.md, "Choosing the GEMM library"), so the automatic
// mode times each per (threads, transposes, M, N, K, beta) on the call's own operands and, given
// a folder (set_cpu_gemm_choices_dir), keeps the choice in a file for every later process on the
// machine (Note [GEMM choices file]). LATTICE_CPU_GEMM forces one way. fp64 GEMMs (--fp64) stay
// OpenBLAS's dgemm; attention's small per-head GEMMs stay OpenBLAS's too.
#pragma once

#include <string>
#include <vector>

namespace lattice::kernels {

// automatic: timed per shape (among the OpenBLAS ways where the build has no oneDNN); the others:
// always that way. The split ways cut C's rows into one band per thread (num_threads()) and run
// a single-threaded call of the library per band, in one OpenMP region: on small K they beat the
// library's own threading (docs/benchmarks.md, "Splitting a GEMM over the threads").
enum class CpuGemm { automatic, openblas, onednn, openblas_split, onednn_split };

// "auto", "openblas", "onednn", "openblas-split", "onednn-split": what LATTICE_CPU_GEMM takes.
const char* cpu_gemm_name(CpuGemm mode);
// The mode cpu_gemm_name gives `name`, or false for a name it never gives.
bool cpu_gemm_from_name(const std::string& name, CpuGemm& mode);
// True for onednn and onednn_split.
bool uses_onednn(CpuGemm mode);

// Empty when this build has oneDNN (-DLATTICE_WITH_ONEDNN, libdnnl-dev); otherwise why not.
std::string onednn_sgemm_missing();

// The mode in use. Until set_cpu_gemm is called: LATTICE_CPU_GEMM=openblas|onednn|auto (unset:
// auto, which is OpenBLAS in a build without oneDNN). A value that cannot be served gives
// openblas and is reported once on stderr.
CpuGemm cpu_gemm();
// Makes the linear layers' fp32 GEMMs use `mode`; false (and nothing changes) for a oneDNN way in
// a build without oneDNN. Not to be called while kernels run on other threads.
bool set_cpu_gemm(CpuGemm mode);
// Empty when LATTICE_CPU_GEMM is unset or names a mode this build runs; else a sentence naming
// the variable, its value and why (what lattice train reports before training).
std::string cpu_gemm_env_error();

// C (M, N) = alpha op(A) (M, K) @ op(B) (K, N) + beta C, row-major with leading dimensions, the
// way cpu_gemm() picks for the shape. Threads as set_num_threads (both libraries are OpenMP
// builds, follow omp_set_num_threads and run single-threaded inside an OpenMP region).
void gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc);

// One shape the automatic mode has timed, and what it chose.
struct GemmChoice {
  int threads;  // num_threads() when it was timed
  bool trans_a, trans_b;
  int M, N, K;
  bool accumulate;  // beta != 0
  CpuGemm library;  // the way chosen: openblas, onednn, openblas_split or onednn_split
  // The fastest of the timed repetitions, GFLOP/s; 0 for a way not timed (oneDNN's in a build
  // without it, the split ways at one thread).
  double openblas_gflops, onednn_gflops, openblas_split_gflops, onednn_split_gflops;
  bool remembered = false;  // read from the choices file, timed by an earlier process
};
// The shapes the automatic mode knows in this process (timed here or read from the choices
// file), in the order it learnt them.
std::vector<GemmChoice> cpu_gemm_choices();
// Forgets them (tests), so that the next call of each shape looks it up (or times it) again.
void clear_cpu_gemm_choices();

// Keeps the automatic mode's choices in gemm-choices/<machine>.tsv under `dir` (the data folder:
// lattice and its benchmarks pass default_data_dir()), read and appended under a lock shared
// by the machine's processes: a shape is timed once per machine, thread count and library
// versions, and every later process (a rerun, a resumed run, the ranks of a job) runs it on
// the same library (Note [GEMM choices file]). Empty (the default): choices live in the
// process only.
void set_cpu_gemm_choices_dir(const std::string& dir);
// The file in use, or "" when none is set.
std::string cpu_gemm_choices_file();

// Shapes with M N K below this are not timed: they run on OpenBLAS. A timing of a GEMM this
// small (under about 0.1 ms at 2 threads) is mostly call overhead and noise.
constexpr double kMinTimedGemmWork = 16.0 * 1024 * 1024;
// An accumulating GEMM (beta != 0) is timed on a copy of C; one whose C is larger than this
// (config B's LM head gradient: 147 MiB) is not timed and runs on OpenBLAS, so that the first
// step's peak memory stays what the planner counts (docs/benchmarks.md, "Memory").
constexpr double kMaxTimedCopyBytes = 16.0 * 1024 * 1024;

}  // namespace lattice::kernels
