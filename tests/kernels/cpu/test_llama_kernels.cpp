// The Llama family's kernels (kernels.h, issue 23): RMSNorm (plain and fused with the residual
// add), RoPE, SwiGLU and attention over grouped keys and values. Each backward agrees with central
// finite differences of its forward in double precision; each forward agrees with a direct
// implementation of Hugging Face's formula written here (RMSNorm's x * rsqrt(mean(x^2) + eps) * w,
// rotate_half, silu(gate) * up, query head h reading key/value head h / (NH / KV)); the float
// kernels agree with the double ones. Every test runs once per copy of the kernels (generic,
// avx2, avx512: Note [CPU dispatch]); a copy this CPU cannot run is reported as skipped.
#include <QtTest/QtTest>

#include <cmath>

#include "common/cpu_isa_rows.h"
#include "common/grad_check.h"
#include "lattice/kernels.h"

using lattice::testing::check_gradient;
using lattice::testing::dot;
using lattice::testing::random_vector;
namespace k = lattice::kernels;

namespace {

// "" when every |a[i] - b[i]| <= tol * (1 + |b[i]|), else the first disagreement.
template <typename X>
QString differs(const char* tensor, const std::vector<X>& a, const std::vector<double>& b,
                double tol) {
  if (a.size() != b.size())
    return QString("%1: %2 vs %3 elements").arg(tensor).arg(a.size()).arg(b.size());
  for (size_t i = 0; i < a.size(); i++)
    if (!(std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i]))))
      return QString("%1[%2]: %3, expected %4 (tolerance %5)")
          .arg(tensor)
          .arg(i)
          .arg(double(a[i]), 0, 'g', 10)
          .arg(b[i], 0, 'g', 10)
          .arg(tol);
  return {};
}

#define VERIFY_CLOSE(tensor, a, b, tol)             \
  do {                                              \
    const QString why = differs(tensor, a, b, tol); \
    QVERIFY2(why.isEmpty(), qPrintable(why));       \
  } while (0)

std::vector<float> to_float(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

// Query heads of a grouped layout, as kernels.h describes it.
struct Grouped {
  int NH, KV, HS;
  int width() const { return (NH + 2 * KV) * HS; }
  int query(int h) const { return (h / (NH / KV)) * (NH / KV + 2) * HS + (h % (NH / KV)) * HS; }
  int key(int g) const { return g * (NH / KV + 2) * HS + (NH / KV) * HS; }
};

}  // namespace

class LlamaKernels : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { k::set_num_threads(2); }
  void initTestCase_data() { lattice::testing::add_cpu_isa_rows(); }
  void init() {
    const QString unavailable = lattice::testing::select_row_isa();
    if (!unavailable.isEmpty()) QSKIP(qPrintable(unavailable));
  }

  void rmsnorm_is_hugging_faces_formula() {
    const int N = 3, C = 10;
    const float eps = 1e-6f;
    const auto x = random_vector(N * C, 1, 2.0), w = random_vector(C, 2);
    std::vector<double> out(N * C), rstd(N), expected(N * C);
    k::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    for (int n = 0; n < N; n++) {
      double squares = 0;
      for (int c = 0; c < C; c++) squares += x[n * C + c] * x[n * C + c];
      const double r = 1 / std::sqrt(squares / C + eps);
      for (int c = 0; c < C; c++) expected[n * C + c] = x[n * C + c] * r * w[c];
    }
    VERIFY_CLOSE("rmsnorm out", out, expected, 1e-14);
    std::vector<float> out32(N * C), rstd32(N);
    const auto x32 = to_float(x), w32 = to_float(w);
    k::rmsnorm_forward(out32.data(), rstd32.data(), x32.data(), w32.data(), N, C, eps);
    VERIFY_CLOSE("rmsnorm out (float)", out32, expected, 1e-5);
  }

  void residual_rmsnorm_is_the_add_then_rmsnorm() {
    const int N = 4, C = 9;
    const auto r = random_vector(N * C, 3), x = random_vector(N * C, 4), w = random_vector(C, 5);
    std::vector<float> r32 = to_float(r), x32 = to_float(x), w32 = to_float(w);
    std::vector<float> sum(N * C), out(N * C), rstd(N), out2(N * C), rstd2(N);
    k::residual_rmsnorm_forward(sum.data(), out.data(), rstd.data(), r32.data(), x32.data(),
                                w32.data(), N, C, 1e-5f);
    for (int i = 0; i < N * C; i++) r32[i] += x32[i];
    k::rmsnorm_forward(out2.data(), rstd2.data(), r32.data(), w32.data(), N, C, 1e-5f);
    for (int i = 0; i < N * C; i++) {
      QVERIFY2(sum[i] == r32[i], qPrintable(QString("residual_out[%1] is not the sum").arg(i)));
      QVERIFY2(out[i] == out2[i], qPrintable(QString("out[%1] differs from rmsnorm of the "
                                                     "stored sum")
                                                 .arg(i)));
    }
  }

  void rmsnorm_backward_matches_finite_differences() {
    const int N = 3, C = 8;
    auto x = random_vector(N * C, 6), w = random_vector(C, 7);
    const auto dout = random_vector(N * C, 8);
    std::vector<double> out(N * C), rstd(N);
    auto loss = [&] {
      k::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
      return dot(out, dout);
    };
    loss();
    // dinp and dweight accumulate: start them at a known value and subtract it.
    std::vector<double> dx(N * C, 0.5), dw(C, -0.25);
    k::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    for (double& v : dx) v -= 0.5;
    for (double& v : dw) v += 0.25;
    std::string err = check_gradient("rmsnorm inp", x, dx, loss);
    QVERIFY2(err.empty(), err.c_str());
    err = check_gradient("rmsnorm weight", w, dw, loss);
    QVERIFY2(err.empty(), err.c_str());
  }

  void rope_is_rotate_half_on_queries_and_keys() {
    const int B = 2, T = 5, N = B * T;
    for (const Grouped g : {Grouped{4, 4, 6}, Grouped{4, 2, 6}, Grouped{6, 1, 8}}) {
      for (int R : {g.HS, (g.HS / 2) & ~1}) {  // all dims, or an even part (rotary-percent)
        std::vector<double> cos(T * R / 2), sin(T * R / 2);
        k::rope_tables(cos.data(), sin.data(), T, R, 10000.0);
        const auto x = random_vector(N * g.width(), 9);
        std::vector<double> y = x, expected = x;
        k::rope_forward(y.data(), cos.data(), sin.data(), nullptr, N, T, g.NH, g.KV, g.HS, R);
        // Hugging Face: q * cos + rotate_half(q) * sin with cos, sin repeated over both halves.
        auto rotate = [&](int n, int col) {
          const int t = n % T;
          for (int i = 0; i < R; i++) {
            const int j = i % (R / 2);
            const double half = i < R / 2 ? -x[n * g.width() + col + i + R / 2]
                                          : x[n * g.width() + col + i - R / 2];
            expected[n * g.width() + col + i] =
                x[n * g.width() + col + i] * cos[t * R / 2 + j] + half * sin[t * R / 2 + j];
          }
        };
        for (int n = 0; n < N; n++) {
          for (int h = 0; h < g.NH; h++) rotate(n, g.query(h));
          for (int kv = 0; kv < g.KV; kv++) rotate(n, g.key(kv));
        }
        VERIFY_CLOSE("rope qkv", y, expected, 1e-14);
        // Angles: position t, pair i turns by t * theta^(-2i/R) (here t 3, the last pair).
        const int i = R / 2 - 1;
        const double angle = 3 * std::pow(10000.0, -2.0 * i / R);
        QVERIFY2(std::abs(cos[3 * R / 2 + i] - std::cos(angle)) < 1e-6,
                 qPrintable(QString("cos table at (3, %1): %2, expected %3")
                                .arg(i)
                                .arg(cos[3 * R / 2 + i])
                                .arg(std::cos(angle))));
      }
    }
  }

  void rope_positions_array_and_backward() {
    const Grouped g{4, 2, 4};
    const int N = 6, T = 3, R = 4, P = 16;
    std::vector<double> cos(P * R / 2), sin(P * R / 2);
    k::rope_tables(cos.data(), sin.data(), P, R, 500000.0);
    const std::vector<int32_t> positions = {7, 0, 15, 2, 9, 1};
    auto x = random_vector(N * g.width(), 10);
    const auto dout = random_vector(N * g.width(), 11);
    std::vector<double> y;
    auto loss = [&] {
      y = x;
      k::rope_forward(y.data(), cos.data(), sin.data(), positions.data(), N, T, g.NH, g.KV, g.HS,
                      R);
      return dot(y, dout);
    };
    std::vector<double> dx = dout;
    k::rope_backward(dx.data(), cos.data(), sin.data(), positions.data(), N, T, g.NH, g.KV, g.HS,
                     R);
    const std::string err = check_gradient("rope qkv", x, dx, loss);
    QVERIFY2(err.empty(), err.c_str());
    // Rows at position 0 are not rotated; values never are.
    loss();
    for (int c = 0; c < g.width(); c++)
      QVERIFY2(y[1 * g.width() + c] == x[1 * g.width() + c],
               qPrintable(QString("row at position 0 changed at column %1").arg(c)));
    for (int kv = 0; kv < g.KV; kv++)
      for (int n = 0; n < N; n++)
        for (int d = 0; d < g.HS; d++) {
          const int col = n * g.width() + g.key(kv) + g.HS + d;
          QVERIFY2(y[col] == x[col], qPrintable(QString("value element %1 changed").arg(col)));
        }
  }

  void swiglu_forward_and_backward() {
    const int N = 3, F = 7;
    auto inp = random_vector(N * 2 * F, 12, 2.0);
    const auto dout = random_vector(N * F, 13);
    std::vector<double> out(N * F), expected(N * F);
    auto loss = [&] {
      k::swiglu_forward(out.data(), inp.data(), N, F);
      return dot(out, dout);
    };
    loss();
    for (int n = 0; n < N; n++)
      for (int f = 0; f < F; f++) {
        const double gate = inp[n * 2 * F + f], up = inp[n * 2 * F + F + f];
        expected[n * F + f] = gate / (1 + std::exp(-gate)) * up;
      }
    VERIFY_CLOSE("swiglu out", out, expected, 1e-14);
    std::vector<double> dinp(N * 2 * F);
    k::swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
    const std::string err = check_gradient("swiglu inp", inp, dinp, loss);
    QVERIFY2(err.empty(), err.c_str());
    std::vector<float> out32(N * F);
    const auto inp32 = to_float(inp);
    k::swiglu_forward(out32.data(), inp32.data(), N, F);
    VERIFY_CLOSE("swiglu out (float)", out32, expected, 1e-5);
  }

  // Grouped attention equals multi-head attention over keys and values copied to every query
  // head of their group; its backward sums the copies' gradients.
  void grouped_attention_equals_attention_over_copied_keys() {
    const int B = 2, T = 6;
    for (const Grouped g : {Grouped{4, 2, 4}, Grouped{4, 1, 4}, Grouped{6, 3, 2}}) {
      const int C = g.NH * g.HS, N = B * T;
      const auto qkv = random_vector(N * g.width(), 14);
      const auto dout = random_vector(N * C, 15);
      std::vector<double> mha(N * 3 * C);  // per-head [q|k|v]
      for (int n = 0; n < N; n++)
        for (int h = 0; h < g.NH; h++)
          for (int d = 0; d < g.HS; d++) {
            const int kv = h / (g.NH / g.KV);
            double* to = &mha[n * 3 * C + h * 3 * g.HS];
            const double* from = &qkv[n * g.width()];
            to[d] = from[g.query(h) + d];
            to[g.HS + d] = from[g.key(kv) + d];
            to[2 * g.HS + d] = from[g.key(kv) + g.HS + d];
          }
      std::vector<double> out(N * C), ref(N * C), lse(B * g.NH * T),
          lse_ref(B * g.NH * T);
      std::vector<double> ws(k::attention_workspace_elems(T, g.HS) * k::num_threads());
      k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, g.NH, 0.0f, 0, ws.data(),
                           0, 0, g.KV);
      k::attention_forward(ref.data(), lse_ref.data(), mha.data(), B, T, C, g.NH, 0.0f, 0,
                           ws.data());
      VERIFY_CLOSE("grouped attention out", out, ref, 1e-12);
      std::vector<double> dqkv(N * g.width()), dmha(N * 3 * C), expected(N * g.width(), 0.0);
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), B, T, C, g.NH, 0.0f,
                            0, ws.data(), 0, 0, g.KV);
      k::attention_backward(dmha.data(), dout.data(), mha.data(), lse_ref.data(), B, T, C, g.NH,
                            0.0f, 0, ws.data());
      for (int n = 0; n < N; n++)
        for (int h = 0; h < g.NH; h++)
          for (int d = 0; d < g.HS; d++) {
            const int kv = h / (g.NH / g.KV);
            const double* from = &dmha[n * 3 * C + h * 3 * g.HS];
            double* to = &expected[n * g.width()];
            to[g.query(h) + d] = from[d];
            to[g.key(kv) + d] += from[g.HS + d];
            to[g.key(kv) + g.HS + d] += from[2 * g.HS + d];
          }
      VERIFY_CLOSE("grouped attention dqkv", dqkv, expected, 1e-12);
    }
  }

  void grouped_attention_backward_matches_finite_differences() {
    const Grouped g{4, 2, 3};
    const int B = 2, T = 4, C = g.NH * g.HS;
    for (float p : {0.0f, 0.25f}) {
      auto qkv = random_vector(B * T * g.width(), 16);
      const auto dout = random_vector(B * T * C, 17);
      std::vector<double> out(B * T * C), lse(B * g.NH * T), dqkv(B * T * g.width());
      std::vector<double> ws(k::attention_workspace_elems(T, g.HS) * k::num_threads());
      auto loss = [&] {
        k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, g.NH, p, 5, ws.data(),
                             0, 0, g.KV);
        return dot(out, dout);
      };
      loss();
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), B, T, C, g.NH, p, 5,
                            ws.data(), 0, 0, g.KV);
      const std::string err = check_gradient(
          "grouped attention qkv (dropout " + std::to_string(p) + ")", qkv, dqkv, loss);
      QVERIFY2(err.empty(), err.c_str());
    }
  }

  // Decoding with a cache of KV heads gives the training attention's rows.
  void grouped_kv_cache_attention_equals_attention() {
    const Grouped g{4, 2, 4};
    const int T = 5, C = g.NH * g.HS;
    const auto qkv = random_vector(T * g.width(), 18);
    std::vector<double> out(T * C), lse(g.NH * T), cached(T * C);
    std::vector<double> ws(k::attention_workspace_elems(T, g.HS) * k::num_threads());
    k::attention_forward(out.data(), lse.data(), qkv.data(), 1, T, C, g.NH, 0.0f, 0, ws.data(), 0,
                         0, g.KV);
    const int max_T = 8;
    std::vector<double> k_cache(g.KV * max_T * g.HS), v_cache(g.KV * max_T * g.HS);
    std::vector<double> kv_ws(static_cast<size_t>(max_T) * k::num_threads());
    std::vector<int32_t> slot_of(T, 0), positions(T);
    for (int t = 0; t < T; t++) positions[t] = t;
    // The prompt's first three rows at once, then one row at a time.
    k::attention_kv_forward(cached.data(), k_cache.data(), v_cache.data(), qkv.data(),
                            slot_of.data(), positions.data(), 3, g.NH, g.HS, max_T, kv_ws.data(),
                            g.KV);
    for (int t = 3; t < T; t++)
      k::attention_kv_forward(cached.data() + t * C, k_cache.data(), v_cache.data(),
                              qkv.data() + t * g.width(), slot_of.data(), positions.data() + t, 1,
                              g.NH, g.HS, max_T, kv_ws.data(), g.KV);
    VERIFY_CLOSE("cached grouped attention", cached, out, 1e-12);
  }
};

QTEST_APPLESS_MAIN(LlamaKernels)
#include "test_llama_kernels.moc"
