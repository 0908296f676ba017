// A full training step on the GPU against the CPU (label cuda; QSKIP without a device). Same
// weights (drawn by GptModel::init_weights), same tokens, no dropout (one case with dropout,
// whose masks both devices draw alike):
//   - one micro-batch's loss and every parameter gradient of GptModel<float> on the CUDA
//     device vs the same model on the CPU device (its host constructor; normwise relative
//     error per tensor, 1e-4: fp32 on both, different summation orders);
//   - GptModel<bf16> and GptModel<fp16> (the latter with a loss scale of 2^10, as training runs
//     it): loss within 2e-2 relative, gradients within 5e-2 (16-bit activations);
//   - three iterations of `train()` with --device cuda vs the CPU trainer (fp32 losses and
//     grad norms within 1e-4; bf16 losses within 2e-2);
//   - --fp16 on the GPU (fp16 kernels): with a scale that does not overflow fp16 the losses
//     are within 2e-2 of fp32 and nothing is skipped; the default 2^32 overflows the fp16 loss
//     gradient, so the first iterations skip and halve until it fits (fp32 kernels would not
//     have skipped); a scale of 2^140 overflows, skips, and halves after the hysteresis
//     exactly as on the CPU (tests/train/test_loss_scaling.cpp) until steps are taken;
//   - checkpoints (engine/src/checkpoint/chunk_state.h): a GPU run saved at --exit-interval 3 and
//     resumed with --load continues bit for bit (fp32, bf16, fp16 at 2^12, the fp16 scaler's
//     state at 2^140); a GPU checkpoint continues on the CPU and a CPU one on the GPU within
//     the CPU-vs-GPU tolerance;
//     --save-hf from the GPU loads with --load-hf on either engine;
//   - full recomputation (docs/gpu.md#recomputation): three iterations with
//     --recompute-granularity full equal the run without it (losses and grad norms within
//     1e-6: the recomputed activations are the forward's), uniform and block, with dropout and
//     in bf16; --recompute-granularity selective changes nothing;
//   - the reports: phase times, timeline boxes and per-op times as a CPU run's;
//   - MoE layers (8 experts top-2, aux loss; token dropping): one micro-batch's gradients in
//     fp32 (1e-4), bf16 and fp16 (5e-2), and three training steps (fp32 1e-4, bf16 2e-2).
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <cmath>
#include <filesystem>
#include <map>

#include "common/tiny_model.h"
#include "common/cuda_test_support.h"
#include "train/gpu_runs.h"
#include "device/backends.h"
#include "device/device.h"
#include "lattice/train.h"
#include "model/gpt.h"

using namespace lattice;
namespace cu = lattice::kernels::cuda;

namespace {

struct Row {
  double loss, norm, scale;
  int skipped;
  int iteration;
  double lr;
  int64_t consumed;
  double moe_aux;  // NaN without MoE
};

class RecordingSink : public MetricsSink {
 public:
  void on_iteration(const IterationMetrics& m) override {
    rows.push_back({m.lm_loss, m.grad_norm, m.loss_scale, m.skipped_iterations, m.iteration,
                    m.learning_rate, m.consumed_samples, m.moe_aux_loss});
  }
  void on_message(const std::string& m) override { messages += m + "\n"; }
  void on_checkpoint(int iteration, const std::string&, int64_t, double) override {
    checkpoints.push_back(iteration);
  }
  std::vector<Row> rows;
  std::string messages;
  std::vector<int> checkpoints;  // iterations saved
};

// The rank reports' timeline boxes per reported iteration.
class ReportSink : public MetricsSink {
 public:
  void on_rank_reports(int iteration, const std::vector<RankReport>& ranks) override {
    if (!ranks.empty() && !ranks[0].timeline.empty()) boxes[iteration] = ranks[0].timeline;
  }
  std::map<int, std::vector<TimelineBox>> boxes;
};

TrainOptions small_run() {
  return testing::small_gpu_run(2);
}

struct Outcome {
  std::vector<Row> rows;
  std::string messages;
  std::vector<int> checkpoints;  // iterations saved
  std::string error;             // "" when train() succeeded
};

Outcome train_on(TrainOptions o, const std::string& device) {
  o.device = device;
  RecordingSink sink;
  Result<TrainSummary> r = train(o, sink);
  Outcome out{sink.rows, sink.messages, sink.checkpoints, r ? "" : r.status().message()};
  if (!r) qWarning("train (%s) failed: %s", device.c_str(), out.error.c_str());
  return out;
}

std::vector<Row> run(TrainOptions o, const std::string& device) {
  return train_on(std::move(o), device).rows;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

// "" when both runs have the same iterations and every loss and grad norm of gpu is within
// `tolerance` (relative) of cpu's, else the first difference.
QString losses_and_norms_differ(const std::vector<Row>& gpu, const std::vector<Row>& cpu,
                                double tolerance) {
  if (gpu.size() != cpu.size())
    return QString("%1 GPU iterations, %2 CPU iterations").arg(gpu.size()).arg(cpu.size());
  for (size_t i = 0; i < cpu.size(); i++) {
    if (!(relative(gpu[i].loss, cpu[i].loss) < tolerance))
      return QString("iteration %1 loss: GPU %2, CPU %3")
          .arg(i + 1)
          .arg(gpu[i].loss, 0, 'g', 9)
          .arg(cpu[i].loss, 0, 'g', 9);
    if (!(relative(gpu[i].norm, cpu[i].norm) < tolerance))
      return QString("iteration %1 grad norm: GPU %2, CPU %3")
          .arg(i + 1)
          .arg(gpu[i].norm, 0, 'g', 9)
          .arg(cpu[i].norm, 0, 'g', 9);
  }
  return "";
}

TrainOptions resumable_run() {
  return testing::resumable_gpu_run(2);
}

// Iterations 1-3 of `o` on `device`, stopped by --exit-interval 3 with a checkpoint in `dir`.
// "" or what went wrong.
QString save_after_3(TrainOptions o, const std::string& device, const std::string& dir) {
  o.save = dir;
  o.exit_interval = 3;
  const Outcome r = train_on(o, device);
  if (!r.error.empty())
    return QString("saving run on %1 failed: %2").arg(device.c_str(), r.error.c_str());
  if (r.rows.size() != 3)
    return QString("%1 iterations ran before --exit-interval 3").arg(r.rows.size());
  if (r.checkpoints != std::vector<int>{3})
    return QString("%1 checkpoints reported, want one of iteration 3").arg(r.checkpoints.size());
  if (!std::filesystem::exists(dir + "/iter_0000003/metadata.json"))
    return QString::fromStdString(dir + "/iter_0000003/metadata.json is missing");
  return {};
}

// Bit for bit, NaN included (an overflowing --fp16 step reports a NaN or inf grad norm).
bool same(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

// The rows of a run resumed after iteration 3 against the uninterrupted run's iterations 4 on:
// same iterations, consumed samples and learning rates; losses within `tolerance` (relative),
// or with tolerance 0 bit for bit, grad norms, loss scales and skipped counts too.
QString compare_continuation(const std::vector<Row>& resumed, const std::vector<Row>& straight,
                             double tolerance) {
  if (straight.size() < 3 || resumed.size() != straight.size() - 3)
    return QString("%1 iterations after the resume, want %2")
        .arg(resumed.size())
        .arg(straight.size() >= 3 ? straight.size() - 3 : 0);
  for (size_t i = 0; i < resumed.size(); i++) {
    const Row& got = resumed[i];
    const Row& want = straight[i + 3];
    const QString at = QString("iteration %1: ").arg(want.iteration);
    if (got.iteration != want.iteration)
      return at + QString("the resumed run reports iteration %1").arg(got.iteration);
    if (got.consumed != want.consumed)
      return at + QString("consumed samples %1, want %2").arg(got.consumed).arg(want.consumed);
    if (got.lr != want.lr)
      return at +
             QString("learning rate %1, want %2").arg(got.lr, 0, 'g', 17).arg(want.lr, 0, 'g', 17);
    const bool loss_ok =
        tolerance == 0 ? same(got.loss, want.loss) : relative(got.loss, want.loss) < tolerance;
    if (!loss_ok)
      return at + QString("loss %1, uninterrupted %2 (tolerance %3)")
                      .arg(got.loss, 0, 'g', 17)
                      .arg(want.loss, 0, 'g', 17)
                      .arg(tolerance);
    if (tolerance == 0 &&
        (!same(got.norm, want.norm) || got.scale != want.scale || got.skipped != want.skipped))
      return at + QString("grad norm %1 / loss scale %2 / skipped %3, uninterrupted %4 / %5 / %6")
                      .arg(got.norm, 0, 'g', 17)
                      .arg(got.scale)
                      .arg(got.skipped)
                      .arg(want.norm, 0, 'g', 17)
                      .arg(want.scale)
                      .arg(want.skipped);
  }
  return {};
}

// "" or what breaks Megatron's dynamic scaler in `rows` of a run of `iterations` that starts
// at 2^exponent and overflows there: iteration 1 skipped with the scale kept (hysteresis 2),
// iteration 2 skipped and halved, then every skip halves and every step taken keeps the
// scale; by the end steps are taken, and no loss is NaN (no NaN reached the weights).
QString overflow_recovery(const std::vector<Row>& rows, int exponent, size_t iterations) {
  if (rows.size() != iterations)
    return QString("%1 iterations, want %2").arg(rows.size()).arg(iterations);
  if (rows[0].skipped != 1 || rows[0].scale != std::ldexp(1.0, exponent) || rows[1].skipped != 2 ||
      rows[1].scale != std::ldexp(1.0, exponent - 1))
    return QString("iterations 1-2: skipped %1, %2, scale %3, %4; want 1, 2, 2^%5, 2^%6")
        .arg(rows[0].skipped)
        .arg(rows[1].skipped)
        .arg(rows[0].scale)
        .arg(rows[1].scale)
        .arg(exponent)
        .arg(exponent - 1);
  for (size_t i = 2; i < rows.size(); i++) {
    const bool skipped = rows[i].skipped == rows[i - 1].skipped + 1;
    const double want = skipped ? rows[i - 1].scale / 2 : rows[i - 1].scale;
    if (rows[i].scale != want)
      return QString("iteration %1: scale %2, want %3").arg(i + 1).arg(rows[i].scale).arg(want);
  }
  if (rows.back().skipped >= static_cast<int>(iterations))
    return "every iteration skipped: the scale never came down far enough";
  for (const Row& r : rows)
    if (!std::isfinite(r.loss)) return QString("iteration %1: loss is not finite").arg(r.iteration);
  return {};
}

// `o` saved after iteration 3 on `saver`, resumed with --load on `loader`, against the
// uninterrupted run on `loader` (compare_continuation): "" or the first difference.
QString resume_and_compare(const TrainOptions& o, const std::string& saver,
                           const std::string& loader, double tolerance) {
  QTemporaryDir dir;
  if (!dir.isValid()) return "no temporary directory";
  const std::string ckpt = dir.filePath("ckpt").toStdString();
  const Outcome straight = train_on(o, loader);
  if (!straight.error.empty())
    return QString("uninterrupted run on %1: %2").arg(loader.c_str(), straight.error.c_str());
  if (const QString e = save_after_3(o, saver, ckpt); !e.isEmpty()) return e;
  TrainOptions resume = o;
  resume.load = ckpt;
  const Outcome resumed = train_on(resume, loader);
  if (!resumed.error.empty())
    return QString("resumed run on %1: %2").arg(loader.c_str(), resumed.error.c_str());
  if (resumed.messages.find("continuing after iteration 3") == std::string::npos)
    return QString("no \"continuing after iteration 3\" in: %1").arg(resumed.messages.c_str());
  return compare_continuation(resumed.rows, straight.rows, tolerance);
}

}  // namespace

class GpuTraining : public QObject {
  Q_OBJECT

  // One micro-batch forward + backward on both devices; returns "" or the first mismatch.
  // loss_scale multiplies the loss gradient on the GPU (the GPU's gradients are divided by it
  // before the comparison): fp16 activation gradients need it to stay above fp16's subnormals.
  template <typename A>
  void compare_step(double loss_tolerance, double grad_tolerance, float loss_scale = 1.0f,
                    const ModelConfig& c = testing::tiny_config(2, 128, 2, 64, 256)) {
    const int B = 2, N = B * c.seq_length;
    GptModel<float> cpu(c, B);
    cpu.init_weights(7);
    cpu.zero_grads();
    const std::vector<int32_t> tokens = testing::random_tokens(N, c.vocab_size, 1);
    const std::vector<int32_t> targets = testing::random_tokens(N, c.vocab_size, 2);
    GptActivations<float> acts(c, B);
    const double cpu_loss = cpu.forward(acts, tokens.data(), targets.data(), 0, 1.0f / N);
    cpu.backward(acts);

    Result<std::unique_ptr<Device>> device = make_cuda_device();
    QVERIFY2(device, device ? "" : device.status().message().c_str());
    auto gpu = GptModel<A>::create(c, B, **device);
    QVERIFY2(gpu, gpu ? "" : gpu.status().message().c_str());
    auto gpu_acts = (*gpu)->new_activations();
    QVERIFY2(gpu_acts, gpu_acts ? "" : gpu_acts.status().message().c_str());
    (*gpu)->upload(cpu.params());
    (*gpu)->zero_grads();
    // Host tokens and targets, copied to the device by the facade; it returns the mean loss.
    const double gpu_loss =
        (*gpu)->forward(**gpu_acts, tokens.data(), targets.data(), 0, loss_scale / N);
    (*gpu)->backward(**gpu_acts);
    const Status synced = (*device)->synchronize((*device)->compute());
    QVERIFY2(synced, synced.message().c_str());
    std::vector<float> grads((*gpu)->grad_size());
    cu::copy_to_host(grads.data(), (*gpu)->grads(), grads.size() * sizeof(float));
    for (float& g : grads) g /= loss_scale;  // a power of two: exact
    QVERIFY2(
        relative(gpu_loss, cpu_loss) < loss_tolerance,
        qPrintable(
            QString("loss: GPU %1, CPU %2").arg(gpu_loss, 0, 'g', 9).arg(cpu_loss, 0, 'g', 9)));
    for (const ParamTensor& t : cpu.layout().tensors()) {
      const size_t at = t.grad_offset;
      const std::vector<float> g(grads.begin() + at, grads.begin() + at + t.numel);
      const std::vector<float> want(cpu.grads() + at, cpu.grads() + at + t.numel);
      LATTICE_COMPARE("d " + t.name, g, want, grad_tolerance);
    }
  }

 private slots:
  void initTestCase() {
    LATTICE_REQUIRE_CUDA_DEVICE();
    register_cuda_backend();
  }

  void one_micro_batch_matches_the_cpu_device_in_fp32() { compare_step<float>(1e-5, 1e-4); }
  void one_micro_batch_in_bf16_is_within_bf16_tolerance() { compare_step<cu::bf16>(2e-2, 5e-2); }
  void one_micro_batch_in_fp16_is_within_bf16_tolerance() {
    compare_step<cu::fp16>(2e-2, 5e-2, 1024.0f);
  }

  // MoE layers (kernels/cuda/moe.cu; Note [MoE layer]): 8 experts top-2 with the
  // load-balancing loss, every gradient of one micro-batch (router and experts included) and
  // three training steps against the CPU, at the dense model's tolerances; with token dropping
  // (capacity factor 0.5: the plan drops routes on both devices alike), in bf16 and fp16.
  static ModelConfig moe_config(ModelConfig c) {
    c.num_experts = 8;
    c.moe_router_topk = 2;
    c.moe_ffn_hidden_size = 256;
    c.moe_aux_loss_coeff = 0.01f;
    return c;
  }
  void moe_micro_batch_matches_the_cpu_device() {
    const ModelConfig c = moe_config(testing::tiny_config(2, 128, 2, 64, 256));
    compare_step<float>(1e-5, 1e-4, 1.0f, c);
    ModelConfig dropping = c;
    dropping.moe_expert_capacity_factor = 0.5f;
    compare_step<float>(1e-5, 1e-4, 1.0f, dropping);
    compare_step<cu::bf16>(2e-2, 5e-2, 1.0f, c);
    compare_step<cu::fp16>(2e-2, 5e-2, 1024.0f, c);
  }
  void moe_training_steps_match_the_cpu_trainer() {
    TrainOptions o = small_run();
    o.model = moe_config(o.model);
    const std::vector<Row> cpu = run(o, "cpu");
    QCOMPARE(cpu.size(), size_t(3));
    const std::vector<Row> gpu = run(o, "cuda");
    QString d = losses_and_norms_differ(gpu, cpu, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable("MoE: " + d));
    for (size_t i = 0; i < cpu.size(); i++)  // the aux loss metric, copied to the host on the GPU
      QVERIFY2(cpu[i].moe_aux > 0 && relative(gpu[i].moe_aux, cpu[i].moe_aux) < 1e-4,
               qPrintable(QString("iteration %1 moe aux loss: GPU %2, CPU %3")
                              .arg(i + 1)
                              .arg(gpu[i].moe_aux)
                              .arg(cpu[i].moe_aux)));
    TrainOptions dropping = o;
    dropping.model.moe_expert_capacity_factor = 0.5f;
    d = losses_and_norms_differ(run(dropping, "cuda"), run(dropping, "cpu"), 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable("MoE with token dropping: " + d));
    o.bf16 = true;
    const std::vector<Row> bf16 = run(o, "cuda");
    QCOMPARE(bf16.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); i++)
      QVERIFY2(relative(bf16[i].loss, cpu[i].loss) < 2e-2,
               qPrintable(QString("iteration %1 MoE bf16 loss: GPU %2, CPU fp32 %3")
                              .arg(i + 1)
                              .arg(bf16[i].loss)
                              .arg(cpu[i].loss)));
    // Expert parallelism (--expert-model-parallel-size 2, Comm::all_to_all over NCCL) needs two
    // GPUs: test_gpu_tensor_parallel's moe_ep2_trains_as_one_gpu_and_as_the_cpu_engine.
  }

  void training_steps_match_the_cpu_trainer() {
    const std::vector<Row> cpu = run(small_run(), "cpu");
    const std::vector<Row> gpu = run(small_run(), "cuda");
    const QString d = losses_and_norms_differ(gpu, cpu, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    TrainOptions o = small_run();
    o.bf16 = true;
    const std::vector<Row> bf16 = run(o, "cuda");
    QCOMPARE(bf16.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); i++)
      QVERIFY2(relative(bf16[i].loss, cpu[i].loss) < 2e-2,
               qPrintable(QString("iteration %1 bf16 loss: GPU %2, CPU fp32 %3")
                              .arg(i + 1)
                              .arg(bf16[i].loss)
                              .arg(cpu[i].loss)));
  }

  // A GPU run reports what a CPU run reports (issue 21): forward, backward and optimizer
  // times per rank, the timeline boxes of each reported iteration (a forward and a backward per
  // micro-batch, inside the iteration, in order), and with --profile the time of every op the
  // model ran; the same ops, with the same call counts, as the CPU trainer's run.
  void a_gpu_run_reports_what_a_cpu_run_reports() {
    TrainOptions o = small_run();
    o.profile = true;
    o.log_interval = 1;
    ReportSink cpu_sink, gpu_sink;
    o.device = "cpu";
    Result<TrainSummary> cpu = train(o, cpu_sink);
    o.device = "cuda";
    Result<TrainSummary> gpu = train(o, gpu_sink);
    QVERIFY2(cpu && gpu,
             qPrintable(QString::fromStdString((cpu ? gpu.status() : cpu.status()).message())));
    QCOMPARE(gpu->ranks.size(), size_t(1));
    const PhaseTimes& t = gpu->ranks[0].times;
    QVERIFY2(t.forward > 0 && t.backward > 0 && t.optimizer > 0,
             qPrintable(QString("forward %1, backward %2, optimizer %3 s")
                            .arg(t.forward)
                            .arg(t.backward)
                            .arg(t.optimizer)));
    QCOMPARE(gpu_sink.boxes.size(), cpu_sink.boxes.size());
    const int micro_batches = o.num_micro_batches();
    for (const auto& [iteration, boxes] : gpu_sink.boxes) {
      int forward = 0, backward = 0;
      double last_end = 0;
      for (const TimelineBox& b : boxes) {
        QVERIFY2(b.start >= 0 && b.end >= b.start,
                 qPrintable(QString("iteration %1: a box from %2 to %3 s")
                                .arg(iteration)
                                .arg(b.start)
                                .arg(b.end)));
        if (b.kind == TimelineBox::kForward || b.kind == TimelineBox::kBackward) {
          QVERIFY(b.start >= last_end - 1e-6);  // one compute stream: in order, no overlap
          last_end = b.end;
        }
        forward += b.kind == TimelineBox::kForward;
        backward += b.kind == TimelineBox::kBackward;
      }
      QCOMPARE(forward, micro_batches);
      QCOMPARE(backward, micro_batches);
    }
    QCOMPARE(gpu->op_times.size(), cpu->op_times.size());
    for (size_t i = 0; i < cpu->op_times.size(); i++) {
      const OpTime& c = cpu->op_times[i];
      const OpTime& g = gpu->op_times[i];
      if (c.name == "data" || c.name == "tensor-parallel comm") continue;  // host-side / none
      QVERIFY2(g.calls == c.calls, qPrintable(QString("%1: %2 calls on the GPU, %3 on the CPU")
                                                  .arg(QString::fromStdString(c.name))
                                                  .arg(g.calls)
                                                  .arg(c.calls)));
      QVERIFY2(c.calls == 0 || g.seconds > 0,
               qPrintable(QString::fromStdString(c.name) + ": no time on the GPU"));
    }
  }

  // Hidden and attention dropout draw the CPU trainer's masks (same seeds per micro-batch),
  // so the runs still agree; and dropout did act (the losses differ from a run without it).
  void dropout_steps_match_the_cpu_trainer() {
    TrainOptions o = small_run();
    o.model.hidden_dropout = o.model.attention_dropout = 0.1f;
    const std::vector<Row> cpu = run(o, "cpu");
    const std::vector<Row> gpu = run(o, "cuda");
    const std::vector<Row> plain = run(small_run(), "cuda");
    const QString d = losses_and_norms_differ(gpu, cpu, 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable("with dropout: " + d));
    QVERIFY(!plain.empty() && !gpu.empty());
    QVERIFY2(relative(gpu[0].loss, plain[0].loss) > 1e-4, "dropout did not change the loss");
  }

  void full_recomputation_equals_the_run_without_it() {
    TrainOptions full = small_run();
    full.parallel.recompute_granularity = "full";
    full.parallel.recompute_method = "uniform";
    full.parallel.recompute_num_layers = 1;
    const std::vector<Row> plain = run(small_run(), "cuda");
    QVERIFY(!plain.empty());
    QString d = losses_and_norms_differ(run(full, "cuda"), plain, 1e-6);
    QVERIFY2(d.isEmpty(), qPrintable("full uniform 1: " + d));
    TrainOptions selective = small_run();
    selective.parallel.recompute_granularity = "selective";
    d = losses_and_norms_differ(run(selective, "cuda"), plain, 1e-6);
    QVERIFY2(d.isEmpty(), qPrintable("selective: " + d));
    // With dropout (the recomputation draws the forward's masks), by block.
    TrainOptions dropout = small_run();
    dropout.model.hidden_dropout = dropout.model.attention_dropout = 0.1f;
    TrainOptions dropout_block = dropout;
    dropout_block.parallel = full.parallel;
    dropout_block.parallel.recompute_method = "block";
    d = losses_and_norms_differ(run(dropout_block, "cuda"), run(dropout, "cuda"), 1e-6);
    QVERIFY2(d.isEmpty(), qPrintable("full block 1 with dropout: " + d));
    // bf16: the recomputed ln1 rounds as the forward's fused residual LayerNorm.
    TrainOptions bf16 = small_run();
    bf16.bf16 = true;
    TrainOptions bf16_full = full;
    bf16_full.bf16 = true;
    d = losses_and_norms_differ(run(bf16_full, "cuda"), run(bf16, "cuda"), 1e-6);
    QVERIFY2(d.isEmpty(), qPrintable("bf16 full uniform 1: " + d));
  }

  void fp16_training_is_within_bf16_tolerance_of_fp32() {
    // 256 tokens per step: a scale of 2^12 makes the loss gradient at most 2^4 in fp16.
    const std::vector<Row> fp32 = run(small_run(), "cuda");
    TrainOptions o = small_run();
    o.fp16 = true;
    o.initial_loss_scale = 4096;
    const std::vector<Row> fp16 = run(o, "cuda");
    QCOMPARE(fp16.size(), fp32.size());
    for (size_t i = 0; i < fp16.size(); i++) {
      QVERIFY2(relative(fp16[i].loss, fp32[i].loss) < 2e-2,
               qPrintable(QString("iteration %1: fp16 %2 vs fp32 %3")
                              .arg(i + 1)
                              .arg(fp16[i].loss, 0, 'g', 9)
                              .arg(fp32[i].loss, 0, 'g', 9)));
      QCOMPARE(fp16[i].scale, 4096.0);
      QCOMPARE(fp16[i].skipped, 0);
    }
  }

  void fp16_overflow_skips_and_halves_until_the_loss_gradient_fits() {
    // The default 2^32 over 256 tokens puts |dlogits| up to 2^24 into fp16 (max 65504): inf.
    // The scaler must see it (every step skipped, no NaN in the weights) and halve, after the
    // hysteresis of 2, until the activation gradients fit: at most 2^24 (65504 * 256 /
    // max |p - y|), lower where the LayerNorm backward's gain (rstd ~ 35 at initialisation)
    // overflows first: 2^22 (iteration 12) for this model's first step over the CPU device's
    // 16-bit ops, where 2^23 overflows; 24 iterations leave room.
    TrainOptions o = small_run();
    o.fp16 = true;
    o.train_iters = 24;
    const std::vector<Row> rows = run(o, "cuda");
    const QString d = overflow_recovery(rows, 32, 24);  // fp32 kernels would not skip at 2^32
    QVERIFY2(d.isEmpty(), qPrintable("fp16 from 2^32: " + d));
    QVERIFY2(rows.back().scale <= std::ldexp(1.0, 24),
             qPrintable(QString("steps taken at a scale of %1, above 2^24 (fp16 must overflow)")
                            .arg(rows.back().scale)));
  }

  void fp16_loss_scaler_at_2_to_140_on_the_gpu() {
    // 2^140 / 256 tokens overflows even fp32 (as tests/train/test_loss_scaling.cpp): every
    // iteration skips until the scale is low enough for fp16, about 2^22 (iteration ~120).
    TrainOptions o = small_run();
    o.fp16 = true;
    o.initial_loss_scale = std::ldexp(1.0, 140);
    o.train_iters = 140;
    const std::vector<Row> rows = run(o, "cuda");
    const QString d = overflow_recovery(rows, 140, 140);
    QVERIFY2(d.isEmpty(), qPrintable("fp16 from 2^140: " + d));
  }

  void a_gpu_checkpoint_resumes_bit_for_bit() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string ckpt = dir.filePath("ckpt").toStdString();
    const Outcome straight = train_on(resumable_run(), "cuda");
    QVERIFY2(straight.error.empty(), straight.error.c_str());
    QCOMPARE(straight.rows.size(), size_t{6});
    const QString saved = save_after_3(resumable_run(), "cuda", ckpt);
    QVERIFY2(saved.isEmpty(), qPrintable(saved));
    // Resumed, saving at --save-interval 4 and at the end into the same directory, keeping one.
    TrainOptions o = resumable_run();
    o.load = o.save = ckpt;
    o.save_interval = 4;
    o.save_retain = 1;
    const Outcome resumed = train_on(o, "cuda");
    QVERIFY2(resumed.error.empty(), resumed.error.c_str());
    QVERIFY2(resumed.messages.find("continuing after iteration 3") != std::string::npos,
             resumed.messages.c_str());
    const QString d = compare_continuation(resumed.rows, straight.rows, 0);
    QVERIFY2(d.isEmpty(), qPrintable(d));
    QVERIFY2(resumed.checkpoints == (std::vector<int>{4, 6}),
             qPrintable(QString("%1 checkpoints reported, want iterations 4 and 6")
                            .arg(resumed.checkpoints.size())));
    QVERIFY(std::filesystem::exists(ckpt + "/iter_0000006/metadata.json"));
    QVERIFY2(!std::filesystem::exists(ckpt + "/iter_0000004"), "--save-retain 1 keeps one");
  }

  void a_gpu_checkpoint_continues_on_the_cpu() {
    const QString d = resume_and_compare(resumable_run(), "cuda", "cpu", 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable("GPU checkpoint, CPU continuation: " + d));
  }

  void a_cpu_checkpoint_continues_on_the_gpu() {
    const QString d = resume_and_compare(resumable_run(), "cpu", "cuda", 1e-4);
    QVERIFY2(d.isEmpty(), qPrintable("CPU checkpoint, GPU continuation: " + d));
  }

  void a_bf16_checkpoint_resumes_with_the_bf16_copy_refreshed() {
    // The bf16 compute copy is not stored: upload() rounds it from the loaded fp32 master
    // weights exactly as the AdamW step writes it, so the resumed run is bit for bit too.
    TrainOptions o = resumable_run();
    o.bf16 = true;
    const QString d = resume_and_compare(o, "cuda", "cuda", 0);
    QVERIFY2(d.isEmpty(), qPrintable("bf16: " + d));
  }

  void an_fp16_checkpoint_resumes_with_the_fp16_copy_refreshed() {
    // As bf16: the fp16 compute copy is rounded again from the loaded master weights. At 2^12
    // nothing overflows, so every step updates the copy and the comparison sees it.
    TrainOptions o = resumable_run();
    o.fp16 = true;
    o.initial_loss_scale = 4096;
    const QString d = resume_and_compare(o, "cuda", "cuda", 0);
    QVERIFY2(d.isEmpty(), qPrintable("fp16: " + d));
  }

  void the_fp16_loss_scaler_state_survives_a_gpu_checkpoint() {
    // 2^140 overflows every iteration here: a resumed run that restarted the scaler would
    // report a scale of 2^140 and 1 skipped iteration at iteration 4, the uninterrupted run
    // a halved scale and 4.
    TrainOptions o = resumable_run();
    o.fp16 = true;
    o.initial_loss_scale = std::ldexp(1.0, 140);
    const QString d = resume_and_compare(o, "cuda", "cuda", 0);
    QVERIFY2(d.isEmpty(), qPrintable("fp16: " + d));
  }

  void gpt2_weights_saved_on_the_gpu_load_on_both_engines() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    TrainOptions o = resumable_run();
    o.train_iters = 3;
    o.save_hf = dir.filePath("gpt2.safetensors").toStdString();
    const Outcome saved = train_on(o, "cuda");
    QVERIFY2(saved.error.empty(), saved.error.c_str());
    QVERIFY2(saved.messages.find("saved GPT-2 weights to") != std::string::npos,
             saved.messages.c_str());
    TrainOptions from = small_run();
    from.train_iters = 2;
    from.load_hf = o.save_hf;
    const Outcome cpu = train_on(from, "cpu");
    const Outcome gpu = train_on(from, "cuda");
    QVERIFY2(gpu.error.empty(), gpu.error.c_str());
    QVERIFY2(gpu.messages.find("loaded GPT-2 weights from") != std::string::npos,
             gpu.messages.c_str());
    QCOMPARE(gpu.rows.size(), size_t{2});
    QCOMPARE(cpu.rows.size(), size_t{2});
    for (size_t i = 0; i < 2; i++)
      QVERIFY2(relative(gpu.rows[i].loss, cpu.rows[i].loss) < 1e-4,
               qPrintable(QString("--load-hf iteration %1 loss: GPU %2, CPU %3")
                              .arg(i + 1)
                              .arg(gpu.rows[i].loss, 0, 'g', 9)
                              .arg(cpu.rows[i].loss, 0, 'g', 9)));
    // The trained weights, not a fresh initialisation.
    const std::vector<Row> fresh = run(small_run(), "cuda");
    QVERIFY(!fresh.empty());
    QVERIFY2(gpu.rows[0].loss != fresh[0].loss, "--load-hf started from the initial weights");
  }
};

QTEST_APPLESS_MAIN(GpuTraining)
#include "test_gpu_training.moc"
