// Instability caught and acted on (docs/studio.md "Instability"): real `lattice train` runs of
// a tiny model with a grad-norm spike or NaN gradients injected (LATTICE_INJECT_SPIKE,
// LATTICE_INJECT_NAN), under --on-spike warn, skip, stop and rollback, read back by `lattice runs
// show`; a rolled-back run ends with the weights of one run that skipped the same batches.
#include <QFile>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include "common/process.h"

using namespace lattice;

namespace {

// 40 iterations (or `iters`) of a tiny model; judging starts at iteration 11 (window 20). A
// constant learning rate, so that runs of different lengths step alike.
QStringList train_args(int iters, const QString& db, const QString& name) {
  return QString(
             "train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
             "--seq-length 32 --vocab-size 256 --micro-batch-size 2 --global-batch-size 4 "
             "--log-interval 1 --eval-iters 0 --threads 1 --spike-window 20 "
             "--lr-decay-style constant --train-iters %1 --run-name %2")
             .arg(iters)
             .arg(name)
             .split(' ') +
         QStringList{"--db", db};
}

testing::Run train(const QStringList& args, const QString& env = {}) {
  return testing::run_process(LATTICE_CLI_PATH, args, {}, 240000,
                              env.isEmpty() ? QStringList{} : QStringList{env});
}

QString show(const QString& db, const QString& name) {
  const testing::Run r = testing::run_process(LATTICE_CLI_PATH, {"runs", "show", name, "--db", db});
  return r.out + r.err;
}

// The event lines of `runs show`.
QStringList event_lines(const QString& shown) {
  QStringList lines;
  bool in = false;
  for (const QString& line : shown.split('\n')) {
    if (line.startsWith("  instability (")) {
      in = true;
      continue;
    }
    if (in && !line.startsWith("    ")) in = false;
    if (in) lines << line;
  }
  return lines;
}

QByteArray file(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

}  // namespace

class Instability : public QObject {
  Q_OBJECT
 private slots:
  void a_clean_run_has_no_event() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    const testing::Run run = train(train_args(40, db, "clean"));
    QVERIFY2(run.exit_code == 0, qPrintable(run.out + run.err));
    QVERIFY2(!run.out.contains("warning:"), qPrintable(run.out));
    const QString shown = show(db, "clean");
    QVERIFY2(shown.contains("  steps:       40 logged"), qPrintable(shown));
    QVERIFY2(!shown.contains("\n  instability"), qPrintable(shown));
    QVERIFY(event_lines(shown).isEmpty());
  }

  void warn_records_the_injected_spike_and_nothing_else() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    const testing::Run run = train(train_args(40, db, "spiked"), "LATTICE_INJECT_SPIKE=30");
    QVERIFY2(run.exit_code == 0, qPrintable(run.out + run.err));
    static const QRegularExpression warned(
        "> warning: grad norm spike at iteration 30: [0-9.]+ against [0-9.]+ ± [0-9.]+ over the "
        "last 20 \\(z [0-9.]+\\) \\(--on-spike warn\\)\n");
    QVERIFY2(warned.match(run.out).hasMatch(), qPrintable(run.out));
    QCOMPARE(run.out.count("warning:"), 1);
    QVERIFY2(run.out.contains("number of skipped iterations:   0 |"), qPrintable(run.out));
    const QStringList events = event_lines(show(db, "spiked"));
    QCOMPARE(events.size(), 1);
    static const QRegularExpression line(
        "^ +30  grad norm spike +[0-9.]+ +z [0-9.]+ +against [0-9.]+ ± [0-9.]+ \\(20\\)  warn$");
    QVERIFY2(line.match(events[0]).hasMatch(), qPrintable(events[0]));
  }

  void skip_leaves_the_weights_as_they_were() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    // Iteration 30 skipped: its checkpoint's weights and optimizer state are iteration 29's.
    const testing::Run skipped =
        train(train_args(30, db, "skipped") +
                  QStringList{"--on-spike", "skip", "--save", dir.filePath("skipped")},
              "LATTICE_INJECT_SPIKE=30");
    QVERIFY2(skipped.exit_code == 0, qPrintable(skipped.out + skipped.err));
    QVERIFY2(skipped.out.contains("(--on-spike skip)"), qPrintable(skipped.out));
    QVERIFY2(skipped.out.contains("iteration       30/      30 |"), qPrintable(skipped.out));
    QVERIFY2(skipped.out.contains("number of skipped iterations:   1 |"), qPrintable(skipped.out));
    const testing::Run clean =
        train(train_args(29, db, "clean29") + QStringList{"--save", dir.filePath("clean")});
    QVERIFY2(clean.exit_code == 0, qPrintable(clean.out + clean.err));
    const QByteArray after_skip = file(dir.filePath("skipped/iter_0000030/rank_00000.safetensors"));
    QVERIFY(!after_skip.isEmpty());
    QVERIFY(after_skip == file(dir.filePath("clean/iter_0000029/rank_00000.safetensors")));
    QVERIFY2(event_lines(show(db, "skipped")).join('\n').endsWith("skip"),
             qPrintable(show(db, "skipped")));
  }

  void stop_saves_and_ends_the_run_with_the_sentence() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    const QString save = dir.filePath("ckpt");
    const testing::Run run =
        train(train_args(40, db, "stopped") + QStringList{"--on-spike", "stop", "--save", save},
              "LATTICE_INJECT_SPIKE=30");
    QCOMPARE(run.exit_code, 1);
    static const QRegularExpression sentence(
        "grad norm spike at iteration 30: [0-9.]+ against [0-9.]+ ± [0-9.]+ over the last 20 "
        "\\(z [0-9.]+\\); stopped by --on-spike stop; the checkpoint of iteration 29 is in ");
    QVERIFY2(sentence.match(run.err).hasMatch(), qPrintable(run.err));
    QVERIFY2(!run.out.contains("iteration       30/"), qPrintable(run.out));
    QVERIFY(QFile::exists(save + "/iter_0000029/rank_00000.safetensors"));
    QCOMPARE(QString(file(save + "/latest_checkpointed_iteration.txt")).trimmed(), QString("29"));
    const QString shown = show(db, "stopped");
    QVERIFY2(shown.contains("stopped by --on-spike stop"), qPrintable(shown));
    QVERIFY2(event_lines(shown).join('\n').endsWith("stop"), qPrintable(shown));
  }

  void rollback_goes_back_and_skips_the_batches_to_the_spike() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    const QStringList every25 = {"--save-interval", "25"};
    const testing::Run run =
        train(train_args(40, db, "spiky") + every25 +
                  QStringList{"--on-spike", "rollback", "--save", dir.filePath("spiky")},
              "LATTICE_INJECT_SPIKE=30");
    QVERIFY2(run.exit_code == 0, qPrintable(run.out + run.err));
    QVERIFY2(
        run.out.contains("> rolled back by --on-spike rollback to the checkpoint of iteration "
                         "25 in " +
                         dir.filePath("spiky") + ", skipping the batches of iterations 26 to 30"),
        qPrintable(run.out));
    QVERIFY2(run.out.contains("> iteration 30 skipped (--iterations-to-skip)"),
             qPrintable(run.out));
    QVERIFY2(run.out.contains("iteration       40/      40 |"), qPrintable(run.out));
    // The same batches skipped in one run without a spike: the same weights and moments.
    const testing::Run once = train(train_args(40, db, "once") + every25 +
                                    QStringList{"--iterations-to-skip", "26", "27", "28", "29",
                                                "30", "--save", dir.filePath("once")});
    QVERIFY2(once.exit_code == 0, qPrintable(once.out + once.err));
    const QByteArray rolled = file(dir.filePath("spiky/iter_0000040/rank_00000.safetensors"));
    QVERIFY(!rolled.isEmpty());
    QVERIFY(rolled == file(dir.filePath("once/iter_0000040/rank_00000.safetensors")));
    // Two runs in the store, one lineage: the spike's tail discarded.
    const QString first = show(db, "spiky"), second = show(db, "spiky-rollback1");
    QVERIFY2(first.contains("status:      failed - grad norm spike at iteration 30") &&
                 first.contains("(run spiky-rollback1 goes on)"),
             qPrintable(first));
    QVERIFY2(event_lines(first).join('\n').endsWith("rollback"), qPrintable(first));
    QVERIFY2(second.contains("resumed:     from run 1 ('spiky') at step 25") &&
                 second.contains("steps 26 to 30 discarded") &&
                 second.contains("--iterations-to-skip 26 27 28 29 30"),
             qPrintable(second));
  }

  void rollback_without_an_earlier_checkpoint_says_so() {
    QTemporaryDir dir;
    const QString save = dir.filePath("late");
    const testing::Run run =
        train(train_args(40, dir.filePath("runs.sqlite"), "late") +
                  QStringList{"--on-spike", "rollback", "--save", save, "--save-interval", "35"},
              "LATTICE_INJECT_SPIKE=30");
    QCOMPARE(run.exit_code, 1);
    QVERIFY2(run.err.contains("--on-spike rollback found no checkpoint from before iteration 30 "
                              "in --save " +
                              save),
             qPrintable(run.err));
    const testing::Run bad =
        train(train_args(40, dir.filePath("runs.sqlite"), "bad") +
              QStringList{"--on-spike", "rollback", "--iterations-to-skip", "0"});
    QCOMPARE(bad.exit_code, 2);
    QVERIFY2(bad.err.contains("--on-spike rollback needs --save and --save-interval") &&
                 bad.err.contains("--iterations-to-skip '0' is not an iteration number"),
             qPrintable(bad.err));
  }

  void nan_gradients_are_caught() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    // Iteration 5: before the window could judge a spike, a NaN is caught all the same.
    const testing::Run run = train(train_args(12, db, "nan"), "LATTICE_INJECT_NAN=5");
    QVERIFY2(run.exit_code == 0, qPrintable(run.out + run.err));
    QVERIFY2(run.out.contains("> warning: non-finite loss or grad norm at iteration 5 (nan)"),
             qPrintable(run.out));
    const QStringList events = event_lines(show(db, "nan"));
    QCOMPARE(events.size(), 1);
    QVERIFY2(events[0].contains(QRegularExpression("^ +5  non-finite loss or grad norm +nan ")),
             qPrintable(events[0]));
  }

#ifdef LATTICE_MPIEXEC
  void every_rank_of_a_pipeline_decides_the_same() {
    // PP 2: the loss lives on the last stage, the norm is all-reduced; both ranks see the
    // same spike and stop at the same iteration (neither waits for the other in vain).
    QTemporaryDir dir;
    const QStringList args = train_args(35, dir.filePath("runs.sqlite"), "pp2") +
                             QStringList{"--pipeline-model-parallel-size",
                                         "2",
                                         "--on-spike",
                                         "stop",
                                         "--global-batch-size",
                                         "8"};
    const testing::Run run = testing::run_process(
        LATTICE_MPIEXEC, QStringList{"--oversubscribe", "-n", "2", "env", "LATTICE_INJECT_SPIKE=30",
                                     LATTICE_CLI_PATH} +
                             args);
    QVERIFY2(run.exit_code != 0, qPrintable(run.out + run.err));
    for (const char* rank : {"rank 0", "rank 1"}) {
      const QRegularExpression stopped(QString("%1: grad norm spike at iteration 30: [0-9.]+ "
                                               "against [0-9.]+ ± [0-9.]+ over the last 20 "
                                               "\\(z [0-9.]+\\); stopped by --on-spike stop")
                                           .arg(rank));
      QVERIFY2(stopped.match(run.err).hasMatch(), qPrintable(run.out + run.err));
    }
  }

  void a_pipeline_rolls_back_on_every_rank() {
    QTemporaryDir dir;
    const QStringList common = train_args(35, dir.filePath("runs.sqlite"), "pp2") +
                               QStringList{"--pipeline-model-parallel-size",
                                           "2",
                                           "--global-batch-size",
                                           "8",
                                           "--save-interval",
                                           "20"};
    const testing::Run run = testing::run_process(
        LATTICE_MPIEXEC,
        QStringList{"--oversubscribe", "-n", "2", "env", "LATTICE_INJECT_SPIKE=30",
                    LATTICE_CLI_PATH} +
            common + QStringList{"--on-spike", "rollback", "--save", dir.filePath("rolled")});
    QVERIFY2(run.exit_code == 0, qPrintable(run.out + run.err));
    QVERIFY2(run.out.contains("skipping the batches of iterations 21 to 30"), qPrintable(run.out));
    const testing::Run once = testing::run_process(
        LATTICE_MPIEXEC, QStringList{"--oversubscribe", "-n", "2", LATTICE_CLI_PATH} + common +
                             QStringList{"--run-name", "once", "--save", dir.filePath("once"),
                                         "--iterations-to-skip", "21", "22", "23", "24", "25", "26",
                                         "27", "28", "29", "30"});
    QVERIFY2(once.exit_code == 0, qPrintable(once.out + once.err));
    for (const char* rank : {"rank_00000", "rank_00001"}) {
      const QString name = QString("/iter_0000035/%1.safetensors").arg(rank);
      const QByteArray rolled = file(dir.filePath("rolled") + name);
      QVERIFY2(!rolled.isEmpty(), rank);
      QVERIFY2(rolled == file(dir.filePath("once") + name), rank);
    }
  }
#endif
};

QTEST_GUILESS_MAIN(Instability)
#include "test_instability.moc"
