// The settings `lattice` restarts itself with (kernels::apply_process_settings, kernels.h), each
// unless the user chose:
// - the way its OpenMP threads wait (Note [OpenMP waiting], kernels/cpu/README.md): a thread
//   with nothing to do spins for kOpenMpSpinCount PAUSEs (tens of microseconds), not libgomp's
//   300,000, and then sleeps: on a machine shared with other processes a long spin keeps off the
//   core the very thread a barrier waits for. libgomp's own report of its settings
//   (OMP_DISPLAY_ENV=VERBOSE, printed when it starts, the last one being the program that runs)
//   is the evidence.
// - glibc's per-thread cache of freed blocks off (Note [glibc's thread cache]): with it, the
//   large aligned buffers oneDNN's sgemm takes per call were not reused and every step faulted
//   in fresh pages. The running process's environment, which glibc reads as it starts, is the
//   evidence.
#include <QtTest/QtTest>

#include <QFile>
#include <QProcess>

#include "common/process.h"
#include "lattice/kernels.h"

namespace {

namespace kernels = lattice::kernels;

// The test environment with `env` ("K=V") set and the settings apply_process_settings looks
// at otherwise unset.
QProcessEnvironment environment(const QStringList& env) {
  QProcessEnvironment e = lattice::testing::test_environment();
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "GLIBC_TUNABLES"}) e.remove(name);
  for (const QString& kv : env) e.insert(kv.section('=', 0, 0), kv.section('=', 1));
  return e;
}

// libgomp's GOMP_SPINCOUNT as the lattice program that ran reports it, run in environment(env).
QString spin_count(const QStringList& env = {}) {
  QProcessEnvironment e = environment(env);
  e.insert("OMP_DISPLAY_ENV", "VERBOSE");
  QProcess p;
  p.setProcessEnvironment(e);
  p.start(LATTICE_CLI_PATH, {"version"});
  if (!p.waitForFinished(60000) || p.exitCode() != 0) return "lattice version failed";
  const QString err = QString::fromUtf8(p.readAllStandardError());
  const qsizetype at = err.lastIndexOf("GOMP_SPINCOUNT = '");
  if (at < 0) return "no GOMP_SPINCOUNT in: " + err;
  return err.mid(at).section('\'', 1, 1);
}

// A `lattice train` run in environment(env): its name and environment once it printed its
// first line.
struct Running {
  QByteArray name;
  QByteArray raw;  // /proc/PID/environ: NUL-terminated K=V entries
  QByteArrayList environ;
};
Running running_train(const QStringList& env = {}) {
  QProcess p;
  p.setProcessEnvironment(environment(env));
  p.start(LATTICE_CLI_PATH, {"train", "--mock-data", "--train-iters", "100000", "--eval-iters", "0",
                             "--threads", "1", "--no-db", "--log-interval", "1"});
  Running r;
  if (!p.waitForStarted(10000) || !p.waitForReadyRead(60000)) return r;
  const QString proc = "/proc/" + QString::number(p.processId());
  QFile comm(proc + "/comm"), environ(proc + "/environ");
  if (comm.open(QIODevice::ReadOnly)) r.name = comm.readAll().trimmed();
  if (environ.open(QIODevice::ReadOnly)) {
    r.raw = environ.readAll();
    r.environ = r.raw.split('\0');
  }
  p.kill();
  p.waitForFinished(10000);
  return r;
}

}  // namespace

class ProcessSettings : public QObject {
  Q_OBJECT
 private slots:
  void threads_spin_briefly_by_default() {
    QCOMPARE(spin_count(), QString(kernels::kOpenMpSpinCount));
  }

  // The restart executes the program's own file, so the process keeps its name ("lattice" in
  // ps, top and pgrep -x; /proc/self/exe would make it "exe") and its pid.
  void the_restarted_program_keeps_its_name() {
    const Running r = running_train();
    QCOMPARE(r.name, QByteArray("lattice"));
    QVERIFY2(r.environ.contains(QByteArray("GOMP_SPINCOUNT=") + kernels::kOpenMpSpinCount),
             "the process runs without its GOMP_SPINCOUNT: it was not restarted");
    QVERIFY2(r.environ.contains(QByteArray("GLIBC_TUNABLES=") + kernels::kGlibcTunables),
             "the process runs without glibc's thread cache turned off");
  }

  // A user's other tunables are kept, and their own tcache_count left alone. (glibc, parsing the
  // variable as the process starts, puts a NUL in the place of each ':' in it.)
  void the_users_tunables_stand() {
    const QByteArray mine = "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=262144";
    const QByteArray raw = running_train({QString::fromUtf8(mine)}).raw;
    QVERIFY2(raw.contains(mine + ':' + kernels::kGlibcTunables) ||
                 raw.contains(mine + '\0' + kernels::kGlibcTunables),
             raw.constData());
    const QByteArray count = "GLIBC_TUNABLES=glibc.malloc.tcache_count=3";
    QVERIFY(running_train({QString::fromUtf8(count)}).environ.contains(count));
  }

  void the_users_choice_stands() {
    QCOMPARE(spin_count({"GOMP_SPINCOUNT=5000"}), QString("5000"));
    QVERIFY(spin_count({"OMP_WAIT_POLICY=active"}) != kernels::kOpenMpSpinCount);
    QCOMPARE(spin_count({"OMP_WAIT_POLICY=passive"}), QString("0"));
  }
};

QTEST_GUILESS_MAIN(ProcessSettings)
#include "test_process_settings.moc"
