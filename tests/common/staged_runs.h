// Both sides of the staged-device tests (test_expert_parallel_staged, test_vlm_staged): the
// test program runs itself as an MPI worker (`--worker RUN DEVICE DIR`) once on the plain CPU
// device and once on the staged one (staged_backend.h), and compares rank 0's figures and the
// checkpoints the two wrote. A test gives its options per run and its figure lines; the rest is
// here.
#pragma once

#include <QtTest/QtTest>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>

#include "common/mpi_worker.h"
#include "common/process.h"
#include "common/staged_backend.h"
#include "device/backends.h"
#include "lattice/comm.h"
#include "lattice/train.h"

namespace lattice::testing {

// The options of run RUN (as the test names its runs) on the plain CPU device.
using StagedOptions = std::function<Result<TrainOptions>(const std::string& run)>;
// Rank 0's figure lines for one iteration, exact ("%a"), appended to `out`.
using StagedFigureLines = std::function<void(const IterationMetrics& m, std::ostream& out)>;

// The worker: argv = RUN DEVICE DIR trains `options(RUN)` on DEVICE ("plain" or "staged": the
// staged backend as --device cuda), saving the checkpoint at the end into DIR/ckpt; rank 0
// writes its `figure_lines` of every iteration to DIR/figures. Returns the exit code.
inline int staged_worker(char** argv, const StagedOptions& options,
                         const StagedFigureLines& figure_lines) {
  const std::string run = argv[0], device = argv[1], dir = argv[2];
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "worker: %s\n", world.status().message().c_str());
    return 1;
  }
  Result<TrainOptions> o = options(run);
  if (!o) return end_worker(*world, o.status().message());
  if (device == "staged") {
    register_device_backend(staged_backend());
    o->device = "cuda";
  }
  o->save = dir + "/ckpt";
  struct Figures : MetricsSink {
    explicit Figures(const StagedFigureLines& lines) : lines_(lines) {}
    void on_iteration(const IterationMetrics& m) override { lines_(m, text_); }
    const StagedFigureLines& lines_;
    std::ostringstream text_;
  } figures(figure_lines);
  Result<TrainSummary> r = train(*o, **world, figures);
  const std::string error = r ? "" : r.status().message();
  if (r && (*world)->rank() == 0) std::ofstream(dir + "/figures") << figures.text_.str();
  return end_worker(*world, error);
}

// The test program's main: the worker when run as `--worker RUN DEVICE DIR`, else the tests.
template <typename Test>
int staged_test_main(int argc, char** argv, const StagedOptions& options,
                     const StagedFigureLines& figure_lines) {
  if (argc == 5 && std::string(argv[1]) == "--worker")
    return staged_worker(argv + 2, options, figure_lines);
  Test test;
  return QTest::qExec(&test, argc, argv);
}

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
