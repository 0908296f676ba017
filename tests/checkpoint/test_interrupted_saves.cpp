// Interrupted saves (issue 30 item 7), with real `lattice train` processes: the iter_N.tmp/ a
// save killed with SIGKILL leaves is removed by the next load or save of the directory, which
// says what it removed and how large it was, and the complete checkpoints are untouched; a
// .tmp that another live process is still writing (it holds iter_N.tmp.lock) is never removed,
// and a second save of the same iteration into the same directory is refused meanwhile.
#include <QtTest/QtTest>

#include <QCryptographicHash>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <csignal>

#include "common/process.h"

namespace {

using lattice::testing::Run;
using lattice::testing::run_lattice;

const QStringList kModel = {"train",
                            "--mock-data",
                            "--num-layers",
                            "2",
                            "--hidden-size",
                            "64",
                            "--num-attention-heads",
                            "4",
                            "--seq-length",
                            "32",
                            "--vocab-size",
                            "255",
                            "--micro-batch-size",
                            "2",
                            "--eval-iters",
                            "0",
                            "--threads",
                            "1"};

// Every file under `dir` (relative name -> SHA-1 of its bytes).
std::map<QString, QByteArray> fingerprint(const QString& dir) {
  std::map<QString, QByteArray> out;
  QDirIterator it(dir, QDir::Files, QDirIterator::Subdirectories);
  while (it.hasNext()) {
    const QString path = it.next();
    QFile f(path);
    if (f.open(QIODevice::ReadOnly))
      out[QDir(dir).relativeFilePath(path)] =
          QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha1);
  }
  return out;
}

qint64 tree_bytes(const QString& dir) {
  qint64 bytes = 0;
  QDirIterator it(dir, QDir::Files, QDirIterator::Subdirectories);
  while (it.hasNext()) bytes += QFileInfo(it.next()).size();
  return bytes;
}

// As save_lock.cpp prints a size.
QString size_text(qint64 bytes) {
  if (bytes >= 1000000000) return QString::number(bytes / 1e9, 'f', 2) + " GB";
  if (bytes >= 100000) return QString::number(bytes / 1e6, 'f', 1) + " MB";
  return QString::number(bytes / 1e3, 'f', 1) + " kB";
}

// Starts `lattice train` saving into `save` whose save of iteration `stall_at` holds for
// `seconds` between the shards and the metadata, and waits until it is there.
bool start_stalled(QProcess& job, const QString& db, const QString& name, const QString& save,
                   int stall_at, int seconds, const QStringList& extra) {
  QProcessEnvironment e = lattice::testing::test_environment();
  e.insert("LATTICE_CHECKPOINT_STALL_AT", QString("%1:%2").arg(stall_at).arg(seconds));
  job.setProcessEnvironment(e);
  job.start(LATTICE_CLI_PATH,
            kModel + QStringList{"--db", db, "--run-name", name, "--save", save} + extra);
  if (!job.waitForStarted()) return false;
  const QString sidecar =
      save + QString("/iter_%1.tmp/rank_00000.json").arg(stall_at, 7, 10, QChar('0'));
  QElapsedTimer waited;
  waited.start();
  while (!QFile::exists(sidecar) && waited.elapsed() < 120000) QTest::qWait(50);
  return QFile::exists(sidecar);
}

}  // namespace

class InterruptedSaves : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db() const { return dir_.filePath("runs.sqlite"); }

  Run train(const QString& name, const QStringList& extra) {
    return run_lattice(1, kModel + QStringList{"--db", db(), "--run-name", name} + extra);
  }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void a_save_killed_midway_is_removed_by_the_next_load_and_said() {
    const QString save = dir_.filePath("killed");
    QProcess job;
    QVERIFY(start_stalled(job, db(), "killed", save, 4, 60,
                          {"--train-iters", "6", "--save-interval", "2"}));
    ::kill(static_cast<pid_t>(job.processId()), SIGKILL);
    QVERIFY(job.waitForFinished(30000));
    const QString tmp = save + "/iter_0000004.tmp";
    QVERIFY(QFileInfo(tmp).isDir());
    QVERIFY(QFile::exists(save + "/iter_0000002/metadata.json"));
    const qint64 left_bytes = tree_bytes(tmp);
    QVERIFY(left_bytes > 0);
    const auto complete = fingerprint(save + "/iter_0000002");

    Run resumed = train("after-kill", {"--train-iters", "6", "--load", save, "--save", save});
    QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err));
    const QString said = "--load " + save + ": removed iter_0000004.tmp (" + size_text(left_bytes) +
                         "), left by an interrupted save";
    QVERIFY2(resumed.out.contains(said), qPrintable("expected: " + said + "\n" + resumed.out));
    QVERIFY2(resumed.out.contains("continuing after iteration 2"), qPrintable(resumed.out));
    QVERIFY(!QFileInfo::exists(tmp));
    QVERIFY(!QFileInfo::exists(tmp + ".lock"));
    QVERIFY2(fingerprint(save + "/iter_0000002") == complete, "iter_0000002 changed");
    QVERIFY(QFile::exists(save + "/iter_0000006/metadata.json"));
  }

  // Leftovers of several interrupted saves (and a lock file whose save died before its
  // directory existed) in a directory that is only saved into: the first save removes them all,
  // in one line with their sizes.
  void leftovers_are_removed_by_the_next_save_in_one_line() {
    const QString save = dir_.filePath("leftovers");
    QVERIFY(QDir().mkpath(save + "/iter_0000009.tmp") && QDir().mkpath(save + "/iter_0000011.tmp"));
    const auto write = [](const QString& path, qint64 bytes) {
      QFile f(path);
      return f.open(QIODevice::WriteOnly) && f.write(QByteArray(bytes, 'x')) == bytes;
    };
    QVERIFY(write(save + "/iter_0000009.tmp/rank_00000.safetensors", 3000000));
    QVERIFY(write(save + "/iter_0000011.tmp/rank_00000.safetensors", 1500000));
    QVERIFY(write(save + "/iter_0000013.tmp.lock", 0));
    Run r = train("leftovers", {"--train-iters", "1", "--save", save});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const QString said = "--save " + save +
                         ": removed 2 interrupted saves (4.5 MB): iter_0000009.tmp (3.0 MB), "
                         "iter_0000011.tmp (1.5 MB)";
    QVERIFY2(r.out.contains(said), qPrintable("expected: " + said + "\n" + r.out));
    QCOMPARE(QDir(save).entryList(QDir::AllEntries | QDir::NoDotAndDotDot),
             QStringList({"iter_0000001", "latest_checkpointed_iteration.txt"}));
  }

  // A job whose save of iteration 2 is still running (held 40 s) and a second job saving into
  // the same directory: the second keeps the first's .tmp and says why, and may not save
  // iteration 2 itself; once the first is killed, its .tmp goes with the next save.
  void a_save_in_progress_is_never_removed() {
    const QString save = dir_.filePath("shared");
    QProcess first;
    QVERIFY(start_stalled(first, db(), "first", save, 2, 40, {"--train-iters", "2"}));
    const QString tmp = save + "/iter_0000002.tmp";
    const auto before = fingerprint(tmp);

    Run second = train("second", {"--train-iters", "1", "--save", save});
    QVERIFY2(second.exit_code == 0, qPrintable(second.err));
    const QString kept = "--save " + save +
                         ": kept iter_0000002.tmp: another process is writing it (it holds "
                         "iter_0000002.tmp.lock)";
    QVERIFY2(second.out.contains(kept), qPrintable("expected: " + kept + "\n" + second.out));
    QVERIFY2(fingerprint(tmp) == before, "the live save's files changed");
    QCOMPARE(first.state(), QProcess::Running);

    Run same = train("same-iteration", {"--train-iters", "2", "--save", save});
    QCOMPARE(same.exit_code, 1);
    QVERIFY2(
        same.err.contains("another process is saving into " + tmp + " (it holds " + tmp + ".lock)"),
        qPrintable(same.err));
    QVERIFY2(fingerprint(tmp) == before, "the live save's files changed");

    ::kill(static_cast<pid_t>(first.processId()), SIGKILL);
    QVERIFY(first.waitForFinished(30000));
    Run third = train("third", {"--train-iters", "1", "--save", save});
    QVERIFY2(third.exit_code == 0, qPrintable(third.err));
    QVERIFY2(third.out.contains("--save " + save + ": removed iter_0000002.tmp ("),
             qPrintable(third.out));
    QVERIFY(!QFileInfo::exists(tmp));
  }
};

QTEST_GUILESS_MAIN(InterruptedSaves)
#include "test_interrupted_saves.moc"
