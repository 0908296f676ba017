// How train() routes --device runs with the CUDA backend registered (device/backends.h), checked
// without a device (label unit, CUDA builds): options the GPU refuses stop a --device cuda run
// before the trainer looks for a GPU, --device auto falls back to the CPU (docs/gpu.md#scope). The
// sentences themselves are tests/train/test_capabilities.cpp's, in every build.
#include <QtTest/QtTest>

#include "common/tiny_model.h"
#include "device/backends.h"
#include "lattice/cuda_kernels.h"
#include "lattice/train.h"

using namespace lattice;

namespace {

TrainOptions supported() {
  return testing::cuda_ready_options();
}

// What --device auto says of `o` on one rank with the CUDA backend.
std::string cuda_unavailable(const TrainOptions& o, int world_size) {
  register_cuda_backend();
  return unavailable(*device_backend(), o, world_size);
}

}  // namespace

class GpuOptionsTest : public QObject {
  Q_OBJECT
 private slots:
  // The CPU options' recomputation rules stop train() before it looks for a device.
  void bad_recompute_combinations_stop_train() {
    register_cuda_backend();
    TrainOptions o = supported();
    o.parallel.recompute_granularity = "selective";
    o.parallel.recompute_method = "uniform";
    o.parallel.recompute_num_layers = 1;
    MetricsSink sink;
    Result<TrainSummary> r = train(o, sink);
    QVERIFY(!r);
    QVERIFY2(r.status().message().find("--recompute-method") != std::string::npos,
             r.status().message().c_str());
  }

  void train_refuses_unsupported_flags_before_looking_for_a_device() {
    register_cuda_backend();
    TrainOptions o = supported();
    o.parallel.sequence_parallel = true;
    MetricsSink sink;
    Result<TrainSummary> r = train(o, sink);
    QVERIFY(!r);
    QVERIFY2(r.status().message().find("--sequence-parallel") != std::string::npos,
             r.status().message().c_str());
    // --device auto with options the GPU trainer refuses trains on the CPU, device or not.
    TrainOptions fallback = supported();
    fallback.device = "auto";
    fallback.fp64 = true;  // the CPU trainer runs it, the GPU one refuses it
    const std::string why = cuda_unavailable(fallback, 1);
    QVERIFY2(why.find("--fp64") != std::string::npos, why.c_str());
    Result<TrainSummary> on_cpu = train(fallback, sink);
    QVERIFY2(on_cpu.is_ok(), on_cpu.is_ok() ? "" : on_cpu.status().message().c_str());
    if (kernels::cuda::device_count() == 0) {
      Result<TrainSummary> plain = train(supported(), sink);
      QVERIFY(!plain);
      QVERIFY2(plain.status().message().find("no CUDA device") != std::string::npos,
               plain.status().message().c_str());
      QCOMPARE(cuda_unavailable(supported(), 1),
               std::string("no CUDA device visible to this process"));
      // --device auto without a device trains on the CPU.
      TrainOptions automatic = supported();
      automatic.device = "auto";
      Result<TrainSummary> cpu = train(automatic, sink);
      QVERIFY2(cpu.is_ok(), cpu.is_ok() ? "" : cpu.status().message().c_str());
      QCOMPARE(cpu->losses.size(), size_t{1});
    }
  }

  // Every sentence joined with "; ", then nothing about the device (the options come first).
  void gpu_unavailable_joins_every_reason() {
    TrainOptions o = supported();
    o.fp64 = true;
    o.model.num_attention_heads = 4;  // head size 32
    QCOMPARE(cuda_unavailable(o, 1),
             std::string("--fp64 is not supported by the GPU trainer yet (docs/gpu.md#scope); "
                         "head size --hidden-size / --num-attention-heads = 32: the GPU "
                         "attention kernel takes 64 or 128"));
  }
};

QTEST_APPLESS_MAIN(GpuOptionsTest)
#include "test_gpu_options.moc"
