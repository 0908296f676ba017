// A LLaVA-style vision-language model (Note [image rows] in model/gpt_vision.cpp) against an
// independent float64 PyTorch reference (vlm_reference.py: the CLIP tower and projector of
// tests/model/vision_reference.py, the decoder of moe_reference.py, joined as LLaVA's
// inputs_embeds): from the same weights, five AdamW steps on the same tokens and images give the
// same losses, grad norms and weights, Lattice in double to 1e-9. Cases: a GPT-2 language model
// with a CLIP tower (class token), one image per sequence, one image cut off by the sequence's
// end; a Llama-shaped one (RoPE: no position embedding on the image rows) with two images per
// sequence and --freeze-ViT; LLaVA's projector-only pre-training (--freeze-LM --freeze-ViT),
// where everything but the projector stays bit-equal to the start. The placeholder id lies
// inside the padded vocabulary, so a looked-up embedding row would show. Skipped where Debian's
// python3-torch is missing (installers/install-deps.sh --tests).
#include <QtTest/QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <cmath>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "common/torch_reference.h"
#include "common/vlm_batches.h"
#include "lattice/kernels.h"
#include "model/gpt.h"
#include "optim/adamw.h"

using namespace lattice;
using testing::kPython;
using testing::rows_json;
using testing::torch_available;

namespace {
constexpr int kSteps = 5, kBatch = 2;

using Steps = testing::VlmSteps;
Steps make_steps(const ModelConfig& c) {
  return testing::vlm_steps(c, kSteps, kBatch);
}

struct Trained {
  std::vector<double> losses, norms;
  std::vector<double> weights;  // (arena) after the last step
};

Trained train(const ModelConfig& c, const OptimizerConfig& o, const std::vector<float>& initial,
              const Steps& steps) {
  GptModel<double> model(c, kBatch);
  std::copy(initial.begin(), initial.end(), model.params());
  AdamW<double> adam(model.layout(), o);
  auto acts = model.new_activations();
  if (!acts) qFatal("%s", acts.status().message().c_str());
  const int N = kBatch * c.seq_length;
  Trained t;
  for (int step = 0; step < kSteps; step++) {
    model.zero_grads();
    const Status loaded =
        model.load_images(**acts, steps.tokens[step].data(), steps.images[step].data());
    if (!loaded) qFatal("%s", loaded.message().c_str());
    t.losses.push_back(
        model.forward(**acts, steps.tokens[step].data(), steps.targets[step].data(), 0, 1.0f / N));
    model.backward(**acts);
    t.norms.push_back(adam.step(model.params(), model.grads(), o.lr));
  }
  const double* p = model.params();
  t.weights.assign(p, p + model.arena_size());
  return t;
}

ModelConfig vlm(bool llama, int images_per_sample) {
  return testing::tiny_vlm_config(llama, images_per_sample, 16, 0.1f);
}

QString floats_json(const std::vector<float>& values) {
  QJsonArray a;
  for (float v : values) a.append(static_cast<double>(v));
  return QJsonDocument(a).toJson(QJsonDocument::Compact);
}

}  // namespace

class VlmParity : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  // Runs the reference and Lattice in double for `c` from init_weights(7); "" when they agree.
  QString check(const QString& name, const ModelConfig& c) {
    kernels::set_num_threads(2);
    OptimizerConfig o;
    o.lr = 1e-2f;
    o.weight_decay = 0.1f;
    o.clip_grad = 1.0f;
    o.lr_decay_style = "constant";
    GptModel<float> init(c, kBatch);
    if (!init.init_weights(7).is_ok()) return "init_weights failed";
    const ParamLayout& layout = init.layout();
    const std::vector<float> initial(init.params(), init.params() + init.arena_size());
    std::vector<safetensors::TensorSource> sources;
    QJsonArray frozen;
    for (const ParamTensor& t : layout.tensors()) {
      sources.push_back({t.name, t.global_shape, initial.data() + t.offset, {}});
      if (t.frozen) frozen.append(QString::fromStdString(t.name));
    }
    const std::string weights = dir_.filePath(name + "-init.safetensors").toStdString();
    const std::string spec = dir_.filePath(name + ".json").toStdString();
    if (!safetensors::write(weights, sources).is_ok()) return "cannot write the weights";
    const Steps steps = make_steps(c);
    const VisionConfig& v = c.vision;
    {
      QJsonObject config{{"layers", c.num_layers},
                         {"hidden", c.hidden_size},
                         {"heads", c.num_attention_heads},
                         {"groups", c.kv_heads()},
                         {"rotary_dim", c.rope() ? c.rotary_dim() : 0},
                         {"rotary_base", c.rotary_base},
                         {"rms", c.rms_norm()},
                         {"eps", c.norm_epsilon},
                         {"swiglu", c.swiglu},
                         {"experts", 0},
                         {"layer_freq", 1}};
      QJsonObject vision{{"channels", v.num_channels},
                         {"img_h", v.img_h},
                         {"img_w", v.img_w},
                         {"patch", v.patch_dim},
                         {"hidden", v.hidden_size},
                         {"heads", v.num_attention_heads},
                         {"layers", v.num_layers},
                         {"lm_hidden", v.lm_hidden_size},
                         {"ffn", v.ffn()},
                         {"class_token", v.class_token},
                         {"patch_bias", v.patch_bias},
                         {"select_layer", v.select_layer}};
      QJsonObject optim{
          {"lr", o.lr},        {"beta1", o.adam_beta1},          {"beta2", o.adam_beta2},
          {"eps", o.adam_eps}, {"weight_decay", o.weight_decay}, {"clip_grad", o.clip_grad}};
      auto compact = [](const QJsonObject& j) {
        return QJsonDocument(j).toJson(QJsonDocument::Compact);
      };
      QString text = "{\"config\": " + compact(config) + ", \"vision\": " + compact(vision) +
                     ", \"optim\": " + compact(optim) +
                     QString(", \"image_token\": %1, \"images_per_sample\": %2, \"frozen\": ")
                         .arg(c.image_token_id())
                         .arg(v.images_per_sample) +
                     QJsonDocument(frozen).toJson(QJsonDocument::Compact) + ", \"steps\": [";
      for (int s = 0; s < kSteps; s++)
        text += QString(s ? ", " : "") +
                "{\"tokens\": " + rows_json(steps.tokens[s], c.seq_length) +
                ", \"targets\": " + rows_json(steps.targets[s], c.seq_length) +
                ", \"images\": " + floats_json(steps.images[s]) + "}";
      text += "]}";
      std::ofstream(spec) << text.toStdString();
    }
    const testing::Run py =
        testing::run_process(kPython,
                             {QString(LATTICE_SOURCE_DIR) + "/tests/train/vlm_reference.py",
                              QString::fromStdString(weights), QString::fromStdString(spec)},
                             {}, 300000);
    if (py.exit_code != 0) return "the reference failed: " + py.err;
    const QJsonObject result = QJsonDocument::fromJson(py.out.toUtf8()).object();
    const QJsonArray torch_losses = result["losses"].toArray(),
                     torch_norms = result["grad_norms"].toArray();
    if (torch_losses.size() != kSteps) return "the reference gave no losses";

    const Trained exact = train(c, o, initial, steps);
    QString errors;
    auto verify = [&](const QString& what, double got, double expected) {
      if (std::abs(got - expected) <= 1e-9 * std::abs(expected) + 1e-15) return;
      errors += QString("%1: lattice %2, pytorch %3; ")
                    .arg(what)
                    .arg(got, 0, 'g', 17)
                    .arg(expected, 0, 'g', 17);
    };
    for (int s = 0; s < kSteps; s++) {
      verify(QString("loss, step %1").arg(s + 1), exact.losses[s], torch_losses[s].toDouble());
      verify(QString("grad norm, step %1").arg(s + 1), exact.norms[s], torch_norms[s].toDouble());
    }
    const QJsonObject theirs = result["weights"].toObject();
    for (const ParamTensor& t : layout.tensors()) {
      const QJsonArray want = theirs[QString::fromStdString(t.name)].toArray();
      if (want.size() != static_cast<int>(t.numel))
        return QString("the reference has %1 values of %2, Lattice %3")
            .arg(want.size())
            .arg(QString::fromStdString(t.name))
            .arg(t.numel);
      double rms = 0;
      for (const QJsonValue& w : want) rms += w.toDouble() * w.toDouble();
      rms = std::sqrt(rms / static_cast<double>(t.numel));
      bool moved = false;
      for (size_t i = 0; i < t.numel; i++) {
        const double w = want[static_cast<int>(i)].toDouble(), got = exact.weights[t.offset + i];
        moved = moved || got != static_cast<double>(initial[t.offset + i]);
        if (std::abs(got - w) > 1e-9 * std::max(std::abs(w), rms)) {
          errors += QString("%1[%2] after %3 steps: lattice %4, pytorch %5; ")
                        .arg(QString::fromStdString(t.name))
                        .arg(i)
                        .arg(kSteps)
                        .arg(got, 0, 'g', 17)
                        .arg(w, 0, 'g', 17);
          break;
        }
      }
      // Frozen tensors keep their bits; every trained one moved.
      if (moved == t.frozen)
        errors += QString("%1 is %2 but %3; ")
                      .arg(QString::fromStdString(t.name))
                      .arg(t.frozen ? "frozen" : "trained")
                      .arg(moved ? "moved" : "did not move");
    }
    if (!(exact.losses.back() < exact.losses.front()))
      errors += "the five steps did not lower the loss; ";
    return errors;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
  }

  void gpt2_with_a_clip_tower_matches_pytorch() {
    const ModelConfig c = vlm(false, 1);
    QVERIFY(c.validate().empty());
    const QString errors = check("gpt2-clip", c);
    QVERIFY2(errors.isEmpty(), qPrintable(errors));
  }

  void llama_with_two_images_and_a_frozen_encoder_matches_pytorch() {
    ModelConfig c = vlm(true, 2);
    c.vision.class_token = false;
    c.vision.patch_bias = true;
    c.freeze_vision = true;
    const QString errors = check("llama-clip-frozen-vit", c);
    QVERIFY2(errors.isEmpty(), qPrintable(errors));
  }

  void projector_only_pretraining_matches_pytorch() {
    ModelConfig c = vlm(false, 1);
    c.freeze_lm = true;
    c.freeze_vision = true;
    int trained = 0;
    const ParamLayout layout(c);  // named: a temporary's tensors() would dangle in the loop
    for (const ParamTensor& t : layout.tensors()) trained += !t.frozen;
    QCOMPARE(trained, 4);  // the projector's two weights and biases
    const QString errors = check("projector-only", c);
    QVERIFY2(errors.isEmpty(), qPrintable(errors));
  }
};

QTEST_GUILESS_MAIN(VlmParity)
#include "test_vlm_parity.moc"
