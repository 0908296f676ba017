// The parent side of the staged-device tests (test_expert_parallel_staged, test_vlm_staged):
// the test program runs itself as an MPI worker (`--worker RUN DEVICE DIR`) once on the plain
// CPU device and once on the staged one (staged_backend.h), and compares rank 0's figures and
// the checkpoints the two wrote.
#pragma once

#include <QtTest/QtTest>

#include <filesystem>
#include <string>

#include "common/process.h"

namespace lattice::testing {

#ifdef LATTICE_MPIEXEC
// This program as `--worker RUN DEVICE DIR` on `ranks` ranks, DIR = root/RUN/DEVICE (created);
// rank 0's figures (the worker writes DIR/figures), or "" after failing the current test with
// the worker's output.
inline QString staged_worker_figures(const QTemporaryDir& root, const QString& run,
                                     const QString& device, int ranks) {
  const QString dir = root.filePath(run + "/" + device);
  std::filesystem::create_directories(dir.toStdString());
  const QString self =
      QString::fromStdString(std::filesystem::read_symlink("/proc/self/exe").string());
  const Run r = run_mpi(ranks, self, {"--worker", run, device, dir}, {}, 180000);
  if (r.exit_code != 0) {
    QTest::qFail(qPrintable(run + " " + device + ": " + r.err + r.out), __FILE__, __LINE__);
    return {};
  }
  QFile f(dir + "/figures");
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}
#endif

// Every .safetensors file of the checkpoint directory `plain` equals, byte for byte, the file
// of the same name under `staged` (the parameters and optimizer moments: every gradient that
// reached them); fails the current test naming the first that differs, or when `plain` has none.
inline void verify_same_checkpoint_files(const std::filesystem::path& plain,
                                         const std::filesystem::path& staged) {
  const auto bytes = [](const std::filesystem::path& path) {
    QFile f(QString::fromStdString(path.string()));
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
  };
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(plain)) {
    if (e.path().extension() != ".safetensors") continue;
    files++;
    const std::filesystem::path name = std::filesystem::relative(e.path(), plain);
    const QByteArray saved = bytes(e.path());
    QVERIFY2(!saved.isEmpty(), name.c_str());
    QVERIFY2(saved == bytes(staged / name), name.c_str());
  }
  QVERIFY2(files > 0, "the plain run saved no checkpoint files");
}

}  // namespace lattice::testing
