// CUDA op benchmark (tests/gpu/run.sh runs it): bf16 GEMM TFLOP/s on GPT layer shapes with
// fused cuBLASLt epilogues against the plain cuBLASLt GEMM followed by separate bias / GELU
// kernels, flash-style attention forward + backward time (also with Llama's query groups), and
// the memory bandwidth of LayerNorm and of the Llama family's RMSNorm, RoPE and SwiGLU.
// Prints one table; numbers are for docs/benchmarks.md, never asserted.
// Usage: lattice-bench-cuda-ops [--quick]
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "lattice/cuda_kernels.h"

namespace cu = lattice::kernels::cuda;

namespace {

int g_iters = 20;

// Mean milliseconds of fn over g_iters runs after 3 warm-up runs.
double time_ms(cu::Context& ctx, const std::function<void()>& fn) {
  for (int i = 0; i < 3; i++) fn();
  cu::StreamTimer timer(ctx);
  timer.start();
  for (int i = 0; i < g_iters; i++) fn();
  return timer.stop_ms() / g_iters;
}

struct Buffer {
  explicit Buffer(size_t bytes) : ptr(cu::device_malloc(bytes)) {}
  ~Buffer() { cu::device_free(ptr); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  void* ptr;
};

// Small random-ish bf16 values (|x| < 0.05) so that GEMMs and GELU stay finite.
void fill_bf16(cu::bf16* dst, size_t n) {
  std::vector<cu::bf16> host(n);
  uint32_t state = 12345;
  for (auto& x : host) {
    state = state * 1664525u + 1013904223u;
    x = cu::to_bf16((static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.1f);
  }
  cu::copy_to_device(dst, host.data(), n * sizeof(cu::bf16));
}

void row(const std::string& what, const std::string& shape, double ms, const std::string& rate) {
  std::printf("| %-34s | %-24s | %9.3f | %-22s |\n", what.c_str(), shape.c_str(), ms, rate.c_str());
}

std::string tflops(double flop, double ms) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f TFLOP/s", flop / (ms * 1e-3) / 1e12);
  return text;
}

std::string gb_per_s(double bytes, double ms) {
  char text[64];
  std::snprintf(text, sizeof text, "%.0f GB/s", bytes / (ms * 1e-3) / 1e9);
  return text;
}

void bench_matmul(cu::Context& ctx, int N, int C) {
  struct Gemm {
    const char* name;
    int in, out;
    bool gelu;
  };
  const Gemm gemms[] = {{"qkv", C, 3 * C, false},
                        {"attn proj", C, C, false},
                        {"fc1 + gelu", C, 4 * C, true},
                        {"fc2", 4 * C, C, false}};
  for (const Gemm& g : gemms) {
    Buffer inp(size_t(N) * g.in * 2), w(size_t(g.out) * g.in * 2), b(size_t(g.out) * 2),
        out(size_t(N) * g.out * 2), pre(size_t(N) * g.out * 2);
    fill_bf16(inp.as<cu::bf16>(), size_t(N) * g.in);
    fill_bf16(w.as<cu::bf16>(), size_t(g.out) * g.in);
    fill_bf16(b.as<cu::bf16>(), g.out);
    const double flop = 2.0 * N * g.in * g.out;
    char shape[64];
    std::snprintf(shape, sizeof shape, "%dx%d->%d", N, g.in, g.out);
    const double fused = time_ms(ctx, [&] {
      cu::matmul_forward(ctx, out.as<cu::bf16>(), g.gelu ? pre.as<cu::bf16>() : nullptr,
                         inp.as<cu::bf16>(), w.as<cu::bf16>(), b.as<cu::bf16>(), N, g.in, g.out,
                         g.gelu);
    });
    const double plain_gemm = time_ms(ctx, [&] {
      cu::matmul_forward(ctx, out.as<cu::bf16>(), nullptr, inp.as<cu::bf16>(), w.as<cu::bf16>(),
                         nullptr, N, g.in, g.out, false);
    });
    const double plain = time_ms(ctx, [&] {
      cu::matmul_forward(ctx, pre.as<cu::bf16>(), nullptr, inp.as<cu::bf16>(), w.as<cu::bf16>(),
                         nullptr, N, g.in, g.out, false);
      cu::add_bias(ctx, pre.as<cu::bf16>(), b.as<cu::bf16>(), N, g.out);
      if (g.gelu) cu::gelu_forward(ctx, out.as<cu::bf16>(), pre.as<cu::bf16>(), size_t(N) * g.out);
    });
    row(std::string("bf16 GEMM ") + g.name + " fused", shape, fused, tflops(flop, fused));
    row(std::string("bf16 GEMM ") + g.name + " plain+kernels", shape, plain, tflops(flop, plain));
    row(std::string("bf16 GEMM ") + g.name + " plain only", shape, plain_gemm,
        tflops(flop, plain_gemm));
    // Backward: dinp and dweight GEMMs (fp32 dweight accumulated) and the bias gradient.
    Buffer dinp(size_t(N) * g.in * 2), dw(size_t(g.out) * g.in * 4), db(size_t(g.out) * 4);
    const double backward = time_ms(ctx, [&] {
      cu::matmul_backward(ctx, dinp.as<cu::bf16>(), dw.as<float>(), db.as<float>(),
                          out.as<cu::bf16>(), inp.as<cu::bf16>(), w.as<cu::bf16>(), N, g.in, g.out);
    });
    row(std::string("bf16 GEMM ") + g.name + " backward", shape, backward,
        tflops(2 * flop, backward));
  }
}

// KV: key/value heads (query groups); 0 is NH, GPT-2's per-head layout.
void bench_attention(cu::Context& ctx, int B, int T, int NH, int HS, int KV = 0) {
  const int C = NH * HS;
  const size_t qkv_elems = size_t(B) * T * (NH + 2 * (KV > 0 ? KV : NH)) * HS;
  Buffer qkv(qkv_elems * 2), out(size_t(B) * T * C * 2), dout(size_t(B) * T * C * 2),
      dqkv(qkv_elems * 2), lse(size_t(B) * NH * T * 4),
      ws(cu::attention_workspace_floats(B, T, NH) * 4);
  fill_bf16(qkv.as<cu::bf16>(), qkv_elems);
  fill_bf16(dout.as<cu::bf16>(), size_t(B) * T * C);
  const double fwd_flop = 4.0 * B * NH * double(T) * T * HS / 2;  // causal: half the square
  char shape[64];
  if (KV > 0)
    std::snprintf(shape, sizeof shape, "B%d T%d NH%d KV%d HS%d", B, T, NH, KV, HS);
  else
    std::snprintf(shape, sizeof shape, "B%d T%d NH%d HS%d", B, T, NH, HS);
  const double fwd = time_ms(ctx, [&] {
    cu::attention_forward(ctx, out.as<cu::bf16>(), lse.as<float>(), qkv.as<cu::bf16>(), B, T, C, NH,
                          0.0f, 0, 0, 0, KV);
  });
  const double bwd = time_ms(ctx, [&] {
    cu::attention_backward(ctx, dqkv.as<cu::bf16>(), dout.as<cu::bf16>(), qkv.as<cu::bf16>(),
                           out.as<cu::bf16>(), lse.as<float>(), ws.as<float>(), B, T, C, NH, 0.0f,
                           0, 0, 0, KV);
  });
  row("bf16 attention forward (own)", shape, fwd, tflops(fwd_flop, fwd));
  row("bf16 attention backward (own)", shape, bwd, tflops(2.5 * fwd_flop, bwd));
  row("bf16 attention fwd+bwd (own)", shape, fwd + bwd, tflops(3.5 * fwd_flop, fwd + bwd));
}

void bench_layernorm(cu::Context& ctx, int N, int C) {
  Buffer x(size_t(N) * C * 2), r(size_t(N) * C * 2), out(size_t(N) * C * 2), w(size_t(C) * 2),
      b(size_t(C) * 2), mean(size_t(N) * 4), rstd(size_t(N) * 4);
  fill_bf16(x.as<cu::bf16>(), size_t(N) * C);
  fill_bf16(r.as<cu::bf16>(), size_t(N) * C);
  fill_bf16(w.as<cu::bf16>(), C);
  fill_bf16(b.as<cu::bf16>(), C);
  char shape[64];
  std::snprintf(shape, sizeof shape, "%dx%d", N, C);
  const double plain = time_ms(ctx, [&] {
    cu::layernorm_forward(ctx, out.as<cu::bf16>(), mean.as<float>(), rstd.as<float>(),
                          x.as<cu::bf16>(), w.as<cu::bf16>(), b.as<cu::bf16>(), N, C);
  });
  row("bf16 layernorm forward", shape, plain, gb_per_s(4.0 * N * C, plain));  // read + write
  const double fused = time_ms(ctx, [&] {
    cu::residual_layernorm_forward(ctx, r.as<cu::bf16>(), out.as<cu::bf16>(), mean.as<float>(),
                                   rstd.as<float>(), r.as<cu::bf16>(), x.as<cu::bf16>(),
                                   w.as<cu::bf16>(), b.as<cu::bf16>(), N, C);
  });
  row("bf16 residual+layernorm forward", shape, fused,
      gb_per_s(8.0 * N * C, fused));  // 2 in, 2 out
  Buffer dx(size_t(N) * C * 2), dw(size_t(C) * 4), db(size_t(C) * 4);
  const double backward = time_ms(ctx, [&] {
    cu::layernorm_backward(ctx, dx.as<cu::bf16>(), dw.as<float>(), db.as<float>(),
                           out.as<cu::bf16>(), x.as<cu::bf16>(), w.as<cu::bf16>(), mean.as<float>(),
                           rstd.as<float>(), N, C);
  });
  // dout and inp read twice (statistics, then dinp), dinp read and written, dw / db's terms
  row("bf16 layernorm backward", shape, backward, gb_per_s(14.0 * N * C, backward));
}

void bench_rmsnorm(cu::Context& ctx, int N, int C) {
  Buffer x(size_t(N) * C * 2), r(size_t(N) * C * 2), out(size_t(N) * C * 2), w(size_t(C) * 2),
      rstd(size_t(N) * 4), dx(size_t(N) * C * 2), dw(size_t(C) * 4);
  fill_bf16(x.as<cu::bf16>(), size_t(N) * C);
  fill_bf16(r.as<cu::bf16>(), size_t(N) * C);
  fill_bf16(w.as<cu::bf16>(), C);
  char shape[64];
  std::snprintf(shape, sizeof shape, "%dx%d", N, C);
  const double plain = time_ms(ctx, [&] {
    cu::rmsnorm_forward(ctx, out.as<cu::bf16>(), rstd.as<float>(), x.as<cu::bf16>(),
                        w.as<cu::bf16>(), N, C, 1e-5f);
  });
  row("bf16 rmsnorm forward", shape, plain, gb_per_s(4.0 * N * C, plain));  // read + write
  const double fused = time_ms(ctx, [&] {
    cu::residual_rmsnorm_forward(ctx, r.as<cu::bf16>(), out.as<cu::bf16>(), rstd.as<float>(),
                                 r.as<cu::bf16>(), x.as<cu::bf16>(), w.as<cu::bf16>(), N, C, 1e-5f);
  });
  row("bf16 residual+rmsnorm forward", shape, fused, gb_per_s(8.0 * N * C, fused));
  const double backward = time_ms(ctx, [&] {
    cu::rmsnorm_backward(ctx, dx.as<cu::bf16>(), dw.as<float>(), out.as<cu::bf16>(),
                         x.as<cu::bf16>(), w.as<cu::bf16>(), rstd.as<float>(), N, C);
  });
  // dout and inp read twice (dot, then dinp), dinp read and written, dw's term
  row("bf16 rmsnorm backward", shape, backward, gb_per_s(14.0 * N * C, backward));
}

// RoPE in place on a Llama qkv (N, (NH + 2 KV) HS): the query and key heads read and written.
void bench_rope(cu::Context& ctx, int N, int NH, int KV, int HS) {
  const size_t elems = size_t(N) * (NH + 2 * KV) * HS;
  const int T = 1024, half = HS / 2;
  Buffer qkv(elems * 2), cos(size_t(T) * half * 4), sin(size_t(T) * half * 4);
  fill_bf16(qkv.as<cu::bf16>(), elems);
  // cos 0.6, sin 0.8: a rotation, so repeated timing runs keep the values' size.
  const std::vector<float> cos_table(size_t(T) * half, 0.6f), sin_table(cos_table.size(), 0.8f);
  cu::copy_to_device(cos.ptr, cos_table.data(), cos_table.size() * 4);
  cu::copy_to_device(sin.ptr, sin_table.data(), sin_table.size() * 4);
  char shape[64];
  std::snprintf(shape, sizeof shape, "N%d NH%d KV%d HS%d", N, NH, KV, HS);
  const double bytes = 4.0 * N * (NH + KV) * HS;  // rotated heads: read + write
  const double fwd = time_ms(ctx, [&] {
    cu::rope_forward(ctx, qkv.as<cu::bf16>(), cos.as<float>(), sin.as<float>(), nullptr, N, T, NH,
                     KV, HS, HS);
  });
  row("bf16 rope forward (in place)", shape, fwd, gb_per_s(bytes, fwd));
  const double bwd = time_ms(ctx, [&] {
    cu::rope_backward(ctx, qkv.as<cu::bf16>(), cos.as<float>(), sin.as<float>(), nullptr, N, T, NH,
                      KV, HS, HS);
  });
  row("bf16 rope backward (in place)", shape, bwd, gb_per_s(bytes, bwd));
}

void bench_swiglu(cu::Context& ctx, int N, int F) {
  const size_t n = size_t(N) * F;
  Buffer inp(2 * n * 2), out(n * 2), dout(n * 2), dinp(2 * n * 2);
  fill_bf16(inp.as<cu::bf16>(), 2 * n);
  fill_bf16(dout.as<cu::bf16>(), n);
  char shape[64];
  std::snprintf(shape, sizeof shape, "%dx%d", N, F);
  const double fwd =
      time_ms(ctx, [&] { cu::swiglu_forward(ctx, out.as<cu::bf16>(), inp.as<cu::bf16>(), N, F); });
  row("bf16 swiglu forward", shape, fwd, gb_per_s(6.0 * n, fwd));  // gate, up in; out
  const double bwd = time_ms(ctx, [&] {
    cu::swiglu_backward(ctx, dinp.as<cu::bf16>(), inp.as<cu::bf16>(), dout.as<cu::bf16>(), N, F);
  });
  row("bf16 swiglu backward", shape, bwd, gb_per_s(10.0 * n, bwd));  // gate, up, dout; 2 out
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (quick) g_iters = 5;
  std::printf("%s\n", lattice::bench::machine_line().c_str());
  if (cu::device_count() == 0) {
    std::printf("lattice-bench-cuda-ops: no CUDA device; nothing measured\n");
    return 77;
  }
  std::string error;
  auto ctx = cu::Context::create(&error);
  if (!ctx) {
    std::fprintf(stderr, "lattice-bench-cuda-ops: %s\n", error.c_str());
    return 1;
  }
  std::printf("device: %s\n\n", cu::device_name(0).c_str());
  std::printf("| %-34s | %-24s | %9s | %-22s |\n", "op", "shape", "ms", "rate");
  std::printf("|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(26, '-').c_str(),
              std::string(11, '-').c_str(), std::string(24, '-').c_str());
  bench_matmul(*ctx, 8192, quick ? 1024 : 2048);  // GPT-2 medium / 1.3B hidden sizes, 8k tokens
  bench_attention(*ctx, 8, 1024, 16, 64);
  bench_attention(*ctx, 8, 1024, 8, 128);
  bench_attention(*ctx, 8, 1024, 32, 128, 8);  // Llama 3 8B's heads: 4 query heads per group
  bench_layernorm(*ctx, 8192, 2048);
  bench_rmsnorm(*ctx, 8192, 4096);
  bench_rope(*ctx, 8192, 32, 8, 128);
  bench_swiglu(*ctx, 8192, quick ? 4096 : 14336);
  error = ctx->synchronize();
  if (!error.empty()) {
    std::fprintf(stderr, "lattice-bench-cuda-ops: %s\n", error.c_str());
    return 1;
  }
  std::printf("\ncuDNN fused attention: not measured (no cuDNN path in this build yet)\n");
  return 0;
}
