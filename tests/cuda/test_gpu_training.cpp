// A full training step on the GPU against the CPU engine (label cuda; QSKIP without a
// device). Same weights (both drawn by GptModel::init_weights), same tokens, no dropout:
//   - one micro-batch's loss and every parameter gradient of GpuGpt<float> vs GptModel<float>
//     (normwise relative error per tensor, 1e-4: fp32 on both, different summation orders);
//   - GpuGpt<bf16>: loss within 2e-2 relative, gradients within 5e-2 (bf16 activations);
//   - three iterations of `train()` with --device cuda vs the CPU trainer (fp32 losses and
//     grad norms within 1e-4; bf16 losses within 2e-2);
//   - the fp16 loss-scaler path on the GPU: without overflow the losses equal the fp32 GPU
//     run's (power-of-two scale), and a scale of 2^140 overflows, skips, and halves after the
//     hysteresis exactly as on the CPU (tests/train/test_loss_scaling.cpp).
#include <QtTest/QtTest>

#include <cmath>

#include "common/tiny_model.h"
#include "cuda/cuda_test_support.h"
#include "device/caching_allocator.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_trainer.h"
#include "lattice/train.h"
#include "model/gpt.h"

using namespace lattice;
namespace cu = lattice::kernels::cuda;

namespace {

struct Row {
  double loss, norm, scale;
  int skipped;
};

class RecordingSink : public MetricsSink {
 public:
  void on_iteration(const IterationMetrics& m) override {
    rows.push_back({m.lm_loss, m.grad_norm, m.loss_scale, m.skipped_iterations});
  }
  std::vector<Row> rows;
};

TrainOptions small_run() {
  TrainOptions o;
  o.model = testing::tiny_config(2, 128, 2, 64, 255);  // head size 64
  o.tokenizer.vocab_size = 255;
  o.model.vocab_size = 256;  // NullTokenizer: --vocab-size + 1
  o.micro_batch_size = 2;
  o.global_batch_size = 4;
  o.train_iters = 3;
  o.mock_data = true;
  o.eval_iters = 0;
  o.threads = 2;
  o.optim.lr = 1e-3f;
  return o;
}

std::vector<Row> run(TrainOptions o, const std::string& device) {
  o.device = device;
  RecordingSink sink;
  Result<TrainSummary> r = train(o, sink);
  if (!r) qWarning("train (%s) failed: %s", device.c_str(), r.status().message().c_str());
  return sink.rows;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

}  // namespace

class GpuTraining : public QObject {
  Q_OBJECT

  // One micro-batch forward + backward on both engines; returns "" or the first mismatch.
  template <typename A>
  void compare_step(double loss_tolerance, double grad_tolerance) {
    const ModelConfig c = testing::tiny_config(2, 128, 2, 64, 256);
    const int B = 2, N = B * c.seq_length;
    GptModel<float> cpu(c, B);
    cpu.init_weights(7);
    cpu.zero_grads();
    const std::vector<int32_t> tokens = testing::random_tokens(N, c.vocab_size, 1);
    const std::vector<int32_t> targets = testing::random_tokens(N, c.vocab_size, 2);
    GptActivations<float> acts(c, B);
    const double cpu_loss = cpu.forward(acts, tokens.data(), targets.data(), 0, 1.0f / N);
    cpu.backward(acts);

    std::string error;
    std::unique_ptr<cu::Context> ctx = cu::Context::create(&error);
    QVERIFY2(ctx, error.c_str());
    CachingAllocator memory(make_cuda_memory_backend());
    auto gpu = gpu::GpuGpt<A>::create(c, B, *ctx, memory);
    QVERIFY2(gpu, gpu ? "" : gpu.status().message().c_str());
    (*gpu)->upload(cpu.params());
    testing::DeviceBuffer<int32_t> d_tokens(tokens), d_targets(targets);
    (*gpu)->zero_grads();
    (*gpu)->forward(d_tokens.get(), d_targets.get(), 1.0f / N);
    (*gpu)->backward(d_tokens.get());
    error = ctx->synchronize();
    QVERIFY2(error.empty(), error.c_str());
    std::vector<float> losses(N), grads((*gpu)->numel());
    cu::copy_to_host(losses.data(), (*gpu)->losses(), N * sizeof(float));
    cu::copy_to_host(grads.data(), (*gpu)->grads(), grads.size() * sizeof(float));
    double gpu_loss = 0;
    for (float l : losses) gpu_loss += l;
    gpu_loss /= N;
    QVERIFY2(
        relative(gpu_loss, cpu_loss) < loss_tolerance,
        qPrintable(
            QString("loss: GPU %1, CPU %2").arg(gpu_loss, 0, 'g', 9).arg(cpu_loss, 0, 'g', 9)));
    for (const ParamTensor& t : cpu.layout().tensors()) {
      const std::vector<float> g(grads.begin() + t.offset, grads.begin() + t.offset + t.numel);
      const std::vector<float> want(cpu.grads() + t.offset, cpu.grads() + t.offset + t.numel);
      LATTICE_COMPARE("d " + t.name, g, want, grad_tolerance);
    }
  }

 private slots:
  void initTestCase() {
    LATTICE_REQUIRE_CUDA_DEVICE();
    gpu::register_gpu_trainer();
  }

  void one_micro_batch_matches_the_cpu_model_in_fp32() { compare_step<float>(1e-5, 1e-4); }
  void one_micro_batch_in_bf16_is_within_bf16_tolerance() { compare_step<cu::bf16>(2e-2, 5e-2); }

  void training_steps_match_the_cpu_trainer() {
    const std::vector<Row> cpu = run(small_run(), "cpu");
    const std::vector<Row> gpu = run(small_run(), "cuda");
    QCOMPARE(gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); i++) {
      QVERIFY2(relative(gpu[i].loss, cpu[i].loss) < 1e-4,
               qPrintable(QString("iteration %1 loss: GPU %2, CPU %3")
                              .arg(i + 1)
                              .arg(gpu[i].loss, 0, 'g', 9)
                              .arg(cpu[i].loss, 0, 'g', 9)));
      QVERIFY2(relative(gpu[i].norm, cpu[i].norm) < 1e-4,
               qPrintable(QString("iteration %1 grad norm: GPU %2, CPU %3")
                              .arg(i + 1)
                              .arg(gpu[i].norm, 0, 'g', 9)
                              .arg(cpu[i].norm, 0, 'g', 9)));
    }
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

  void fp16_loss_scaler_on_the_gpu() {
    const std::vector<Row> fp32 = run(small_run(), "cuda");
    TrainOptions o = small_run();
    o.fp16 = true;
    const std::vector<Row> fp16 = run(o, "cuda");
    QCOMPARE(fp16.size(), fp32.size());
    for (size_t i = 0; i < fp16.size(); i++) {
      QVERIFY2(relative(fp16[i].loss, fp32[i].loss) < 1e-6,
               qPrintable(QString("iteration %1: fp16 (scaled) %2 vs fp32 %3")
                              .arg(i + 1)
                              .arg(fp16[i].loss, 0, 'g', 17)
                              .arg(fp32[i].loss, 0, 'g', 17)));
      QCOMPARE(fp16[i].scale, 4294967296.0);
      QCOMPARE(fp16[i].skipped, 0);
    }
    // 2^140 / 256 tokens overflows fp32 (as tests/train/test_loss_scaling.cpp): every iteration
    // skips until the scale is low enough; 24 iterations bring the factor down to 2^110.
    o.initial_loss_scale = std::ldexp(1.0, 140);
    o.train_iters = 24;
    const std::vector<Row> rows = run(o, "cuda");
    QCOMPARE(rows.size(), size_t{24});
    QCOMPARE(rows[0].skipped, 1);
    QCOMPARE(rows[0].scale, std::ldexp(1.0, 140));
    QCOMPARE(rows[1].skipped, 2);
    QCOMPARE(rows[1].scale, std::ldexp(1.0, 139));
    for (size_t i = 2; i < rows.size(); i++) {
      const bool skipped = rows[i].skipped == rows[i - 1].skipped + 1;
      QCOMPARE(rows[i].scale, skipped ? rows[i - 1].scale / 2 : rows[i - 1].scale);
    }
    QVERIFY2(rows.back().skipped < 24, "the scale came down far enough for steps to be taken");
  }
};

QTEST_APPLESS_MAIN(GpuTraining)
#include "test_gpu_training.moc"
