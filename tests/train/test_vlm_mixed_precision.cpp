// A LLaVA-style vision-language model (Note [image rows] in model/gpt_vision.cpp) under --bf16
// and --fp16 (Note [tower precision]: the tower computes in the 16-bit type on the compute copy,
// its gradients in fp32, the spliced rows rounded once) against the same model in fp32, from the
// same weights, on the CPU device's 16-bit op lists: the embedding's output with the spliced
// patches and five AdamW steps' losses within the 16-bit loss tolerance (2e-2 relative, as
// tests/train/test_gpu_training.cpp and tests/model/test_gpt_layouts.cpp), the tower's gradients
// of the first step within the 16-bit gradient tolerance (5e-2, normwise per tensor, as
// test_gpt_layouts' kHalfTolerance). fp16 runs under a loss scale of 2^10, as training does, its
// gradients unscaled before the step. Cases: a GPT-2 language model with a CLIP tower (class
// token, one image cut off by the sequence's end) in bf16 and fp16; a Llama-shaped one (RoPE) with
// two images per sequence in bf16.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/tiny_model.h"
#include "common/vlm_batches.h"
#include "device/cpu_device.h"
#include "lattice/kernels.h"
#include "model/gpt.h"
#include "optim/adamw.h"

using namespace lattice;

namespace {
constexpr int kSteps = 5, kBatch = 2;
constexpr double kLossTolerance = 2e-2, kGradTolerance = 5e-2;  // the 16-bit tolerances

// What one run leaves to compare.
struct Run {
  std::vector<double> losses;     // (kSteps)
  std::vector<float> embedded;    // (B T, C) the first step's embedding output, patches spliced
  std::vector<float> tower_grad;  // (vision arena) the first step's tower gradients, unscaled
  std::string error;
};

float widened(float x) {
  return x;
}
float widened(bf16 x) {
  return from_bf16(x);
}
float widened(fp16 x) {
  return from_fp16(x);
}

// kSteps AdamW steps of GptModel<A> on a CPU device from `initial` (layout order, fp32).
template <typename A>
Run train(const ModelConfig& c, const std::vector<float>& initial, float loss_scale) {
  Run r;
  CpuDevice device;
  auto made = GptModel<A>::create(c, kBatch, device);
  if (!made) return {{}, {}, {}, made.status().message()};
  GptModel<A>& m = **made;
  auto acts = m.new_activations();
  if (!acts) return {{}, {}, {}, acts.status().message()};
  m.upload(initial.data());
  OptimizerConfig o;
  o.lr = 1e-2f;
  o.weight_decay = 0.1f;
  o.clip_grad = 1.0f;
  o.lr_decay_style = "constant";
  AdamW<A> adam(m.layout(), o);
  const testing::VlmSteps steps = testing::vlm_steps(c, kSteps, kBatch);
  const int N = kBatch * c.seq_length;
  const size_t tower = m.layout().tensors()[m.layout().vision_end_index()].offset;
  for (int s = 0; s < kSteps; s++) {
    m.zero_grads();
    if (Status st = m.load_images(**acts, steps.tokens[s].data(), steps.images[s].data()); !st)
      return {{}, {}, {}, st.message()};
    r.losses.push_back(
        m.forward(**acts, steps.tokens[s].data(), steps.targets[s].data(), 0, loss_scale / N));
    m.backward(**acts);
    if (Status st = device.synchronize(device.compute()); !st) return {{}, {}, {}, st.message()};
    for (size_t i = 0; i < m.arena_size(); i++) m.grads()[i] /= loss_scale;  // 2^k: exact
    if (s == 0) {
      const A* e = (*acts)->residual;  // residual[0]: the embedding's output (no dropout)
      for (size_t i = 0; i < static_cast<size_t>(N) * c.hidden_size; i++)
        r.embedded.push_back(widened(e[i]));
      r.tower_grad.assign(m.grads(), m.grads() + tower);
    }
    adam.step(m.params(), m.grads(), o.lr);
    m.refresh_compute_copy();
  }
  return r;
}

// max |got - want| / max |want| (the layouts test's normwise error; NaN counts as infinite).
double relative_error(const float* got, const float* want, size_t n) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; i++) scale = std::max(scale, std::abs(double(want[i])));
  for (size_t i = 0; i < n; i++) {
    const double d = std::abs(double(got[i]) - double(want[i]));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst / std::max(scale, 1e-30);
}

QString beyond(const QString& what, double e, double tolerance) {
  return what + QString(": relative error %1 > %2").arg(e, 0, 'g', 3).arg(tolerance);
}

// The 16-bit run of `c` against fp32 from init_weights(7); "" when within the tolerances.
template <typename A>
QString check(const ModelConfig& c, float loss_scale) {
  kernels::set_num_threads(2);
  GptModel<float> init(c, kBatch);
  if (!init.init_weights(7).is_ok()) return "init_weights failed";
  const std::vector<float> initial(init.params(), init.params() + init.arena_size());
  const Run want = train<float>(c, initial, 1.0f);
  if (!want.error.empty()) return "fp32: " + QString::fromStdString(want.error);
  const Run got = train<A>(c, initial, loss_scale);
  if (!got.error.empty()) return QString::fromStdString(got.error);
  const ParamLayout& layout = init.layout();
  // The image rows carry patches, and the tower's gradients are not zero: a test that can fail.
  if (relative_error(want.tower_grad.data(), std::vector<float>(want.tower_grad.size()).data(),
                     want.tower_grad.size()) == 0)
    return "fp32: the tower got no gradient";
  const double embedded =
      relative_error(got.embedded.data(), want.embedded.data(), want.embedded.size());
  if (!(embedded <= kLossTolerance))
    return beyond("the embedding's output with the spliced patches", embedded, kLossTolerance);
  double worst_grad = 0, worst_loss = 0;
  for (int i = 0; i < layout.vision_end_index(); i++) {
    const ParamTensor& t = layout.tensors()[i];
    const double e = relative_error(got.tower_grad.data() + t.offset,
                                    want.tower_grad.data() + t.offset, t.numel);
    if (!(e <= kGradTolerance))
      return beyond("d " + QString::fromStdString(t.name), e, kGradTolerance);
    worst_grad = std::max(worst_grad, e);
  }
  for (int s = 0; s < kSteps; s++) {
    const double e = std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]);
    worst_loss = std::max(worst_loss, e);
    if (!(e <= kLossTolerance))
      return beyond(QString("step %1's loss %2 against fp32's %3")
                        .arg(s + 1)
                        .arg(got.losses[s])
                        .arg(want.losses[s]),
                    e, kLossTolerance);
  }
  if (!(want.losses.back() < want.losses.front())) return "fp32: the loss did not fall";
  qInfo(
      "relative errors: embedding %.3g, worst tower gradient %.3g, worst loss %.3g (fp32 loss "
      "%.4f -> %.4f)",
      embedded, worst_grad, worst_loss, want.losses.front(), want.losses.back());
  return "";
}

}  // namespace

class VlmMixedPrecision : public QObject {
  Q_OBJECT

 private slots:
  void gpt2_with_a_clip_tower_in_bf16_is_within_bf16_tolerance_of_fp32() {
    const QString e = check<bf16>(testing::tiny_vlm_config(false, 1, 16, 0.1f), 1.0f);
    QVERIFY2(e.isEmpty(), qPrintable("bf16: " + e));
  }

  void gpt2_with_a_clip_tower_in_fp16_under_a_loss_scale_is_within_tolerance_of_fp32() {
    const QString e = check<fp16>(testing::tiny_vlm_config(false, 1, 16, 0.1f), 1024.0f);
    QVERIFY2(e.isEmpty(), qPrintable("fp16: " + e));
  }

  void llama_with_two_images_in_bf16_is_within_bf16_tolerance_of_fp32() {
    const QString e = check<bf16>(testing::tiny_vlm_config(true, 2, 16, 0.1f), 1.0f);
    QVERIFY2(e.isEmpty(), qPrintable("bf16: " + e));
  }
};

QTEST_APPLESS_MAIN(VlmMixedPrecision)
#include "test_vlm_mixed_precision.moc"
