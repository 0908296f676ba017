// A rank that dies mid-step must take the whole job down quickly and say which rank it was:
// a 2-rank data-parallel `lattice train` under mpirun loses rank 1 to SIGKILL while both are
// stepping; mpirun must exit within 30 s, name rank 1, and leave no process behind. A run
// store that rank 0 cannot open ends every rank before training, with rank 0's message.
#include <QtTest/QtTest>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <csignal>

#include "common/process.h"

namespace {

// pid -> (rank or -1) of every `lattice` process whose command line holds `marker`.
std::map<int, int> lattice_processes(const QString& marker) {
  std::map<int, int> out;
  for (const QString& entry : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    bool numeric = false;
    const int pid = entry.toInt(&numeric);
    if (!numeric) continue;
    QFile comm("/proc/" + entry + "/comm"), cmdline("/proc/" + entry + "/cmdline"),
        environ("/proc/" + entry + "/environ");
    if (!comm.open(QIODevice::ReadOnly) || comm.readAll().trimmed() != "lattice") continue;
    if (!cmdline.open(QIODevice::ReadOnly) || !cmdline.readAll().contains(marker.toUtf8()))
      continue;
    int rank = -1;
    if (environ.open(QIODevice::ReadOnly))
      for (const QByteArray& kv : environ.readAll().split('\0'))
        if (kv.startsWith("OMPI_COMM_WORLD_RANK=")) rank = kv.mid(21).toInt();
    out[pid] = rank;
  }
  return out;
}

}  // namespace

class RankFailure : public QObject {
  Q_OBJECT
 private slots:
  void killed_rank_ends_the_job_and_is_named() {
    QTemporaryDir dir;
    const QString marker = "rank-failure-" + QString::number(QCoreApplication::applicationPid());
    QProcess mpirun;
    mpirun.setProcessEnvironment(lattice::testing::test_environment());
    mpirun.setProcessChannelMode(QProcess::MergedChannels);
    mpirun.start(LATTICE_MPIEXEC,
                 {"--oversubscribe", "-n", "2", LATTICE_CLI_PATH, "train", "--mock-data",
                  "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                  "--seq-length", "64", "--micro-batch-size", "2", "--global-batch-size", "8",
                  "--train-iters", "1000000", "--log-interval", "1", "--threads", "1",
                  "--eval-iters", "0", "--db", dir.filePath("runs.sqlite"), "--run-name",
                  marker});
    QVERIFY(mpirun.waitForStarted());
    // Wait until training is under way (an iteration line), then kill rank 1.
    QString output;
    QElapsedTimer waited;
    waited.start();
    while (!output.contains("iteration") && waited.elapsed() < 60000) {
      mpirun.waitForReadyRead(1000);
      output += QString::fromUtf8(mpirun.readAll());
    }
    QVERIFY2(output.contains("iteration"), qPrintable("training never started:\n" + output));
    int victim = -1;
    for (const auto& [pid, rank] : lattice_processes(marker))
      if (rank == 1) victim = pid;
    QVERIFY2(victim > 0, "no rank 1 process found");
    QElapsedTimer since_kill;
    since_kill.start();
    QCOMPARE(::kill(victim, SIGKILL), 0);
    const bool ended = mpirun.waitForFinished(30000);
    output += QString::fromUtf8(mpirun.readAll());
    if (!ended) mpirun.kill();
    QVERIFY2(ended, qPrintable("mpirun still running 30 s after rank 1 was killed:\n" +
                               output.right(2000)));
    qInfo("job ended %lld ms after the kill", static_cast<long long>(since_kill.elapsed()));
    QVERIFY(mpirun.exitStatus() != QProcess::NormalExit || mpirun.exitCode() != 0);
    QVERIFY2(output.contains("rank 1"), qPrintable("no message names rank 1:\n" + output.right(2000)));
    // Nothing left behind (give the launcher a moment to reap).
    QElapsedTimer reaping;
    reaping.start();
    while (!lattice_processes(marker).empty() && reaping.elapsed() < 5000) QTest::qWait(100);
    QVERIFY2(lattice_processes(marker).empty(), "a lattice rank outlived the job");
  }

  // Rank 0 alone opens the run store; when it cannot (here: a file that is not a database),
  // the other ranks must stop too, not wait for rank 0 in the job's first collective.
  void a_run_store_rank_0_cannot_open_stops_every_rank() {
    QTemporaryDir dir;
    const QString db = dir.filePath("notes.txt");
    QFile f(db);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("my notes, not a database\n");
    f.close();
    const lattice::testing::Run r = lattice::testing::run_mpi(
        2, LATTICE_CLI_PATH,
        {"train", "--mock-data", "--num-layers", "2", "--hidden-size", "64",
         "--num-attention-heads", "4", "--seq-length", "64", "--micro-batch-size", "2",
         "--global-batch-size", "8", "--train-iters", "5", "--threads", "1", "--eval-iters", "0",
         "--db", db},
        {}, 60000);
    QVERIFY2(!r.timed_out, "a rank kept waiting for rank 0");
    QVERIFY2(r.exit_code != 0, qPrintable(r.out + r.err));
    QVERIFY2(r.err.contains("--db " + db), qPrintable(r.err));
    QVERIFY2(!r.out.contains("iteration"), qPrintable(r.out));
  }
};

QTEST_GUILESS_MAIN(RankFailure)
#include "test_rank_failure.moc"
