// lattice-bench-gemm: float GEMM rates of the shapes config B trains with (N = 1024 tokens,
// C = 768, F = 3072, V = 50304), or config A's with --config A (C = 256, F = 1024, V = 8192),
// for each BLAS library present, side by side in one run.
// Libraries are loaded with dlopen(RTLD_LOCAL) so that their cblas symbols cannot collide:
// OpenBLAS (OpenMP and pthread builds), BLIS (OpenMP build) and oneDNN's dnnl_sgemm.
// This is how Lattice picked its CPU GEMM (docs/benchmarks.md). Row-major throughout.
// Under the names, the kernels each library picked (its core, sub-configuration or instruction
// set): a library's environment variable caps it, not another's. Last column, where the CPU has
// AVX512_BF16 or AMX-BF16 and the build oneDNN: the engine's own bf16 GEMM (kernels::gemm_bf16:
// bf16 operands, fp32 sums and output), what --bf16 runs on the CPU (Note [bf16 GEMMs],
// kernels/cpu/README.md).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "lattice/cpu_bf16_gemm.h"
#include "lattice/kernels.h"

namespace {

// Every backend is driven through one row-major signature.
using Gemm = void (*)(void* fn, bool ta, bool tb, int M, int N, int K, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc);

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS enum values
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);
void call_cblas(void* fn, bool ta, bool tb, int M, int N, int K, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc) {
  reinterpret_cast<CblasSgemm>(fn)(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, M, N,
                                   K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}
using DnnlSgemm = int (*)(char, char, long, long, long, float, const float*, long, const float*,
                          long, float, float*, long);
void call_dnnl(void* fn, bool ta, bool tb, int M, int N, int K, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
  reinterpret_cast<DnnlSgemm>(fn)(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb,
                                  beta, C, ldc);
}

// The kernels a library picked on this CPU, as far as its environment lets it (OPENBLAS_CORETYPE,
// BLIS_ARCH_TYPE, ONEDNN_MAX_CPU_ISA): OpenBLAS's core, BLIS's sub-configuration, oneDNN's
// instruction set; "?" where the library does not say.
std::string openblas_kernel(void* h) {
  auto name = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"));
  return name ? name() : "?";
}
std::string blis_kernel(void* h) {
  auto id = reinterpret_cast<int (*)()>(dlsym(h, "bli_arch_query_id"));
  auto name = reinterpret_cast<const char* (*)(int)>(dlsym(h, "bli_arch_string"));
  return id && name ? name(id()) : "?";
}
std::string dnnl_kernel(void* h) {
  auto isa = reinterpret_cast<int (*)()>(dlsym(h, "dnnl_get_effective_cpu_isa"));
  if (!isa) return "?";
  const int value = isa();
  // dnnl_cpu_isa_t (oneapi/dnnl/dnnl_types.h): each a set of bits over the one below it.
  const struct {
    int bits;
    const char* name;
  } names[] = {{0x3e7, "avx512_core_amx"}, {0xe7, "avx512_core_bf16"},
               {0x67, "avx512_core_vnni"}, {0x27, "avx512_core"},
               {0x407, "avx2_vnni"},       {0x7, "avx2"},
               {0x3, "avx"},               {0x1, "sse41"}};
  for (const auto& n : names)
    if (value == n.bits) return n.name;
  return "isa " + std::to_string(value);
}

struct Backend {
  std::string name, library, symbol, threads_symbol;
  Gemm call;
  std::string (*kernel)(void* handle);
  void* fn = nullptr;
  std::string picked = "";  // kernel(handle)
};

struct Shape {
  const char* name;
  bool ta, tb;
  int M, N, K;
  float beta;
};

double rate(const Backend& b, const Shape& s) {
  std::vector<float> A(static_cast<size_t>(s.M) * s.K, 0.01f),
      B(static_cast<size_t>(s.K) * s.N, 0.02f), C(static_cast<size_t>(s.M) * s.N, 0.0f);
  const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  std::vector<double> rates;
  for (int rep = 0; rep < 6; rep++) {
    const auto t0 = std::chrono::steady_clock::now();
    b.call(b.fn, s.ta, s.tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, s.beta, C.data(), s.N);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) rates.push_back(2.0 * s.M * s.N * s.K / sec / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];  // median of 5 after one warm-up
}

// The engine's bf16 GEMM on the shape, same timing as rate().
double rate_bf16(const Shape& s) {
  using lattice::bf16;
  std::vector<bf16> A(static_cast<size_t>(s.M) * s.K, lattice::to_bf16(0.01f)),
      B(static_cast<size_t>(s.K) * s.N, lattice::to_bf16(0.02f));
  std::vector<float> C(static_cast<size_t>(s.M) * s.N, 0.0f);
  const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  std::vector<double> rates;
  for (int rep = 0; rep < 6; rep++) {
    const auto t0 = std::chrono::steady_clock::now();
    lattice::kernels::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, s.beta,
                                C.data(), s.N);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) rates.push_back(2.0 * s.M * s.N * s.K / sec / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::string config = "B";
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) {
      config = argv[++i];
    } else if (!a.empty() && a.find_first_not_of("0123456789") == std::string::npos) {
      threads = std::atoi(a.c_str());
    } else {
      std::fprintf(stderr, "usage: lattice-bench-gemm [THREADS] [--config A|B]\n");
      return 2;
    }
  }
  if (config != "A" && config != "B") {
    std::fprintf(stderr, "lattice-bench-gemm: --config %s is not A or B\n", config.c_str());
    return 2;
  }
  const std::string dir = "/usr/lib/x86_64-linux-gnu/";
  std::vector<Backend> backends = {
      {"OpenBLAS (OpenMP)", dir + "openblas-openmp/libopenblas.so.0", "cblas_sgemm",
       "openblas_set_num_threads", call_cblas, openblas_kernel},
      {"OpenBLAS (pthread)", dir + "openblas-pthread/libopenblas.so.0", "cblas_sgemm",
       "openblas_set_num_threads", call_cblas, openblas_kernel},
      {"BLIS (OpenMP)", dir + "blis-openmp/libblis.so.4", "cblas_sgemm",
       "bli_thread_set_num_threads", call_cblas, blis_kernel},
      {"oneDNN", dir + "libdnnl.so.2", "dnnl_sgemm", "", call_dnnl, dnnl_kernel},
  };
  const bool a = config == "A";
  const int N = 1024, C = a ? 256 : 768, F = 4 * C, V = a ? 8192 : 50304;
  const Shape shapes[] = {
      {"qkv forward", false, true, N, 3 * C, C, 1}, {"fc1 forward", false, true, N, F, C, 1},
      {"fc2 forward", false, true, N, C, F, 1},     {"fc1 dinput", false, false, N, C, F, 0},
      {"fc1 dweight", true, false, F, C, N, 1},     {"lm head forward", false, true, N, V, C, 0},
      {"lm head dinput", false, false, N, C, V, 0}, {"lm head dweight", true, false, V, C, N, 1},
  };
  std::vector<Backend*> present;
  for (Backend& b : backends) {
    void* h = dlopen(b.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::printf("%-20s not installed (%s)\n", b.name.c_str(), b.library.c_str());
      continue;
    }
    b.fn = dlsym(h, b.symbol.c_str());
    if (!b.fn) continue;
    if (!b.threads_symbol.empty())
      if (auto set = reinterpret_cast<void (*)(long)>(dlsym(h, b.threads_symbol.c_str())))
        set(threads);
    b.picked = b.kernel(h);
    present.push_back(&b);
  }
  const std::string no_bf16 = lattice::kernels::onednn_bf16_missing();
  lattice::kernels::set_num_threads(threads);  // OpenMP's count, which oneDNN follows
  std::printf("%s\n", lattice::bench::machine_line().c_str());
  if (!no_bf16.empty()) std::printf("no bf16 column: %s\n", no_bf16.c_str());
  std::printf(
      "config %s's shapes, float GEMM, GFLOP/s (median of 5), %d threads, "
      "OMP_NUM_THREADS=%s\n",
      config.c_str(), threads,
      std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "unset");
  std::printf("%-18s %-22s", "shape", "M x N x K");
  for (Backend* b : present) std::printf(" %20s", b->name.c_str());
  if (no_bf16.empty()) std::printf(" %20s", "oneDNN bf16 (engine)");
  std::printf("\n%-18s %-22s", "kernels", "");
  for (Backend* b : present) std::printf(" %20s", b->picked.c_str());
  if (no_bf16.empty()) std::printf(" %20s", "");
  std::printf("\n");
  std::vector<double> sums(present.size(), 0.0);
  double sum_bf16 = 0;
  for (const Shape& s : shapes) {
    char dims[64];
    std::snprintf(dims, sizeof dims, "%dx%dx%d%s", s.M, s.N, s.K,
                  s.ta   ? " (A^T)"
                  : s.tb ? " (B^T)"
                         : "");
    std::printf("%-18s %-22s", s.name, dims);
    for (size_t i = 0; i < present.size(); i++) {
      const double r = rate(*present[i], s);
      sums[i] += r;
      std::printf(" %20.1f", r);
    }
    if (no_bf16.empty()) {
      const double r = rate_bf16(s);
      sum_bf16 += r;
      std::printf(" %20.1f", r);
    }
    std::printf("\n");
  }
  std::printf("%-18s %-22s", "mean", "");
  for (double s : sums) std::printf(" %20.1f", s / std::size(shapes));
  if (no_bf16.empty()) std::printf(" %20.1f", sum_bf16 / std::size(shapes));
  std::printf("\n");
  return 0;
}
