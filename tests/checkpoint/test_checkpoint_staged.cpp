// The engine on a device that is not host-addressable, run on the CPU: a CpuDevice with host
// addressing off (CpuDeviceOptions), registered as the backend a --device cuda run trains on
// (device/backends.h). The trainer then stages what a GPU run stages: micro-batches through
// host copies, losses and the overflow flag through device buffers, checkpoints and --save-hf
// through checkpoint/chunk_state.h's host copies. Specifies that, for one process and for TP 2
// (sequence parallel), PP 2 interleaved and DP 2 with the distributed optimizer (this program
// rerun as two MPI ranks), and for context parallelism (CP 2 x TP 2 with sequence parallelism,
// four ranks; CP 2 with full recomputation, whose forwards are plain CP 2's), whose ring
// attention runs on the device through its op list and the device's CP communicator (Note
// [ring attention on a device]):
//   - a staged run trains bit for bit as the plain CPU run (losses, grad norms, validation);
//   - a staged run saved at --exit-interval 3 writes the plain run's checkpoint files byte for
//     byte, and the plain CPU resumes it to the plain run's last three iterations; a plain
//     checkpoint resumes on the staged device the same way; --save-hf writes the same file;
//   - with --bf16 on the CPU's 16-bit op lists (the GPU's compute-copy path: AdamW writing the
//     bf16 copy, its refresh after a load and after the distributed optimizer's gather; the
//     16-bit ring under CP 2), a run resumed from its checkpoint continues exactly as the
//     uninterrupted run, close to fp32.
#include <QtTest/QtTest>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "common/mpi_worker.h"
#include "common/process.h"
#include "common/staged_backend.h"
#include "common/tiny_model.h"
#include "device/backends.h"
#include "device/cpu_device.h"
#include "lattice/comm.h"
#include "lattice/train.h"

using namespace lattice;

namespace {

// The runs: "one" (one process), "tp2" (TP 2, sequence parallel), "pp2i" (PP 2, two chunks of
// one layer per rank), "dp2" (DP 2, distributed optimizer, buckets that cut tensors),
// "cp2tp2" (CP 2 x TP 2, sequence parallel), "cp2full" (CP 2, full recomputation), "cp2" (CP 2).
// Dropout on (hidden only under CP: the ring has no attention dropout), --fp16's loss scaler
// (fp32 arithmetic on the CPU), a validation every 3 iterations.
TrainOptions options_for(const std::string& run) {
  TrainOptions o = testing::cuda_ready_options();
  o.model = testing::tiny_config(run == "pp2i" ? 4 : 2, 32, 4, 16, 256);
  o.model.hidden_dropout = 0.1f;
  o.model.attention_dropout = 0.1f;
  o.global_batch_size = 8;
  o.train_iters = 6;
  o.eval_interval = 3;
  o.eval_iters = 1;
  o.threads = 1;
  o.seed = 11;
  o.fp16 = true;
  o.device = "cpu";
  if (run == "tp2") {
    o.model.tensor_model_parallel_size = 2;
    o.parallel.sequence_parallel = true;
  } else if (run == "pp2i") {
    o.parallel.pipeline_model_parallel_size = 2;
    o.parallel.num_layers_per_virtual_pipeline_stage = 1;
  } else if (run == "dp2") {
    o.parallel.use_distributed_optimizer = true;
    o.parallel.ddp_bucket_size = 1000;
  } else if (run.rfind("cp2", 0) == 0) {
    o.parallel.context_parallel_size = 2;
    o.model.attention_dropout = 0.0f;
    if (run == "cp2tp2") {
      o.model.tensor_model_parallel_size = 2;
      o.parallel.sequence_parallel = true;
    } else if (run == "cp2full") {
      o.parallel.recompute_granularity = "full";
      o.parallel.recompute_method = "uniform";
      o.parallel.recompute_num_layers = 1;
    }
  }
  return o;
}

int ranks_of(const QString& run) {
  if (run == "cp2tp2") return 4;
  return run == "one" || run == "bf16" ? 1 : 2;
}

// Ranks that write checkpoint files: under CP only context-parallel rank 0 of each shard.
int writers_of(const QString& run) {
  return run.startsWith("cp2") ? ranks_of(run) / 2 : ranks_of(run);
}

// One line per figure, exact ("%a"): "loss I X", "norm I X", "valid I X".
std::string figures(const TrainSummary& s, int first_iteration) {
  std::ostringstream out;
  char line[96];
  for (size_t i = 0; i < s.losses.size(); i++) {
    const int it = first_iteration + static_cast<int>(i);
    std::snprintf(line, sizeof line, "loss %d %a\nnorm %d %a\n", it, s.losses[i], it,
                  s.grad_norms[i]);
    out << line;
  }
  for (const ValidationMetrics& v : s.validations) {
    std::snprintf(line, sizeof line, "valid %d %a\n", v.iteration, v.lm_loss);
    out << line;
  }
  return out.str();
}

// The worker: `--worker RUN DEVICE SAVE LOAD OUT` trains RUN on DEVICE ("plain", "staged",
// "bf16": staged with --bf16), saving to SAVE at --exit-interval 3 or loading LOAD ("-": none);
// a run that ends writes --save-hf OUT.safetensors. Rank 0 writes its figures to OUT.
int worker(char** argv) {
  const std::string run = argv[0], device = argv[1], save = argv[2], load = argv[3], out = argv[4];
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "worker: %s\n", world.status().message().c_str());
    return 1;
  }
  TrainOptions o = options_for(run);
  if (device != "plain") {
    register_device_backend(device == "bf16" ? testing::staged_backend<true>()
                                             : testing::staged_backend<false>());
    o.device = "cuda";
    o.bf16 = device == "bf16";
    o.fp16 = !o.bf16;
  }
  if (save != "-") {
    o.save = save;
    o.exit_interval = 3;
  } else {
    o.save_hf = out + ".safetensors";
  }
  if (load != "-") o.load = load;
  MetricsSink sink;
  Result<TrainSummary> r = train(o, **world, sink);
  std::string error = r ? "" : r.status().message();
  if (r && (*world)->rank() == 0) {
    std::ofstream(out) << figures(*r, load != "-" ? 4 : 1);
  }
  return testing::end_worker(*world, error);
}

QString read_text(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

QByteArray read_bytes(const std::string& path) {
  QFile f(QString::fromStdString(path));
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// The lines of `text` from iteration `from` on.
QString from_iteration(const QString& text, int from) {
  QStringList kept;
  for (const QString& line : text.split('\n', Qt::SkipEmptyParts))
    if (line.section(' ', 1, 1).toInt() >= from) kept << line;
  return kept.join('\n');
}

}  // namespace

class CheckpointStaged : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void staged_device_trains_and_checkpoints_as_the_cpu_data() {
    QTest::addColumn<QString>("run");
    QTest::newRow("one process") << "one";
#ifdef LATTICE_MPIEXEC
    QTest::newRow("TP 2, sequence parallel") << "tp2";
    QTest::newRow("PP 2 interleaved") << "pp2i";
    QTest::newRow("DP 2, distributed optimizer") << "dp2";
    QTest::newRow("CP 2 x TP 2, sequence parallel") << "cp2tp2";
    QTest::newRow("CP 2, full recomputation") << "cp2full";
#endif
  }
  void staged_device_trains_and_checkpoints_as_the_cpu() {
    QFETCH(QString, run);
    const QString plain = work(run, "plain", "-", "-", "plain");
    QVERIFY(!plain.isEmpty());
    // Trains bit for bit as the CPU, and --save-hf writes the same file.
    QCOMPARE(work(run, "staged", "-", "-", "staged"), plain);
    const std::string base = dir_.filePath(run).toStdString();
    QVERIFY(!read_bytes(base + "/plain.safetensors").isEmpty());
    QVERIFY(read_bytes(base + "/plain.safetensors") == read_bytes(base + "/staged.safetensors"));
    // Both save the same files at iteration 3 ...
    QVERIFY(!work(run, "plain", "ckpt-plain", "-", "plain-3").isEmpty());
    QVERIFY(!work(run, "staged", "ckpt-staged", "-", "staged-3").isEmpty());
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(base + "/ckpt-plain/iter_0000003")) {
      if (e.path().extension() != ".safetensors") continue;
      files++;
      const std::string name = e.path().filename().string();
      QVERIFY2(
          read_bytes(e.path().string()) == read_bytes(base + "/ckpt-staged/iter_0000003/" + name),
          name.c_str());
    }
    QCOMPARE(files, writers_of(run));  // every writing rank holds something of its own
    // ... and each resumes on the other device as the uninterrupted run continued.
    const QString tail = from_iteration(plain, 4);
    QCOMPARE(from_iteration(work(run, "plain", "-", "ckpt-staged", "plain-4"), 4), tail);
    QCOMPARE(from_iteration(work(run, "staged", "-", "ckpt-plain", "staged-4"), 4), tail);
  }

  void bf16_on_the_staged_device_resumes_exactly_data() {
    QTest::addColumn<QString>("run");
    QTest::newRow("one process") << "one";
#ifdef LATTICE_MPIEXEC
    QTest::newRow("DP 2, distributed optimizer") << "dp2";
    // The 16-bit ring on the device (Note [ring attention in 16 bits]): 16-bit keys and values
    // through the device's CP communicator, merges in fp32 device buffers.
    QTest::newRow("CP 2") << "cp2";
#endif
  }
  void bf16_on_the_staged_device_resumes_exactly() {
    QFETCH(QString, run);
    const QString whole = work(run, "bf16", "-", "-", "bf16");
    QVERIFY(!whole.isEmpty());
    QVERIFY(!work(run, "bf16", "ckpt-bf16", "-", "bf16-3").isEmpty());
    QCOMPARE(from_iteration(work(run, "bf16", "-", "ckpt-bf16", "bf16-4"), 4),
             from_iteration(whole, 4));
    // bf16 compute tracks fp32: every loss within 2% of the plain run's.
    const QStringList fp32 = work(run, "plain", "-", "-", "plain-for-bf16").split('\n');
    const QStringList half = whole.split('\n');
    QCOMPARE(half.size(), fp32.size());
    for (int i = 0; i < half.size(); i++) {
      if (!half[i].startsWith("loss")) continue;
      const double a = std::strtod(half[i].section(' ', 2).toUtf8().constData(), nullptr);
      const double b = std::strtod(fp32[i].section(' ', 2).toUtf8().constData(), nullptr);
      QVERIFY2(std::isfinite(a) && std::fabs(a - b) < 0.02 * b,
               qPrintable(half[i] + " vs fp32 " + fp32[i]));
    }
  }

 private:
  // Runs the worker for `run` on its ranks in dir_/RUN (SAVE and LOAD relative to it, "-":
  // none); returns rank 0's figures, or "" after failing the test with the worker's output.
  QString work(const QString& run, const QString& device, const QString& save, const QString& load,
               const QString& out) {
    const QString base = dir_.filePath(run);
    std::filesystem::create_directories(base.toStdString());
    auto at = [&](const QString& p) { return p == "-" ? p : base + "/" + p; };
    const QString self =
        QString::fromStdString(std::filesystem::read_symlink("/proc/self/exe").string());
    const QStringList args{"--worker", run, device, at(save), at(load), base + "/" + out};
    testing::Run r;
#ifdef LATTICE_MPIEXEC
    if (ranks_of(run) > 1) r = testing::run_mpi(ranks_of(run), self, args, {}, 180000);
#endif
    if (ranks_of(run) == 1) r = testing::run_process(self, args);
    const QString what = run + " " + device + " " + out + ": ";
    if (r.exit_code != 0) {
      QTest::qFail(qPrintable(what + r.err + r.out), __FILE__, __LINE__);
      return {};
    }
    return read_text(base + "/" + out);
  }

  QTemporaryDir dir_;
};

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--worker") return worker(argv + 2);
  CheckpointStaged test;
  return QTest::qExec(&test, argc, argv);
}
#include "test_checkpoint_staged.moc"
