// CUDA op benchmark (tests/gpu/run.sh runs it): bf16 GEMM TFLOP/s on GPT layer shapes with
// fused cuBLASLt epilogues against the plain cuBLASLt GEMM followed by separate bias / GELU
// kernels, flash-style attention forward + backward time, and LayerNorm memory bandwidth.
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

void bench_attention(cu::Context& ctx, int B, int T, int NH, int HS) {
  const int C = NH * HS;
  Buffer qkv(size_t(B) * T * 3 * C * 2), out(size_t(B) * T * C * 2), dout(size_t(B) * T * C * 2),
      dqkv(size_t(B) * T * 3 * C * 2), lse(size_t(B) * NH * T * 4),
      ws(cu::attention_workspace_floats(B, T, NH) * 4);
  fill_bf16(qkv.as<cu::bf16>(), size_t(B) * T * 3 * C);
  fill_bf16(dout.as<cu::bf16>(), size_t(B) * T * C);
  const double fwd_flop = 4.0 * B * NH * double(T) * T * HS / 2;  // causal: half the square
  char shape[64];
  std::snprintf(shape, sizeof shape, "B%d T%d NH%d HS%d", B, T, NH, HS);
  const double fwd = time_ms(ctx, [&] {
    cu::attention_forward(ctx, out.as<cu::bf16>(), lse.as<float>(), qkv.as<cu::bf16>(), B, T, C, NH,
                          0.0f, 0);
  });
  const double bwd = time_ms(ctx, [&] {
    cu::attention_backward(ctx, dqkv.as<cu::bf16>(), dout.as<cu::bf16>(), qkv.as<cu::bf16>(),
                           out.as<cu::bf16>(), lse.as<float>(), ws.as<float>(), B, T, C, NH, 0.0f,
                           0);
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
  auto rate = [](double bytes, double ms) {
    char text[64];
    std::snprintf(text, sizeof text, "%.0f GB/s", bytes / (ms * 1e-3) / 1e9);
    return std::string(text);
  };
  const double plain = time_ms(ctx, [&] {
    cu::layernorm_forward(ctx, out.as<cu::bf16>(), mean.as<float>(), rstd.as<float>(),
                          x.as<cu::bf16>(), w.as<cu::bf16>(), b.as<cu::bf16>(), N, C);
  });
  row("bf16 layernorm forward", shape, plain, rate(4.0 * N * C, plain));  // read + write
  const double fused = time_ms(ctx, [&] {
    cu::residual_layernorm_forward(ctx, r.as<cu::bf16>(), out.as<cu::bf16>(), mean.as<float>(),
                                   rstd.as<float>(), r.as<cu::bf16>(), x.as<cu::bf16>(),
                                   w.as<cu::bf16>(), b.as<cu::bf16>(), N, C);
  });
  row("bf16 residual+layernorm forward", shape, fused, rate(8.0 * N * C, fused));  // 2 in, 2 out
  Buffer dx(size_t(N) * C * 2), dw(size_t(C) * 4), db(size_t(C) * 4);
  const double backward = time_ms(ctx, [&] {
    cu::layernorm_backward(ctx, dx.as<cu::bf16>(), dw.as<float>(), db.as<float>(),
                           out.as<cu::bf16>(), x.as<cu::bf16>(), w.as<cu::bf16>(), mean.as<float>(),
                           rstd.as<float>(), N, C);
  });
  // dout and inp read twice (statistics, then dinp), dinp read and written, dw / db's terms
  row("bf16 layernorm backward", shape, backward, rate(14.0 * N * C, backward));
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
  bench_layernorm(*ctx, 8192, 2048);
  error = ctx->synchronize();
  if (!error.empty()) {
    std::fprintf(stderr, "lattice-bench-cuda-ops: %s\n", error.c_str());
    return 1;
  }
  std::printf("\ncuDNN fused attention: not measured (no cuDNN path in this build yet)\n");
  return 0;
}
