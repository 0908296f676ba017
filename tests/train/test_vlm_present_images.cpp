// The vision tower runs on the micro-batch's present images only (Note [present images] in
// model/gpt_vision.cpp): with images_per_sample 3 (one 3-image document bounds the dataset), a
// micro-batch of a 3-image, a text-only and a 1-image sequence runs the tower on 4 images, not
// 9, and a micro-batch of 1-image sequences on 2, not 6; the unused slots hold noise, which must
// not reach the model. Losses and gradients equal a reference with no unused slot at all: each
// sequence alone in a model whose bound is its own image count (fp64, to 1e-12; the sum over
// sequences is rounded differently), and the 1-image micro-batch equals the same micro-batch in
// a model of bound 1 bit for bit. Both with CLIP's class token and without one (whose features
// are the selected hidden state in place, which lies where the smaller batch puts it).
#include <QtTest/QtTest>

#include <cmath>
#include <random>

#include "common/tiny_model.h"
#include "lattice/kernels.h"
#include "model/gpt.h"

using namespace lattice;

namespace {
constexpr int kSeq = 24;

struct Batch {
  std::vector<int32_t> tokens, targets;  // (B, T)
  std::vector<float> images;             // (B I, Cin, H, W), I = the bound
};

// Sequences with images[b] images each: text, then each image as Np placeholder rows from row 1,
// one text row between images; targets the next text token (-1 at image rows). Image slots
// past a sequence's own hold normal(0, 10) noise, its own images normal(0, 1).
Batch make_batch(const ModelConfig& c, const std::vector<int>& images, int seed) {
  const VisionConfig& v = c.vision;
  const int T = c.seq_length, Np = v.patches(), I = v.images_per_sample, B = images.size();
  const size_t pixels = static_cast<size_t>(v.num_channels) * v.img_h * v.img_w;
  const int32_t image = c.image_token_id();
  Batch out;
  out.tokens.resize(static_cast<size_t>(B) * T);
  out.targets.resize(out.tokens.size());
  out.images.resize(B * I * pixels);
  std::mt19937 rng(seed);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  for (int b = 0; b < B; b++) {
    int32_t* x = out.tokens.data() + b * T;
    for (int t = 0; t < T; t++) x[t] = (t * 37 + b * 53 + seed) % c.vocab_size;
    for (int k = 0; k < images[b] * Np; k++) x[1 + k + k / Np] = image;
    for (int t = 0; t < T; t++) {
      const int32_t next = t + 1 < T ? x[t + 1] : (x[t] * 7 + 3) % c.vocab_size;
      out.targets[b * T + t] = next == image ? -1 : next;
    }
    for (int j = 0; j < I; j++)
      for (size_t p = 0; p < pixels; p++)
        out.images[(b * I + j) * pixels + p] = pixel(rng) * (j < images[b] ? 1.0f : 10.0f);
  }
  return out;
}

// Sequence b of `from` alone, in a model of bound I.
Batch one_sequence(const ModelConfig& c, const Batch& from, int from_bound, int b, int I) {
  const VisionConfig& v = c.vision;
  const int T = c.seq_length;
  const size_t pixels = static_cast<size_t>(v.num_channels) * v.img_h * v.img_w;
  Batch out;
  out.tokens.assign(from.tokens.begin() + b * T, from.tokens.begin() + (b + 1) * T);
  out.targets.assign(from.targets.begin() + b * T, from.targets.begin() + (b + 1) * T);
  const float* first = from.images.data() + b * from_bound * pixels;
  out.images.assign(first, first + I * pixels);
  return out;
}

bool g_class_token = true;  // the tower of the test case being run

ModelConfig bound(int images_per_sample) {
  ModelConfig c = testing::tiny_vlm_config(false, images_per_sample, kSeq, 0.1f);
  c.vision.class_token = g_class_token;
  return c;
}

struct Run {
  double loss = 0;
  std::vector<double> grads;  // (arena)
  int tower_images = 0;       // the tower's last batch
};

// One forward and backward of `batch` (B sequences) from `weights`, the loss scaled by `scale`.
Run run(const ModelConfig& c, int B, const std::vector<double>& weights, const Batch& batch,
        float scale) {
  GptModel<double> model(c, B);
  if (model.arena_size() != weights.size()) qFatal("the bound changed the parameter arena");
  std::copy(weights.begin(), weights.end(), model.params());
  model.zero_grads();
  auto acts = model.new_activations();
  if (!acts) qFatal("%s", acts.status().message().c_str());
  const Status loaded = model.load_images(**acts, batch.tokens.data(), batch.images.data());
  if (!loaded) qFatal("%s", loaded.message().c_str());
  Run r;
  r.loss = model.forward(**acts, batch.tokens.data(), batch.targets.data(), 0, scale);
  model.backward(**acts);
  r.grads.assign(model.grads(), model.grads() + model.arena_size());
  r.tower_images = model.vision()->images();
  return r;
}

// "" when a and b agree to `tol` (relative to max(1, |b|)), else the first difference.
QString compare(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  if (a.size() != b.size()) return "the gradient arenas differ in size";
  for (size_t i = 0; i < a.size(); i++)
    if (std::fabs(a[i] - b[i]) > tol * std::max(1.0, std::fabs(b[i])))
      return QString("gradient [%1]: %2 vs the reference's %3 (tolerance %4)")
          .arg(i)
          .arg(a[i], 0, 'g', 17)
          .arg(b[i], 0, 'g', 17)
          .arg(tol);
  return "";
}

}  // namespace

class VlmPresentImages : public QObject {
  Q_OBJECT

  std::vector<double> weights_;

  // CLIP's tower (a class token) or one without (its features are the selected state itself).
  void set_tower(bool class_token) {
    g_class_token = class_token;
    GptModel<double> init(bound(3), 1);
    QVERIFY(init.init_weights(7).is_ok());
    weights_.assign(init.params(), init.params() + init.arena_size());
  }

 private slots:
  void initTestCase() { kernels::set_num_threads(1); }

  void the_tower_runs_on_present_images_only_data() {
    QTest::addColumn<bool>("class_token");
    QTest::newRow("class token") << true;
    QTest::newRow("no class token") << false;
  }
  void the_tower_runs_on_present_images_only() {
    QFETCH(bool, class_token);
    set_tower(class_token);
    const std::vector<int> images = {3, 0, 1};
    const int B = 3;
    const float scale = 1.0f / (B * kSeq);
    const Batch batch = make_batch(bound(3), images, 5);
    const Run r = run(bound(3), B, weights_, batch, scale);
    QCOMPARE(r.tower_images, 4);  // 3 + 0 + 1, not B x 3
    // The reference: each sequence alone, in a model bounded by its own images (no unused slot).
    double loss = 0;
    std::vector<double> grads(r.grads.size(), 0.0);
    for (int b = 0; b < B; b++) {
      const int I = std::max(1, images[b]);
      const Run alone = run(bound(I), 1, weights_, one_sequence(bound(I), batch, 3, b, I), scale);
      if (images[b] > 0) QCOMPARE(alone.tower_images, images[b]);
      loss += alone.loss / B;  // forward's loss is its rows' mean
      for (size_t i = 0; i < grads.size(); i++) grads[i] += alone.grads[i];
    }
    QVERIFY2(std::fabs(r.loss - loss) <= 1e-12 * std::fabs(loss),
             qPrintable(QString("loss %1 vs the sequences' %2 (tolerance 1e-12)")
                            .arg(r.loss, 0, 'g', 17)
                            .arg(loss, 0, 'g', 17)));
    const QString diff = compare(r.grads, grads, 1e-12);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }

  void one_image_sequences_equal_a_bound_of_one_bit_for_bit() {
    set_tower(true);
    const int B = 2;
    const float scale = 1.0f / (B * kSeq);
    const Batch three = make_batch(bound(3), {1, 1}, 9);
    const Run r = run(bound(3), B, weights_, three, scale);
    QCOMPARE(r.tower_images, 2);  // not B x 3
    Batch one = three;            // the same sequences and images with no unused slot
    one.images.clear();
    for (int b = 0; b < B; b++) {
      const Batch s = one_sequence(bound(1), three, 3, b, 1);
      one.images.insert(one.images.end(), s.images.begin(), s.images.end());
    }
    const Run ref = run(bound(1), B, weights_, one, scale);
    QCOMPARE(ref.tower_images, 2);
    QCOMPARE(r.loss, ref.loss);
    const QString diff = compare(r.grads, ref.grads, 0.0);
    QVERIFY2(diff.isEmpty(), qPrintable(diff));
  }
};

QTEST_GUILESS_MAIN(VlmPresentImages)
#include "test_vlm_present_images.moc"
