// The linear layers' fp32 GEMM on OpenBLAS or oneDNN, whole or split over the threads, chosen per
// shape by timing each way (lattice/cpu_gemm.h; Note [fp32 GEMM choice], README.md), the choices
// kept per machine in a file (gemm_choices_file.h). Compiled once, for plain x86-64: both
// libraries pick their own kernels for the CPU at load time.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
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

// A way other than one OpenBLAS call must beat it by this factor to be chosen: OpenBLAS stays
// where the two are within the noise of a few repetitions, so that reruns on one machine mostly
// choose alike.
constexpr double kMargin = 1.05;
constexpr int kTimedRepetitions = 5;  // per way, after one warm-up call each
// Rounds after the first stop once the timing has spent this long: a large shape's few calls are
// long enough to time (a round of four ways on config B's LM head takes a second).
constexpr double kTimingBudgetSeconds = 0.25;
constexpr size_t kMaxTimedShapes = 4096;  // beyond: OpenBLAS (a server meeting endless shapes)
// A split way gives each thread at least this many rows of C; fewer rows make one band.
constexpr int kMinBandRows = 16;

#ifdef LATTICE_HAVE_ONEDNN
constexpr bool kHaveOnednn = true;
#else
constexpr bool kHaveOnednn = false;
#endif

using Sgemm = void (*)(bool, bool, int, int, int, float, const float*, int, const float*, int,
                       float, float*, int);

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

// C's rows in one band per thread (at least kMinBandRows each, band edges on multiples of 8),
// each band a single-threaded call of `sgemm` (both libraries run single-threaded inside an
// OpenMP region). Inside a region already, or with one band, one call.
void split_rows(Sgemm sgemm, bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  const int bands = std::min(num_threads(), M / kMinBandRows);
  if (bands < 2 || omp_in_parallel()) {
    sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  auto edge = [&](int band) {
    return band == bands ? M : static_cast<int>(int64_t{M} * band / bands) / 8 * 8;
  };
#pragma omp parallel num_threads(bands)
  {
    const int band = omp_get_thread_num(), m0 = edge(band), rows = edge(band + 1) - m0;
    // op(A)'s row m is A's row m, or A's column m when A is transposed.
    const float* a = ta ? A + m0 : A + static_cast<size_t>(m0) * lda;
    sgemm(ta, tb, rows, N, K, alpha, a, lda, B, ldb, beta, C + static_cast<size_t>(m0) * ldc, ldc);
  }
}

// Runs the GEMM the way `way` names (openblas for automatic); a oneDNN way only in a build with
// oneDNN (set_cpu_gemm and from_env refuse it otherwise).
void run_way(CpuGemm way, bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
             int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  switch (way) {
#ifdef LATTICE_HAVE_ONEDNN
    case CpuGemm::onednn:
      onednn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    case CpuGemm::onednn_split:
      split_rows(onednn_sgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
#endif
    case CpuGemm::openblas_split:
      split_rows(openblas_sgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    default:
      openblas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

struct EnvRequest {
  CpuGemm mode;
  std::string error;
};
EnvRequest from_env() {
  const char* env = std::getenv(kEnvVar);
  const std::string value = env ? env : "";
  // Automatic by default: on a quiet machine it ran config A 14 % faster than OpenBLAS alone
  // (docs/benchmarks.md, "Choosing the GEMM library"); the choices file keeps reruns alike.
  if (value.empty()) return {CpuGemm::automatic, ""};
  if (CpuGemm mode; cpu_gemm_from_name(value, mode)) {
    const std::string missing = uses_onednn(mode) ? onednn_sgemm_missing() : "";
    if (missing.empty()) return {mode, ""};
    return {CpuGemm::openblas, std::string(kEnvVar) + "=" + value + ": " + missing};
  }
  return {CpuGemm::openblas, std::string(kEnvVar) + "=" + value +
                                 " is not auto, openblas, onednn, openblas-split or onednn-split"};
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

// The ways the automatic mode times at this thread count: one OpenBLAS call first (the default
// a way must beat by kMargin), then oneDNN's where the build has it, then the split ways when
// there are threads to split over.
std::vector<CpuGemm> candidate_ways() {
  std::vector<CpuGemm> ways = {CpuGemm::openblas};
  if (kHaveOnednn) ways.push_back(CpuGemm::onednn);
  if (num_threads() > 1) {
    ways.push_back(CpuGemm::openblas_split);
    if (kHaveOnednn) ways.push_back(CpuGemm::onednn_split);
  }
  return ways;
}

double& rate_of(GemmChoice& c, CpuGemm way) {
  switch (way) {
    case CpuGemm::onednn:
      return c.onednn_gflops;
    case CpuGemm::openblas_split:
      return c.openblas_split_gflops;
    case CpuGemm::onednn_split:
      return c.onednn_split_gflops;
    default:
      return c.openblas_gflops;
  }
}

// Times every candidate way on the call's A and B. With beta 0 they write into C itself, which
// the winner's call then overwrites; with beta != 0 (C += ...) into a copy of C, so that the sum
// is made once. Each round starts at the next way, so that a burst of load from elsewhere falls
// on all; kTimedRepetitions rounds, fewer past kTimingBudgetSeconds. Each way is rated by its
// fastest call (load from elsewhere only ever slows a call: a burst of a few milliseconds covered
// every round of a 0.5 ms shape, and medians then chose by the burst), and the fastest way is
// chosen where it beats one OpenBLAS call by kMargin.
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
  const std::vector<CpuGemm> ways = candidate_ways();
  auto seconds = [&](CpuGemm way) {
    const auto t0 = std::chrono::steady_clock::now();
    run_way(way, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, out, ld_out);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // A warm-up call per way (packing buffers, oneDNN's kernel generation, the first touch of a
  // fresh C: config B's 197 MiB of logits made the first way's warm-up 3x slower), then the
  // rounds.
  for (CpuGemm way : ways) seconds(way);
  std::vector<std::vector<double>> times(ways.size());
  double spent = 0;
  for (int rep = 0; rep < kTimedRepetitions && (rep == 0 || spent < kTimingBudgetSeconds); rep++)
    for (size_t j = 0; j < ways.size(); j++) {
      const size_t w = (rep + j) % ways.size();
      times[w].push_back(seconds(ways[w]));
      spent += times[w].back();
    }
  GemmChoice c{num_threads(), ta, tb, M, N, K, beta != 0.0f, CpuGemm::openblas, 0, 0, 0, 0};
  for (size_t w = 0; w < ways.size(); w++)
    rate_of(c, ways[w]) =
        2.0 * M * N * K / *std::min_element(times[w].begin(), times[w].end()) / 1e9;
  for (CpuGemm way : ways)
    if (rate_of(c, way) > kMargin * c.openblas_gflops && rate_of(c, way) > rate_of(c, c.library))
      c.library = way;
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

// The way the automatic mode runs this shape: from the table, else from the choices file (Note
// [GEMM choices file]), else timed now (and written to the file). OpenBLAS where there is
// nothing to choose from (one thread in a build without oneDNN).
CpuGemm chosen_way(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc) {
  if (static_cast<double>(M) * N * K < kMinTimedGemmWork) return CpuGemm::openblas;
  if (!kHaveOnednn && num_threads() < 2) return CpuGemm::openblas;
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

}  // namespace

const char* cpu_gemm_name(CpuGemm mode) {
  switch (mode) {
    case CpuGemm::openblas:
      return "openblas";
    case CpuGemm::onednn:
      return "onednn";
    case CpuGemm::openblas_split:
      return "openblas-split";
    case CpuGemm::onednn_split:
      return "onednn-split";
    case CpuGemm::automatic:
      break;
  }
  return "auto";
}

bool cpu_gemm_from_name(const std::string& name, CpuGemm& mode) {
  for (CpuGemm m : {CpuGemm::automatic, CpuGemm::openblas, CpuGemm::onednn, CpuGemm::openblas_split,
                    CpuGemm::onednn_split})
    if (name == cpu_gemm_name(m)) {
      mode = m;
      return true;
    }
  return false;
}

bool uses_onednn(CpuGemm mode) {
  return mode == CpuGemm::onednn || mode == CpuGemm::onednn_split;
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
  if (uses_onednn(mode) && !onednn_sgemm_missing().empty()) return false;
  g_selected.store(static_cast<int>(mode), std::memory_order_relaxed);
  return true;
}

std::string cpu_gemm_env_error() {
  return from_env().error;
}

void gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) {
  CpuGemm way = cpu_gemm();
  if (M == 0 || N == 0 || K == 0) way = CpuGemm::openblas;  // an empty sum: C = beta C
  if (way == CpuGemm::automatic)
    way = chosen_way(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  run_way(way, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
