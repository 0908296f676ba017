// Training behaviour: a tiny model memorises one batch; runs are bit-identical for the same
// seed and thread count; the learning-rate schedule follows Megatron's shapes.
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <random>

#include "common/tiny_model.h"
#include "lattice/kernels.h"
#include "lattice/train.h"
#include "model/gpt.h"
#include "optim/adamw.h"

using namespace lattice;

namespace {

class RecordingSink : public MetricsSink {
 public:
  void on_iteration(const IterationMetrics& m) override { losses.push_back(m.lm_loss); }
  std::vector<double> losses;
};

TrainOptions small_run(uint64_t seed) {
  TrainOptions o;
  o.model.num_layers = 2;
  o.model.hidden_size = 32;
  o.model.num_attention_heads = 4;
  o.model.seq_length = 32;
  o.model.vocab_size = 200;
  o.model.attention_dropout = 0.1f;  // dropout on: determinism must hold with it
  o.model.hidden_dropout = 0.1f;
  o.micro_batch_size = 2;
  o.global_batch_size = 4;
  o.train_iters = 8;
  o.mock_data = true;
  o.seed = seed;
  o.threads = 2;
  o.optim.lr = 1e-3f;
  return o;
}

uint64_t bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace

class Training : public QObject {
  Q_OBJECT
 private slots:
  void tiny_model_overfits_one_batch() {
    kernels::set_num_threads(2);
    const ModelConfig c = testing::tiny_config(2, 32, 4, 16, 64);
    const int B = 4, N = B * c.seq_length;
    GptModel<float> model(c, B);
    model.init_weights(1);
    OptimizerConfig oc;
    oc.lr = 3e-3f;
    oc.weight_decay = 0.0f;
    AdamW<float> opt(model.layout(), oc);
    GptActivations<float> acts(c, B);
    std::mt19937 rng(5);
    std::vector<int32_t> tokens(N), targets(N);
    for (int i = 0; i < N; i++) tokens[i] = rng() % c.vocab_size, targets[i] = rng() % c.vocab_size;
    double first = 0, last = 0;
    for (int step = 1; step <= 300; step++) {
      model.zero_grads();
      last = model.forward(acts, tokens.data(), targets.data(), step, 1.0f / N);
      model.backward(acts);
      opt.step(model.params(), model.grads(), oc.lr);
      if (step == 1) first = last;
    }
    QVERIFY2(
        last < 0.05 * first,
        qPrintable(QString("loss %1 -> %2, expected below 5% of the start").arg(first).arg(last)));
  }

  void same_seed_gives_bit_identical_losses() {
    RecordingSink a, b;
    QVERIFY(train(small_run(11), a).is_ok());
    QVERIFY(train(small_run(11), b).is_ok());
    QCOMPARE(a.losses.size(), size_t(8));
    for (size_t i = 0; i < a.losses.size(); i++)
      QVERIFY2(bits(a.losses[i]) == bits(b.losses[i]),
               qPrintable(QString("iteration %1: %2 vs %3")
                              .arg(i + 1)
                              .arg(a.losses[i], 0, 'g', 17)
                              .arg(b.losses[i], 0, 'g', 17)));
  }

  void another_seed_gives_another_run() {
    RecordingSink a, b;
    QVERIFY(train(small_run(11), a).is_ok());
    QVERIFY(train(small_run(12), b).is_ok());
    QVERIFY2(a.losses[0] != b.losses[0], "different seeds produced the same first loss");
  }

  void learning_rate_schedules_follow_megatron() {
    OptimizerConfig c;
    c.lr = 1.0f;
    c.min_lr = 0.1f;
    c.lr_warmup_iters = 10;
    c.lr_decay_style = "linear";
    // Arguments are optimizer steps already taken: iteration 1 trains at learning_rate(c, 0).
    QCOMPARE(learning_rate(c, 0, 110), 0.0);  // Megatron's first warm-up iteration: lr 0
    QCOMPARE(learning_rate(c, 5, 110), 0.5);  // warm-up: lr * steps / warmup
    QCOMPARE(learning_rate(c, 10, 110), 1.0);
    QVERIFY(std::abs(learning_rate(c, 60, 110) - 0.55) < 1e-6);  // halfway down
    QVERIFY(std::abs(learning_rate(c, 110, 110) - 0.1) < 1e-6);
    QVERIFY(std::abs(learning_rate(c, 500, 110) - 0.1) < 1e-6);  // min after decay
    c.lr_decay_style = "cosine";
    QVERIFY(std::abs(learning_rate(c, 60, 110) - 0.55) < 1e-6);  // cos(pi/2) midpoint
    QVERIFY(std::abs(learning_rate(c, 35, 110) - (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25)))) <
            1e-6);
    c.lr_decay_style = "constant";
    QCOMPARE(learning_rate(c, 500, 110), 1.0);
  }

  void gradients_are_clipped_to_the_global_norm() {
    const ModelConfig c = testing::tiny_config(1, 8, 2, 4, 16);
    ParamLayout layout(c);
    OptimizerConfig oc;
    oc.clip_grad = 1.0f;
    oc.lr = 0.0f;  // only the clipping is observed
    AdamW<double> opt(layout, oc);
    std::vector<double> params(layout.total_numel(), 0.0), grads(layout.total_numel(), 0.0);
    grads[0] = 3.0;
    grads[layout.tensors().back().offset] = 4.0;
    const double norm = opt.step(params.data(), grads.data(), 0.0);
    QCOMPARE(norm, 5.0);
    // The step took the clipped gradient (the first moment after one step is (1 - beta1) g);
    // the gradients are scaled on their way into the step, not in place (as on the GPU).
    const double beta1 = oc.adam_beta1;
    int seen = 0;
    for (const auto& view : opt.state_views()) {
      if (view.offset == 0) {
        QVERIFY(std::abs(view.exp_avg[0] - (1 - beta1) * 3.0 / (5.0 + 1e-6)) < 1e-12);
        seen++;
      }
      if (view.offset == layout.tensors().back().offset) {
        QVERIFY(std::abs(view.exp_avg[0] - (1 - beta1) * 4.0 / (5.0 + 1e-6)) < 1e-12);
        seen++;
      }
    }
    QCOMPARE(seen, 2);
  }

  void non_finite_gradients_skip_the_step() {
    const ModelConfig c = testing::tiny_config(1, 8, 2, 4, 16);
    ParamLayout layout(c);
    AdamW<float> opt(layout, OptimizerConfig{});
    std::vector<float> params(layout.total_numel(), 1.0f), grads(layout.total_numel(), 0.5f);
    grads[3] = std::nanf("");
    const double norm = opt.step(params.data(), grads.data(), 0.1);
    QVERIFY(std::isnan(norm));
    QCOMPARE(opt.steps_taken(), 0);
    for (size_t i = 0; i < params.size(); i++)
      QVERIFY2(params[i] == 1.0f,
               qPrintable(QString("param[%1] changed by a skipped step").arg(i)));
    for (float m : opt.exp_avg()) QCOMPARE(m, 0.0f);
  }

  void no_weight_decay_on_biases_and_norms() {
    const ModelConfig c = testing::tiny_config(1, 8, 2, 4, 16);
    ParamLayout layout(c);
    OptimizerConfig oc;
    oc.lr = 0.1f;
    oc.weight_decay = 0.5f;
    AdamW<double> opt(layout, oc);
    std::vector<double> params(layout.total_numel(), 1.0), grads(layout.total_numel(), 0.0);
    opt.step(params.data(), grads.data(), 0.1);
    for (const ParamTensor& t : layout.tensors()) {
      const double expected = t.decay ? 1.0 - 0.1 * 0.5 : 1.0;
      QVERIFY2(std::abs(params[t.offset] - expected) < 1e-9,
               qPrintable(QString::fromStdString(t.name) +
                          QString(": %1, expected %2").arg(params[t.offset]).arg(expected)));
    }
  }
};

QTEST_APPLESS_MAIN(Training)
#include "test_training.moc"
