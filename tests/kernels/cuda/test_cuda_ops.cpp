// Every CUDA op of lattice/cuda_kernels.h (except attention: test_cuda_attention.cpp) agrees
// with its CPU op of lattice/kernels.h on random inputs, its output buffers poisoned with NaN
// before the run: relative error < 1e-5 for fp32, < 1e-2 for bf16 and fp16 (one template per
// op covers both 16-bit types; cuda_test_support.h). fp16 overflow must reach the fp32
// gradients as inf or NaN (the loss scaler's signal): fp16_overflow_reaches_the_fp32_grads.
// Without a CUDA device the whole case is SKIPPED (ctest reports it as skipped, not passed).
#include <QtTest/QtTest>

#include <cstring>

#include "common/cuda_test_support.h"
#include "lattice/kernels.h"

using namespace lattice::testing;
namespace k = lattice::kernels;

namespace {

// fp32, bf16 and fp16 in one test template: the host rounding to A (none for fp32), the A-typed
// host copy, the name and the tolerance.
template <typename A>
struct Compute {
  static constexpr const char* kName = Half<A>::kName;
  static constexpr double kTolerance = Half<A>::kTolerance;
  static std::vector<float>& round(std::vector<float>& v) { return round_to<A>(v); }
  static std::vector<A> host(const std::vector<float>& v) { return to_half<A>(v); }
};
template <>
struct Compute<float> {
  static constexpr const char* kName = "fp32";
  static constexpr double kTolerance = kFp32Tolerance;
  static std::vector<float>& round(std::vector<float>& v) { return v; }
  static std::vector<float> host(const std::vector<float>& v) { return v; }
};

}  // namespace

class CudaOps : public QObject {
  Q_OBJECT
  std::unique_ptr<cu::Context> ctx_;

  void sync() {
    const std::string error = ctx_->synchronize();
    QVERIFY2(error.empty(), error.c_str());
  }

 private slots:
  void initTestCase() {
    LATTICE_REQUIRE_CUDA_DEVICE();
    k::set_num_threads(2);
    std::string error;
    ctx_ = cu::Context::create(&error);
    QVERIFY2(ctx_, error.c_str());
    qInfo("device: %s", cu::device_name(0).c_str());
  }

  void matmul_fp32_matches_cpu() {
    const int N = 96, C = 200, OC = 136;
    const auto inp = random_floats(N * C, 1), w = random_floats(OC * C, 2, 0.05f),
               b = random_floats(OC, 3);
    std::vector<float> out(N * OC), act(N * OC);
    k::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    k::gelu_forward(act.data(), out.data(), act.size());
    DeviceBuffer<float> d_inp(inp), d_w(w), d_b(b), d_out(N * OC), d_pre(N * OC);
    cu::matmul_forward(*ctx_, d_out.get(), nullptr, d_inp.get(), d_w.get(), d_b.get(), N, C, OC,
                       false);
    sync();
    LATTICE_COMPARE("matmul out", d_out.download(), out, kFp32Tolerance);
    d_out.poison();
    cu::matmul_forward(*ctx_, d_out.get(), d_pre.get(), d_inp.get(), d_w.get(), d_b.get(), N, C, OC,
                       true);
    sync();
    LATTICE_COMPARE("matmul+gelu out", d_out.download(), act, kFp32Tolerance);
    LATTICE_COMPARE("matmul+gelu pre_gelu", d_pre.download(), out, kFp32Tolerance);

    const auto dout = random_floats(N * OC, 4);
    std::vector<float> dinp(N * C), dw = random_floats(OC * C, 5), db = random_floats(OC, 6);
    DeviceBuffer<float> d_dout(dout), d_dinp(N * C), d_dw(dw), d_db(db);  // dw, db accumulate
    k::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
    cu::matmul_backward(*ctx_, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                        d_w.get(), N, C, OC);
    sync();
    LATTICE_COMPARE("matmul dinp", d_dinp.download(), dinp, kFp32Tolerance);
    LATTICE_COMPARE("matmul dweight", d_dw.download(), dw, kFp32Tolerance);
    LATTICE_COMPARE("matmul dbias", d_db.download(), db, kFp32Tolerance);
  }

  void matmul_bf16_matches_cpu() { check_matmul_half<cu::bf16>(); }
  void matmul_fp16_matches_cpu() { check_matmul_half<cu::fp16>(); }

  void add_bias_matches_cpu() {
    const int N = 33, OC = 70;
    auto out = random_floats(N * OC, 21);
    const auto b = random_floats(OC, 22);
    DeviceBuffer<float> d_out(out), d_b(b);
    k::add_bias(out.data(), b.data(), N, OC);
    cu::add_bias(*ctx_, d_out.get(), d_b.get(), N, OC);
    sync();
    LATTICE_COMPARE("add_bias out", d_out.download(), out, kFp32Tolerance);
  }

  void layernorm_fp32_matches_cpu() {
    const int N = 77, C = 320;
    const auto inp = random_floats(N * C, 31, 2.0f), w = random_floats(C, 32),
               b = random_floats(C, 33), dout = random_floats(N * C, 34);
    std::vector<float> out(N * C), mean(N), rstd(N);
    std::vector<float> dinp = random_floats(N * C, 35), dw = random_floats(C, 36),
                       db = random_floats(C, 37);
    DeviceBuffer<float> d_inp(inp), d_w(w), d_b(b), d_out(N * C), d_mean(N), d_rstd(N),
        d_dout(dout), d_dinp(dinp), d_dw(dw), d_db(db);
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                         C);
    k::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
    cu::layernorm_forward(*ctx_, d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(),
                          d_b.get(), N, C);
    cu::layernorm_backward(*ctx_, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                           d_w.get(), d_mean.get(), d_rstd.get(), N, C);
    sync();
    LATTICE_COMPARE("layernorm out", d_out.download(), out, kFp32Tolerance);
    LATTICE_COMPARE("layernorm mean", d_mean.download(), mean, kFp32Tolerance);
    LATTICE_COMPARE("layernorm rstd", d_rstd.download(), rstd, kFp32Tolerance);
    LATTICE_COMPARE("layernorm dinp (+=)", d_dinp.download(), dinp, kFp32Tolerance);
    LATTICE_COMPARE("layernorm dweight (+=)", d_dw.download(), dw, kFp32Tolerance);
    LATTICE_COMPARE("layernorm dbias (+=)", d_db.download(), db, kFp32Tolerance);
  }

  void layernorm_bf16_matches_cpu() { check_layernorm_half<cu::bf16>(); }
  void layernorm_fp16_matches_cpu() { check_layernorm_half<cu::fp16>(); }

  void residual_layernorm_fp32_matches_cpu() {
    const int N = 40, C = 256;
    const auto res = random_floats(N * C, 41), x = random_floats(N * C, 42),
               w = random_floats(C, 43), b = random_floats(C, 44);
    std::vector<float> sum(N * C), out(N * C), mean(N), rstd(N);
    k::residual_dropout_forward(sum.data(), res.data(), x.data(), sum.size(), 0.0f, 0);
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), w.data(), b.data(), N,
                         C);
    DeviceBuffer<float> d_res(res), d_x(x), d_w(w), d_b(b), d_out(N * C), d_mean(N), d_rstd(N);
    // residual_out aliases residual: the pre-LN block updates the stream in place.
    cu::residual_layernorm_forward(*ctx_, d_res.get(), d_out.get(), d_mean.get(), d_rstd.get(),
                                   d_res.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
    sync();
    LATTICE_COMPARE("residual_layernorm residual", d_res.download(), sum, kFp32Tolerance);
    LATTICE_COMPARE("residual_layernorm out", d_out.download(), out, kFp32Tolerance);
    LATTICE_COMPARE("residual_layernorm rstd", d_rstd.download(), rstd, kFp32Tolerance);
  }

 private:
  template <typename H>
  void check_matmul_half() {
    const int N = 128, C = 256, OC = 192;
    const std::string name = Half<H>::kName;
    const double tol = Half<H>::kTolerance;
    auto inp = random_floats(N * C, 11), w = random_floats(OC * C, 12, 0.05f),
         b = random_floats(OC, 13), dout = random_floats(N * OC, 14);
    round_to<H>(inp), round_to<H>(w), round_to<H>(b), round_to<H>(dout);
    std::vector<float> out(N * OC), act(N * OC), dinp(N * C), dw(OC * C, 0.0f), db(OC, 0.0f);
    k::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    k::gelu_forward(act.data(), out.data(), act.size());
    k::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
    DeviceBuffer<H> d_inp(to_half<H>(inp)), d_w(to_half<H>(w)), d_b(to_half<H>(b)),
        d_dout(to_half<H>(dout)), d_out(N * OC), d_pre(N * OC), d_dinp(N * C);
    DeviceBuffer<float> d_dw(std::vector<float>(OC * C, 0.0f)), d_db(std::vector<float>(OC, 0.0f));
    cu::matmul_forward(*ctx_, d_out.get(), d_pre.get(), d_inp.get(), d_w.get(), d_b.get(), N, C, OC,
                       true);
    cu::matmul_backward(*ctx_, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                        d_w.get(), N, C, OC);
    sync();
    LATTICE_COMPARE(name + " matmul+gelu out", d_out.download(), act, tol);
    LATTICE_COMPARE(name + " matmul pre_gelu", d_pre.download(), out, tol);
    LATTICE_COMPARE(name + " matmul dinp", d_dinp.download(), dinp, tol);
    LATTICE_COMPARE(name + " matmul dweight (fp32)", d_dw.download(), dw, tol);
    LATTICE_COMPARE(name + " matmul dbias (fp32)", d_db.download(), db, tol);
  }

  template <typename H>
  void check_layernorm_half() {
    const int N = 64, C = 768;
    const std::string name = Half<H>::kName;
    const double tol = Half<H>::kTolerance;
    auto res = random_floats(N * C, 51), x = random_floats(N * C, 52), w = random_floats(C, 53),
         b = random_floats(C, 54), dout = random_floats(N * C, 55);
    round_to<H>(res), round_to<H>(x), round_to<H>(w), round_to<H>(b), round_to<H>(dout);
    std::vector<float> sum(N * C), out(N * C), mean(N), rstd(N), dinp(N * C, 0.0f), dw(C, 0.0f),
        db(C, 0.0f);
    k::residual_dropout_forward(sum.data(), res.data(), x.data(), sum.size(), 0.0f, 0);
    round_to<H>(sum);  // the GPU stores the residual stream in 16 bits and normalises that
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), w.data(), b.data(), N,
                         C);
    k::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), sum.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
    DeviceBuffer<H> d_res(to_half<H>(res)), d_x(to_half<H>(x)), d_w(to_half<H>(w)),
        d_b(to_half<H>(b)), d_out(N * C), d_sum(N * C), d_dout(to_half<H>(dout)),
        d_dinp(to_half<H>(std::vector<float>(N * C, 0.0f)));
    DeviceBuffer<float> d_mean(N), d_rstd(N), d_dw(std::vector<float>(C, 0.0f)),
        d_db(std::vector<float>(C, 0.0f));
    cu::residual_layernorm_forward(*ctx_, d_sum.get(), d_out.get(), d_mean.get(), d_rstd.get(),
                                   d_res.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
    cu::layernorm_backward(*ctx_, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_sum.get(),
                           d_w.get(), d_mean.get(), d_rstd.get(), N, C);
    sync();
    LATTICE_COMPARE(name + " residual_layernorm residual", d_sum.download(), sum, tol);
    LATTICE_COMPARE(name + " layernorm out", d_out.download(), out, tol);
    LATTICE_COMPARE(name + " layernorm dinp", d_dinp.download(), dinp, tol);
    LATTICE_COMPARE(name + " layernorm dweight (fp32)", d_dw.download(), dw, tol);
    LATTICE_COMPARE(name + " layernorm dbias (fp32)", d_db.download(), db, tol);
  }

  template <typename H>
  void check_gelu_half(std::vector<float> inp, std::vector<float> dout) {
    const size_t n = inp.size();
    const std::string name = Half<H>::kName;
    round_to<H>(inp), round_to<H>(dout);
    std::vector<float> out(n), dinp(n);
    k::gelu_forward(out.data(), inp.data(), n);
    k::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    DeviceBuffer<H> h_inp(to_half<H>(inp)), h_dout(to_half<H>(dout)), h_out(n), h_dinp(n);
    cu::gelu_forward(*ctx_, h_out.get(), h_inp.get(), n);
    cu::gelu_backward(*ctx_, h_dinp.get(), h_inp.get(), h_dout.get(), n);
    sync();
    LATTICE_COMPARE(name + " gelu out", h_out.download(), out, Half<H>::kTolerance);
    LATTICE_COMPARE(name + " gelu dinp", h_dinp.download(), dinp, Half<H>::kTolerance);
  }

  template <typename H>
  void check_embedding_half() {
    const int B = 2, T = 9, C = 64, V = 30;
    const std::string name = Half<H>::kName;
    const double tol = Half<H>::kTolerance;
    const auto tokens = random_tokens(B * T, V, 78);
    auto wte = random_floats(V * C, 79), wpe = random_floats(T * C, 80),
         dout = random_floats(B * T * C, 81);
    round_to<H>(wte), round_to<H>(wpe), round_to<H>(dout);
    std::vector<float> out(B * T * C), dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
    k::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    k::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    DeviceBuffer<int32_t> d_tokens(tokens);
    DeviceBuffer<H> d_wte(to_half<H>(wte)), d_wpe(to_half<H>(wpe)), d_dout(to_half<H>(dout)),
        d_out(B * T * C);
    DeviceBuffer<float> d_dwte(std::vector<float>(V * C, 0.0f)),
        d_dwpe(std::vector<float>(T * C, 0.0f));
    cu::embedding_forward(*ctx_, d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, T, C);
    cu::embedding_backward(*ctx_, d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), B, T,
                           C);
    sync();
    LATTICE_COMPARE(name + " embedding out", d_out.download(), out, tol);
    LATTICE_COMPARE(name + " embedding dwte (fp32)", d_dwte.download(), dwte, tol);
    LATTICE_COMPARE(name + " embedding dwpe (fp32)", d_dwpe.download(), dwpe, tol);
  }

  template <typename H>
  void check_add_bias_half() {
    const int N = 16, OC = 48;
    auto out = random_floats(N * OC, 23), b = random_floats(OC, 24);
    round_to<H>(out), round_to<H>(b);
    DeviceBuffer<H> d_out(to_half<H>(out)), d_b(to_half<H>(b));
    k::add_bias(out.data(), b.data(), N, OC);
    cu::add_bias(*ctx_, d_out.get(), d_b.get(), N, OC);
    sync();
    LATTICE_COMPARE(std::string(Half<H>::kName) + " add_bias out", d_out.download(), out,
                    Half<H>::kTolerance);
  }

  // RMSNorm with the fused residual add (residual_out aliasing residual), the plain forward on the
  // stored sum (the fused op's out and rstd, bit for bit), and the backward (dinp, dweight +=;
  // N large enough that the weight gradient's column sums split into row blocks).
  template <typename A>
  void check_rmsnorm() {
    using X = Compute<A>;
    const int N = 200, C = 320;
    const float eps = 1e-5f;
    auto res = random_floats(N * C, 111), x = random_floats(N * C, 112), w = random_floats(C, 113),
         dout = random_floats(N * C, 114), dinp = random_floats(N * C, 115);
    X::round(res), X::round(x), X::round(w), X::round(dout), X::round(dinp);
    std::vector<float> dw = random_floats(C, 116), sum(N * C), out(N * C), rstd(N);
    DeviceBuffer<A> d_res(X::host(res)), d_x(X::host(x)), d_w(X::host(w)), d_dout(X::host(dout)),
        d_dinp(X::host(dinp)), d_out(N * C), d_plain_out(N * C);
    DeviceBuffer<float> d_rstd(N), d_plain_rstd(N), d_dw(dw);
    k::residual_dropout_forward(sum.data(), res.data(), x.data(), sum.size(), 0.0f, 0);
    X::round(sum);  // the device stores the residual stream in A and normalises that
    k::rmsnorm_forward(out.data(), rstd.data(), sum.data(), w.data(), N, C, eps);
    k::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), sum.data(), w.data(), rstd.data(), N,
                        C);
    cu::residual_rmsnorm_forward(*ctx_, d_res.get(), d_out.get(), d_rstd.get(), d_res.get(),
                                 d_x.get(), d_w.get(), N, C, eps);
    cu::rmsnorm_forward(*ctx_, d_plain_out.get(), d_plain_rstd.get(), d_res.get(), d_w.get(), N, C,
                        eps);
    cu::rmsnorm_backward(*ctx_, d_dinp.get(), d_dw.get(), d_dout.get(), d_res.get(), d_w.get(),
                         d_rstd.get(), N, C);
    sync();
    const std::string name = X::kName;
    LATTICE_COMPARE(name + " residual_rmsnorm residual", d_res.download(), sum, X::kTolerance);
    LATTICE_COMPARE(name + " rmsnorm out", d_out.download(), out, X::kTolerance);
    LATTICE_COMPARE(name + " rmsnorm rstd", d_rstd.download(), rstd, X::kTolerance);
    LATTICE_COMPARE(name + " rmsnorm dinp (+=)", d_dinp.download(), dinp, X::kTolerance);
    LATTICE_COMPARE(name + " rmsnorm dweight (+=, fp32)", d_dw.download(), dw, X::kTolerance);
    QVERIFY2(same_bits(d_plain_out.download(), d_out.download()) &&
                 same_bits(d_plain_rstd.download(), d_rstd.download()),
             (name + " rmsnorm_forward of the stored sum differs from residual_rmsnorm_forward's "
                     "out or rstd (they must be bit for bit the same)")
                 .c_str());
  }

  // RoPE forward on qkv and backward on dqkv (N, (NH + 2 KV) HS), in place; positions from an
  // array (beyond T) or n % T.
  template <typename A>
  void check_rope(int B, int T, int NH, int KV, int HS, int rotary_dim, bool with_positions) {
    using X = Compute<A>;
    const int N = B * T, P = T + 5, half = rotary_dim / 2;
    const size_t n = static_cast<size_t>(N) * (NH + 2 * KV) * HS;
    std::vector<double> cos64(static_cast<size_t>(P) * half), sin64(cos64.size());
    k::rope_tables(cos64.data(), sin64.data(), P, rotary_dim, 10000.0);
    const std::vector<float> cos(cos64.begin(), cos64.end()), sin(sin64.begin(), sin64.end());
    std::vector<int32_t> positions = random_tokens(N, P, 121);
    const int32_t* pos = with_positions ? positions.data() : nullptr;
    auto qkv = random_floats(n, 122), dqkv = random_floats(n, 123);
    X::round(qkv), X::round(dqkv);
    DeviceBuffer<A> d_qkv(X::host(qkv)), d_dqkv(X::host(dqkv));
    DeviceBuffer<float> d_cos(cos), d_sin(sin);
    DeviceBuffer<int32_t> d_positions(positions);
    const int32_t* d_pos = with_positions ? d_positions.get() : nullptr;
    k::rope_forward(qkv.data(), cos.data(), sin.data(), pos, N, T, NH, KV, HS, rotary_dim);
    k::rope_backward(dqkv.data(), cos.data(), sin.data(), pos, N, T, NH, KV, HS, rotary_dim);
    cu::rope_forward(*ctx_, d_qkv.get(), d_cos.get(), d_sin.get(), d_pos, N, T, NH, KV, HS,
                     rotary_dim);
    cu::rope_backward(*ctx_, d_dqkv.get(), d_cos.get(), d_sin.get(), d_pos, N, T, NH, KV, HS,
                      rotary_dim);
    sync();
    const std::string name = std::string(X::kName) + " rope NH " + std::to_string(NH) + " KV " +
                             std::to_string(KV) + " rotary_dim " + std::to_string(rotary_dim);
    LATTICE_COMPARE(name + " forward qkv", d_qkv.download(), qkv, X::kTolerance);
    LATTICE_COMPARE(name + " backward dqkv", d_dqkv.download(), dqkv, X::kTolerance);
  }

  template <typename A>
  void check_swiglu() {
    using X = Compute<A>;
    const int N = 96, F = 1000;
    auto inp = random_floats(2 * N * F, 131, 3.0f), dout = random_floats(N * F, 132);
    X::round(inp), X::round(dout);
    std::vector<float> out(N * F), dinp(2 * N * F);
    k::swiglu_forward(out.data(), inp.data(), N, F);
    k::swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
    DeviceBuffer<A> d_inp(X::host(inp)), d_dout(X::host(dout)), d_out(N * F), d_dinp(2 * N * F);
    cu::swiglu_forward(*ctx_, d_out.get(), d_inp.get(), N, F);
    cu::swiglu_backward(*ctx_, d_dinp.get(), d_inp.get(), d_dout.get(), N, F);
    sync();
    LATTICE_COMPARE(std::string(X::kName) + " swiglu out", d_out.download(), out, X::kTolerance);
    LATTICE_COMPARE(std::string(X::kName) + " swiglu dinp (gate | up)", d_dinp.download(), dinp,
                    X::kTolerance);
  }

  template <typename T>
  static bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
  }

  // A fp32 gradient buffer holds an inf or NaN.
  template <typename T>
  bool has_non_finite(const DeviceBuffer<T>& b) {
    for (float x : to_float(b.download()))
      if (!std::isfinite(x)) return true;
    return false;
  }

 private slots:
  void gelu_matches_cpu() {
    const size_t n = 100003;
    auto inp = random_floats(n, 61, 3.0f), dout = random_floats(n, 62);
    std::vector<float> out(n), dinp(n);
    k::gelu_forward(out.data(), inp.data(), n);
    k::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    DeviceBuffer<float> d_inp(inp), d_dout(dout), d_out(n), d_dinp(n);
    cu::gelu_forward(*ctx_, d_out.get(), d_inp.get(), n);
    cu::gelu_backward(*ctx_, d_dinp.get(), d_inp.get(), d_dout.get(), n);
    sync();
    LATTICE_COMPARE("gelu out", d_out.download(), out, kFp32Tolerance);
    LATTICE_COMPARE("gelu dinp", d_dinp.download(), dinp, kFp32Tolerance);
    check_gelu_half<cu::bf16>(inp, dout);
    check_gelu_half<cu::fp16>(inp, dout);
  }

  void embedding_matches_cpu() {
    const int B = 3, T = 17, C = 96, V = 50, begin = 20, end = 45;  // a vocabulary shard
    const auto tokens = random_tokens(B * T, V, 71);
    const auto wte = random_floats((end - begin) * C, 72), wpe = random_floats(T * C, 73),
               dout = random_floats(B * T * C, 74);
    std::vector<float> out(B * T * C), dwte = random_floats((end - begin) * C, 75),
                                       dwpe = random_floats(T * C, 76);
    k::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, begin, end);
    k::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, begin,
                          end);
    DeviceBuffer<int32_t> d_tokens(tokens);
    DeviceBuffer<float> d_wte(wte), d_wpe(wpe), d_dout(dout), d_out(B * T * C),
        d_dwte(random_floats((end - begin) * C, 75)), d_dwpe(random_floats(T * C, 76));
    cu::embedding_forward(*ctx_, d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, T, C,
                          begin, end);
    cu::embedding_backward(*ctx_, d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), B, T, C,
                           begin, end);
    sync();
    LATTICE_COMPARE("embedding out", d_out.download(), out, kFp32Tolerance);
    LATTICE_COMPARE("embedding dwte (+=)", d_dwte.download(), dwte, kFp32Tolerance);
    LATTICE_COMPARE("embedding dwpe (+=)", d_dwpe.download(), dwpe, kFp32Tolerance);

    std::vector<float> pos = random_floats(B * T * C, 77);
    DeviceBuffer<float> d_pos(pos);
    k::position_embedding_forward(pos.data(), wpe.data(), B, T, C);
    cu::position_embedding_forward(*ctx_, d_pos.get(), d_wpe.get(), B, T, C);
    sync();
    LATTICE_COMPARE("position_embedding out", d_pos.download(), pos, kFp32Tolerance);
  }

  void embedding_bf16_matches_cpu() { check_embedding_half<cu::bf16>(); }
  void embedding_fp16_matches_cpu() { check_embedding_half<cu::fp16>(); }
  void add_bias_bf16_matches_cpu() { check_add_bias_half<cu::bf16>(); }
  void add_bias_fp16_matches_cpu() { check_add_bias_half<cu::fp16>(); }

  void residual_dropout_matches_cpu() {
    const size_t n = 50001, offset = 12345;
    const float p = 0.1f;
    const uint64_t key = 0x5eedull;
    const auto res = random_floats(n, 81), x = random_floats(n, 82), dout = random_floats(n, 83);
    std::vector<float> out(n), dx(n);
    k::residual_dropout_forward(out.data(), res.data(), x.data(), n, p, key, offset);
    k::dropout_backward(dx.data(), dout.data(), n, p, key, offset);
    DeviceBuffer<float> d_res(res), d_x(x), d_dout(dout), d_out(n), d_dx(n);
    cu::residual_dropout_forward(*ctx_, d_out.get(), d_res.get(), d_x.get(), n, p, key, offset);
    cu::dropout_backward(*ctx_, d_dx.get(), d_dout.get(), n, p, key, offset);
    sync();
    LATTICE_COMPARE("residual_dropout out (same mask)", d_out.download(), out, kFp32Tolerance);
    LATTICE_COMPARE("dropout_backward dx (same mask)", d_dx.download(), dx, kFp32Tolerance);
  }

  void residual_dropout_bf16_matches_cpu() {
    // bf16 inputs (exact in fp32), the CPU op in fp32, the device rounding once on store.
    const size_t n = 50001, offset = 777;
    const float p = 0.1f;
    const uint64_t key = 0xd20bull;
    auto res = random_floats(n, 84), x = random_floats(n, 85), dout = random_floats(n, 86);
    round_to_bf16(res), round_to_bf16(x), round_to_bf16(dout);
    std::vector<float> out(n), dx(n);
    k::residual_dropout_forward(out.data(), res.data(), x.data(), n, p, key, offset);
    k::dropout_backward(dx.data(), dout.data(), n, p, key, offset);
    DeviceBuffer<cu::bf16> d_res(to_bf16(res)), d_x(to_bf16(x)), d_dout(to_bf16(dout)), d_out(n),
        d_dx(n);
    cu::residual_dropout_forward(*ctx_, d_out.get(), d_res.get(), d_x.get(), n, p, key, offset);
    cu::dropout_backward(*ctx_, d_dx.get(), d_dout.get(), n, p, key, offset);
    sync();
    LATTICE_COMPARE("bf16 residual_dropout out (same mask)", d_out.download(), out, kBf16Tolerance);
    LATTICE_COMPARE("bf16 dropout_backward dx (same mask)", d_dx.download(), dx, kBf16Tolerance);
  }

  // The Llama family's ops.
  void rmsnorm_fp32_matches_cpu() { check_rmsnorm<float>(); }
  void rmsnorm_bf16_matches_cpu() { check_rmsnorm<cu::bf16>(); }
  void rmsnorm_fp16_matches_cpu() { check_rmsnorm<cu::fp16>(); }
  // {B, T, NH, KV, HS, rotary_dim, positions array}: query groups, MQA with a positions array and
  // half the head rotated, GPT-2's per-head layout (KV = NH).
  void rope_fp32_matches_cpu() {
    check_rope<float>(2, 50, 8, 2, 64, 64, false);
    check_rope<float>(1, 33, 4, 1, 128, 64, true);
    check_rope<float>(2, 17, 4, 4, 64, 64, false);
  }
  void rope_bf16_matches_cpu() {
    check_rope<cu::bf16>(2, 50, 8, 2, 64, 64, true);
    check_rope<cu::bf16>(1, 33, 4, 1, 128, 96, false);
  }
  void rope_fp16_matches_cpu() {
    check_rope<cu::fp16>(2, 50, 8, 2, 64, 64, true);
    check_rope<cu::fp16>(1, 33, 4, 1, 128, 96, false);
  }
  void swiglu_fp32_matches_cpu() { check_swiglu<float>(); }
  void swiglu_bf16_matches_cpu() { check_swiglu<cu::bf16>(); }
  void swiglu_fp16_matches_cpu() { check_swiglu<cu::fp16>(); }

  void softmax_cross_entropy_matches_cpu() {
    const int N = 37, V = 5003;
    const auto logits = random_floats(N * V, 91, 3.0f);
    const auto targets = random_tokens(N, V, 92);
    std::vector<float> losses(N), dlogits(N * V);
    k::softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V,
                             0.25f);
    DeviceBuffer<float> d_logits(logits), d_losses(N);
    DeviceBuffer<int32_t> d_targets(targets);
    // dlogits aliases logits, as in training.
    cu::softmax_cross_entropy(*ctx_, d_losses.get(), d_logits.get(), d_logits.get(),
                              d_targets.get(), N, V, 0.25f);
    sync();
    LATTICE_COMPARE("cross_entropy losses", d_losses.download(), losses, kFp32Tolerance);
    LATTICE_COMPARE("cross_entropy dlogits (aliasing logits)", d_logits.download(), dlogits,
                    kFp32Tolerance);
  }

  void vocab_parallel_cross_entropy_matches_cpu() {
    // Two shards of the vocabulary; the host plays the tensor-parallel all-reduces.
    const int N = 19, V = 2048, half = V / 2;
    const auto logits = random_floats(N * V, 101, 2.0f);
    const auto targets = random_tokens(N, V, 102);
    std::vector<float> losses(N), dlogits(N * V);
    k::softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V,
                             1.0f);
    DeviceBuffer<int32_t> d_targets(targets);
    std::vector<std::unique_ptr<DeviceBuffer<float>>> shard, max, target_logit, shard_losses;
    std::vector<std::unique_ptr<DeviceBuffer<double>>> sum_exp;
    for (int s = 0; s < 2; s++) {
      std::vector<float> part(N * half);
      for (int n = 0; n < N; n++)
        std::copy_n(logits.begin() + n * V + s * half, half, part.begin() + n * half);
      shard.push_back(std::make_unique<DeviceBuffer<float>>(part));
      max.push_back(std::make_unique<DeviceBuffer<float>>(N));
      target_logit.push_back(std::make_unique<DeviceBuffer<float>>(N));
      shard_losses.push_back(std::make_unique<DeviceBuffer<float>>(N));
      sum_exp.push_back(std::make_unique<DeviceBuffer<double>>(N));
      cu::cross_entropy_shard_max(*ctx_, max[s]->get(), shard[s]->get(), N, half);
    }
    sync();
    std::vector<float> global_max = max[0]->download(), other = max[1]->download();
    for (int n = 0; n < N; n++) global_max[n] = std::max(global_max[n], other[n]);
    for (int s = 0; s < 2; s++) {
      max[s]->upload(global_max);
      cu::cross_entropy_shard_sums(*ctx_, sum_exp[s]->get(), target_logit[s]->get(),
                                   shard[s]->get(), max[s]->get(), d_targets.get(), s * half, N,
                                   half);
    }
    sync();
    std::vector<double> sums = sum_exp[0]->download(), sums1 = sum_exp[1]->download();
    std::vector<float> tl = target_logit[0]->download(), tl1 = target_logit[1]->download();
    for (int n = 0; n < N; n++) sums[n] += sums1[n], tl[n] += tl1[n];
    for (int s = 0; s < 2; s++) {
      sum_exp[s]->upload(sums);
      target_logit[s]->upload(tl);
      cu::cross_entropy_shard_finish(
          *ctx_, shard_losses[s]->get(), shard[s]->get(), shard[s]->get(), max[s]->get(),
          sum_exp[s]->get(), target_logit[s]->get(), d_targets.get(), s * half, N, half, 1.0f);
    }
    sync();
    for (int s = 0; s < 2; s++) {
      std::vector<float> expected(N * half);
      for (int n = 0; n < N; n++)
        std::copy_n(dlogits.begin() + n * V + s * half, half, expected.begin() + n * half);
      const std::string name = "vocab-parallel shard " + std::to_string(s);
      LATTICE_COMPARE(name + " losses", shard_losses[s]->download(), losses, kFp32Tolerance);
      LATTICE_COMPARE(name + " dlogits", shard[s]->download(), expected, kFp32Tolerance);
    }
  }

  void multi_tensor_adamw_matches_cpu() {
    // 30 tensors: more than one launch's worth (24), so the batching seam is crossed too.
    std::vector<size_t> sizes = {1000, 70001, 33, 65536, 0};
    for (size_t t = 0; sizes.size() < 30; t++) sizes.push_back(5 + 7 * t);
    k::AdamWParams p;
    p.lr = 3e-3f, p.step = 7, p.weight_decay = 0.1f;
    const float grad_scale = 0.5f;
    std::vector<cu::AdamWTensor> tensors;
    std::vector<std::vector<float>> params, ms, vs;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> keep;
    // Compute copies by tensor: bf16, fp16 and none in turn (one launch mixes all three).
    std::vector<std::unique_ptr<DeviceBuffer<cu::bf16>>> bf16_copies(sizes.size());
    std::vector<std::unique_ptr<DeviceBuffer<cu::fp16>>> fp16_copies(sizes.size());
    for (size_t t = 0; t < sizes.size(); t++) {
      const size_t n = sizes[t];
      auto param = random_floats(n, 200 + t), grad = random_floats(n, 300 + t),
           m = random_floats(n, 400 + t, 0.1f), v = random_floats(n, 500 + t, 0.1f);
      for (float& x : v) x = std::abs(x);
      cu::AdamWTensor desc;
      for (auto* host : {&param, &grad, &m, &v})
        keep.push_back(std::make_unique<DeviceBuffer<float>>(*host));
      if (t % 3 == 0) {
        bf16_copies[t] = std::make_unique<DeviceBuffer<cu::bf16>>(n);
        desc.param_copy = bf16_copies[t]->get();
      } else if (t % 3 == 1) {
        fp16_copies[t] = std::make_unique<DeviceBuffer<cu::fp16>>(n);
        desc.param_copy = fp16_copies[t]->get();
      }
      desc.param = keep[keep.size() - 4]->get();
      desc.grad = keep[keep.size() - 3]->get();
      desc.m = keep[keep.size() - 2]->get();
      desc.v = keep[keep.size() - 1]->get();
      desc.n = n;
      desc.decay = t % 2 == 0;  // odd tensors play biases / norms: no weight decay
      tensors.push_back(desc);
      for (float& g : grad) g *= grad_scale;
      k::AdamWParams cpu = p;
      cpu.weight_decay = desc.decay ? p.weight_decay : 0.0f;
      k::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, cpu);
      params.push_back(param), ms.push_back(m), vs.push_back(v);
    }
    cu::adamw_update(*ctx_, tensors.data(), static_cast<int>(tensors.size()), p, grad_scale);
    sync();
    for (size_t t = 0; t < sizes.size(); t++) {
      const std::string name = "adamw tensor " + std::to_string(t);
      LATTICE_COMPARE(name + " param", keep[4 * t]->download(), params[t], kFp32Tolerance);
      LATTICE_COMPARE(name + " m", keep[4 * t + 2]->download(), ms[t], kFp32Tolerance);
      LATTICE_COMPARE(name + " v", keep[4 * t + 3]->download(), vs[t], kFp32Tolerance);
      if (bf16_copies[t])
        LATTICE_COMPARE(name + " bf16 copy", bf16_copies[t]->download(), params[t], kBf16Tolerance);
      if (fp16_copies[t])
        LATTICE_COMPARE(name + " fp16 copy", fp16_copies[t]->download(), params[t], kFp16Tolerance);
    }
  }

  void sum_squares_and_scale_match_cpu() {
    const auto a = random_floats(123457, 601), b = random_floats(99, 602);
    const double expected = k::sum_squares(a.data(), a.size()) + k::sum_squares(b.data(), b.size());
    DeviceBuffer<float> d_a(a), d_b(b);
    DeviceBuffer<double> d_result(1);
    const float* tensors[] = {d_a.get(), d_b.get()};
    const size_t sizes[] = {a.size(), b.size()};
    cu::sum_squares(*ctx_, d_result.get(), tensors, sizes, 2);
    sync();
    const double got = d_result.download()[0];
    QVERIFY2(
        std::abs(got - expected) <= 1e-9 * expected,
        qPrintable(
            QString("sum_squares: GPU %1, CPU %2").arg(got, 0, 'g', 17).arg(expected, 0, 'g', 17)));
    const double single = cu::sum_squares(*ctx_, d_b.get(), b.size());
    QVERIFY2(std::abs(single - k::sum_squares(b.data(), b.size())) <= 1e-9 * single,
             "sum_squares (one tensor, host result) differs from the CPU");

    std::vector<float> x = a;
    k::scale(x.data(), x.size(), 0.37f);
    cu::scale(*ctx_, d_a.get(), a.size(), 0.37f);
    sync();
    LATTICE_COMPARE("scale x", d_a.download(), x, kFp32Tolerance);
  }

  void convert_round_trips() {
    const auto x = random_floats(1001, 701);
    std::vector<float> rounded = x;
    round_to_bf16(rounded);
    DeviceBuffer<float> d_x(x), d_back(x.size());
    DeviceBuffer<cu::bf16> d_b(x.size());
    cu::convert(*ctx_, d_b.get(), d_x.get(), x.size());
    cu::convert(*ctx_, d_back.get(), d_b.get(), x.size());
    sync();
    LATTICE_COMPARE("convert fp32 -> bf16 -> fp32 (same rounding as the host)", d_back.download(),
                    rounded, 0.0);

    // fp16: the same rounding as the host's to_fp16, and overflow to inf (never a saturated
    // 65504: the loss scaler must see it). Values around the limit and the subnormals.
    std::vector<float> y = random_floats(1001, 702, 1000.0f);
    for (float v : {65504.0f, 65519.0f, 65520.0f, -1e6f, 6e-8f, 3e-8f, 1e-5f, -0.0f})
      y.push_back(v);
    std::vector<float> y_rounded = y;
    round_to<cu::fp16>(y_rounded);
    QVERIFY2(std::isinf(y_rounded[1001 + 2]) && std::isinf(y_rounded[1001 + 3]),
             "host to_fp16: 65520 and -1e6 must round to inf");
    DeviceBuffer<float> d_y(y), d_y_back(y.size());
    DeviceBuffer<cu::fp16> d_h(y.size());
    cu::convert(*ctx_, d_h.get(), d_y.get(), y.size());
    cu::convert(*ctx_, d_y_back.get(), d_h.get(), y.size());
    sync();
    const std::vector<float> back = d_y_back.download();
    for (size_t i = 0; i < y.size(); i++)
      QVERIFY2(std::memcmp(&back[i], &y_rounded[i], sizeof(float)) == 0,
               qPrintable(QString("convert fp32 -> fp16 -> fp32 [%1] of %2: GPU %3, host %4")
                              .arg(i)
                              .arg(y[i], 0, 'g', 9)
                              .arg(back[i], 0, 'g', 9)
                              .arg(y_rounded[i], 0, 'g', 9)));
  }

  // The loss scaler sees an overflow only as a non-finite fp32 gradient (the squared norm). An
  // fp16 activation gradient that overflowed (inf) must reach every fp32 parameter gradient
  // computed from it as inf or NaN: through the GEMM (dweight), the bias and LayerNorm column
  // sums, the embedding scatter, and on through GELU and attention to the layers below.
  void fp16_overflow_reaches_the_fp32_grads() {
    const int N = 64, C = 128, OC = 64, NH = 1, T = 32, B = N / T;  // attention: HS 64
    auto dout = random_floats(N * OC, 801);
    dout[5 * OC + 7] = std::numeric_limits<float>::infinity();
    const auto inp = random_floats(N * C, 802), w = random_floats(OC * C, 803, 0.05f);
    DeviceBuffer<cu::fp16> d_dout(to_half<cu::fp16>(dout)), d_inp(to_half<cu::fp16>(inp)),
        d_w(to_half<cu::fp16>(w)), d_dinp(N * C);
    DeviceBuffer<float> d_dw(std::vector<float>(OC * C, 0.0f)), d_db(std::vector<float>(OC, 0.0f));
    cu::matmul_backward(*ctx_, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                        d_w.get(), N, C, OC);
    sync();
    QVERIFY2(has_non_finite(d_dw), "matmul_backward: an inf in fp16 dout left dweight finite");
    QVERIFY2(has_non_finite(d_db), "matmul_backward: an inf in fp16 dout left dbias finite");
    QVERIFY2(has_non_finite(d_dinp), "matmul_backward: an inf in fp16 dout left dinp finite");

    // LayerNorm backward from that dinp (N, C): its weight and bias gradients.
    const auto x = random_floats(N * C, 804), lw = random_floats(C, 805);
    std::vector<float> mean(N), rstd(N), ln_out(N * C);
    const std::vector<float> ones(C, 1.0f), zeros(C, 0.0f);
    k::layernorm_forward(ln_out.data(), mean.data(), rstd.data(), x.data(), ones.data(),
                         zeros.data(), N, C);
    DeviceBuffer<cu::fp16> d_x(to_half<cu::fp16>(x)), d_lw(to_half<cu::fp16>(lw)),
        d_ln_dinp(to_half<cu::fp16>(std::vector<float>(N * C, 0.0f)));
    DeviceBuffer<float> d_mean(mean), d_rstd(rstd), d_lnw(zeros), d_lnb(zeros);
    cu::layernorm_backward(*ctx_, d_ln_dinp.get(), d_lnw.get(), d_lnb.get(), d_dinp.get(),
                           d_x.get(), d_lw.get(), d_mean.get(), d_rstd.get(), N, C);
    sync();
    QVERIFY2(has_non_finite(d_lnw), "layernorm_backward: a non-finite dout left dweight finite");
    QVERIFY2(has_non_finite(d_lnb), "layernorm_backward: a non-finite dout left dbias finite");

    // Embedding backward of the residual stream's gradient.
    const auto tokens = random_tokens(N, 50, 806);
    DeviceBuffer<int32_t> d_tokens(tokens);
    DeviceBuffer<float> d_dwte(std::vector<float>(50 * C, 0.0f)),
        d_dwpe(std::vector<float>(T * C, 0.0f));
    cu::embedding_backward(*ctx_, d_dwte.get(), d_dwpe.get(), d_ln_dinp.get(), d_tokens.get(), B, T,
                           C);
    sync();
    QVERIFY2(has_non_finite(d_dwte), "embedding_backward: a non-finite dout left dwte finite");
    QVERIFY2(has_non_finite(d_dwpe), "embedding_backward: a non-finite dout left dwpe finite");

    // GELU and attention backward pass it on to the layers below.
    const auto pre = random_floats(N * C, 807);
    DeviceBuffer<cu::fp16> d_pre(to_half<cu::fp16>(pre)), d_gelu_dinp(N * C);
    cu::gelu_backward(*ctx_, d_gelu_dinp.get(), d_pre.get(), d_dinp.get(), N * C);
    const auto qkv = random_floats(3 * N * OC, 808);
    DeviceBuffer<cu::fp16> d_qkv(to_half<cu::fp16>(qkv)), d_att(N * OC), d_dqkv(3 * N * OC);
    DeviceBuffer<float> d_lse(B * NH * T), d_ws(cu::attention_workspace_floats(B, T, NH));
    cu::attention_forward(*ctx_, d_att.get(), d_lse.get(), d_qkv.get(), B, T, OC, NH, 0.0f, 0);
    cu::attention_backward(*ctx_, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_att.get(), d_lse.get(),
                           d_ws.get(), B, T, OC, NH, 0.0f, 0);
    sync();
    QVERIFY2(has_non_finite(d_gelu_dinp), "gelu_backward: a non-finite dout left dinp finite");
    QVERIFY2(has_non_finite(d_dqkv), "attention_backward: an inf in dout left dqkv finite");

    // A GEMM whose finite fp16 inputs give a result beyond 65504 (128 * 200 * 200 = 5.12e6):
    // cuBLASLt's fp16 output must be inf, not a saturated 65504 that no check would notice.
    DeviceBuffer<cu::fp16> d_big_inp(to_half<cu::fp16>(std::vector<float>(N * C, 200.0f))),
        d_big_w(to_half<cu::fp16>(std::vector<float>(OC * C, 200.0f))), d_big_out(N * OC);
    cu::matmul_forward(*ctx_, d_big_out.get(), nullptr, d_big_inp.get(), d_big_w.get(), nullptr, N,
                       C, OC, false);
    sync();
    for (float v : to_float(d_big_out.download()))
      QVERIFY2(std::isinf(v) && v > 0,
               qPrintable(QString("fp16 GEMM beyond 65504 gave %1, want +inf").arg(v)));
  }

  void unsupported_head_size_is_an_error_not_a_crash() {
    DeviceBuffer<float> qkv(3 * 96 * 4), out(96 * 4), lse(4 * 3);
    std::string error;
    auto ctx = cu::Context::create(&error);
    QVERIFY2(ctx, error.c_str());
    cu::attention_forward(*ctx, out.get(), lse.get(), qkv.get(), 1, 4, 96, 3, 0.0f, 0);  // HS 32
    const std::string got = ctx->synchronize();
    QVERIFY2(got.find("head size 32") != std::string::npos,
             ("expected an error naming head size 32, got: " + got).c_str());
  }
};

QTEST_GUILESS_MAIN(CudaOps)
#include "test_cuda_ops.moc"
