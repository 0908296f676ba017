// --fp16 on the CPU: fp32 arithmetic with Megatron's loss scaler in the training step
// (optim/grad_scaling.h). Without an overflow the scaled run trains exactly as fp32 does (the
// scale is a power of two); an overflow skips the optimizer step, counts it, and the scale
// halves once the hysteresis is used up. The agreement over ranks is in
// grad_scaling_worker.cpp (mpirun).
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <cmath>
#include <cstring>

#include "lattice/cpu_bf16_gemm.h"
#include "lattice/train.h"
#include "optim/grad_scaling.h"

using namespace lattice;

namespace {

struct Row {
  double loss, scale, norm;
  int skipped, iteration;
};

class RecordingSink : public MetricsSink {
 public:
  void on_iteration(const IterationMetrics& m) override {
    rows.push_back({m.lm_loss, m.loss_scale, m.grad_norm, m.skipped_iterations, m.iteration});
  }
  void on_message(const std::string& m) override { messages.push_back(m); }
  std::vector<Row> rows;
  std::vector<std::string> messages;
};

TrainOptions small_run() {
  TrainOptions o;
  o.model.num_layers = 2;
  o.model.hidden_size = 32;
  o.model.num_attention_heads = 4;
  o.model.seq_length = 32;
  o.model.vocab_size = 200;
  o.model.attention_dropout = 0.1f;
  o.model.hidden_dropout = 0.1f;
  o.micro_batch_size = 2;
  o.global_batch_size = 4;
  o.train_iters = 6;
  o.mock_data = true;
  o.threads = 2;
  o.eval_iters = 0;
  o.optim.lr = 1e-3f;
  return o;
}

std::vector<Row> run(const TrainOptions& o, std::vector<std::string>* messages = nullptr) {
  RecordingSink sink;
  Result<TrainSummary> r = train(o, sink);
  if (!r) qWarning("train failed: %s", r.status().message().c_str());
  if (messages) *messages = sink.messages;
  return sink.rows;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

class LossScalingTest : public QObject {
  Q_OBJECT
 private slots:
  void fp16_on_the_cpu_matches_fp32_when_nothing_overflows() {
    const std::vector<Row> fp32 = run(small_run());
    TrainOptions o = small_run();
    o.fp16 = true;
    const std::vector<Row> fp16 = run(o);
    QCOMPARE(fp16.size(), fp32.size());
    QCOMPARE(fp16.size(), size_t{6});
    for (size_t i = 0; i < fp16.size(); i++) {
      // A power-of-two scale multiplies every gradient exactly: the runs agree bit for bit.
      QVERIFY2(fp16[i].loss == fp32[i].loss,
               qPrintable(QString("iteration %1: lm loss %2 (fp16) vs %3 (fp32)")
                              .arg(i + 1)
                              .arg(fp16[i].loss, 0, 'g', 17)
                              .arg(fp32[i].loss, 0, 'g', 17)));
      QVERIFY2(fp16[i].norm == fp32[i].norm,
               qPrintable(QString("iteration %1: grad norm %2 (fp16) vs %3 (fp32)")
                              .arg(i + 1)
                              .arg(fp16[i].norm, 0, 'g', 17)
                              .arg(fp32[i].norm, 0, 'g', 17)));
      QCOMPARE(fp16[i].scale, 4294967296.0);  // 2^32, no growth inside the 1000-step window
      QCOMPARE(fp16[i].skipped, 0);
      QCOMPARE(fp32[i].scale, 1.0);
    }
  }

  void an_overflow_skips_the_step_and_the_scale_halves_after_the_hysteresis() {
    // 2^140 makes the loss gradient's factor (scale / 128 tokens) overflow fp32: every
    // iteration overflows until the scale has come down far enough.
    TrainOptions o = small_run();
    o.fp16 = true;
    o.initial_loss_scale = std::ldexp(1.0, 140);
    o.hysteresis = 2;
    o.train_iters = 16;
    const std::vector<Row> rows = run(o);
    QCOMPARE(rows.size(), size_t{16});
    // Iteration 1 overflows: skipped, and the hysteresis absorbs it (scale unchanged).
    QCOMPARE(rows[0].skipped, 1);
    QCOMPARE(rows[0].scale, std::ldexp(1.0, 140));
    // Iteration 2 overflows again: the hysteresis is used up and the scale halves.
    QCOMPARE(rows[1].skipped, 2);
    QCOMPARE(rows[1].scale, std::ldexp(1.0, 139));
    int clean = 0;
    for (size_t i = 1; i < rows.size(); i++) {
      QCOMPARE(rows[i].iteration, int(i) + 1);
      const bool skipped = rows[i].skipped == rows[i - 1].skipped + 1;
      QVERIFY2(skipped || rows[i].skipped == rows[i - 1].skipped,
               qPrintable(QString("iteration %1: skipped count jumped from %2 to %3")
                              .arg(i + 1)
                              .arg(rows[i - 1].skipped)
                              .arg(rows[i].skipped)));
      // Every overflow after the hysteresis halves the scale; a clean step leaves it (the
      // growth window is 1000 iterations).
      const double want = skipped ? rows[i - 1].scale / 2 : rows[i - 1].scale;
      if (i > 1)
        QVERIFY2(rows[i].scale == want,
                 qPrintable(QString("iteration %1: loss scale %2, expected %3")
                                .arg(i + 1)
                                .arg(rows[i].scale)
                                .arg(want)));
      if (!skipped) {
        clean++;
        QVERIFY2(std::isfinite(rows[i].norm), "a step that was taken has a finite grad norm");
      }
      QVERIFY2(std::isfinite(rows[i].loss), "the forward loss never carries the scale");
    }
    QVERIFY2(clean > 0, "the scale came down far enough for steps to be taken");
    // Once steps are taken, the largest scale that did not overflow is below 2^134: the
    // factor scale / 128 must be a finite float.
    QVERIFY(rows.back().scale <= std::ldexp(1.0, 134));
  }

  void a_resumed_run_continues_the_scaler() {
    // Straight through: 8 iterations from 2^140 (the scale moves at iterations 2, 3, ...).
    TrainOptions o = small_run();
    o.fp16 = true;
    o.initial_loss_scale = std::ldexp(1.0, 140);
    o.train_iters = 8;
    const std::vector<Row> straight = run(o);
    QCOMPARE(straight.size(), size_t{8});
    // The same run saved after iteration 4 and resumed.
    QTemporaryDir dir;
    TrainOptions first = o;
    first.save = dir.path().toStdString();
    first.exit_interval = 4;
    const std::vector<Row> a = run(first);
    QCOMPARE(a.size(), size_t{4});
    TrainOptions second = o;
    second.load = first.save;
    std::vector<std::string> said;
    const std::vector<Row> b = run(second, &said);
    QCOMPARE(b.size(), size_t{4});
    QVERIFY(!any_contains(said, "holds no loss scale"));
    for (size_t i = 0; i < 4; i++) {
      QVERIFY2(b[i].scale == straight[4 + i].scale,
               qPrintable(QString("iteration %1: loss scale %2 after resuming, %3 straight")
                              .arg(5 + i)
                              .arg(b[i].scale)
                              .arg(straight[4 + i].scale)));
      QCOMPARE(b[i].skipped, straight[4 + i].skipped);
      QCOMPARE(b[i].loss, straight[4 + i].loss);
    }
  }

  void resuming_fp16_from_a_checkpoint_without_a_scaler_says_the_scale_restarts() {
    QTemporaryDir dir;
    TrainOptions first = small_run();  // fp32: its checkpoint has no grad_scaler
    first.train_iters = 2;
    first.save = dir.path().toStdString();
    QCOMPARE(run(first).size(), size_t{2});
    TrainOptions second = small_run();
    second.train_iters = 3;
    second.fp16 = true;
    second.initial_loss_scale = 1024;
    second.load = first.save;
    std::vector<std::string> said;
    const std::vector<Row> rows = run(second, &said);
    QCOMPARE(rows.size(), size_t{1});
    QCOMPARE(rows[0].scale, 1024.0);
    QVERIFY2(any_contains(said, "warning: the checkpoint in --load " + first.save +
                                    " holds no loss scale (it was saved without --fp16); the "
                                    "dynamic loss scale starts again at --initial-loss-scale 1024"),
             said.empty() ? "no message" : said.back().c_str());
    second.loss_scale = 512;  // a static scale has nothing to restore: nothing to say
    QVERIFY(!any_contains((run(second, &said), said), "holds no loss scale"));
  }

  void unscaling_flags_inf_and_nan() {
    std::vector<float> g = {2.0f, -4.0f, 8.0f};
    QVERIFY(!unscale_and_check(g.data(), g.size(), 0.5));
    QCOMPARE(g[2], 4.0f);
    g[1] = std::nanf("");
    QVERIFY(unscale_and_check(g.data(), g.size(), 0.5));
    g[1] = INFINITY;
    QVERIFY(unscale_and_check(g.data(), g.size(), 1.0));
  }

  // On a CPU without bf16 GEMMs (forced here: this machine may have them).
  void bf16_on_the_cpu_names_the_gpu_trainer() {
    TrainOptions o = small_run();
    o.bf16 = true;
    RecordingSink sink;
    const kernels::Bf16Gemm before = kernels::bf16_gemm();
    QVERIFY(kernels::set_bf16_gemm(kernels::Bf16Gemm::none));
    Result<TrainSummary> r = train(o, sink);
    kernels::set_bf16_gemm(before);
    QVERIFY(!r);
    QVERIFY2(r.status().message().find("--device cuda") != std::string::npos,
             r.status().message().c_str());
  }
};

QTEST_APPLESS_MAIN(LossScalingTest)
#include "test_loss_scaling.moc"
