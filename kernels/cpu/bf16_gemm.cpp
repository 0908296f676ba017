// The CPU's bf16 GEMM (lattice/cpu_bf16_gemm.h; Note [bf16 GEMMs], README.md): oneDNN's matmul
// primitive, one per shape, kept for the process (a training step calls the same few shapes
// every micro-batch; building a primitive costs far more than running a small one).
// Compiled once, for plain x86-64: oneDNN picks its own kernels for the CPU at run time.
#include <cpuid.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lattice/cpu_bf16_gemm.h"
#include "lattice/cpu_isa.h"

#ifdef LATTICE_HAVE_ONEDNN
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#endif

namespace lattice::kernels {
namespace {

constexpr const char* kEnvVar = "LATTICE_CPU_BF16_GEMM";

#ifdef LATTICE_HAVE_ONEDNN
// cpuid leaf 7: AVX512_BF16 is subleaf 1's EAX bit 5, AMX-BF16 subleaf 0's EDX bit 22.
bool cpu_has_bf16_instructions() {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  const bool amx_bf16 = (d >> 22) & 1;
  __cpuid_count(7, 1, a, b, c, d);
  const bool avx512_bf16 = (a >> 5) & 1;
  return avx512_bf16 || amx_bf16;
}
#endif

// The path LATTICE_CPU_BF16_GEMM asks for and the error it gives (empty: usable).
struct EnvRequest {
  Bf16Gemm path;
  std::string error;
};
EnvRequest from_env() {
  const char* env = std::getenv(kEnvVar);
  const std::string value = env ? env : "";
  const std::string missing = onednn_bf16_missing();
  const Bf16Gemm best = missing.empty() ? Bf16Gemm::onednn : Bf16Gemm::none;
  if (value.empty() || value == "auto") return {best, ""};
  if (value == "widened") return {Bf16Gemm::widened, ""};
  if (value == "onednn") {
    if (missing.empty()) return {Bf16Gemm::onednn, ""};
    return {Bf16Gemm::none, std::string(kEnvVar) + "=onednn: " + missing};
  }
  return {best, std::string(kEnvVar) + "=" + value + " is not onednn, widened or auto"};
}

std::atomic<int> g_selected{-1};  // a Bf16Gemm once set, else -1

}  // namespace

const char* bf16_gemm_name(Bf16Gemm path) {
  switch (path) {
    case Bf16Gemm::onednn:
      return "onednn";
    case Bf16Gemm::widened:
      return "widened";
    case Bf16Gemm::none:
      break;
  }
  return "none";
}

std::string onednn_bf16_missing() {
#ifndef LATTICE_HAVE_ONEDNN
  return "this build has no oneDNN (build with libdnnl-dev installed, -DLATTICE_WITH_ONEDNN)";
#else
  // oneDNN runs bf16 on any AVX-512 CPU, but without the bf16 instructions it emulates them,
  // slower than OpenBLAS's sgemm on widened copies. Capped below them (ONEDNN_MAX_CPU_ISA), it
  // refuses bf16 matmuls altogether.
  static const bool hardware = cpu_isa_supported(CpuIsa::avx512) && cpu_has_bf16_instructions();
  if (!hardware) return "this CPU has neither AVX512_BF16 nor AMX-BF16";
  const unsigned bf16_isa = dnnl_cpu_isa_avx512_core_bf16;
  if ((static_cast<unsigned>(dnnl_get_effective_cpu_isa()) & bf16_isa) != bf16_isa)
    return "oneDNN is capped below AVX512_BF16 (ONEDNN_MAX_CPU_ISA or DNNL_MAX_CPU_ISA)";
  return "";
#endif
}

Bf16Gemm bf16_gemm() {
  const int selected = g_selected.load(std::memory_order_relaxed);
  if (selected >= 0) return static_cast<Bf16Gemm>(selected);
  static const Bf16Gemm initial = [] {
    EnvRequest r = from_env();
    if (!r.error.empty())
      std::fprintf(stderr, "lattice: %s; bf16 GEMMs: %s\n", r.error.c_str(),
                   bf16_gemm_name(r.path));
    return r.path;
  }();
  return initial;
}

bool set_bf16_gemm(Bf16Gemm path) {
  if (path == Bf16Gemm::onednn && !onednn_bf16_missing().empty()) return false;
  g_selected.store(static_cast<int>(path), std::memory_order_relaxed);
  return true;
}

std::string bf16_gemm_env_error() {
  return from_env().error;
}

#ifdef LATTICE_HAVE_ONEDNN
namespace {

using Key = std::tuple<bool, bool, int, int, int, int, int, int, bool>;

// Primitives may run on several threads at once (pipeline stages of one process); streams are
// each thread's own.
struct Primitives {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;
  struct Entry {
    dnnl::matmul matmul;
    dnnl::memory::desc a, b, c;
  };
  std::map<Key, Entry> cache;
};

Primitives& primitives() {
  static Primitives p;
  return p;
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum
    if (beta == 0.0f)
      for (int m = 0; m < M; m++) std::memset(C + static_cast<size_t>(m) * ldc, 0, N * sizeof(float));
    return;
  }
  using dnnl::memory;
  Primitives& p = primitives();
  const Key key{trans_a, trans_b, M, N, K, lda, ldb, ldc, beta != 0.0f};
  std::unique_lock lock(p.mutex);
  auto it = p.cache.find(key);
  if (it == p.cache.end()) {
    // Transposes are strides: op(A) (M, K) is A read with strides (1, lda) when transposed.
    const memory::desc a({M, K}, memory::data_type::bf16,
                         trans_a ? memory::dims{1, lda} : memory::dims{lda, 1});
    const memory::desc b({K, N}, memory::data_type::bf16,
                         trans_b ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    const memory::desc c({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (beta != 0.0f) {  // C += ...: the sum post-op adds the destination's old values
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, p.engine);
    it = p.cache.emplace(key, Primitives::Entry{dnnl::matmul(pd), a, b, c}).first;
  }
  const Primitives::Entry& e = it->second;
  lock.unlock();
  memory ma(e.a, p.engine, const_cast<bf16*>(A)), mb(e.b, p.engine, const_cast<bf16*>(B)),
      mc(e.c, p.engine, C);
  thread_local dnnl::stream stream(p.engine);
  e.matmul.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  stream.wait();
}
#else
void gemm_bf16(bool, bool, int, int, int, const bf16*, int, const bf16*, int, float, float*,
               int) {
  std::fprintf(stderr, "lattice: gemm_bf16 called in a build without oneDNN\n");
  std::abort();
}
#endif

}  // namespace lattice::kernels
