// Tensor and pipeline parallelism in the GPU trainer (label cuda; skipped with fewer than 2
// devices). This
// program reruns itself under mpirun as the ranks of a run (--worker: train() on this rank,
// rank 0 prints one "ROW iteration loss grad-norm" line per iteration), and specifies that:
//   - GPU TP 2 trains as GPU TP 1 and as the CPU engine's TP 2 (fp32 losses and grad norms
//     within 1e-4, the GPU-vs-CPU tolerance of test_gpu_training); bf16 TP 2 losses within
//     2e-2 of the CPU's fp32;
//   - a checkpoint of a GPU TP 2 run continues on the CPU engine at TP 1 (losses within 1e-4
//     of the uninterrupted CPU run): the shards are the CPU engine's TP checkpoint;
//   - GPU TP 2 with --sequence-parallel trains as GPU TP 2 without it and as the CPU engine's
//     TP 2 with it (1e-4), also with dropout (against the CPU's), and its checkpoint continues
//     on the CPU engine at TP 1 (sequence parallelism does not change the checkpoint layout);
//   - with 4 devices, GPU TP 2 x DP 2 trains as GPU TP 1 x DP 1;
//   - DP 2 with --use-distributed-optimizer (buckets small enough that shards cut tensors)
//     trains as DP 2 without it (fp32 losses and grad norms within 1e-5; bf16 within 1e-3,
//     where a last-bit difference of a clipped update may round a weight to the other bf16
//     neighbour), and its optimizer memory halves (within the caching allocator's size
//     classes); a checkpoint of it continues on the CPU engine at DP 1 without the
//     distributed optimizer (losses within 1e-4 of the uninterrupted CPU run).
//   - GPU PP 2 (1F1B, one layer per stage) trains as GPU PP 1 and as the CPU engine's PP 2
//     (1e-4), and its checkpoint continues on the CPU engine at PP 1; the interleaved schedule
//     (4 layers, two chunks per rank) likewise against one GPU and the CPU's interleaved PP 2,
//     and PP 2 with one + three layers against one GPU;
//     with 4 devices GPU TP 2 x PP 2 trains as one GPU;
//   - GPU PP 2 with hidden and attention dropout trains as the CPU engine's PP 2 with dropout
//     (the same masks: per-micro-batch seeds, global layer keys), fp16 PP 2 within 16-bit
//     tolerance of the CPU, and with 4 devices the distributed optimizer over PP 2 x DP 2
//     (interleaved, two chunks each with its shard) trains as PP 2 x DP 2 without it.
//   - MoE with expert parallelism (8 experts top-2 with the load-balancing loss, EP 2 on 2
//     ranks: the count exchange and token all-to-alls over NCCL, Note [expert parallelism])
//     trains as one GPU and as the CPU engine's EP 2 (1e-4); bf16 EP 2 losses within 2e-2 of
//     the CPU's fp32.
// Never run on a GPU yet (docs/gpu.md).
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/process.h"
#include "common/tiny_model.h"
#include "common/cuda_test_support.h"
#include "train/gpu_runs.h"
#include "device/backends.h"
#include "lattice/train.h"

using namespace lattice;

namespace {

// ctest's SKIP_REGULAR_EXPRESSION matches it (tests/kernels/cuda/CMakeLists.txt). Not "no CUDA
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

TrainOptions small_run() {
  return testing::small_gpu_run(1);
}

TrainOptions resumable_run() {
  return testing::resumable_gpu_run(1);
}

// test_gpu_training's MoE layers: 8 experts top-2 with the load-balancing loss.
void moe_run(TrainOptions& o) {
  o.model.num_experts = 8;
  o.model.moe_router_topk = 2;
  o.model.moe_ffn_hidden_size = 256;
  o.model.moe_aux_loss_coeff = 0.01f;
}

// The worker's run from its arguments: device=cpu|cuda tp=N pp=N layers=N vpp=N
// (--num-layers-per-virtual-pipeline-stage) first=N (--decoder-first-pipeline-num-layers)
// bf16=0|1 fp16=0|1 scale=S (--initial-loss-scale) dropout=0|1 (hidden and attention 0.1)
// resumable=0|1 save=DIR exit=N dopt=0|1 (--use-distributed-optimizer) bucket=N
// (--ddp-bucket-size) sp=0|1 (--sequence-parallel) moe=0|1 (moe_run's experts) ep=N
// (--expert-model-parallel-size).
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
    if (key == "fp16") o.fp16 = value == "1";
    if (key == "scale") o.initial_loss_scale = value.toDouble();
    if (key == "dropout")
      o.model.hidden_dropout = o.model.attention_dropout = value == "1" ? 0.1f : 0.0f;
    if (key == "save") o.save = value.toStdString();
    if (key == "exit") o.exit_interval = value.toInt();
    if (key == "dopt") o.parallel.use_distributed_optimizer = value == "1";
    if (key == "bucket") o.parallel.ddp_bucket_size = value.toInt();
    if (key == "sp") o.parallel.sequence_parallel = value == "1";
    if (key == "moe" && value == "1") moe_run(o);
    if (key == "ep") o.parallel.expert_model_parallel_size = value.toInt();
  }
  return o;
}

int worker(const QStringList& args) {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "worker: %s\n", world.status().message().c_str());
    return 1;
  }
  register_cuda_backend();
  RowSink sink;
  Result<TrainSummary> r = train(worker_options(args), **world, sink);
  const int rank = (*world)->rank();
  if (!r) std::fprintf(stderr, "rank %d: %s\n", rank, r.status().message().c_str());
  if (rank == 0)
    for (const Row& row : sink.rows)
      std::printf("ROW %d %.17g %.17g\n", row.iteration, row.loss, row.norm);
  if (rank == 0 && r)  // rank 0's device memory of the optimizer state (the moments)
    std::printf("OPTIMIZER_BYTES %zu\n", r->memory.optimizer);
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
  double optimizer_bytes = 0;  // rank 0's, from run_ranks
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
    } else if (line.startsWith("OPTIMIZER_BYTES ")) {
      out.optimizer_bytes = line.section(' ', 1).toDouble();
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
    register_cuda_backend();
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

  // The rows of the residual stream split over the TP group: the same model, so the same losses
  // and grad norms as without it (the LayerNorm and bias gradients summed over TP first).
  void tp2_sequence_parallel_trains_as_tp2_and_as_the_cpu_engine() {
    const Outcome sp = run_ranks(2, {"device=cuda", "tp=2", "sp=1"});
    const Outcome tp2 = run_ranks(2, {"device=cuda", "tp=2"});
    const Outcome cpu = run_ranks(2, {"device=cpu", "tp=2", "sp=1"});
    QString d = compare("GPU TP 2 + SP vs GPU TP 2", sp, tp2, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    d = compare("GPU TP 2 + SP vs CPU TP 2 + SP", sp, cpu, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    // Each rank's rows draw the masks of their global element indices.
    const Outcome gpu_dropout = run_ranks(2, {"device=cuda", "tp=2", "sp=1", "dropout=1"});
    const Outcome cpu_dropout = run_ranks(2, {"device=cpu", "tp=2", "sp=1", "dropout=1"});
    d = compare("GPU TP 2 + SP vs CPU TP 2 + SP, with dropout", gpu_dropout, cpu_dropout, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void a_gpu_sequence_parallel_checkpoint_continues_on_the_cpu_at_tp1() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString ckpt = dir.filePath("ckpt");
    const Outcome saved =
        run_ranks(2, {"device=cuda", "tp=2", "sp=1", "resumable=1", "save=" + ckpt, "exit=3"});
    QVERIFY2(saved.error.isEmpty(), qPrintable(saved.error));
    QCOMPARE(saved.rows.size(), size_t{3});
    TrainOptions cpu = resumable_run();
    cpu.device = "cpu";
    const Outcome straight = run_here(cpu);
    QVERIFY2(straight.error.isEmpty(), qPrintable(straight.error));
    QCOMPARE(straight.rows.size(), size_t{6});
    cpu.load = ckpt.toStdString();
    const Outcome resumed = run_here(cpu);
    Outcome tail;
    tail.rows.assign(straight.rows.begin() + 3, straight.rows.end());
    const QString d =
        compare("CPU TP 1 from a GPU TP 2 + SP checkpoint", resumed, tail, 1e-4, true);
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

  // Buckets of 20000 elements: the arena (~0.5M) splits into many buckets whose shards cut
  // tensors, so the cut descriptors and the per-bucket reduce-scatter / all-gather all run.
  void dp2_distributed_optimizer_trains_as_dp2() {
    const Outcome plain = run_ranks(2, {"device=cuda"});
    const Outcome dopt = run_ranks(2, {"device=cuda", "dopt=1", "bucket=20000"});
    QString d = compare("GPU DP 2 distributed optimizer vs GPU DP 2", dopt, plain, 1e-5);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    // The moments shrink by DP; the caching allocator rounds each to a size class (<= 1.25x).
    QVERIFY2(plain.optimizer_bytes > 0, "no optimizer memory reported");
    const double ratio = dopt.optimizer_bytes / plain.optimizer_bytes;
    QVERIFY2(ratio >= 0.4 && ratio <= 0.625,
             qPrintable(QString("optimizer memory with the distributed optimizer %1 B, without %2 "
                                "B: ratio %3, want about 1/2")
                            .arg(dopt.optimizer_bytes)
                            .arg(plain.optimizer_bytes)
                            .arg(ratio)));
    // bf16: the compute copy of the weights other ranks updated comes from the all-gathered
    // master weights.
    const Outcome plain16 = run_ranks(2, {"device=cuda", "bf16=1"});
    const Outcome dopt16 = run_ranks(2, {"device=cuda", "bf16=1", "dopt=1", "bucket=20000"});
    d = compare("GPU bf16 DP 2 distributed optimizer vs GPU bf16 DP 2", dopt16, plain16, 1e-3);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void a_gpu_distributed_optimizer_checkpoint_continues_on_the_cpu_at_dp1() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString ckpt = dir.filePath("ckpt");
    const Outcome saved = run_ranks(
        2, {"device=cuda", "dopt=1", "bucket=20000", "resumable=1", "save=" + ckpt, "exit=3"});
    QVERIFY2(saved.error.isEmpty(), qPrintable(saved.error));
    QCOMPARE(saved.rows.size(), size_t{3});
    TrainOptions cpu = resumable_run();
    cpu.device = "cpu";
    const Outcome straight = run_here(cpu);
    QVERIFY2(straight.error.isEmpty(), qPrintable(straight.error));
    QCOMPARE(straight.rows.size(), size_t{6});
    cpu.load = ckpt.toStdString();
    const Outcome resumed = run_here(cpu);
    Outcome tail;
    tail.rows.assign(straight.rows.begin() + 3, straight.rows.end());
    const QString d = compare("CPU DP 1 from a GPU DP 2 distributed-optimizer checkpoint", resumed,
                              tail, 1e-4, true);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void moe_ep2_trains_as_one_gpu_and_as_the_cpu_engine() {
    TrainOptions one = small_run();
    one.device = "cuda";
    moe_run(one);
    const Outcome ep1 = run_here(one);
    const Outcome ep2 = run_ranks(2, {"device=cuda", "moe=1", "ep=2"});
    const Outcome cpu = run_ranks(2, {"device=cpu", "moe=1", "ep=2"});
    QString d = compare("GPU MoE EP 2 vs one GPU", ep2, ep1, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    d = compare("GPU MoE EP 2 vs CPU EP 2", ep2, cpu, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    const Outcome bf16 = run_ranks(2, {"device=cuda", "moe=1", "ep=2", "bf16=1"});
    d = compare("GPU bf16 MoE EP 2 vs CPU fp32 EP 2 (losses)", bf16, cpu, 2e-2, true);
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

  // Each micro-batch's seed reaches its stage's forward and backward (several in flight), and
  // the second stage keys its masks by the global layer index, as the CPU engine does.
  void pp2_with_dropout_trains_as_the_cpu_engine() {
    const Outcome gpu = run_ranks(2, {"device=cuda", "pp=2", "dropout=1"});
    const Outcome cpu = run_ranks(2, {"device=cpu", "pp=2", "dropout=1"});
    QString d = compare("GPU PP 2 vs CPU PP 2, with dropout", gpu, cpu, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    // fp16 stages send fp16 activations (at a loss scale of 2^12: no overflow, no skipped step).
    const Outcome fp16 = run_ranks(2, {"device=cuda", "pp=2", "fp16=1", "scale=4096"});
    const Outcome cpu32 = run_ranks(2, {"device=cpu", "pp=2"});
    d = compare("GPU fp16 PP 2 vs CPU fp32 PP 2 (losses)", fp16, cpu32, 2e-2, true);
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  // Interleaved PP 2 x DP 2: each chunk's optimizer has its own shard of its chunk's buckets.
  void distributed_optimizer_over_interleaved_pp2_trains_as_without_it() {
    if (kernels::cuda::device_count() < 4) QSKIP("fewer than 4 CUDA devices: PP 2 x DP 2 not run");
    const QStringList run = {"device=cuda", "pp=2", "layers=4", "vpp=1"};
    const Outcome plain = run_ranks(4, run);
    const Outcome dopt = run_ranks(4, run + QStringList{"dopt=1", "bucket=20000"});
    const QString d =
        compare("GPU PP 2 x DP 2 distributed optimizer vs without", dopt, plain, 1e-5);
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
