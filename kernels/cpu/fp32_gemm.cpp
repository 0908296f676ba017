// The linear layers' fp32 GEMM on OpenBLAS or oneDNN, chosen per shape by timing both
// (lattice/cpu_gemm.h; Note [fp32 GEMM choice], README.md), the choices kept per machine in a
// file (gemm_choices_file.h). Compiled once, for plain x86-64: both libraries pick their own
// kernels for the CPU at load time.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gemm_choices_file.h"
#include "lattice/cpu_gemm.h"
#include "lattice/kernels.h"

#ifdef LATTICE_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace lattice::kernels {
namespace {

constexpr const char* kEnvVar = "LATTICE_CPU_GEMM";

// oneDNN must beat OpenBLAS by this factor to be chosen: OpenBLAS stays where the two are within
// the noise of a few repetitions, so that reruns on one machine mostly choose alike.
constexpr double kOnednnMargin = 1.05;
constexpr int kTimedRepetitions = 3;      // per library, after one warm-up call each
constexpr size_t kMaxTimedShapes = 4096;  // beyond: OpenBLAS (a server meeting endless shapes)

void openblas_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#ifdef LATTICE_HAVE_ONEDNN
// dnnl_sgemm is row-major, as cblas_sgemm with CblasRowMajor.
void onednn_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  const dnnl_status_t status =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (status != dnnl_success) {
    std::fprintf(stderr, "lattice: dnnl_sgemm failed (status %d) for M %d N %d K %d\n",
                 static_cast<int>(status), M, N, K);
    std::abort();
  }
}
#endif

struct EnvRequest {
  CpuGemm mode;
  std::string error;
};
EnvRequest from_env() {
  const char* env = std::getenv(kEnvVar);
  const std::string value = env ? env : "";
  // Automatic by default: on a quiet machine it ran config A 14 % faster than OpenBLAS alone
  // (docs/benchmarks.md, "Choosing the GEMM library"); the choices file keeps reruns alike.
  if (value.empty() || value == "auto") return {CpuGemm::automatic, ""};
  if (value == "openblas") return {CpuGemm::openblas, ""};
  if (value == "onednn") {
    const std::string missing = onednn_sgemm_missing();
    if (missing.empty()) return {CpuGemm::onednn, ""};
    return {CpuGemm::openblas, std::string(kEnvVar) + "=onednn: " + missing};
  }
  return {CpuGemm::openblas,
          std::string(kEnvVar) + "=" + value + " is not openblas, onednn or auto"};
}

std::atomic<int> g_selected{-1};  // a CpuGemm once set, else -1

// The automatic mode's table. `mutex` guards `choices` and `file`; `timing` lets one thread
// time at a time (two timings at once would each see the other's load), while shapes already
// in the table go on running on other threads (pipeline stages of one process).
using Key = std::tuple<int, bool, bool, int, int, int, bool>;
Key key_of(const GemmChoice& c) {
  return {c.threads, c.trans_a, c.trans_b, c.M, c.N, c.K, c.accumulate};
}
struct Table {
  std::mutex mutex, timing;
  std::map<Key, size_t> index;  // into choices
  std::vector<GemmChoice> choices;
  std::string file;     // the choices file, "" for none
  bool warned = false;  // a problem with the file reported (once per process)
  void add(const GemmChoice& c) {
    if (index.emplace(key_of(c), choices.size()).second) choices.push_back(c);
  }
};
Table& table() {
  static Table t;
  return t;
}

#ifdef LATTICE_HAVE_ONEDNN
// Times both libraries on the call's A and B. With beta 0 they write into C itself, which the
// winner's call then overwrites; with beta != 0 (C += ...) into a copy of C, so that the sum is
// made once. Rounds alternate which library goes first, so that a burst of load from elsewhere
// falls on both.
GemmChoice time_shape(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  std::vector<float> copy;
  float* out = C;
  int ld_out = ldc;
  if (beta != 0.0f) {
    copy.resize(static_cast<size_t>(M) * N);
    for (int m = 0; m < M; m++)
      std::memcpy(copy.data() + static_cast<size_t>(m) * N, C + static_cast<size_t>(m) * ldc,
                  N * sizeof(float));
    out = copy.data(), ld_out = N;
  }
  using Fn = void (*)(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
                      float*, int);
  const Fn fns[2] = {openblas_sgemm, onednn_sgemm};
  auto seconds = [&](Fn fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, out, ld_out);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (Fn fn : fns) seconds(fn);  // warm-up: packing buffers, oneDNN's kernel generation
  std::vector<double> times[2];
  for (int rep = 0; rep < kTimedRepetitions; rep++)
    for (int j = 0; j < 2; j++) {
      const int lib = (rep + j) % 2;
      times[lib].push_back(seconds(fns[lib]));
    }
  auto gflops = [&](std::vector<double>& t) {
    std::sort(t.begin(), t.end());
    return 2.0 * M * N * K / t[t.size() / 2] / 1e9;
  };
  GemmChoice c{num_threads(),   ta, tb, M, N, K, beta != 0.0f, CpuGemm::openblas, gflops(times[0]),
               gflops(times[1])};
  if (c.onednn_gflops > kOnednnMargin * c.openblas_gflops) c.library = CpuGemm::onednn;
  return c;
}

// Reports a problem with the choices file once per process, in one sentence.
void warn_once(Table& t, const std::string& problem) {
  std::lock_guard lock(t.mutex);
  if (t.warned) return;
  t.warned = true;
  std::fprintf(stderr, "lattice: %s; fp32 GEMM shapes not in it are timed in this process\n",
               problem.c_str());
}

// The library the automatic mode runs this shape on: from the table, else from the choices
// file (Note [GEMM choices file]), else timed now (and written to the file).
CpuGemm chosen_library(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                       const float* B, int ldb, float beta, float* C, int ldc) {
  if (static_cast<double>(M) * N * K < kMinTimedGemmWork) return CpuGemm::openblas;
  if (beta != 0.0f && static_cast<double>(M) * N * sizeof(float) > kMaxTimedCopyBytes)
    return CpuGemm::openblas;
  Table& t = table();
  const Key key{num_threads(), ta, tb, M, N, K, beta != 0.0f};
  std::string file;
  {
    std::lock_guard lock(t.mutex);
    auto it = t.index.find(key);
    if (it != t.index.end()) return t.choices[it->second].library;
    if (t.choices.size() >= kMaxTimedShapes) return CpuGemm::openblas;
    file = t.file;
  }
  std::lock_guard timing(t.timing);
  // The other processes' choices, read under the file's lock, which stays held while this one
  // times, so that a shape is timed once per machine and no other process's timing runs beside.
  std::optional<cpu::LockedChoicesFile> locked;
  if (!file.empty()) {
    locked.emplace(file);
    if (!locked->ok()) {
      warn_once(t, locked->problem());
      locked.reset();
    } else {
      if (!locked->skipped().empty())
        warn_once(t, "skipped malformed lines in " + locked->skipped().front() +
                         (locked->skipped().size() > 1 ? " and others" : ""));
      std::lock_guard lock(t.mutex);
      for (const GemmChoice& c : locked->rows())
        if (t.choices.size() < kMaxTimedShapes) t.add(c);
    }
  }
  {
    std::lock_guard lock(t.mutex);  // another thread or process may have timed it meanwhile
    auto it = t.index.find(key);
    if (it != t.index.end()) return t.choices[it->second].library;
  }
  const GemmChoice c = time_shape(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (locked && !locked->append(c)) warn_once(t, locked->problem());
  std::lock_guard lock(t.mutex);
  t.add(c);
  return c.library;
}
#endif

}  // namespace

const char* cpu_gemm_name(CpuGemm mode) {
  switch (mode) {
    case CpuGemm::openblas:
      return "openblas";
    case CpuGemm::onednn:
      return "onednn";
    case CpuGemm::automatic:
      break;
  }
  return "auto";
}

std::string onednn_sgemm_missing() {
#ifdef LATTICE_HAVE_ONEDNN
  return "";
#else
  return "this build has no oneDNN (build with libdnnl-dev installed, -DLATTICE_WITH_ONEDNN)";
#endif
}

CpuGemm cpu_gemm() {
  const int selected = g_selected.load(std::memory_order_relaxed);
  if (selected >= 0) return static_cast<CpuGemm>(selected);
  static const CpuGemm initial = [] {
    EnvRequest r = from_env();
    if (!r.error.empty())
      std::fprintf(stderr, "lattice: %s; fp32 GEMMs: %s\n", r.error.c_str(), cpu_gemm_name(r.mode));
    return r.mode;
  }();
  return initial;
}

bool set_cpu_gemm(CpuGemm mode) {
  if (mode == CpuGemm::onednn && !onednn_sgemm_missing().empty()) return false;
  g_selected.store(static_cast<int>(mode), std::memory_order_relaxed);
  return true;
}

std::string cpu_gemm_env_error() {
  return from_env().error;
}

void gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) {
#ifdef LATTICE_HAVE_ONEDNN
  CpuGemm library = cpu_gemm();
  if (M == 0 || N == 0 || K == 0) library = CpuGemm::openblas;  // an empty sum: C = beta C
  if (library == CpuGemm::automatic)
    library = chosen_library(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (library == CpuGemm::onednn) {
    onednn_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  openblas_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

std::vector<GemmChoice> cpu_gemm_choices() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  return t.choices;
}

void set_cpu_gemm_choices_dir(const std::string& dir) {
  Table& t = table();
  const std::string file = dir.empty() ? "" : cpu::gemm_choices_path(dir);
  std::lock_guard timing(t.timing);
  std::lock_guard lock(t.mutex);
  t.file = file;
  t.warned = false;
}

std::string cpu_gemm_choices_file() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  return t.file;
}

void clear_cpu_gemm_choices() {
  Table& t = table();
  std::lock_guard timing(t.timing);
  std::lock_guard lock(t.mutex);
  t.index.clear();
  t.choices.clear();
}

}  // namespace lattice::kernels
