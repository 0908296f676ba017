// Every kernel's backward agrees with central finite differences of its forward, computed
// in double precision; and the float kernels agree with the double ones.
#include <QtTest/QtTest>

#include <cmath>

#include "common/grad_check.h"
#include "lattice/kernels.h"

using lattice::testing::check_gradient;
using lattice::testing::dot;
using lattice::testing::random_vector;
namespace k = lattice::kernels;

class KernelGradients : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { k::set_num_threads(2); }

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

  void attention_backward_matches_finite_differences() {
    const int B = 2, T = 5, C = 8, NH = 2;
    for (float p : {0.0f, 0.2f}) {
      auto qkv = random_vector(B * T * 3 * C, 41);
      const auto dout = random_vector(B * T * C, 42);
      std::vector<double> out(B * T * C), probs(B * NH * T * T), dqkv(B * T * 3 * C);
      std::vector<double> ws(k::attention_workspace_elems(T) * k::num_threads());
      auto loss = [&] {
        k::attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH, p, 5, ws.data());
        return dot(out, dout);
      };
      loss();
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, C, NH, p, 5,
                            ws.data());
      const std::string err =
          check_gradient("attention qkv (dropout " + std::to_string(p) + ")", qkv, dqkv, loss);
      QVERIFY2(err.empty(), err.c_str());
    }
  }

  void attention_is_causal() {
    const int B = 1, T = 6, C = 4, NH = 1;
    auto qkv = random_vector(T * 3 * C, 43);
    std::vector<double> out(T * C), out2(T * C), probs(T * T);
    std::vector<double> ws(k::attention_workspace_elems(T) * k::num_threads());
    k::attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH, 0.0f, 0, ws.data());
    for (int c = 0; c < 3 * C; c++) qkv[(T - 1) * 3 * C + c] += 1.0;  // change the last token
    k::attention_forward(out2.data(), probs.data(), qkv.data(), B, T, C, NH, 0.0f, 0, ws.data());
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

  void float_kernels_agree_with_double() {
    // The float path (including its polynomial exp) against the double path.
    const int B = 2, T = 70, C = 16, NH = 2, N = B * T, V = 300;
    const auto qkv_d = random_vector(N * 3 * C, 81);
    std::vector<float> qkv_f(qkv_d.begin(), qkv_d.end());
    std::vector<double> out_d(N * C), probs_d(B * NH * T * T),
        ws_d(k::attention_workspace_elems(T) * k::num_threads());
    std::vector<float> out_f(N * C), probs_f(B * NH * T * T), ws_f(ws_d.size());
    k::attention_forward(out_d.data(), probs_d.data(), qkv_d.data(), B, T, C, NH, 0.1f, 3,
                         ws_d.data());
    k::attention_forward(out_f.data(), probs_f.data(), qkv_f.data(), B, T, C, NH, 0.1f, 3,
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
