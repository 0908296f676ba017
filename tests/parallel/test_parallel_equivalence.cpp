// The central promise of 3D parallelism: a job split over tensor, pipeline and data parallel
// ranks (real MPI processes) trains exactly like one process. A tiny GPT runs 10 steps with
// dropout on; every step's loss and grad norm and every parameter at the end must match the
// one-process run within 1e-5 relative. The runs use --fp64 so that what is compared is the
// parallel algorithm, not float rounding: splitting a sum over ranks changes the order of
// additions, which in float moves results by ~1e-7 per op and, after Adam's normalisation,
// by more than 1e-5 on parameters whose gradients are near zero (docs/design-notes.md
// #parallel-equivalence). The float path is the same code with T = float.
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <cmath>

#include "checkpoint/safetensors.h"
#include "common/process.h"
#include "lattice/storage/run_store.h"

namespace {

using lattice::testing::Run;

// 8 layers so that 4 pipeline stages can hold 2 virtual stages each; vocabulary 511 + EOD =
// 512; 16 samples per step = 8 micro-batches of 2 (4 per data-parallel rank at DP 2).
const QStringList kModel = {"--mock-data", "--num-layers",
                            "8",           "--hidden-size",
                            "64",          "--num-attention-heads",
                            "8",           "--seq-length",
                            "32",          "--vocab-size",
                            "511",         "--micro-batch-size",
                            "2",           "--global-batch-size",
                            "16",          "--train-iters",
                            "10",          "--lr",
                            "1e-3",        "--lr-warmup-iters",
                            "2",           "--lr-decay-style",
                            "cosine",      "--hidden-dropout",
                            "0.1",         "--attention-dropout",
                            "0.1",         "--eval-iters",
                            "0",           "--log-interval",
                            "5",           "--threads",
                            "1",           "--fp64"};

struct Trace {
  QList<double> losses, norms;
  std::map<std::string, std::vector<float>> params;
};

}  // namespace

class ParallelEquivalence : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  Trace reference_;

  QString db() const { return dir_.filePath("runs.sqlite"); }

  // Trains `name` on `ranks` processes (1: without mpirun) and reads back its trace.
  Trace train(const QString& name, int ranks, const QStringList& layout) {
    return train_with(name, ranks, kModel, layout);
  }
  Trace train_with(const QString& name, int ranks, const QStringList& model,
                   const QStringList& layout) {
    const QString weights = dir_.filePath(name + ".safetensors");
    QStringList args = QStringList{"train"} + model + layout +
                       QStringList{"--db", db(), "--run-name", name, "--save-hf", weights};
    const Run r = lattice::testing::run_lattice(ranks, args);
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
    auto file = lattice::safetensors::File::open(weights.toStdString());
    if (!file) return t;
    for (const auto& info : file->tensors()) {
      std::vector<float> v(info.numel);
      if (file->read_float(info, v.data())) t.params[info.name] = std::move(v);
    }
    return t;
  }

  void expect_same(const QString& name, const Trace& t) { expect_same_as(reference_, name, t); }

  // Every value within 1e-5 relative; parameters also pass an absolute 1e-7 (the weights
  // file stores float32, whose last bit at 0.02 is 2e-9, and biases start at exactly 0).
  void expect_same_as(const Trace& reference, const QString& name, const Trace& t) {
    QCOMPARE(t.losses.size(), 10);
    QCOMPARE(t.norms.size(), 10);
    for (int i = 0; i < 10; i++) {
      const double rl = std::abs(t.losses[i] - reference.losses[i]) / reference.losses[i];
      QVERIFY2(rl <= 1e-5, qPrintable(QString("%1: step %2 loss %3 vs one process %4 (rel %5)")
                                          .arg(name)
                                          .arg(i + 1)
                                          .arg(t.losses[i], 0, 'g', 17)
                                          .arg(reference.losses[i], 0, 'g', 17)
                                          .arg(rl)));
      const double rn = std::abs(t.norms[i] - reference.norms[i]) / reference.norms[i];
      QVERIFY2(rn <= 1e-5, qPrintable(QString("%1: step %2 grad norm %3 vs %4")
                                          .arg(name)
                                          .arg(i + 1)
                                          .arg(t.norms[i], 0, 'g', 17)
                                          .arg(reference.norms[i], 0, 'g', 17)));
    }
    QCOMPARE(t.params.size(), reference.params.size());
    for (const auto& [tensor, want] : reference.params) {
      const auto it = t.params.find(tensor);
      QVERIFY2(it != t.params.end(), qPrintable(name + ": no tensor " + tensor.c_str()));
      const std::vector<float>& got = it->second;
      QCOMPARE(got.size(), want.size());
      for (size_t i = 0; i < want.size(); i++) {
        const double diff = std::abs(double(got[i]) - want[i]);
        if (diff > 1e-5 * std::abs(want[i]) + 1e-7)
          QFAIL(qPrintable(QString("%1: %2[%3] = %4, one process %5 (tolerance 1e-5 relative)")
                               .arg(name, tensor.c_str())
                               .arg(i)
                               .arg(got[i], 0, 'g', 9)
                               .arg(want[i], 0, 'g', 9)));
      }
    }
  }

  void check_layout(const QString& name, int ranks, const QStringList& layout) {
    const Trace t = train(name, ranks, layout);
    expect_same(name, t);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    reference_ = train("one-process", 1, {});
    QCOMPARE(reference_.losses.size(), 10);
    QVERIFY(!reference_.params.empty());
    // The run learns: the last loss is below the first.
    QVERIFY(reference_.losses.last() < reference_.losses.first());
  }

  void tensor_parallel_2() { check_layout("tp2", 2, {"--tensor-model-parallel-size", "2"}); }
  void pipeline_parallel_2() {
    check_layout("pp2", 2, {"--pipeline-model-parallel-size", "2"});
    check_layout(
        "pp2-uneven", 2,
        {"--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers", "5"});
  }
  void pipeline_4_interleaved() {
    check_layout(
        "pp4-vpp2", 4,
        {"--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage", "1"});
  }
  void data_parallel_2() { check_layout("dp2", 2, {}); }
  void data_parallel_2_distributed_optimizer() {
    check_layout("dp2-distopt", 2, {"--use-distributed-optimizer"});
  }
  void tensor_2_pipeline_2() {
    check_layout("tp2-pp2", 4,
                 {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"});
  }
  void tensor_2_data_2_sequence_parallel() {
    check_layout("tp2-dp2-sp", 4, {"--tensor-model-parallel-size", "2", "--sequence-parallel"});
  }
  void tensor_2_pipeline_2_data_2() {
    check_layout("tp2-pp2-dp2", 8,
                 {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                  "--use-distributed-optimizer"});
  }
  // The Llama family (RoPE, RMSNorm, SwiGLU, 8 query heads in 2 key/value groups, the untied
  // output layer on the last stage, no biases) splits as exactly: TP 2 x PP 2 x DP 2 with
  // sequence parallelism and the distributed optimizer, and interleaved PP 2 with full
  // recomputation, against its own one process.
  void llama_tensor_2_pipeline_2_data_2_sequence_parallel() {
    const QStringList llama =
        kModel + QStringList{"--position-embedding-type", "rope", "--normalization", "RMSNorm",
                             "--swiglu", "--ffn-hidden-size", "128", "--group-query-attention",
                             "--num-query-groups", "2", "--untie-embeddings-and-output-weights",
                             "--disable-bias-linear"};
    const Trace one = train_with("llama-one-process", 1, llama, {});
    QCOMPARE(one.losses.size(), 10);
    QVERIFY(one.losses.last() < one.losses.first());
    QVERIFY2(one.params.count("model.layers.0.mlp.gate_proj.weight") &&
                 one.params.count("lm_head.weight"),
             "the weights file lacks Llama's gate_proj or lm_head");
    const Trace many = train_with("llama-tp2-pp2-dp2-sp", 8, llama,
                                  {"--tensor-model-parallel-size", "2",
                                   "--pipeline-model-parallel-size", "2", "--sequence-parallel",
                                   "--use-distributed-optimizer"});
    expect_same_as(one, "llama-tp2-pp2-dp2-sp", many);
    // Interleaved 1F1B with full recomputation: the recomputed layers re-apply RoPE and SwiGLU.
    const Trace recomputed = train_with(
        "llama-pp2-vpp2-recompute", 2, llama,
        {"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "2",
         "--recompute-granularity", "full", "--recompute-method", "uniform",
         "--recompute-num-layers", "1"});
    expect_same_as(one, "llama-pp2-vpp2-recompute", recomputed);
  }

  // Megatron's default batch: without --global-batch-size, 4 ranks at TP 2 (DP 2) train one
  // micro-batch per data-parallel rank, 2 x 2 samples per iteration.
  void global_batch_defaults_to_micro_batch_times_data_parallel() {
    QStringList model = kModel;
    const qsizetype at = model.indexOf("--global-batch-size");
    model.remove(at, 2);
    model[model.indexOf("--train-iters") + 1] = "2";
    model[model.indexOf("--log-interval") + 1] = "1";
    const Run r = lattice::testing::run_lattice(
        4, QStringList{"train"} + model +
               QStringList{"--tensor-model-parallel-size", "2", "--db", db(), "--run-name",
                           "default-batch"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains("iteration        2/       2 | consumed samples:            8"),
             qPrintable(r.out));
    QVERIFY2(r.out.contains("global batch size:     4"), qPrintable(r.out));
  }

  // The float path (what users train with): losses and grad norms within 1e-5 of one float
  // process; parameters are equal only up to reduction order in float (see the file comment).
  void float_losses_match() {
    auto float_flags = [](QStringList flags) {
      flags.removeAll("--fp64");
      return flags;
    };
    const Trace one = train_with("float-one-process", 1, float_flags(kModel), {});
    const Trace many =
        train_with("float-tp2-pp2-dp2", 8, float_flags(kModel),
                   {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"});
    QCOMPARE(one.losses.size(), 10);
    QCOMPARE(many.losses.size(), 10);
    for (int i = 0; i < 10; i++) {
      QVERIFY2(std::abs(many.losses[i] - one.losses[i]) <= 1e-5 * one.losses[i],
               qPrintable(QString("step %1: loss %2 vs one float process %3")
                              .arg(i + 1)
                              .arg(many.losses[i], 0, 'g', 9)
                              .arg(one.losses[i], 0, 'g', 9)));
      QVERIFY2(std::abs(many.norms[i] - one.norms[i]) <= 1e-5 * one.norms[i],
               qPrintable(QString("step %1: grad norm %2 vs one float process %3")
                              .arg(i + 1)
                              .arg(many.norms[i], 0, 'g', 9)
                              .arg(one.norms[i], 0, 'g', 9)));
    }
  }

  void full_recomputation() {
    check_layout("recompute-full-uniform", 1,
                 {"--recompute-granularity", "full", "--recompute-method", "uniform",
                  "--recompute-num-layers", "2"});
    check_layout("recompute-full-block-pp2", 2,
                 {"--pipeline-model-parallel-size", "2", "--recompute-granularity", "full",
                  "--recompute-method", "block", "--recompute-num-layers", "1"});
  }
  void selective_recomputation() {
    check_layout("recompute-selective-tp2", 2,
                 {"--tensor-model-parallel-size", "2", "--recompute-granularity", "selective"});
  }
};

QTEST_GUILESS_MAIN(ParallelEquivalence)
#include "test_parallel_equivalence.moc"
