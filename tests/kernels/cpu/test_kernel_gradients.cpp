// Every kernel's backward agrees with central finite differences of its forward, computed
// in double precision; and the float kernels agree with the double ones. Every test runs once
// per copy of the kernels (generic, avx2, avx512: Note [CPU dispatch]); a copy this CPU cannot
// run is reported as skipped.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>

#include "common/cpu_isa_rows.h"
#include "common/grad_check.h"
#include "lattice/cpu_isa.h"
#include "lattice/dropout_hash.h"
#include "lattice/kernels.h"

using lattice::testing::check_gradient;
using lattice::testing::dot;
using lattice::testing::random_vector;
namespace k = lattice::kernels;

namespace {

std::vector<float> to_float(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

// "" when every |f[i] - d[i]| <= rtol * (1 + |d[i]|), else the first disagreement.
QString disagreement(const char* tensor, const std::vector<float>& f, const std::vector<double>& d,
                     double rtol) {
  if (f.size() != d.size())
    return QString("%1: %2 vs %3 elements").arg(tensor).arg(f.size()).arg(d.size());
  for (size_t i = 0; i < f.size(); i++) {
    const double tol = rtol * (1 + std::abs(d[i]));
    if (!(std::abs(f[i] - d[i]) <= tol))
      return QString("%1[%2]: float %3, double %4 (|diff| %5 > tolerance %6)")
          .arg(tensor)
          .arg(i)
          .arg(f[i], 0, 'g', 9)
          .arg(d[i], 0, 'g', 12)
          .arg(std::abs(f[i] - d[i]), 0, 'g', 3)
          .arg(tol, 0, 'g', 3);
  }
  return {};
}

}  // namespace

#define VERIFY_AGREE(tensor, f, d, rtol)                  \
  do {                                                    \
    const QString why = disagreement(tensor, f, d, rtol); \
    QVERIFY2(why.isEmpty(), qPrintable(why));             \
  } while (0)

class KernelGradients : public QObject {
  Q_OBJECT

  template <typename T>
  void check_ignored_targets() {
    const int N = 5, V = 300, half = V / 2;
    const auto logits_d = random_vector(N * V, 61, 3.0);
    const std::vector<T> logits(logits_d.begin(), logits_d.end());
    const std::vector<int32_t> all = {7, 299, 0, 150, 42};
    const std::vector<int32_t> masked = {7, k::kIgnoreIndex, 0, k::kIgnoreIndex, 42};
    std::vector<T> want_loss(N), want_d(logits.size());
    k::softmax_cross_entropy(want_loss.data(), want_d.data(), logits.data(), all.data(), N, V,
                             0.5f);
    auto check = [&](const char* how, const std::vector<T>& loss, const std::vector<T>& d) {
      for (int n = 0; n < N; n++) {
        const bool ignored = masked[n] < 0;
        QVERIFY2(loss[n] == (ignored ? T(0) : want_loss[n]),
                 qPrintable(QString("%1 loss[%2] = %3").arg(how).arg(n).arg(double(loss[n]))));
        for (int v = 0; v < V; v++) {
          const T expected = ignored ? T(0) : want_d[n * V + v];
          QVERIFY2(d[n * V + v] == expected, qPrintable(QString("%1 dlogits[%2, %3] = %4, want %5")
                                                            .arg(how)
                                                            .arg(n)
                                                            .arg(v)
                                                            .arg(double(d[n * V + v]))
                                                            .arg(double(expected))));
        }
      }
    };
    std::vector<T> loss(N, T(99)), d = logits;  // dlogits aliases logits
    k::softmax_cross_entropy(loss.data(), d.data(), d.data(), masked.data(), N, V, 0.5f);
    check("whole", loss, d);
    // Without a gradient only the losses are written.
    std::vector<T> loss_only(N, T(99));
    k::softmax_cross_entropy<T>(loss_only.data(), nullptr, logits.data(), masked.data(), N, V, 0);
    check("forward only", loss_only, d);
    // Two vocabulary shards reduced as tensor parallelism reduces them.
    std::vector<T> sh[2], mx[2], tl[2];
    std::vector<double> sums[2];
    for (int r = 0; r < 2; r++) {
      sh[r].resize(N * half), mx[r].resize(N), tl[r].resize(N), sums[r].resize(N);
      for (int i = 0; i < N; i++)
        std::copy_n(logits.data() + i * V + r * half, half, sh[r].data() + i * half);
      k::cross_entropy_shard_max(mx[r].data(), sh[r].data(), N, half);
    }
    std::vector<T> row_max(N), target_logit(N);
    std::vector<double> sum(N);
    for (int i = 0; i < N; i++) row_max[i] = std::max(mx[0][i], mx[1][i]);
    for (int r = 0; r < 2; r++)
      k::cross_entropy_shard_sums(sums[r].data(), tl[r].data(), sh[r].data(), row_max.data(),
                                  masked.data(), r * half, N, half);
    for (int i = 0; i < N; i++)
      sum[i] = sums[0][i] + sums[1][i], target_logit[i] = tl[0][i] + tl[1][i];
    std::vector<T> loss_s(N, T(99)), d_s(N * V);
    for (int r = 0; r < 2; r++) {
      k::cross_entropy_shard_finish(loss_s.data(), sh[r].data(), sh[r].data(), row_max.data(),
                                    sum.data(), target_logit.data(), masked.data(), r * half, N,
                                    half, 0.5f);
      for (int i = 0; i < N; i++)
        std::copy_n(sh[r].data() + i * half, half, d_s.data() + i * V + r * half);
    }
    // The shards' sums are added in another order than the whole row's: compare the unmasked
    // rows loosely, the ignored ones exactly.
    for (int n = 0; n < N; n++) {
      const bool ignored = masked[n] < 0;
      const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
      QVERIFY2(ignored ? loss_s[n] == T(0) : std::abs(loss_s[n] - want_loss[n]) <= tol,
               qPrintable(QString("sharded loss[%1] = %2").arg(n).arg(double(loss_s[n]))));
      for (int v = 0; v < V; v++) {
        const double got = d_s[n * V + v];
        QVERIFY2(ignored ? got == 0.0 : std::abs(got - want_d[n * V + v]) <= tol,
                 qPrintable(QString("sharded dlogits[%1, %2] = %3").arg(n).arg(v).arg(got)));
      }
    }
  }

 private slots:
  void initTestCase() { k::set_num_threads(2); }
  void initTestCase_data() { lattice::testing::add_cpu_isa_rows(); }
  void init() {
    const QString unavailable = lattice::testing::select_row_isa();
    if (!unavailable.isEmpty()) QSKIP(qPrintable(unavailable));
  }

  void the_dispatcher_runs_the_selected_copy() {
    QFETCH_GLOBAL(QString, isa);
    const int expected = isa == "avx512" ? 64 : isa == "avx2" ? 32 : 16;
    QVERIFY2(k::cpu_isa_vector_bytes() == expected,
             qPrintable(QString("%1: the kernels that ran were compiled for %2-byte vectors, "
                                "expected %3")
                            .arg(isa)
                            .arg(k::cpu_isa_vector_bytes())
                            .arg(expected)));
  }

  void matmul_backward_matches_finite_differences() {
    const int N = 5, C = 7, OC = 6;
    auto inp = random_vector(N * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3);
    const auto dout = random_vector(N * OC, 4);
    std::vector<double> out(N * OC);
    auto loss = [&] {
      k::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
      return dot(out, dout);
    };
    std::vector<double> dinp(N * C), dw(OC * C, 0.0), db(OC, 0.0);
    k::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
    for (auto [name, x, g] :
         {std::tuple{"inp", &inp, &dinp}, {"weight", &w, &dw}, {"bias", &b, &db}}) {
      const std::string err = check_gradient(std::string("matmul ") + name, *x, *g, loss);
      QVERIFY2(err.empty(), err.c_str());
    }
  }

  void matmul_backward_accumulates_parameter_gradients() {
    const int N = 3, C = 4, OC = 2;
    auto inp = random_vector(N * C, 5), w = random_vector(OC * C, 6);
    const auto dout = random_vector(N * OC, 7);
    std::vector<double> dinp(N * C), dw_once(OC * C, 0.0), dw_twice(OC * C, 0.0), db(OC, 0.0),
        db2(OC, 0.0);
    k::matmul_backward(dinp.data(), dw_once.data(), db.data(), dout.data(), inp.data(), w.data(), N,
                       C, OC);
    k::matmul_backward(dinp.data(), dw_twice.data(), db2.data(), dout.data(), inp.data(), w.data(),
                       N, C, OC);
    k::matmul_backward(dinp.data(), dw_twice.data(), db2.data(), dout.data(), inp.data(), w.data(),
                       N, C, OC);
    for (int i = 0; i < OC * C; i++)
      QVERIFY2(std::abs(dw_twice[i] - 2 * dw_once[i]) < 1e-12,
               qPrintable(QString("dweight[%1] did not accumulate").arg(i)));
  }

  void layernorm_backward_matches_finite_differences() {
    const int N = 4, C = 9;
    auto inp = random_vector(N * C, 11), w = random_vector(C, 12), b = random_vector(C, 13);
    const auto dout = random_vector(N * C, 14);
    std::vector<double> out(N * C), mean(N), rstd(N);
    auto loss = [&] {
      k::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                           C);
      return dot(out, dout);
    };
    loss();
    std::vector<double> dinp(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
    k::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
    for (auto [name, x, g] :
         {std::tuple{"inp", &inp, &dinp}, {"weight", &w, &dw}, {"bias", &b, &db}}) {
      const std::string err = check_gradient(std::string("layernorm ") + name, *x, *g, loss);
      QVERIFY2(err.empty(), err.c_str());
    }
  }

  void gelu_backward_matches_finite_differences() {
    const size_t n = 64;
    auto inp = random_vector(n, 21, 2.0);
    const auto dout = random_vector(n, 22);
    std::vector<double> out(n), dinp(n);
    auto loss = [&] {
      k::gelu_forward(out.data(), inp.data(), n);
      return dot(out, dout);
    };
    k::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    const std::string err = check_gradient("gelu inp", inp, dinp, loss);
    QVERIFY2(err.empty(), err.c_str());
  }

  void residual_dropout_backward_matches_finite_differences() {
    const size_t n = 200;
    for (float p : {0.0f, 0.3f}) {
      auto x = random_vector(n, 31), res = random_vector(n, 32);
      const auto dout = random_vector(n, 33);
      std::vector<double> out(n), dx(n);
      auto loss = [&] {
        k::residual_dropout_forward(out.data(), res.data(), x.data(), n, p, 99);
        return dot(out, dout);
      };
      k::dropout_backward(dx.data(), dout.data(), n, p, 99);
      std::string err =
          check_gradient("residual_dropout x (p=" + std::to_string(p) + ")", x, dx, loss);
      QVERIFY2(err.empty(), err.c_str());
      err = check_gradient("residual_dropout residual", res, dout, loss);
      QVERIFY2(err.empty(), err.c_str());
    }
  }

  void dropout_keeps_the_expected_fraction() {
    const size_t n = 200000;
    std::vector<double> ones(n, 1.0), out(n);
    k::residual_dropout_forward<double>(out.data(), nullptr, ones.data(), n, 0.25f, 7);
    size_t kept = 0;
    for (double v : out) {
      if (v != 0.0) {
        kept++;
        QCOMPARE(v, 1.0 / 0.75);
      }
    }
    const double fraction = static_cast<double>(kept) / n;
    QVERIFY2(std::abs(fraction - 0.75) < 0.005,
             qPrintable(QString("kept fraction %1, expected 0.75 +- 0.005").arg(fraction)));
  }

  void float_dropout_draws_the_hash_mask() {
    // The float copies draw a vector of masks at once (dropout_row.h); each element must keep
    // or drop as dropout_keep says, from an index offset that is no multiple of a vector.
    const size_t n = 4096 * 9 + 13, offset = 5;
    const float p = 0.3f;
    const std::vector<float> ones(n, 1.0f);
    std::vector<float> out(n), dx(n);
    k::residual_dropout_forward<float>(out.data(), nullptr, ones.data(), n, p, 17, offset);
    k::dropout_backward(dx.data(), ones.data(), n, p, 17, offset);
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    const uint32_t threshold = k::dropout_threshold(p);
    for (size_t i = 0; i < n; i++) {
      const float expected = k::dropout_keep(17, offset + i, threshold) ? scale : 0.0f;
      if (out[i] != expected || dx[i] != expected)
        QFAIL(qPrintable(QString("element %1: forward %2, backward %3, the hash says %4")
                             .arg(i)
                             .arg(out[i])
                             .arg(dx[i])
                             .arg(expected)));
    }
  }

  void attention_backward_matches_finite_differences() {
    const int B = 2, T = 5, C = 8, NH = 2;
    for (float p : {0.0f, 0.2f}) {
      auto qkv = random_vector(B * T * 3 * C, 41);
      const auto dout = random_vector(B * T * C, 42);
      std::vector<double> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C);
      std::vector<double> ws(k::attention_workspace_elems(T, C / NH) * k::num_threads());
      auto loss = [&] {
        k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, p, 5, ws.data());
        return dot(out, dout);
      };
      loss();
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), B, T, C, NH, p, 5,
                            ws.data());
      const std::string err =
          check_gradient("attention qkv (dropout " + std::to_string(p) + ")", qkv, dqkv, loss);
      QVERIFY2(err.empty(), err.c_str());
    }
  }

  // Past kAttentionRowBlock rows the backward runs a head block by block, last block first,
  // adding each block's key and value gradients (a partial last block of 3 rows here), with
  // two query heads sharing one key-value group so that the second head adds to the first's.
  void attention_backward_over_row_blocks_matches_finite_differences() {
    const int B = 1, T = 2 * k::kAttentionRowBlock + 3, C = 4, NH = 2, KV = 1;
    const int W = (NH + 2 * KV) * (C / NH);
    for (float p : {0.0f, 0.2f}) {
      auto qkv = random_vector(B * T * W, 44);
      const auto dout = random_vector(B * T * C, 45);
      std::vector<double> out(B * T * C), lse(B * NH * T), dqkv(B * T * W);
      std::vector<double> ws(k::attention_workspace_elems(T, C / NH) * k::num_threads());
      // Three blocks of kAttentionRowBlock rows (not T), and the key and value head packed
      // three times, each with some padding.
      const size_t R = k::kAttentionRowBlock, HS = C / NH;
      QVERIFY(k::attention_workspace_elems(T, HS) >= 3 * R * T + 3 * HS * T);
      QVERIFY(k::attention_workspace_elems(T, HS) <=
              3 * R * (T + 32) + 2 * HS * (T + 64) + T * (HS + 64));
      auto loss = [&] {
        k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, p, 9, ws.data(), 0,
                             NH, KV);
        return dot(out, dout);
      };
      loss();
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), B, T, C, NH, p, 9,
                            ws.data(), 0, NH, KV);
      const std::string err = check_gradient(
          "attention qkv over row blocks (dropout " + std::to_string(p) + ")", qkv, dqkv, loss);
      QVERIFY2(err.empty(), err.c_str());
    }
  }

  // The attention's products run on register tiles of 6 rows and up to 64 columns (Note
  // [attention tile GEMM], kernels/cpu/tile_gemm.h): whole tiles, a last partial one of rows and
  // of columns, heads of 64 (whole vectors), 128 (two panels with AVX-512), 40 (a partial panel
  // on every ISA) and 3 (less than a vector), packed documents whose first keys fall inside a
  // panel, two query heads per key. Float and double, forward and backward, against the
  // definition computed here in double, one row at a time.
  void attention_matches_its_definition() {
    const int B = 2, T = 131, NH = 2, KV = 1, Q = NH / KV;
    std::vector<int32_t> packed(static_cast<size_t>(B) * T);
    for (int t = 0; t < T; t++) packed[t] = t, packed[T + t] = t < 70 ? t : t - 70;
    for (int HS : {64, 40, 128, 3})
      for (const int32_t* pos : {static_cast<const int32_t*>(nullptr),
                                 static_cast<const int32_t*>(packed.data())}) {
        const int C = NH * HS, W = (NH + 2 * KV) * HS;
        const auto qkv = random_vector(static_cast<size_t>(B) * T * W, 71);
        const auto dout = random_vector(static_cast<size_t>(B) * T * C, 72);
        auto column = [&](int h, int part) {  // part 0: query head h; 1: its key; 2: its value
          const int g = h / Q;
          return g * (Q + 2) * HS + (part == 0 ? (h % Q) * HS : (Q + part - 1) * HS);
        };
        std::vector<double> out(B * T * C, 0.0), dqkv(B * T * W, 0.0);
        const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
        for (int b = 0; b < B; b++)
          for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
              const double* row = &qkv[(static_cast<size_t>(b) * T + i) * W];
              const int first = pos ? i - pos[b * T + i] : 0, n = i + 1 - first;
              auto at = [&](int j, int part, int d) {
                return qkv[(static_cast<size_t>(b) * T + j) * W + column(h, part) + d];
              };
              std::vector<double> p(n), dp(n);
              double top = -1e300, sum = 0;
              for (int j = 0; j < n; j++) {
                double s = 0;
                for (int d = 0; d < HS; d++) s += row[column(h, 0) + d] * at(first + j, 1, d);
                p[j] = s * scale;
                top = std::max(top, p[j]);
              }
              for (double& x : p) sum += (x = std::exp(x - top));
              for (double& x : p) x /= sum;
              const double* dO = &dout[(static_cast<size_t>(b) * T + i) * C + h * HS];
              double* o = &out[(static_cast<size_t>(b) * T + i) * C + h * HS];
              double pdp = 0;
              for (int j = 0; j < n; j++) {
                for (int d = 0; d < HS; d++) {
                  o[d] += p[j] * at(first + j, 2, d);
                  dp[j] += dO[d] * at(first + j, 2, d);
                }
                pdp += p[j] * dp[j];
              }
              double* dq = &dqkv[(static_cast<size_t>(b) * T + i) * W + column(h, 0)];
              for (int j = 0; j < n; j++) {
                const double ds = p[j] * (dp[j] - pdp) * scale;
                double* key_row = &dqkv[(static_cast<size_t>(b) * T + first + j) * W];
                for (int d = 0; d < HS; d++) {
                  dq[d] += ds * at(first + j, 1, d);
                  key_row[column(h, 1) + d] += ds * row[column(h, 0) + d];
                  key_row[column(h, 2) + d] += p[j] * dO[d];
                }
              }
            }
        std::vector<double> out_d(out.size()), lse_d(B * NH * T), dqkv_d(dqkv.size()),
            ws_d(k::attention_workspace_elems(T, HS) * k::num_threads());
        k::attention_forward(out_d.data(), lse_d.data(), qkv.data(), B, T, C, NH, 0.0f, 0,
                             ws_d.data(), 0, NH, KV, pos);
        k::attention_backward(dqkv_d.data(), dout.data(), qkv.data(), lse_d.data(), B, T, C, NH,
                              0.0f, 0, ws_d.data(), 0, NH, KV, pos);
        std::vector<float> out_f(out.size()), lse_f(lse_d.size()), dqkv_f(dqkv.size()),
            ws_f(ws_d.size());
        const std::vector<float> qkv_f = to_float(qkv), dout_f = to_float(dout);
        k::attention_forward(out_f.data(), lse_f.data(), qkv_f.data(), B, T, C, NH, 0.0f, 0,
                             ws_f.data(), 0, NH, KV, pos);
        k::attention_backward(dqkv_f.data(), dout_f.data(), qkv_f.data(), lse_f.data(), B, T, C,
                              NH, 0.0f, 0, ws_f.data(), 0, NH, KV, pos);
        const QString where = QString(" (head size %1, %2)").arg(HS).arg(pos ? "packed" : "causal");
        for (const auto& [name, got, want] :
             {std::tuple{"out", &out_d, &out}, std::tuple{"dqkv", &dqkv_d, &dqkv}}) {
          const QString why = disagreement(name, to_float(*got), *want, 1e-6);
          QVERIFY2(why.isEmpty(), qPrintable("double " + why + where));
        }
        VERIFY_AGREE(qPrintable("float out" + where), out_f, out, 2e-5);
        VERIFY_AGREE(qPrintable("float dqkv" + where), dqkv_f, dqkv, 2e-5);
      }
  }

  void attention_is_causal() {
    const int B = 1, T = 6, C = 4, NH = 1;
    auto qkv = random_vector(T * 3 * C, 43);
    std::vector<double> out(T * C), out2(T * C), lse(T);
    std::vector<double> ws(k::attention_workspace_elems(T, C / NH) * k::num_threads());
    k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, 0.0f, 0, ws.data());
    for (int c = 0; c < 3 * C; c++) qkv[(T - 1) * 3 * C + c] += 1.0;  // change the last token
    k::attention_forward(out2.data(), lse.data(), qkv.data(), B, T, C, NH, 0.0f, 0, ws.data());
    for (int i = 0; i < (T - 1) * C; i++)
      QVERIFY2(out[i] == out2[i], qPrintable(QString("out[%1] saw a future token").arg(i)));
  }

  void softmax_cross_entropy_backward_matches_finite_differences() {
    const int N = 4, V = 11;
    auto logits = random_vector(N * V, 51, 3.0);
    const std::vector<int32_t> targets = {0, 10, 5, 3};
    const float scale = 0.25f;
    std::vector<double> losses(N), dlogits(N * V);
    auto loss = [&] {
      k::softmax_cross_entropy<double>(losses.data(), nullptr, logits.data(), targets.data(), N, V,
                                       0);
      double s = 0;
      for (double l : losses) s += l;
      return s * scale;
    };
    k::softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V,
                             scale);
    const std::string err = check_gradient("cross_entropy logits", logits, dlogits, loss);
    QVERIFY2(err.empty(), err.c_str());
    // The loss itself: -log softmax at the target, computed directly.
    loss();  // the finite differences left perturbed losses behind
    for (int n = 0; n < N; n++) {
      double z = 0;
      for (int v = 0; v < V; v++) z += std::exp(logits[n * V + v]);
      const double expected = std::log(z) - logits[n * V + targets[n]];
      QVERIFY2(std::abs(losses[n] - expected) < 1e-12, qPrintable(QString("loss[%1]").arg(n)));
    }
  }

  void cross_entropy_gradient_may_alias_logits() {
    const int N = 3, V = 7;
    auto logits = random_vector(N * V, 52);
    const std::vector<int32_t> targets = {1, 2, 6};
    std::vector<double> losses(N), d(N * V), losses2(N);
    k::softmax_cross_entropy(losses.data(), d.data(), logits.data(), targets.data(), N, V, 1.0f);
    k::softmax_cross_entropy(losses2.data(), logits.data(), logits.data(), targets.data(), N, V,
                             1.0f);
    for (int i = 0; i < N * V; i++) QCOMPARE(logits[i], d[i]);
    for (int n = 0; n < N; n++) QCOMPARE(losses2[n], losses[n]);
  }

  // kIgnoreIndex (SFT's masked tokens): an ignored row has loss 0 and a zero gradient row, the
  // other rows are exactly what they are without the ignored ones; whole and in two vocabulary
  // shards, logits aliased by dlogits (as the model calls it), in float and double.
  void ignored_targets_give_no_loss_and_no_gradient() { check_ignored_targets<double>(); }
  void float_ignored_targets_give_no_loss_and_no_gradient() { check_ignored_targets<float>(); }

  void embedding_backward_matches_finite_differences() {
    const int B = 2, T = 3, C = 4, V = 5;
    auto wte = random_vector(V * C, 61), wpe = random_vector(T * C, 62);
    const std::vector<int32_t> tokens = {1, 4, 1, 0, 1, 3};  // repeated tokens accumulate
    const auto dout = random_vector(B * T * C, 63);
    std::vector<double> out(B * T * C), dwte(V * C, 0.0), dwpe(T * C, 0.0);
    auto loss = [&] {
      k::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
      return dot(out, dout);
    };
    k::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    std::string err = check_gradient("embedding wte", wte, dwte, loss);
    QVERIFY2(err.empty(), err.c_str());
    err = check_gradient("embedding wpe", wpe, dwpe, loss);
    QVERIFY2(err.empty(), err.c_str());
  }

  void adamw_matches_the_reference_formula() {
    const size_t n = 37;
    auto p = random_vector(n, 71), g = random_vector(n, 72);
    std::vector<double> m(n, 0.0), v(n, 0.0);
    auto p_ref = p;
    std::vector<double> m_ref(n, 0.0), v_ref(n, 0.0);
    k::AdamWParams hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.1f;
    for (int step = 1; step <= 3; step++) {
      hp.step = step;
      k::adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp);
      const double b1 = hp.beta1, b2 = hp.beta2;
      for (size_t i = 0; i < n; i++) {
        m_ref[i] = b1 * m_ref[i] + (1 - b1) * g[i];
        v_ref[i] = b2 * v_ref[i] + (1 - b2) * g[i] * g[i];
        const double mh = m_ref[i] / (1 - std::pow(b1, step)),
                     vh = v_ref[i] / (1 - std::pow(b2, step));
        p_ref[i] -= double(hp.lr) *
                    (mh / (std::sqrt(vh) + double(hp.eps)) + double(hp.weight_decay) * p_ref[i]);
      }
    }
    for (size_t i = 0; i < n; i++)
      QVERIFY2(std::abs(p[i] - p_ref[i]) < 1e-7,
               qPrintable(QString("param[%1]: %2 vs reference %3").arg(i).arg(p[i]).arg(p_ref[i])));
  }

  // The optimizer's one-pass form: every tensor of a model in one call, clipping folded in,
  // gives what clipping the gradients and then stepping tensor by tensor gives, bit for bit,
  // and leaves the gradients as they were.
  void multi_tensor_adamw_equals_clip_then_adamw_per_tensor() {
    const std::vector<size_t> sizes{1, 17, 8192 + 5, 40000, 3, 0, 2 * 8192};
    const float clip = 0.37f;
    k::AdamWParams hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.1f;
    std::vector<std::vector<float>> p, g, m, v;
    for (size_t t = 0; t < sizes.size(); t++) {
      p.push_back(to_float(random_vector(sizes[t], 200 + t)));
      g.push_back(to_float(random_vector(sizes[t], 300 + t)));
      m.push_back(std::vector<float>(sizes[t], 0.0f));
      v.push_back(std::vector<float>(sizes[t], 0.0f));
    }
    auto p_ref = p, m_ref = m, v_ref = v;
    const auto g_before = g;
    for (int step = 1; step <= 3; step++) {
      hp.step = step;
      std::vector<k::AdamWTensor<float>> tensors;
      for (size_t t = 0; t < sizes.size(); t++)
        tensors.push_back(
            {p[t].data(), g[t].data(), m[t].data(), v[t].data(), sizes[t], t % 2 == 0});
      k::adamw_update(tensors.data(), static_cast<int>(tensors.size()), hp, clip);
      for (size_t t = 0; t < sizes.size(); t++) {
        std::vector<float> clipped = g_before[t];
        k::scale(clipped.data(), clipped.size(), clip);
        k::AdamWParams q = hp;
        if (t % 2 != 0) q.weight_decay = 0.0f;
        k::adamw_update(p_ref[t].data(), clipped.data(), m_ref[t].data(), v_ref[t].data(), sizes[t],
                        q);
      }
    }
    for (size_t t = 0; t < sizes.size(); t++) {
      QVERIFY2(p[t] == p_ref[t], qPrintable(QString("tensor %1: params differ").arg(t)));
      QVERIFY2(m[t] == m_ref[t], qPrintable(QString("tensor %1: m differs").arg(t)));
      QVERIFY2(v[t] == v_ref[t], qPrintable(QString("tensor %1: v differs").arg(t)));
      QVERIFY2(g[t] == g_before[t], qPrintable(QString("tensor %1: grads written").arg(t)));
    }
  }

  // The gradient norm's sum of squares is the same bits for 1 and 2 threads and on every ISA:
  // blocks of 8192 elements, each summed in 16 lanes (lane j: elements i % 16 == j) folded
  // pairwise, the blocks added in order (kernels.h). The reference below is that order, scalar.
  void sum_squares_does_not_depend_on_threads_or_isa() {
    const std::vector<size_t> sizes{8192 * 3 + 7, 5, 40000};
    std::vector<std::vector<float>> x;
    for (size_t t = 0; t < sizes.size(); t++)
      x.push_back(to_float(random_vector(sizes[t], 400 + t, 2.0)));
    double reference = 0;
    for (const auto& tensor : x) {
      double tensor_sum = 0;
      for (size_t b = 0; b < tensor.size(); b += 8192) {
        double lanes[16] = {};
        for (size_t i = b; i < std::min(tensor.size(), b + 8192); i++)
          lanes[(i - b) % 16] += static_cast<double>(tensor[i]) * tensor[i];
        for (int w = 8; w >= 1; w /= 2)
          for (int j = 0; j < w; j++) lanes[j] += lanes[j + w];
        tensor_sum += lanes[0];
      }
      reference += tensor_sum;
    }
    const float* pointers[] = {x[0].data(), x[1].data(), x[2].data()};
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      const double all = k::sum_squares(pointers, sizes.data(), 3);
      const double one_by_one = k::sum_squares(pointers[0], sizes[0]) +
                                k::sum_squares(pointers[1], sizes[1]) +
                                k::sum_squares(pointers[2], sizes[2]);
      k::set_num_threads(2);
      QVERIFY2(all == reference, qPrintable(QString("%1 threads: %2, reference %3")
                                                .arg(threads)
                                                .arg(all, 0, 'g', 17)
                                                .arg(reference, 0, 'g', 17)));
      QVERIFY2(all == one_by_one, qPrintable(QString("%1 threads: %2, tensor by tensor %3")
                                                 .arg(threads)
                                                 .arg(all, 0, 'g', 17)
                                                 .arg(one_by_one, 0, 'g', 17)));
    }
  }

  void every_float_kernel_agrees_with_double() {
    // The float kernels run the ISA's explicit vectors (softmaxes, GELU) or its compiled loops;
    // each is held to the double kernel on inputs long enough for several vectors, OpenMP blocks
    // and a partial last vector. Tolerance per element: rtol * (1 + |double|).
    const size_t n = 4096 * 9 + 13;  // above the parallel threshold, not a multiple of a vector
    const auto x_d = random_vector(n, 91, 3.0), dout_d = random_vector(n, 92);
    const auto x_f = to_float(x_d), dout_f = to_float(dout_d);
    {
      std::vector<double> out_d(n), din_d(n);
      std::vector<float> out_f(n), din_f(n);
      k::gelu_forward(out_d.data(), x_d.data(), n);
      k::gelu_forward(out_f.data(), x_f.data(), n);
      k::gelu_backward(din_d.data(), x_d.data(), dout_d.data(), n);
      k::gelu_backward(din_f.data(), x_f.data(), dout_f.data(), n);
      VERIFY_AGREE("gelu out", out_f, out_d, 1e-6);
      VERIFY_AGREE("gelu dinp", din_f, din_d, 4e-6);  // O(1) terms cancel near the minimum
    }
    {
      std::vector<double> out_d(n), dx_d(n);
      std::vector<float> out_f(n), dx_f(n);
      k::residual_dropout_forward(out_d.data(), dout_d.data(), x_d.data(), n, 0.1f, 17, 5);
      k::residual_dropout_forward(out_f.data(), dout_f.data(), x_f.data(), n, 0.1f, 17, 5);
      k::dropout_backward(dx_d.data(), dout_d.data(), n, 0.1f, 17, 5);
      k::dropout_backward(dx_f.data(), dout_f.data(), n, 0.1f, 17, 5);
      VERIFY_AGREE("residual_dropout out", out_f, out_d, 1e-6);
      VERIFY_AGREE("dropout dx", dx_f, dx_d, 1e-6);
    }
    {
      auto p_d = random_vector(n, 93);
      auto p_f = to_float(p_d);
      std::vector<double> m_d(n, 0.0), v_d(n, 0.0);
      std::vector<float> m_f(n, 0.0f), v_f(n, 0.0f);
      k::AdamWParams hp;
      hp.lr = 1e-2f;
      for (int step = 1; step <= 3; step++) {
        hp.step = step;
        k::adamw_update(p_d.data(), dout_d.data(), m_d.data(), v_d.data(), n, hp);
        k::adamw_update(p_f.data(), dout_f.data(), m_f.data(), v_f.data(), n, hp);
      }
      VERIFY_AGREE("adamw param", p_f, p_d, 1e-6);
      VERIFY_AGREE("adamw v", v_f, v_d, 1e-6);
      const std::vector<double> exact(x_f.begin(), x_f.end());
      const double ss_f = k::sum_squares(x_f.data(), n), ss_d = k::sum_squares(exact.data(), n);
      QVERIFY2(std::abs(ss_f - ss_d) <= 1e-12 * ss_d,
               qPrintable(QString("sum_squares: float %1 double %2").arg(ss_f).arg(ss_d)));
    }
    const int N = 37, C = 300;
    const auto in_d = random_vector(N * C, 94, 2.0), w_d = random_vector(C, 95),
               b_d = random_vector(C, 96), dy_d = random_vector(N * C, 97);
    {
      const auto in_f = to_float(in_d), w_f = to_float(w_d), b_f = to_float(b_d),
                 dy_f = to_float(dy_d);
      std::vector<double> out_d(N * C), mean_d(N), rstd_d(N), din_d(N * C, 0.0), dw_d(C, 0.0),
          db_d(C, 0.0);
      std::vector<float> out_f(N * C), mean_f(N), rstd_f(N), din_f(N * C, 0.0f), dw_f(C, 0.0f),
          db_f(C, 0.0f);
      k::layernorm_forward(out_d.data(), mean_d.data(), rstd_d.data(), in_d.data(), w_d.data(),
                           b_d.data(), N, C);
      k::layernorm_forward(out_f.data(), mean_f.data(), rstd_f.data(), in_f.data(), w_f.data(),
                           b_f.data(), N, C);
      k::layernorm_backward(din_d.data(), dw_d.data(), db_d.data(), dy_d.data(), in_d.data(),
                            w_d.data(), mean_d.data(), rstd_d.data(), N, C);
      k::layernorm_backward(din_f.data(), dw_f.data(), db_f.data(), dy_f.data(), in_f.data(),
                            w_f.data(), mean_f.data(), rstd_f.data(), N, C);
      VERIFY_AGREE("layernorm out", out_f, out_d, 1e-5);
      VERIFY_AGREE("layernorm dinp", din_f, din_d, 1e-5);
      VERIFY_AGREE("layernorm dweight", dw_f, dw_d, 1e-5);
      VERIFY_AGREE("layernorm dbias", db_f, db_d, 1e-5);
    }
    {
      const int B = 3, T = 37, V = 11;
      std::vector<int32_t> tokens(B * T);
      for (int i = 0; i < B * T; i++) tokens[i] = (i * 7) % V;
      const auto wte_d = random_vector(V * C, 98), wpe_d = random_vector(T * C, 99);
      const auto wte_f = to_float(wte_d), wpe_f = to_float(wpe_d), dy_f = to_float(dy_d);
      std::vector<double> out_d(B * T * C), dwte_d(V * C, 0.0), dwpe_d(T * C, 0.0);
      std::vector<float> out_f(B * T * C), dwte_f(V * C, 0.0f), dwpe_f(T * C, 0.0f);
      const auto dy3_d = random_vector(B * T * C, 100);
      const auto dy3_f = to_float(dy3_d);
      k::embedding_forward(out_d.data(), tokens.data(), wte_d.data(), wpe_d.data(), B, T, C);
      k::embedding_forward(out_f.data(), tokens.data(), wte_f.data(), wpe_f.data(), B, T, C);
      k::embedding_backward(dwte_d.data(), dwpe_d.data(), dy3_d.data(), tokens.data(), B, T, C);
      k::embedding_backward(dwte_f.data(), dwpe_f.data(), dy3_f.data(), tokens.data(), B, T, C);
      VERIFY_AGREE("embedding out", out_f, out_d, 1e-6);
      VERIFY_AGREE("embedding dwte", dwte_f, dwte_d, 1e-5);
      VERIFY_AGREE("embedding dwpe", dwpe_f, dwpe_d, 1e-5);
    }
    {
      // A vocabulary of several sum blocks (simd.h: 1024) and a partial vector, whole and in
      // two vocabulary shards (the tensor-parallel cross-entropy).
      const int V = 2500, half = 1250;
      const auto logits_d = random_vector(N * V, 101, 4.0);
      const auto logits_f = to_float(logits_d);
      std::vector<int32_t> targets(N);
      for (int i = 0; i < N; i++) targets[i] = (i * 331) % V;
      std::vector<double> loss_d(N), dl_d(N * V);
      std::vector<float> loss_f(N), dl_f(N * V);
      k::softmax_cross_entropy(loss_d.data(), dl_d.data(), logits_d.data(), targets.data(), N, V,
                               0.5f);
      k::softmax_cross_entropy(loss_f.data(), dl_f.data(), logits_f.data(), targets.data(), N, V,
                               0.5f);
      VERIFY_AGREE("cross_entropy loss", loss_f, loss_d, 1e-6);
      VERIFY_AGREE("cross_entropy dlogits", dl_f, dl_d, 1e-6);
      // Shards: rows split into columns [0, half) and [half, V), reduced here as TP would.
      std::vector<float> sh[2], max_s[2], tl[2], loss_s(N), d_s(N * V);
      std::vector<double> sums[2];
      for (int r = 0; r < 2; r++) {
        sh[r].resize(N * half), max_s[r].resize(N), tl[r].resize(N), sums[r].resize(N);
        for (int i = 0; i < N; i++)
          std::copy_n(logits_f.data() + i * V + r * half, half, sh[r].data() + i * half);
        k::cross_entropy_shard_max(max_s[r].data(), sh[r].data(), N, half);
      }
      std::vector<float> row_max(N);
      for (int i = 0; i < N; i++) row_max[i] = std::max(max_s[0][i], max_s[1][i]);
      for (int r = 0; r < 2; r++)
        k::cross_entropy_shard_sums(sums[r].data(), tl[r].data(), sh[r].data(), row_max.data(),
                                    targets.data(), r * half, N, half);
      std::vector<double> sum(N);
      std::vector<float> target_logit(N);
      for (int i = 0; i < N; i++)
        sum[i] = sums[0][i] + sums[1][i], target_logit[i] = tl[0][i] + tl[1][i];
      for (int r = 0; r < 2; r++) {
        std::vector<float> d(N * half);
        k::cross_entropy_shard_finish(loss_s.data(), d.data(), sh[r].data(), row_max.data(),
                                      sum.data(), target_logit.data(), targets.data(), r * half, N,
                                      half, 0.5f);
        for (int i = 0; i < N; i++)
          std::copy_n(d.data() + i * half, half, d_s.data() + i * V + r * half);
      }
      VERIFY_AGREE("sharded cross_entropy loss", loss_s, loss_d, 1e-6);
      VERIFY_AGREE("sharded cross_entropy dlogits", d_s, dl_d, 1e-6);
    }
    {
      const int B = 2, T = 70, Ca = 16, NH = 2;
      const auto qkv_d = random_vector(B * T * 3 * Ca, 102);
      const auto dy_d2 = random_vector(B * T * Ca, 103);
      const auto qkv_f = to_float(qkv_d), dy_f2 = to_float(dy_d2);
      std::vector<double> out_d(B * T * Ca), lse_d(B * NH * T), dqkv_d(B * T * 3 * Ca),
          ws_d(k::attention_workspace_elems(T, Ca / NH) * k::num_threads());
      std::vector<float> out_f(B * T * Ca), lse_f(B * NH * T), dqkv_f(B * T * 3 * Ca),
          ws_f(ws_d.size());
      k::attention_forward(out_d.data(), lse_d.data(), qkv_d.data(), B, T, Ca, NH, 0.1f, 3,
                           ws_d.data());
      k::attention_forward(out_f.data(), lse_f.data(), qkv_f.data(), B, T, Ca, NH, 0.1f, 3,
                           ws_f.data());
      k::attention_backward(dqkv_d.data(), dy_d2.data(), qkv_d.data(), lse_d.data(), B, T, Ca, NH,
                            0.1f, 3, ws_d.data());
      k::attention_backward(dqkv_f.data(), dy_f2.data(), qkv_f.data(), lse_f.data(), B, T, Ca, NH,
                            0.1f, 3, ws_f.data());
      VERIFY_AGREE("attention log-sum-exps", lse_f, lse_d, 1e-6);
      VERIFY_AGREE("attention dqkv", dqkv_f, dqkv_d, 1e-5);
      // The same heads decoded against a key/value cache: a prompt of T rows in one call.
      const int HS = Ca / NH;
      const std::vector<int32_t> cache_slot(T, 0);
      std::vector<int32_t> pos(T);
      for (int t = 0; t < T; t++) pos[t] = t;
      std::vector<double> kc_d(NH * T * HS), vc_d(kc_d.size()), o_d(T * Ca), w_d2(T * 2);
      std::vector<float> kc_f(kc_d.size()), vc_f(kc_d.size()), o_f(T * Ca), w_f2(T * 2);
      k::attention_kv_forward(o_d.data(), kc_d.data(), vc_d.data(), qkv_d.data(), cache_slot.data(),
                              pos.data(), T, NH, HS, T, w_d2.data());
      k::attention_kv_forward(o_f.data(), kc_f.data(), vc_f.data(), qkv_f.data(), cache_slot.data(),
                              pos.data(), T, NH, HS, T, w_f2.data());
      VERIFY_AGREE("attention_kv out", o_f, o_d, 1e-5);
    }
  }

  void float_kernels_agree_with_double() {
    // The float path (including its polynomial exp) against the double path.
    const int B = 2, T = 70, C = 16, NH = 2, N = B * T, V = 300;
    const auto qkv_d = random_vector(N * 3 * C, 81);
    std::vector<float> qkv_f(qkv_d.begin(), qkv_d.end());
    std::vector<double> out_d(N * C), lse_d(B * NH * T),
        ws_d(k::attention_workspace_elems(T, C / NH) * k::num_threads());
    std::vector<float> out_f(N * C), lse_f(B * NH * T), ws_f(ws_d.size());
    k::attention_forward(out_d.data(), lse_d.data(), qkv_d.data(), B, T, C, NH, 0.1f, 3,
                         ws_d.data());
    k::attention_forward(out_f.data(), lse_f.data(), qkv_f.data(), B, T, C, NH, 0.1f, 3,
                         ws_f.data());
    for (int i = 0; i < N * C; i++)
      QVERIFY2(
          std::abs(out_f[i] - out_d[i]) <= 1e-5 * (1 + std::abs(out_d[i])),
          qPrintable(
              QString("attention out[%1]: float %2 double %3").arg(i).arg(out_f[i]).arg(out_d[i])));
    const auto logits_d = random_vector(N * V, 82, 4.0);
    std::vector<float> logits_f(logits_d.begin(), logits_d.end());
    std::vector<int32_t> targets(N);
    for (int i = 0; i < N; i++) targets[i] = (i * 37) % V;
    std::vector<double> loss_d(N), dl_d(N * V);
    std::vector<float> loss_f(N), dl_f(N * V);
    k::softmax_cross_entropy(loss_d.data(), dl_d.data(), logits_d.data(), targets.data(), N, V,
                             1.0f);
    k::softmax_cross_entropy(loss_f.data(), dl_f.data(), logits_f.data(), targets.data(), N, V,
                             1.0f);
    for (int i = 0; i < N; i++)
      QVERIFY2(
          std::abs(loss_f[i] - loss_d[i]) <= 1e-5 * (1 + std::abs(loss_d[i])),
          qPrintable(QString("loss[%1]: float %2 double %3").arg(i).arg(loss_f[i]).arg(loss_d[i])));
    for (int i = 0; i < N * V; i++)
      QVERIFY2(
          std::abs(dl_f[i] - dl_d[i]) <= 1e-6,
          qPrintable(QString("dlogits[%1]: float %2 double %3").arg(i).arg(dl_f[i]).arg(dl_d[i])));
    const auto x_d = random_vector(4096, 83, 3.0);
    std::vector<float> x_f(x_d.begin(), x_d.end()), g_f(x_d.size());
    std::vector<double> g_d(x_d.size());
    k::gelu_forward(g_d.data(), x_d.data(), x_d.size());
    k::gelu_forward(g_f.data(), x_f.data(), x_f.size());
    for (size_t i = 0; i < x_d.size(); i++)
      QVERIFY2(std::abs(g_f[i] - g_d[i]) <= 1e-6 * (1 + std::abs(g_d[i])),
               qPrintable(QString("gelu[%1]: float %2 double %3").arg(i).arg(g_f[i]).arg(g_d[i])));
  }
};

QTEST_APPLESS_MAIN(KernelGradients)
#include "test_kernel_gradients.moc"
