// Tensor and pipeline parallelism in the GPU trainer (label cuda; skipped with fewer than 2
// devices). This
// program reruns itself under mpirun as the ranks of a run (--worker: train() on this rank,
// rank 0 prints one "ROW iteration loss grad-norm" line per iteration), and specifies that:
//   - GPU TP 2 trains as GPU TP 1 and as the CPU engine's TP 2 (fp32 losses and grad norms
//     within 1e-4, the GPU-vs-CPU tolerance of test_gpu_training); bf16 TP 2 losses within
//     2e-2 of the CPU's fp32;
//   - a checkpoint of a GPU TP 2 run continues on the CPU engine at TP 1 (losses within 1e-4
//     of the uninterrupted CPU run): the shards are the CPU engine's TP checkpoint;
//   - with 4 devices, GPU TP 2 x DP 2 trains as GPU TP 1 x DP 1;
//   - GPU PP 2 (1F1B, one layer per stage) trains as GPU PP 1 and as the CPU engine's PP 2
//     (1e-4), and its checkpoint continues on the CPU engine at PP 1; the interleaved schedule
//     (4 layers, two chunks per rank) likewise against one GPU and the CPU's interleaved PP 2,
//     and PP 2 with one + three layers against one GPU;
//     with 4 devices GPU TP 2 x PP 2 trains as one GPU.
// Never run on a GPU yet (docs/gpu.md).
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/process.h"
#include "common/tiny_model.h"
#include "cuda/cuda_test_support.h"
#include "gpu/gpu_trainer.h"
#include "lattice/train.h"

using namespace lattice;

namespace {

// ctest's SKIP_REGULAR_EXPRESSION matches it (tests/cuda/CMakeLists.txt). Not "no CUDA
// device": tests/gpu/run.sh treats that as a broken driver on a machine with a GPU.
constexpr const char* kFewDevicesMessage = "fewer than 2 CUDA devices: multi-GPU test skipped";

struct Row {
  int iteration;
  double loss, norm;
};

class RowSink : public MetricsSink {
 public:
  void on_iteration(const IterationMetrics& m) override {
    rows.push_back({m.iteration, m.lm_loss, m.grad_norm});
  }
  void on_message(const std::string& m) override { messages += m + "\n"; }
  std::vector<Row> rows;
  std::string messages;
};

// test_gpu_training's small run: head size 64, a vocabulary of 256 (padded to 256 at TP 1
// and TP 2, so both draw the same initial weights), 2 micro-batches of 2.
TrainOptions small_run() {
  TrainOptions o;
  o.model = testing::tiny_config(2, 128, 2, 64, 255);
  o.tokenizer.vocab_size = 255;
  o.model.vocab_size = 256;  // NullTokenizer: --vocab-size + 1
  o.micro_batch_size = 2;
  o.global_batch_size = 4;
  o.train_iters = 3;
  o.mock_data = true;
  o.eval_iters = 0;
  o.threads = 1;
  o.optim.lr = 1e-3f;
  return o;
}

// Six iterations with warm-up and cosine decay (a resumed run continues the schedule).
TrainOptions resumable_run() {
  TrainOptions o = small_run();
  o.train_iters = 6;
  o.optim.lr_warmup_iters = 2;
  o.optim.lr_decay_style = "cosine";
  return o;
}

// The worker's run from its arguments: device=cpu|cuda tp=N pp=N layers=N vpp=N
// (--num-layers-per-virtual-pipeline-stage) first=N (--decoder-first-pipeline-num-layers)
// bf16=0|1 resumable=0|1 save=DIR exit=N.
TrainOptions worker_options(const QStringList& args) {
  TrainOptions o = small_run();
  for (const QString& a : args) {
    const QString key = a.section('=', 0, 0), value = a.section('=', 1);
    if (key == "resumable" && value == "1") o = resumable_run();
  }
  for (const QString& a : args) {
    const QString key = a.section('=', 0, 0), value = a.section('=', 1);
    if (key == "device") o.device = value.toStdString();
    if (key == "tp") o.model.tensor_model_parallel_size = value.toInt();
    if (key == "pp") o.parallel.pipeline_model_parallel_size = value.toInt();
    if (key == "layers") o.model.num_layers = value.toInt();
    if (key == "vpp") o.parallel.num_layers_per_virtual_pipeline_stage = value.toInt();
    if (key == "first") o.parallel.decoder_first_pipeline_num_layers = value.toInt();
    if (key == "bf16") o.bf16 = value == "1";
    if (key == "save") o.save = value.toStdString();
    if (key == "exit") o.exit_interval = value.toInt();
  }
  return o;
}

int worker(const QStringList& args) {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "worker: %s\n", world.status().message().c_str());
    return 1;
  }
  gpu::register_gpu_trainer();
  RowSink sink;
  Result<TrainSummary> r = train(worker_options(args), **world, sink);
  const int rank = (*world)->rank();
  if (!r) std::fprintf(stderr, "rank %d: %s\n", rank, r.status().message().c_str());
  if (rank == 0)
    for (const Row& row : sink.rows)
      std::printf("ROW %d %.17g %.17g\n", row.iteration, row.loss, row.norm);
  std::fflush(stdout);
  world->reset();
  finalize_comm();
  return r ? 0 : 1;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

// The rows rank 0 printed, or an error naming the run.
struct Outcome {
  std::vector<Row> rows;
  QString error;
};

Outcome run_ranks(int ranks, const QStringList& args) {
  const QString self =
      QString::fromStdString(std::filesystem::read_symlink("/proc/self/exe").string());
  const testing::Run run =
      testing::run_mpi(ranks, self, QStringList{"--worker"} + args, {}, 280000);
  Outcome out;
  const QString what = QString("%1 ranks, %2").arg(ranks).arg(args.join(' '));
  if (run.exit_code != 0) {
    out.error = what + ": exit " + QString::number(run.exit_code) + ": " + run.err.right(2000);
    return out;
  }
  for (const QString& line : run.out.split('\n'))
    if (line.startsWith("ROW ")) {
      const QStringList f = line.split(' ');
      out.rows.push_back({f[1].toInt(), f[2].toDouble(), f[3].toDouble()});
    }
  return out;
}

Outcome run_here(const TrainOptions& o) {
  RowSink sink;
  Result<TrainSummary> r = train(o, sink);
  Outcome out;
  out.rows = sink.rows;
  if (!r) out.error = QString::fromStdString(o.device + ": " + r.status().message());
  return out;
}

// "" or the first iteration where `got` differs from `want` by more than `tolerance`
// (relative; grad norms too unless skip_norms).
QString compare(const char* what, const Outcome& got, const Outcome& want, double tolerance,
                bool skip_norms = false) {
  if (!got.error.isEmpty()) return got.error;
  if (!want.error.isEmpty()) return want.error;
  if (got.rows.size() != want.rows.size() || got.rows.empty())
    return QString("%1: %2 iterations, reference %3")
        .arg(what)
        .arg(got.rows.size())
        .arg(want.rows.size());
  for (size_t i = 0; i < got.rows.size(); i++) {
    const Row &g = got.rows[i], &w = want.rows[i];
    if (relative(g.loss, w.loss) >= tolerance ||
        (!skip_norms && relative(g.norm, w.norm) >= tolerance))
      return QString("%1, iteration %2: loss %3 / grad norm %4, reference %5 / %6 (tolerance %7)")
          .arg(what)
          .arg(g.iteration)
          .arg(g.loss, 0, 'g', 9)
          .arg(g.norm, 0, 'g', 9)
          .arg(w.loss, 0, 'g', 9)
          .arg(w.norm, 0, 'g', 9)
          .arg(tolerance);
  }
  return {};
}

}  // namespace

class GpuTensorParallel : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (kernels::cuda::device_count() < 2) QSKIP(kFewDevicesMessage);
    gpu::register_gpu_trainer();
  }

  void tp2_trains_as_tp1_and_as_the_cpu_engine() {
    TrainOptions one = small_run();
    one.device = "cuda";
    const Outcome tp1 = run_here(one);
    const Outcome tp2 = run_ranks(2, {"device=cuda", "tp=2"});
    const Outcome cpu = run_ranks(2, {"device=cpu", "tp=2"});
    QString d = compare("GPU TP 2 vs GPU TP 1", tp2, tp1, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    d = compare("GPU TP 2 vs CPU TP 2", tp2, cpu, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    const Outcome bf16 = run_ranks(2, {"device=cuda", "tp=2", "bf16=1"});
    d = compare("GPU bf16 TP 2 vs CPU fp32 TP 2 (losses)", bf16, cpu, 2e-2, true);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void a_gpu_tp2_checkpoint_continues_on_the_cpu_at_tp1() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString ckpt = dir.filePath("ckpt");
    const Outcome saved =
        run_ranks(2, {"device=cuda", "tp=2", "resumable=1", "save=" + ckpt, "exit=3"});
    QVERIFY2(saved.error.isEmpty(), qPrintable(saved.error));
    QCOMPARE(saved.rows.size(), size_t{3});
    QVERIFY(std::filesystem::exists(ckpt.toStdString() + "/iter_0000003/metadata.json"));
    TrainOptions cpu = resumable_run();
    cpu.device = "cpu";
    const Outcome straight = run_here(cpu);
    QVERIFY2(straight.error.isEmpty(), qPrintable(straight.error));
    QCOMPARE(straight.rows.size(), size_t{6});
    cpu.load = ckpt.toStdString();
    const Outcome resumed = run_here(cpu);
    Outcome tail;
    tail.rows.assign(straight.rows.begin() + 3, straight.rows.end());
    const QString d = compare("CPU TP 1 from a GPU TP 2 checkpoint", resumed, tail, 1e-4, true);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void tp2_by_dp2_trains_as_one_gpu() {
    if (kernels::cuda::device_count() < 4) QSKIP("fewer than 4 CUDA devices: TP 2 x DP 2 not run");
    TrainOptions one = small_run();
    one.device = "cuda";
    const Outcome tp1 = run_here(one);
    const Outcome tp2dp2 = run_ranks(4, {"device=cuda", "tp=2"});
    const QString d = compare("GPU TP 2 x DP 2 vs GPU TP 1", tp2dp2, tp1, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void pp2_trains_as_one_gpu_and_as_the_cpu_engine() {
    TrainOptions one = small_run();
    one.device = "cuda";
    const Outcome pp1 = run_here(one);
    const Outcome pp2 = run_ranks(2, {"device=cuda", "pp=2"});
    const Outcome cpu = run_ranks(2, {"device=cpu", "pp=2"});
    QString d = compare("GPU PP 2 vs GPU PP 1", pp2, pp1, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    d = compare("GPU PP 2 vs CPU PP 2", pp2, cpu, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    const Outcome bf16 = run_ranks(2, {"device=cuda", "pp=2", "bf16=1"});
    d = compare("GPU bf16 PP 2 vs CPU fp32 PP 2 (losses)", bf16, cpu, 2e-2, true);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void interleaved_pp2_trains_as_one_gpu_and_as_the_cpu_engine() {
    TrainOptions one = small_run();
    one.device = "cuda";
    one.model.num_layers = 4;
    const Outcome pp1 = run_here(one);
    const QStringList interleaved = {"pp=2", "layers=4", "vpp=1"};
    const Outcome gpu = run_ranks(2, QStringList{"device=cuda"} + interleaved);
    const Outcome cpu = run_ranks(2, QStringList{"device=cpu"} + interleaved);
    QString d = compare("GPU interleaved PP 2 vs GPU PP 1", gpu, pp1, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    d = compare("GPU interleaved PP 2 vs CPU interleaved PP 2", gpu, cpu, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    // Uneven: one layer on the first stage, three on the second.
    const Outcome uneven = run_ranks(2, {"device=cuda", "pp=2", "layers=4", "first=1"});
    d = compare("GPU PP 2 (1 + 3 layers) vs GPU PP 1", uneven, pp1, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void a_gpu_pp2_checkpoint_continues_on_the_cpu_at_pp1() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString ckpt = dir.filePath("ckpt");
    const Outcome saved =
        run_ranks(2, {"device=cuda", "pp=2", "resumable=1", "save=" + ckpt, "exit=3"});
    QVERIFY2(saved.error.isEmpty(), qPrintable(saved.error));
    QCOMPARE(saved.rows.size(), size_t{3});
    TrainOptions cpu = resumable_run();
    cpu.device = "cpu";
    const Outcome straight = run_here(cpu);
    QVERIFY2(straight.error.isEmpty(), qPrintable(straight.error));
    cpu.load = ckpt.toStdString();
    const Outcome resumed = run_here(cpu);
    Outcome tail;
    tail.rows.assign(straight.rows.begin() + 3, straight.rows.end());
    const QString d = compare("CPU PP 1 from a GPU PP 2 checkpoint", resumed, tail, 1e-4, true);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void tp2_by_pp2_trains_as_one_gpu() {
    if (kernels::cuda::device_count() < 4) QSKIP("fewer than 4 CUDA devices: TP 2 x PP 2 not run");
    TrainOptions one = small_run();
    one.device = "cuda";
    const Outcome tp1 = run_here(one);
    const Outcome tp2pp2 = run_ranks(4, {"device=cuda", "tp=2", "pp=2"});
    const QString d = compare("GPU TP 2 x PP 2 vs GPU TP 1", tp2pp2, tp1, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }
};

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--worker") {
    QStringList args;
    for (int i = 2; i < argc; i++) args << argv[i];
    return worker(args);
  }
  GpuTensorParallel test;
  return QTest::qExec(&test, argc, argv);
}

#include "test_gpu_tensor_parallel.moc"
