// The vision tower (model/vision_encoder.h: CLIP-style ViT + LLaVA-1.5 projector) against an
// independent float64 PyTorch implementation (vision_reference.py): from the same float weights
// and images, the projected tokens, every parameter's gradient and the images' gradient of
// loss = sum(out * R) agree, Lattice in double to 1e-10 and in float to the fp32 tolerance of
// test_torch_parity (1e-5 x the tensor's largest magnitude + 1e-9). Cases: a class token with
// --vision-select-layer -2 (the last of three layers not run: zero gradients on both sides), and
// no class token with a patch bias and the last layer selected. Skipped where Debian's
// python3-torch is missing (installers/install-deps.sh --tests).
#include <QtTest/QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <cmath>
#include <fstream>
#include <random>

#include "common/process.h"
#include "common/torch_reference.h"
#include "device/cpu_device.h"
#include "lattice/kernels.h"
#include "model/vision_encoder.h"

using namespace lattice;
using testing::kPython;
using testing::rows_json;
using testing::torch_available;

namespace {

struct Pass {
  std::vector<double> out, grads, d_images;  // grads in the arena's order
};

// One forward and backward in A from the float inputs.
template <typename A>
Pass run(const VisionConfig& c, int B, const std::vector<float>& params,
         const std::vector<float>& images, const std::vector<float>& R) {
  auto made = VisionEncoder<A>::create(c, B, host_device());
  if (!made) qFatal("%s", made.status().message().c_str());
  VisionEncoder<A>& e = **made;
  std::copy(params.begin(), params.end(), e.params());
  const std::vector<A> img(images.begin(), images.end()), r(R.begin(), R.end());
  std::vector<A> d_img(img.size());
  const A* out = e.forward(img.data());
  e.zero_grads();
  e.backward(r.data(), d_img.data());
  Pass p;
  p.out.assign(out, out + r.size());
  p.grads.assign(e.grads(), e.grads() + e.num_params());
  p.d_images.assign(d_img.begin(), d_img.end());
  return p;
}

QJsonArray to_json(const float* x, size_t n) {
  QJsonArray a;
  for (size_t i = 0; i < n; i++) a.append(static_cast<double>(x[i]));
  return a;
}

std::vector<double> from_json(const QJsonArray& a) {
  std::vector<double> v;
  for (const QJsonValue& x : a) v.push_back(x.toDouble());
  return v;
}

// got vs want elementwise within rel x max|want| + abs; a message naming the first miss.
QString mismatch(const QString& what, const double* got, const std::vector<double>& want,
                 double rel, double abs) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  const double tol = rel * scale + abs;
  for (size_t i = 0; i < want.size(); i++)
    if (!(std::abs(got[i] - want[i]) <= tol))
      return QString("%1[%2]: lattice %3, pytorch %4 (tolerance %5 = %6 x max |pytorch| + %7)")
          .arg(what)
          .arg(i)
          .arg(got[i], 0, 'g', 17)
          .arg(want[i], 0, 'g', 17)
          .arg(tol)
          .arg(rel)
          .arg(abs);
  return {};
}

}  // namespace

class VisionParity : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  void check(const QString& name, const VisionConfig& c, int B) {
    QVERIFY2(c.validate().empty(), qPrintable(name));
    kernels::set_num_threads(2);
    auto layout = VisionEncoder<double>::create(c, B, host_device());
    QVERIFY2(layout.is_ok(), layout.status().message().c_str());
    const std::vector<ParamTensor>& tensors = (*layout)->tensors();
    const int M = (*layout)->tokens();
    // Weights of order 0.3 (norm weights near 1), so every path carries a real gradient.
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<float> u(-0.3f, 0.3f);
    std::vector<float> params((*layout)->num_params());
    for (const ParamTensor& t : tensors) {
      const bool norm_weight =
          t.name.find("norm") != std::string::npos && t.name.find(".weight") != std::string::npos;
      for (size_t i = 0; i < t.numel; i++)
        params[t.offset + i] = (norm_weight ? 1.0f : 0.0f) + u(rng);
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> images(static_cast<size_t>(B) * c.num_channels * c.img_h * c.img_w);
    for (float& x : images) x = normal(rng);
    std::vector<float> R(static_cast<size_t>(M) * c.lm_hidden_size);
    for (float& x : R) x = normal(rng);

    const Pass exact = run<double>(c, B, params, images, R);
    const Pass fp32 = run<float>(c, B, params, images, R);

    QJsonObject weights;
    for (const ParamTensor& t : tensors)
      weights[QString::fromStdString(t.name)] = to_json(params.data() + t.offset, t.numel);
    QJsonObject config{{"channels", c.num_channels},
                       {"img_h", c.img_h},
                       {"img_w", c.img_w},
                       {"patch", c.patch_dim},
                       {"hidden", c.hidden_size},
                       {"heads", c.num_attention_heads},
                       {"layers", c.num_layers},
                       {"lm_hidden", c.lm_hidden_size},
                       {"ffn", c.ffn()},
                       {"class_token", c.class_token},
                       {"patch_bias", c.patch_bias},
                       {"select_layer", c.select_layer}};
    QJsonObject spec{{"config", config},
                     {"batch", B},
                     {"params", weights},
                     {"images", to_json(images.data(), images.size())},
                     {"R", to_json(R.data(), R.size())}};
    const QString spec_path = dir_.filePath(name + ".json");
    {
      QFile f(spec_path);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QJsonDocument(spec).toJson(QJsonDocument::Compact));
    }
    const testing::Run py = testing::run_process(
        kPython, {QString(LATTICE_SOURCE_DIR) + "/tests/model/vision_reference.py", spec_path}, {},
        120000);
    QVERIFY2(py.exit_code == 0, qPrintable(py.err));
    const QJsonObject result = QJsonDocument::fromJson(py.out.toUtf8()).object();
    const std::vector<double> out = from_json(result["out"].toArray());
    const std::vector<double> d_images = from_json(result["d_images"].toArray());
    QCOMPARE(out.size(), exact.out.size());
    QCOMPARE(d_images.size(), exact.d_images.size());

    struct Path {
      const char* label;
      const Pass& pass;
      double rel, abs;
    };
    for (const Path& p : {Path{"fp64", exact, 1e-10, 1e-14}, Path{"fp32", fp32, 1e-5, 1e-9}}) {
      const QString tag = name + " " + p.label + " ";
      QString miss = mismatch(tag + "projector output", p.pass.out.data(), out, p.rel, p.abs);
      QVERIFY2(miss.isEmpty(), qPrintable(miss));
      miss = mismatch(tag + "d loss / d images", p.pass.d_images.data(), d_images, p.rel, p.abs);
      QVERIFY2(miss.isEmpty(), qPrintable(miss));
      const QJsonObject grads = result["grads"].toObject();
      int compared = 0, zero = 0;
      for (const ParamTensor& t : tensors) {
        const std::vector<double> want = from_json(grads[QString::fromStdString(t.name)].toArray());
        QVERIFY2(want.size() == t.numel,
                 qPrintable("pytorch's gradient of " + QString::fromStdString(t.name)));
        miss = mismatch(tag + "d loss / d " + QString::fromStdString(t.name),
                        p.pass.grads.data() + t.offset, want, p.rel, p.abs);
        QVERIFY2(miss.isEmpty(), qPrintable(miss));
        bool all_zero = true;
        for (double w : want) all_zero &= w == 0;
        zero += all_zero;
        compared++;
      }
      QCOMPARE(compared, static_cast<int>(tensors.size()));
      // Only the layers past the selected one are unreached (12 tensors each).
      QCOMPARE(zero, 12 * (c.num_layers - c.layers_run()));
    }
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
  }

  // CLIP / LLaVA-1.5's shape in miniature: class token, no patch bias, the penultimate layer's
  // patch rows (layer 2 of 3 unused).
  void clip_style_penultimate_layer_matches_pytorch() {
    VisionConfig c;  // 32 x 32 images, patch 8 (16 patches), width 32, 2 heads
    c.num_layers = 3;
    c.select_layer = -2;
    c.lm_hidden_size = 48;
    check("clip", c, 2);
  }

  // No class token, a patch bias, an odd-sized MLP and a non-square image; every layer run.
  void no_class_token_last_layer_matches_pytorch() {
    VisionConfig c;
    c.num_layers = 2;
    c.img_h = 24;
    c.img_w = 16;
    c.class_token = false;
    c.patch_bias = true;
    c.ffn_hidden_size = 40;
    c.select_layer = -1;
    c.lm_hidden_size = 24;
    check("plain", c, 3);
  }

  // The flags' rules, one sentence each naming the flag.
  void invalid_configs_are_refused_with_the_flag_named() {
    VisionConfig c;
    c.patch_dim = 7;
    c.num_attention_heads = 3;
    c.select_layer = -4;
    c.projector_type = "linear";
    const std::vector<std::string> errors = c.validate();
    QCOMPARE(errors.size(), size_t{5});
    QVERIFY(QString::fromStdString(errors[0]).startsWith("--vision-num-attention-heads 3"));
    QVERIFY(QString::fromStdString(errors[1]).startsWith("--patch-dim 7 does not divide --img-h"));
    QVERIFY(QString::fromStdString(errors[2]).startsWith("--patch-dim 7 does not divide --img-w"));
    QVERIFY(QString::fromStdString(errors[3]).startsWith("--vision-select-layer -4"));
    QVERIFY(QString::fromStdString(errors[4]).startsWith("--vision-projector-type \"linear\""));
    auto made = VisionEncoder<float>::create(c, 1, host_device());
    QVERIFY(!made.is_ok());
    QVERIFY(made.status().message().find("--patch-dim 7") != std::string::npos);
  }
};

QTEST_GUILESS_MAIN(VisionParity)
#include "test_vision_parity.moc"
