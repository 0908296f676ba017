// `lattice` and the way its OpenMP threads wait (Note [OpenMP waiting], kernels/cpu/README.md):
// unless the user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT), a thread with nothing to do spins
// for kOpenMpSpinCount PAUSEs (tens of microseconds), not libgomp's 300,000, and then sleeps: on
// a machine shared with other processes a long spin keeps off the core the very thread a barrier
// waits for. libgomp's own report of its settings (OMP_DISPLAY_ENV=VERBOSE, printed when it
// starts, the last one being the program that runs) is the evidence.
#include <QtTest/QtTest>

#include <QFile>
#include <QProcess>

#include "common/process.h"
#include "lattice/kernels.h"

namespace {

// libgomp's GOMP_SPINCOUNT as the lattice program that ran reports it, with `env` ("K=V") set
// and OMP_WAIT_POLICY / GOMP_SPINCOUNT otherwise unset.
QString spin_count(const QStringList& env = {}) {
  QProcessEnvironment e = lattice::testing::test_environment();
  e.remove("OMP_WAIT_POLICY");
  e.remove("GOMP_SPINCOUNT");
  e.insert("OMP_DISPLAY_ENV", "VERBOSE");
  for (const QString& kv : env) e.insert(kv.section('=', 0, 0), kv.section('=', 1));
  QProcess p;
  p.setProcessEnvironment(e);
  p.start(LATTICE_CLI_PATH, {"version"});
  if (!p.waitForFinished(60000) || p.exitCode() != 0) return "lattice version failed";
  const QString err = QString::fromUtf8(p.readAllStandardError());
  const qsizetype at = err.lastIndexOf("GOMP_SPINCOUNT = '");
  if (at < 0) return "no GOMP_SPINCOUNT in: " + err;
  return err.mid(at).section('\'', 1, 1);
}

}  // namespace

class OpenMpWaiting : public QObject {
  Q_OBJECT
 private slots:
  void threads_spin_briefly_by_default() {
    QCOMPARE(spin_count(), QString(lattice::kernels::kOpenMpSpinCount));
  }

  // The restart executes the program's own file, so the process keeps its name ("lattice" in
  // ps, top and pgrep -x; /proc/self/exe would make it "exe") and its pid.
  void the_restarted_program_keeps_its_name() {
    QProcessEnvironment e = lattice::testing::test_environment();
    e.remove("OMP_WAIT_POLICY");
    e.remove("GOMP_SPINCOUNT");
    QProcess p;
    p.setProcessEnvironment(e);
    p.start(LATTICE_CLI_PATH, {"train", "--mock-data", "--train-iters", "100000", "--eval-iters",
                               "0", "--threads", "1", "--no-db", "--log-interval", "1"});
    QVERIFY(p.waitForStarted(10000));
    QVERIFY2(p.waitForReadyRead(60000), "lattice train printed nothing in 60 s");
    const QString proc = "/proc/" + QString::number(p.processId());
    QFile comm(proc + "/comm"), environ(proc + "/environ");
    QVERIFY(comm.open(QIODevice::ReadOnly) && environ.open(QIODevice::ReadOnly));
    const QByteArray name = comm.readAll().trimmed();
    const bool restarted = environ.readAll().split('\0').contains(
        QByteArray("GOMP_SPINCOUNT=") + lattice::kernels::kOpenMpSpinCount);
    p.kill();
    p.waitForFinished(10000);
    QCOMPARE(name, QByteArray("lattice"));
    QVERIFY2(restarted, "the process runs without its GOMP_SPINCOUNT: it was not restarted");
  }

  void the_users_choice_stands() {
    QCOMPARE(spin_count({"GOMP_SPINCOUNT=5000"}), QString("5000"));
    QVERIFY(spin_count({"OMP_WAIT_POLICY=active"}) != lattice::kernels::kOpenMpSpinCount);
    QCOMPARE(spin_count({"OMP_WAIT_POLICY=passive"}), QString("0"));
  }
};

QTEST_GUILESS_MAIN(OpenMpWaiting)
#include "test_openmp_waiting.moc"
