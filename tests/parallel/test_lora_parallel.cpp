// LoRA through `lattice train` (Note [LoRA] in engine/src/model/param_layout.h, docs/lora.md).
// Layouts: a LoRA run on TP 2 x PP 2, TP 2 x PP 2 with sequence parallelism and full
// recomputation, with selective recomputation, TP 2 x DP 2 with the distributed optimizer and
// DP 2 (small buckets, some of frozen tensors alone), and PP 2 with LoRA dropout each train like
// one process (every step's loss and grad norm within 1e-5 relative, fp64 as
// test_parallel_equivalence). Checkpoints: a LoRA run from a base checkpoint saves its adapters
// alone, resumes from them to the same losses bit for bit, and `ckpt merge-lora` writes W + (alpha
// / r) B A (checked against the same sum in double here) with every other tensor the base's bit for
// bit.
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <cmath>
#include <set>

#include "checkpoint/checkpoint.h"
#include "common/process.h"
#include "lattice/storage/run_store.h"

namespace {

const QStringList kModel = {"--mock-data",
                            "--num-layers",
                            "4",
                            "--hidden-size",
                            "32",
                            "--num-attention-heads",
                            "4",
                            "--seq-length",
                            "16",
                            "--vocab-size",
                            "255",
                            "--micro-batch-size",
                            "2",
                            "--global-batch-size",
                            "8",
                            "--lr",
                            "1e-2",
                            "--eval-iters",
                            "0",
                            "--log-interval",
                            "1",
                            "--threads",
                            "1",
                            "--hidden-dropout",
                            "0.1",
                            "--attention-dropout",
                            "0.1",
                            "--lora-rank",
                            "4",
                            "--lora-alpha",
                            "8"};

struct Trace {
  QList<double> losses, norms;
};

std::vector<float> global(const QString& dir, const std::string& name) {
  std::vector<float> out;
  auto ref = lattice::find_checkpoint(dir.toStdString(), 0);
  if (!ref) return out;
  auto reader = lattice::CheckpointReader::open(ref->path);
  if (!reader) return out;
  std::vector<int64_t> shape;
  if (!(*reader)->read_global("model", name, shape, out)) out.clear();
  return out;
}

}  // namespace

class LoraParallel : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db() const { return dir_.filePath("runs.sqlite"); }

  Trace train(const QString& name, int ranks, const QStringList& args) {
    const lattice::testing::Run r =
        lattice::testing::run_lattice(ranks, QStringList{"train"} + kModel + args +
                                                 QStringList{"--db", db(), "--run-name", name});
    Trace t;
    if (r.exit_code != 0) {
      qWarning("%s failed (%d):\n%s\n%s", qPrintable(name), r.exit_code, qPrintable(r.out),
               qPrintable(r.err));
      return t;
    }
    auto store = lattice::storage::RunStore::open(db().toStdString());
    if (!store) return t;
    auto run = (*store)->find_run(name.toStdString());
    if (!run) return t;
    auto history = (*store)->history(run->id);
    if (!history) return t;
    for (const auto& series : history->metrics) {
      QList<double>* into = series.key == "lm loss"     ? &t.losses
                            : series.key == "grad norm" ? &t.norms
                                                        : nullptr;
      if (into)
        for (const auto& p : series.points) into->append(p.value);
    }
    return t;
  }

  static void expect_close(const QString& name, const Trace& want, const Trace& got, int steps,
                           double tolerance) {
    QCOMPARE(got.losses.size(), steps);
    QCOMPARE(got.norms.size(), steps);
    for (int i = 0; i < steps; i++) {
      const double rl = std::abs(got.losses[i] - want.losses[i]) / want.losses[i];
      const double rn = std::abs(got.norms[i] - want.norms[i]) / want.norms[i];
      QVERIFY2(rl <= tolerance && rn <= tolerance,
               qPrintable(QString("%1 step %2: loss %3 vs %4, grad norm %5 vs %6 (tolerance %7)")
                              .arg(name)
                              .arg(i + 1)
                              .arg(got.losses[i], 0, 'g', 17)
                              .arg(want.losses[i], 0, 'g', 17)
                              .arg(got.norms[i], 0, 'g', 17)
                              .arg(want.norms[i], 0, 'g', 17)
                              .arg(tolerance)));
    }
  }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  // LoRA dropout 0 across TP: a row-parallel adapter's input is this rank's columns, whose
  // mask is drawn by the slice's own index (docs/lora.md), so only TP 1 layouts
  // share masks with one process.
  void lora_layouts_train_like_one_process() {
    const QStringList fp64 = {"--train-iters", "6", "--fp64"};
    const Trace one = train("one", 1, fp64);
    QCOMPARE(one.losses.size(), 6);
    QVERIFY2(one.losses.back() < one.losses.front(), "the LoRA run's loss did not decrease");
    expect_close("TP 2 x PP 2", one,
                 train("tp2pp2", 4,
                       fp64 + QStringList{"--tensor-model-parallel-size", "2",
                                          "--pipeline-model-parallel-size", "2"}),
                 6, 1e-5);
    expect_close(
        "TP 2 x PP 2, SP, full recomputation", one,
        train("tp2pp2sp", 4,
              fp64 + QStringList{"--tensor-model-parallel-size", "2",
                                 "--pipeline-model-parallel-size", "2", "--sequence-parallel",
                                 "--recompute-granularity", "full", "--recompute-method", "uniform",
                                 "--recompute-num-layers", "1"}),
        6, 1e-5);
    expect_close("TP 2 x PP 2, selective recomputation", one,
                 train("tp2pp2sel", 4,
                       fp64 + QStringList{"--tensor-model-parallel-size", "2",
                                          "--pipeline-model-parallel-size", "2",
                                          "--recompute-granularity", "selective"}),
                 6, 1e-5);
    expect_close(
        "TP 2 x DP 2, distributed optimizer, small buckets", one,
        train("tp2dp2", 4,
              fp64 + QStringList{"--tensor-model-parallel-size", "2", "--use-distributed-optimizer",
                                 "--ddp-bucket-size", "3000"}),
        6, 1e-5);
    // Small buckets: some hold frozen tensors alone, which the reducer skips.
    expect_close("DP 2, small buckets", one,
                 train("dp2", 2, fp64 + QStringList{"--ddp-bucket-size", "3000"}), 6, 1e-5);
    const QStringList dropout = fp64 + QStringList{"--lora-dropout", "0.1"};
    expect_close(
        "PP 2 with LoRA dropout", train("one-dropout", 1, dropout),
        train("pp2-dropout", 2, dropout + QStringList{"--pipeline-model-parallel-size", "2"}), 6,
        1e-5);
  }

  void adapters_are_saved_alone_resumed_and_merged() {
    const QString base = dir_.filePath("base"), lora = dir_.filePath("lora");
    const QString merged = dir_.filePath("merged");
    // The base: a plain run (no LoRA flags), two iterations.
    QStringList plain = kModel.mid(0, kModel.indexOf("--lora-rank"));
    const lattice::testing::Run b = lattice::testing::run_lattice(
        1, QStringList{"train"} + plain + QStringList{"--train-iters", "2", "--save", base});
    QVERIFY2(b.exit_code == 0, qPrintable(b.err));
    const QStringList from_base = {"--pretrained-checkpoint", base, "--lora-dropout", "0.1",
                                   "--train-iters",           "6"};
    const Trace straight =
        train("straight", 1, from_base + QStringList{"--save", lora, "--save-interval", "3"});
    QCOMPARE(straight.losses.size(), 6);
    // Resuming the adapters of iteration 3 (base again from --pretrained-checkpoint) gives
    // iterations 4-6 bit for bit.
    const Trace resumed =
        train("resumed", 1, from_base + QStringList{"--load", lora, "--ckpt-step", "3"});
    QCOMPARE(resumed.losses.size(), 3);
    for (int i = 0; i < 3; i++)
      QVERIFY2(resumed.losses[i] == straight.losses[i + 3],
               qPrintable(QString("resumed iteration %1: %2 vs %3")
                              .arg(i + 4)
                              .arg(resumed.losses[i], 0, 'g', 17)
                              .arg(straight.losses[i + 3], 0, 'g', 17)));
    // The LoRA checkpoint holds the adapters alone.
    auto ref = lattice::find_checkpoint(lora.toStdString(), 0);
    QVERIFY(ref);
    auto reader = lattice::CheckpointReader::open(ref->path);
    QVERIFY(reader);
    std::set<std::string> names;
    for (const auto& p : (*reader)->pieces()) names.insert(p.name);
    QCOMPARE(names.size(), size_t(4 * 4 * 2));
    for (const std::string& n : names)
      QVERIFY2(n.find(".adapter.") != std::string::npos, n.c_str());
    QCOMPARE((*reader)->model().lora_rank, 4);
    // Merge, and check it in double from the saved tensors.
    const lattice::testing::Run m = lattice::testing::run_lattice(
        1, {"ckpt", "merge-lora", "--base", base, "--lora", lora, "--output", merged});
    QVERIFY2(m.exit_code == 0, qPrintable(m.err + m.out));
    const double scale = 8.0 / 4.0;
    int checked = 0;
    for (const std::string& n : names) {
      if (n.find(".adapter.linear_in.") == std::string::npos) continue;
      const std::string stem = n.substr(0, n.find(".adapter."));
      const std::vector<float> a = global(lora, n);
      const std::vector<float> bm = global(lora, stem + ".adapter.linear_out.weight");
      const std::vector<float> w = global(base, stem + ".weight");
      const std::vector<float> got = global(merged, stem + ".weight");
      QVERIFY(!a.empty() && !bm.empty() && !w.empty());
      QCOMPARE(got.size(), w.size());
      const size_t r = 4, in = a.size() / r, out = w.size() / in;
      QCOMPARE(bm.size(), out * r);
      double moved = 0;
      for (size_t o = 0; o < out; o++)
        for (size_t i = 0; i < in; i++) {
          double ba = 0;
          for (size_t k = 0; k < r; k++) ba += double(bm[o * r + k]) * double(a[k * in + i]);
          const double want = double(w[o * in + i]) + scale * ba;
          const double e = std::abs(got[o * in + i] - want);
          moved += std::abs(scale * ba);
          QVERIFY2(e <= 1.2e-7 * std::abs(want) + 1e-12,
                   qPrintable(QString("%1[%2, %3]: merged %4, base + (a/r) B A %5")
                                  .arg(stem.c_str())
                                  .arg(o)
                                  .arg(i)
                                  .arg(got[o * in + i], 0, 'g', 9)
                                  .arg(want, 0, 'g', 9)));
        }
      QVERIFY2(
          moved > 0,
          qPrintable(QString("%1: B A is zero: the adapters never trained").arg(stem.c_str())));
      checked++;
    }
    QCOMPARE(checked, 16);
    // Everything else is the base's, bit for bit.
    for (const char* n :
         {"embedding.word_embeddings.weight", "decoder.layers.2.input_layernorm.weight",
          "decoder.layers.3.mlp.linear_fc1.bias", "decoder.final_layernorm.bias"})
      QVERIFY2(global(merged, n) == global(base, n), n);
    // The merged checkpoint is an ordinary one: a run starts from it (--pretrained-checkpoint).
    const lattice::testing::Run again = lattice::testing::run_lattice(
        1, QStringList{"train"} + plain +
               QStringList{"--train-iters", "1", "--pretrained-checkpoint", merged});
    QVERIFY2(again.exit_code == 0, qPrintable(again.err));
  }
};

QTEST_GUILESS_MAIN(LoraParallel)
#include "test_lora_parallel.moc"
