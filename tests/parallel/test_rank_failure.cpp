// A rank that dies or hangs mid-step must take the whole job down quickly, and Lattice must
// say which rank it was, in its own words, and record the run as failed: a 2-rank
// data-parallel `lattice train` under mpirun loses rank 1 to SIGKILL (mpirun must exit within
// 30 s) or to SIGSTOP (the job must end within --distributed-timeout-minutes and a few
// seconds, naming rank 1 and the collective rank 0 waited in, without spinning a core meanwhile),
// and leave no process behind. A run store that rank 0 cannot open ends every rank before
// training, with rank 0's message.
#include <QtTest/QtTest>

#include <unistd.h>

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

int pid_of_rank(const QString& marker, int rank) {
  for (const auto& [pid, r] : lattice_processes(marker))
    if (r == rank) return pid;
  return -1;
}

// Seconds of CPU a process has used (user + system), from /proc/<pid>/stat.
double cpu_seconds(int pid) {
  QFile stat("/proc/" + QString::number(pid) + "/stat");
  if (!stat.open(QIODevice::ReadOnly)) return -1;
  const QByteArray line = stat.readAll();
  const QList<QByteArray> fields = line.mid(line.lastIndexOf(')') + 2).split(' ');
  // fields[0] is the state (field 3); utime and stime are fields 14 and 15.
  return (fields.value(11).toDouble() + fields.value(12).toDouble()) / sysconf(_SC_CLK_TCK);
}

// A 2-rank data-parallel `lattice train` that runs until stopped, recording into `db` as run
// `marker`, started and followed until its first iteration line.
class Job {
 public:
  Job(const QString& db, const QString& marker, const QStringList& extra = {}) {
    mpirun_.setProcessEnvironment(lattice::testing::test_environment());
    mpirun_.setProcessChannelMode(QProcess::MergedChannels);
    mpirun_.start(LATTICE_MPIEXEC, QStringList{"--oversubscribe",
                                               "-n",
                                               "2",
                                               LATTICE_CLI_PATH,
                                               "train",
                                               "--mock-data",
                                               "--num-layers",
                                               "2",
                                               "--hidden-size",
                                               "64",
                                               "--num-attention-heads",
                                               "4",
                                               "--seq-length",
                                               "64",
                                               "--micro-batch-size",
                                               "2",
                                               "--global-batch-size",
                                               "8",
                                               "--train-iters",
                                               "1000000",
                                               "--log-interval",
                                               "1",
                                               "--threads",
                                               "1",
                                               "--eval-iters",
                                               "0",
                                               "--db",
                                               db,
                                               "--run-name",
                                               marker} +
                                       extra);
  }
  ~Job() {
    if (mpirun_.state() != QProcess::NotRunning) {
      mpirun_.kill();
      mpirun_.waitForFinished(5000);
    }
  }
  // Reads output until an iteration line (training is under way) or 60 s.
  bool wait_until_training() {
    QElapsedTimer waited;
    waited.start();
    while (!output_.contains("iteration") && waited.elapsed() < 60000) {
      mpirun_.waitForReadyRead(1000);
      output_ += QString::fromUtf8(mpirun_.readAll());
    }
    return output_.contains("iteration");
  }
  // Waits up to `ms` for mpirun to exit; false (and mpirun killed) when it did not.
  bool wait_for_end(int ms) {
    const bool ended = mpirun_.waitForFinished(ms);
    output_ += QString::fromUtf8(mpirun_.readAll());
    if (!ended) mpirun_.kill();
    return ended;
  }
  bool failed() const {
    return mpirun_.exitStatus() != QProcess::NormalExit || mpirun_.exitCode() != 0;
  }
  const QString& output() const { return output_; }

 private:
  QProcess mpirun_;
  QString output_;
};

// `lattice runs show NAME --db DB`: the run's status line and the rest.
QString run_record(const QString& db, const QString& name) {
  const lattice::testing::Run r =
      lattice::testing::run_process(LATTICE_CLI_PATH, {"runs", "show", name, "--db", db});
  return r.out + r.err;
}

// No lattice process of the job is left (the launcher gets 5 s to reap).
bool nothing_left(const QString& marker) {
  QElapsedTimer reaping;
  reaping.start();
  while (!lattice_processes(marker).empty() && reaping.elapsed() < 5000) QTest::qWait(100);
  return lattice_processes(marker).empty();
}

}  // namespace

class RankFailure : public QObject {
  Q_OBJECT
 private slots:
  void killed_rank_ends_the_job_and_is_named() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    const QString marker = "rank-failure-" + QString::number(QCoreApplication::applicationPid());
    Job job(db, marker);
    QVERIFY2(job.wait_until_training(), qPrintable("training never started:\n" + job.output()));
    const int victim = pid_of_rank(marker, 1);
    QVERIFY2(victim > 0, "no rank 1 process found");
    QElapsedTimer since_kill;
    since_kill.start();
    QCOMPARE(::kill(victim, SIGKILL), 0);
    QVERIFY2(job.wait_for_end(30000), qPrintable("mpirun still running 30 s after rank 1 was "
                                                 "killed:\n" +
                                                 job.output().right(2000)));
    qInfo("job ended %lld ms after the kill", static_cast<long long>(since_kill.elapsed()));
    QVERIFY(job.failed());
    // Lattice's own words (rank 0 saw rank 1's process gone while it waited), not only
    // Open MPI's, on the console and in the run's record.
    const QString words = "rank 1 (pid " + QString::number(victim) + " on this machine) has ended";
    QVERIFY2(job.output().contains("lattice: rank 0: " + words),
             qPrintable("no message of Lattice names rank 1:\n" + job.output().right(3000)));
    const QString record = run_record(db, marker);
    QVERIFY2(record.contains("status:      failed - " + words), qPrintable(record));
    QVERIFY2(nothing_left(marker), "a lattice rank outlived the job");
  }

  // Rank 1 stopped (SIGSTOP) mid-run never arrives: with --distributed-timeout-minutes 0.05
  // (3 s) rank 0 ends the job within the timeout and its 2 s for answers (and a few seconds
  // for mpirun), names rank 1 and the collective it waited in, and records the run as failed
  // with that message. While it waits it sleeps between polls: under half a core.
  void stopped_rank_ends_the_job_within_the_timeout_and_is_named() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    const QString marker = "rank-stopped-" + QString::number(QCoreApplication::applicationPid());
    Job job(db, marker, {"--distributed-timeout-minutes", "0.05"});
    QVERIFY2(job.wait_until_training(), qPrintable("training never started:\n" + job.output()));
    const int rank0 = pid_of_rank(marker, 0), victim = pid_of_rank(marker, 1);
    QVERIFY2(rank0 > 0 && victim > 0, "no rank 0 or rank 1 process found");
    QElapsedTimer since_stop;
    since_stop.start();
    QCOMPARE(::kill(victim, SIGSTOP), 0);
    QTest::qWait(500);
    const double cpu_before = cpu_seconds(rank0);
    QTest::qWait(2000);
    const double cpu_share = (cpu_seconds(rank0) - cpu_before) / 2.0;
    const bool ended = job.wait_for_end(20000);
    const qint64 ms = since_stop.elapsed();
    ::kill(victim, SIGKILL);  // not left stopped if the job did not end
    QVERIFY2(ended, qPrintable("mpirun still running 22 s after rank 1 was stopped:\n" +
                               job.output().right(2000)));
    qInfo("job ended %lld ms after the stop; rank 0 used %.0f%% of a core while waiting",
          static_cast<long long>(ms), 100 * cpu_share);
    QVERIFY(job.failed());
    QVERIFY2(ms < 15000, qPrintable(QString("the job ended %1 ms after the stop").arg(ms)));
    QVERIFY2(cpu_share >= 0 && cpu_share < 0.5,
             qPrintable(QString("rank 0 used %1 of a core while waiting").arg(cpu_share)));
    const QRegularExpression said(
        "lattice: rank 0: (rank 0 waited 3 s \\(--distributed-timeout-minutes 0.05\\) in the "
        "[a-z-]+ [a-z-]+ of iteration [0-9]+ for rank 1 \\(its group: [a-z-]+ \\[0,1\\]\\); "
        "rank 1 did not arrive and did not answer: it is stopped \\(SIGSTOP or a debugger; "
        "pid " +
        QString::number(victim) + " on this machine\\); the job is ended)");
    const QRegularExpressionMatch match = said.match(job.output());
    QVERIFY2(match.hasMatch(), qPrintable("no message names rank 1 and the collective:\n" +
                                          job.output().right(3000)));
    const QString record = run_record(db, marker);
    QVERIFY2(record.contains("status:      failed - " + match.captured(1)), qPrintable(record));
    QVERIFY2(nothing_left(marker), "a lattice rank outlived the job");
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
    const lattice::testing::Run r = lattice::testing::run_mpi(2, LATTICE_CLI_PATH,
                                                              {"train",
                                                               "--mock-data",
                                                               "--num-layers",
                                                               "2",
                                                               "--hidden-size",
                                                               "64",
                                                               "--num-attention-heads",
                                                               "4",
                                                               "--seq-length",
                                                               "64",
                                                               "--micro-batch-size",
                                                               "2",
                                                               "--global-batch-size",
                                                               "8",
                                                               "--train-iters",
                                                               "5",
                                                               "--threads",
                                                               "1",
                                                               "--eval-iters",
                                                               "0",
                                                               "--db",
                                                               db},
                                                              {}, 60000);
    QVERIFY2(!r.timed_out, "a rank kept waiting for rank 0");
    QVERIFY2(r.exit_code != 0, qPrintable(r.out + r.err));
    QVERIFY2(r.err.contains("--db " + db), qPrintable(r.err));
    QVERIFY2(!r.out.contains("iteration"), qPrintable(r.out));
  }
};

QTEST_GUILESS_MAIN(RankFailure)
#include "test_rank_failure.moc"
