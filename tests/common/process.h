// Running the programs under test as real processes, alone or under mpirun, with the MPI test
// environment (tests/CMakeLists.txt: lattice_use_mpi defines LATTICE_MPIEXEC and
// LATTICE_MPI_ENV; LATTICE_CLI_PATH names the `lattice` program). Header-only: the macros are
// those of the test that includes it. Not for processes a test talks to while they run (a
// server, a job it signals): those stay QProcess, started in test_environment().
#pragma once

#include <QByteArray>
#include <QList>
#include <QProcess>
#include <QRegularExpression>
#include <QString>
#include <QStringList>

#include <string>
#include <vector>

namespace lattice::testing {

// `args` as a program's arguments (the flags tiny_model.h gives as std::string).
inline QStringList qt_args(const std::vector<std::string>& args) {
  QStringList out;
  for (const std::string& a : args) out << QString::fromStdString(a);
  return out;
}

struct Run {
  int exit_code = -1;      // -1: crashed or timed out
  bool timed_out = false;  // killed at timeout_ms; err then says "timed out"
  QString out, err;
};

// LATTICE_MPI_ENV's "K=V" words where the test uses MPI, none otherwise.
inline QStringList mpi_environment() {
#ifdef LATTICE_MPI_ENV
  return QString(LATTICE_MPI_ENV).split(' ', Qt::SkipEmptyParts);
#else
  return {};
#endif
}

// The system environment plus mpi_environment() plus `extra` ("K=V" each, later ones win).
inline QProcessEnvironment test_environment(const QStringList& extra = {}) {
  QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
  for (const QString& kv : mpi_environment() + extra)
    e.insert(kv.section('=', 0, 0), kv.section('=', 1));
  return e;
}

// Puts mpi_environment() into this test's own environment, for code under test that starts
// programs with the environment it inherits (the Studio's Launch view). It stays for the rest
// of the test program.
inline void put_mpi_environment() {
  for (const QString& kv : mpi_environment())
    qputenv(kv.section('=', 0, 0).toUtf8(), kv.section('=', 1).toUtf8());
}

// Runs `program args` in test_environment(extra_env) with `input` on its stdin (then closed:
// stdin is a pipe, never a terminal), to its end or `timeout_ms` (then it is killed).
inline Run run_process(const QString& program, const QStringList& args,
                       const QByteArray& input = {}, int timeout_ms = 240000,
                       const QStringList& extra_env = {}) {
  QProcess p;
  p.setProcessEnvironment(test_environment(extra_env));
  p.start(program, args);
  p.write(input);
  p.closeWriteChannel();
  Run r;
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    p.waitForFinished(5000);  // reaped before the caller looks for what it left behind
    r.timed_out = true;
    r.err = "timed out";
    return r;
  }
  r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

#ifdef LATTICE_MPIEXEC
// `program args` on `ranks` ranks under mpirun --oversubscribe, as run_process runs it.
inline Run run_mpi(int ranks, const QString& program, const QStringList& args,
                   const QByteArray& input = {}, int timeout_ms = 240000) {
  return run_process(LATTICE_MPIEXEC,
                     QStringList{"--oversubscribe", "-n", QString::number(ranks), program} + args,
                     input, timeout_ms);
}
#endif

// Every "lm loss: X |" of `lattice train`'s console output, in order.
inline QList<double> lm_losses(const QString& out) {
  QList<double> losses;
  static const QRegularExpression re(R"(lm loss: ([0-9.E+-]+) \|)");
  for (auto it = re.globalMatch(out); it.hasNext();)
    losses.append(it.next().captured(1).toDouble());
  return losses;
}

#if defined(LATTICE_CLI_PATH)
// `lattice args` as one process, or on `ranks` ranks under mpirun --oversubscribe (a test
// built without MPI gets a failed Run for more than one rank).
inline Run run_lattice(int ranks, const QStringList& args, const QByteArray& input = {}) {
  if (ranks == 1) return run_process(LATTICE_CLI_PATH, args, input);
#ifdef LATTICE_MPIEXEC
  return run_mpi(ranks, LATTICE_CLI_PATH, args, input);
#else
  Run r;
  r.err = QString("%1 ranks need mpirun; this test was built without MPI").arg(ranks);
  return r;
#endif
}
#endif

}  // namespace lattice::testing
