// Running the programs under test as real processes, alone or under mpirun, with the MPI test
// environment (tests/CMakeLists.txt: lattice_use_mpi defines LATTICE_MPIEXEC and
// LATTICE_MPI_ENV; LATTICE_CLI_PATH names the `lattice` program). Header-only: the macros are
// those of the test that includes it.
#pragma once

#include <QByteArray>
#include <QProcess>
#include <QString>
#include <QStringList>

namespace lattice::testing {

struct Run {
  int exit_code = -1;  // -1: crashed or timed out
  QString out, err;
};

// The system environment plus LATTICE_MPI_ENV ("K=V K=V ...") where the test uses MPI.
inline QProcessEnvironment test_environment() {
  QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
#ifdef LATTICE_MPI_ENV
  for (const QString& kv : QString(LATTICE_MPI_ENV).split(' ', Qt::SkipEmptyParts))
    e.insert(kv.section('=', 0, 0), kv.section('=', 1));
#endif
  return e;
}

// Runs `program args` in the test environment with `input` on its stdin, to its end or
// `timeout_ms` (then it is killed and err says "timed out").
inline Run run_process(const QString& program, const QStringList& args,
                       const QByteArray& input = {}, int timeout_ms = 240000) {
  QProcess p;
  p.setProcessEnvironment(test_environment());
  p.start(program, args);
  p.write(input);
  p.closeWriteChannel();
  Run r;
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    r.err = "timed out";
    return r;
  }
  r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

#if defined(LATTICE_CLI_PATH) && defined(LATTICE_MPIEXEC)
// `lattice args` as one process, or on `ranks` ranks under mpirun --oversubscribe.
inline Run run_lattice(int ranks, const QStringList& args, const QByteArray& input = {}) {
  if (ranks == 1) return run_process(LATTICE_CLI_PATH, args, input);
  return run_process(
      LATTICE_MPIEXEC,
      QStringList{"--oversubscribe", "-n", QString::number(ranks), LATTICE_CLI_PATH} + args, input);
}
#endif

}  // namespace lattice::testing
