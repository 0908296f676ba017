// Models too large for this machine, as a user meets them with `lattice train` (issue 30 item 5):
// sizes whose products overflow are refused at once in one sentence naming the flag; a run the
// planner's estimate says cannot fit is refused before anything is allocated, naming both
// figures; and an allocation that fails (the process's address space limited with
// setrlimit(RLIMIT_AS), so nothing is touched) ends the run with the memory category and the
// bytes asked for, exit 1, recorded as failed. None of them may abort (exit 134).
#include <QtTest/QtTest>

#include <sys/resource.h>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>

#include "common/process.h"
#include "lattice/model_config.h"
#include "lattice/storage/run_store.h"
#include "model/param_layout.h"

namespace {

const QStringList kBase = {"train",
                           "--mock-data",
                           "--train-iters",
                           "1",
                           "--eval-iters",
                           "0",
                           "--threads",
                           "1",
                           "--vocab-size",
                           "511",
                           "--seq-length",
                           "32",
                           "--micro-batch-size",
                           "1"};

struct Finished {
  int exit_code = -1;
  QProcess::ExitStatus status = QProcess::CrashExit;
  QString out, err;
};

// `lattice args`, with its address space limited to `address_space` bytes when > 0.
Finished run(const QStringList& args, rlim_t address_space = 0) {
  QProcess p;
  p.setProcessEnvironment(lattice::testing::test_environment());
  if (address_space > 0)
    p.setChildProcessModifier([address_space] {
      const rlimit limit{address_space, address_space};
      ::setrlimit(RLIMIT_AS, &limit);
    });
  p.start(LATTICE_CLI_PATH, args);
  Finished f;
  if (!p.waitForFinished(120000)) {
    p.kill();
    p.waitForFinished(5000);
    f.err = "timed out";
    return f;
  }
  f.status = p.exitStatus();
  f.exit_code = p.exitCode();
  f.out = QString::fromUtf8(p.readAllStandardOutput());
  f.err = QString::fromUtf8(p.readAllStandardError());
  return f;
}

QString describe(const Finished& f) {
  return QString("exit %1 (%2)\nstdout: %3\nstderr: %4")
      .arg(f.exit_code)
      .arg(f.status == QProcess::NormalExit ? "normal" : "crashed")
      .arg(f.out.right(1500), f.err.right(1500));
}

}  // namespace

class MemoryLimits : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db() const { return dir_.filePath("runs.sqlite"); }

  QString status_of(const QString& name) {
    auto store = lattice::storage::RunStore::open(db().toStdString());
    if (!store) return "no store: " + QString::fromStdString(store.status().message());
    auto r = (*store)->find_run(name.toStdString());
    if (!r) return "no run " + name;
    return lattice::storage::run_status_name(r->status);
  }
  QString error_of(const QString& name) {
    auto store = lattice::storage::RunStore::open(db().toStdString());
    if (!store) return {};
    auto r = (*store)->find_run(name.toStdString());
    return r ? QString::fromStdString(r->error) : QString();
  }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void huge_sizes_are_refused_in_one_sentence_data() {
    QTest::addColumn<QStringList>("flags");
    QTest::addColumn<QString>("expected");
    // 4 x 1e9 wrapped to a negative FFN size before; now the fused QKV's 3 x hidden is named.
    QTest::newRow("hidden 1e9") << QStringList{"--hidden-size", "1000000000"}
                                << "--hidden-size 1000000000 is larger than 715827882, the most "
                                   "whose fused QKV weight (3 x hidden = 3000000000 rows) fits "
                                   "the largest dimension 2147483647";
    QTest::newRow("default ffn") << QStringList{"--hidden-size", "600000000"}
                                 << "--hidden-size 600000000 makes the default --ffn-hidden-size "
                                    "4 x 600000000 = 2400000000, more than the largest dimension "
                                    "2147483647";
    QTest::newRow("padded vocabulary")
        << QStringList{"--vocab-size", "2147483600"}
        << "--vocab-size 2147483601 pads to 2147483648 rows (a multiple of "
           "--make-vocab-size-divisible-by x TP = 128), more than the largest dimension 2147483647";
    QTest::newRow("parameters") << QStringList{"--num-layers", "2000000000", "--hidden-size",
                                               "100000000"}
                                << "--num-layers 2000000000, --hidden-size 100000000, "
                                   "--ffn-hidden-size 400000000 and --vocab-size 512 make "
                                   "2.4e+26 parameters, more than 288230376151711744";
    QTest::newRow("tokens per micro-batch")
        << QStringList{"--micro-batch-size", "65536", "--seq-length", "65536"}
        << "--micro-batch-size 65536 x (--seq-length 65536 + 1) = 4295032832 tokens per "
           "micro-batch (inputs and next-token targets), more than 2147483647";
    QTest::newRow("attention scores")
        << QStringList{"--num-layers", "16",           "--micro-batch-size",
                       "1000",         "--seq-length", "2000000"}
        << "--micro-batch-size 1000 and --seq-length 2000000 make one micro-batch's activations "
           "about ";
  }
  void huge_sizes_are_refused_in_one_sentence() {
    QFETCH(QStringList, flags);
    QFETCH(QString, expected);
    const Finished f = run(kBase + QStringList{"--db", db()} + flags);
    QVERIFY2(f.status == QProcess::NormalExit && f.exit_code == 2, qPrintable(describe(f)));
    const QStringList lines = f.err.trimmed().split('\n');
    QVERIFY2(lines.size() == 1, qPrintable("one sentence expected:\n" + f.err));
    QVERIFY2(f.err.contains(expected), qPrintable("expected: " + expected + "\n" + describe(f)));
  }

  // 64 layers of hidden 65536: some 3.3e12 parameters, tens of TiB, more than any machine
  // these tests run on has. Refused before the model is built, with both figures.
  void a_run_that_cannot_fit_is_refused_before_allocating() {
    const Finished f = run(kBase + QStringList{"--db", db(), "--run-name", "too-big",
                                               "--num-layers", "64", "--hidden-size", "65536"});
    QVERIFY2(f.status == QProcess::NormalExit && f.exit_code == 1, qPrintable(describe(f)));
    const QRegularExpression sentence(
        "this run needs an estimated [0-9.]+ TiB of memory \\(weights [0-9.]+ TiB, grads "
        "[0-9.]+ TiB, optimizer state [0-9.]+ TiB, activations [0-9.]+ [MG]iB, workspace and "
        "buffers [0-9.]+ [KMG]iB; `lattice plan` "
        "with the same flags shows the estimate\\), more than the [0-9.]+ [MGT]iB this machine "
        "has available \\(");
    QVERIFY2(sentence.match(f.err).hasMatch(), qPrintable(describe(f)));
    QVERIFY2(f.err.contains("--skip-memory-check"), qPrintable(f.err));
    QCOMPARE(status_of("too-big"), QString("failed"));
    QVERIFY2(error_of("too-big").contains("this run needs an estimated"),
             qPrintable(error_of("too-big")));
  }

  // Past the check (--skip-memory-check), in an address space of 3 GiB: the weights of 20
  // layers of hidden 2048 (1.0e9 parameters, 3.76 GiB) cannot be allocated; nothing is touched.
  void failed_weights_allocation_names_the_category_and_bytes() {
    const Finished f =
        run(kBase + QStringList{"--db", db(), "--run-name", "no-room-weights",
                                "--skip-memory-check", "--num-layers", "20", "--hidden-size",
                                "2048", "--num-attention-heads", "16"},
            rlim_t{3} << 30);
    QVERIFY2(f.status == QProcess::NormalExit && f.exit_code == 1, qPrintable(describe(f)));
    const QRegularExpression sentence(
        "out of memory: ([0-9]+) bytes \\(3\\.[0-9]+ GiB\\) of weights could not be allocated");
    const QRegularExpressionMatch m = sentence.match(f.err);
    QVERIFY2(m.hasMatch(), qPrintable(describe(f)));
    // The weights arena: every parameter of the model in fp32.
    lattice::ModelConfig model;
    model.num_layers = 20;
    model.hidden_size = 2048;
    model.num_attention_heads = 16;
    model.seq_length = 32;
    model.vocab_size = 512;
    QCOMPARE(m.captured(1).toLongLong(),
             static_cast<qlonglong>(4 * lattice::ParamLayout(model).total_numel()));
    QCOMPARE(status_of("no-room-weights"), QString("failed"));
    QVERIFY2(error_of("no-room-weights").contains("of weights could not be allocated"),
             qPrintable(error_of("no-room-weights")));
  }

  // A small model whose logits do not fit: seq 8192 and micro-batch 4 are 32768 tokens, whose
  // logits over a vocabulary of 32000 are 1.05e9 floats (4.2 GB, one activation tensor); the
  // weights and workspace fit in 3 GiB.
  void failed_activations_allocation_names_the_category() {
    const Finished f = run(kBase + QStringList{"--db", db(), "--run-name", "no-room-activations",
                                               "--skip-memory-check", "--vocab-size", "32000",
                                               "--num-layers", "2",
                                               "--hidden-size", "64", "--num-attention-heads", "4",
                                               "--seq-length", "8192", "--micro-batch-size", "4"},
                           rlim_t{3} << 30);
    QVERIFY2(f.status == QProcess::NormalExit && f.exit_code == 1, qPrintable(describe(f)));
    QVERIFY2(QRegularExpression("out of memory: [0-9]+ bytes \\([0-9.]+ GiB\\) of activations "
                                "could not be allocated")
                 .match(f.err)
                 .hasMatch(),
             qPrintable(describe(f)));
    QCOMPARE(status_of("no-room-activations"), QString("failed"));
  }

  // `lattice eval` builds the same model: its weights that cannot be allocated are an error too.
  void eval_out_of_memory_is_an_error() {
    QFile input(dir_.filePath("docs.jsonl"));
    QVERIFY(input.open(QIODevice::WriteOnly));
    for (int d = 0; d < 20; d++) input.write("{\"text\": \"1 2 3 4 5 6 7 8 9 10 11 12\"}\n");
    input.close();
    const QString prefix = dir_.filePath("nums");
    const Finished pre =
        run({"data", "preprocess", "--input", input.fileName(), "--output-prefix", prefix,
             "--tokenizer-type", "NullTokenizer", "--vocab-size", "100", "--workers", "1"});
    QVERIFY2(pre.exit_code == 0, qPrintable(describe(pre)));
    const Finished f =
        run({"eval", "--data-path", prefix + "_text_document", "--vocab-size", "100",
             "--seq-length", "8", "--eval-iters", "2", "--threads", "1", "--num-layers", "20",
             "--hidden-size", "2048", "--num-attention-heads", "16"},
            rlim_t{3} << 30);
    QVERIFY2(f.status == QProcess::NormalExit && f.exit_code == 1, qPrintable(describe(f)));
    QVERIFY2(QRegularExpression("out of memory: [0-9]+ bytes \\(3\\.[0-9]+ GiB\\) of weights "
                                "could not be allocated")
                 .match(f.err)
                 .hasMatch(),
             qPrintable(describe(f)));
  }
};

QTEST_GUILESS_MAIN(MemoryLimits)
#include "test_memory_limits.moc"
