// The one model (model/gpt.h) beyond the data flow that tests/model/test_gpt_layouts compares
// across layouts, each on the CPU device (every build):
// - GptModel<double>'s analytic gradients (every parameter tensor, dropout on) agree with central
//   finite differences of its loss under full recomputation (uniform, one layer a group), whose
//   backward reruns each layer's forward from its input (tests/train/test_gpt_gradients checks
//   the model that keeps everything).
// - init_weights writes init_arena's bits into every element of the arena (fp32 and fp64, a
//   whole model and a later pipeline stage), straight into host-addressable memory and staged
//   through a host buffer on a device that is not; the 16-bit compute copy is the master rounded.
// - Per-op times: with set_op_times on, one step marks every op under core/profiler.h's Op
//   names, the expected number of times; off, none.
// - Device::progress() after every layer's forward and backward.
// - The planner's activation estimate (plan/memory_estimate.cpp) is the bytes the model takes
//   for one micro-batch and its recomputation scratch, to the byte, for fp32, bf16 and fp64,
//   with and without each recomputation, on every pipeline stage.
#include <QtTest/QtTest>

#include <cstring>

#include "common/forwarding_device.h"
#include "common/grad_check.h"
#include "common/tiny_model.h"
#include "device/cpu_device.h"
#include "device/ops.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"
#include "model/gpt.h"
#include "model/init_weights.h"
#include "parallel/model_chunks.h"

using namespace lattice;

namespace {

// A CPU device seen through another Device: counts progress() calls and may say its memory is
// not host memory (so init_weights takes the staged path). Everything else is the CPU device's.
class WatchedDevice final : public testing::ForwardingDevice {
 public:
  explicit WatchedDevice(bool host_addressable = true)
      : capabilities_(ForwardingDevice::capabilities()) {
    capabilities_.host_addressable = host_addressable;
  }
  int progress_calls = 0;

  const Capabilities& capabilities() const override { return capabilities_; }
  void progress() override {
    progress_calls++;
    ForwardingDevice::progress();
  }

 private:
  Capabilities capabilities_;
};

// Two layers, hidden 32, 4 heads, sequences of 8, vocabulary 50 (padded 64); dropout 0.1.
ModelConfig small_config() {
  ModelConfig c = testing::tiny_config(2, 32, 4, 8, 50);
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  return c;
}

std::vector<int32_t> sequence(int n, int mul, int add, int vocab) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; i++) v[i] = (i * mul + add) % vocab;
  return v;
}

// "" or the first tensor whose GptModel<A>::init_weights(seed) master differs from
// init_arena(seed) on the host in any bit (the alignment gaps between tensors included).
template <typename A>
std::string init_difference(const ModelShard& shard, bool host_addressable) {
  const ModelConfig c = small_config();
  const ParamLayout layout(c, shard);
  std::vector<A> want(layout.total_numel(), A(0));
  if (init_arena(c, layout, 11, want.data()) != 0) return "init_arena: out of host memory";
  WatchedDevice device(host_addressable);
  auto gpu = GptModel<A>::create(c, 2, device, shard);
  if (!gpu) return gpu.status().message();
  // Whatever the arena held before: init_weights writes every element.
  std::memset((*gpu)->params(), 0x7f, (*gpu)->arena_size() * sizeof(A));
  if (Status s = (*gpu)->init_weights(11); !s) return s.message();
  if ((*gpu)->arena_size() != want.size()) return "the arenas differ in size";
  if (std::memcmp((*gpu)->params(), want.data(), want.size() * sizeof(A)) == 0) return "";
  for (const ParamTensor& t : layout.tensors())
    if (std::memcmp((*gpu)->params() + t.offset, want.data() + t.offset, t.numel * sizeof(A)))
      return t.name + " differs";
  return "an alignment gap differs";
}

}  // namespace

class GptChecks : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { kernels::set_num_threads(2); }

  // test_gpt_gradients' model and data in fp64 under full recomputation: every element of every
  // tensor.
  void every_fp64_parameter_gradient_matches_finite_differences_under_full_recompute() {
    ModelConfig c = testing::tiny_config(2, 8, 2, 5, 13);
    c.ffn_hidden_size = 12;
    c.max_position_embeddings = 6;
    c.make_vocab_size_divisible_by = 8;  // padded to 16: padding rows get gradients too
    c.attention_dropout = 0.2f;
    c.hidden_dropout = 0.1f;
    c.init_method_std = 0.3f;  // large enough that every path carries signal
    const int B = 2, N = B * c.seq_length;
    CpuDevice device;
    auto made = GptModel<double>::create(c, B, device, ModelShard{}, nullptr,
                                         RecomputePlan::make("full", "uniform", 1, 2));
    QVERIFY2(bool(made), bool(made) ? "" : made.status().message().c_str());
    GptModel<double>& model = **made;
    auto made_acts = model.new_activations();
    QVERIFY(bool(made_acts));
    GptActivations<double>& acts = **made_acts;
    QVERIFY(bool(model.init_weights(7)));
    // Non-trivial norms and biases, so their gradients are not degenerate.
    const std::vector<double> noise = testing::random_vector(model.arena_size(), 8, 0.1);
    std::vector<double> params(model.params(), model.params() + model.arena_size());
    for (size_t i = 0; i < params.size(); i++) params[i] += noise[i];
    const std::vector<int32_t> tokens = {1, 5, 12, 3, 3, 0, 7, 7, 2, 11};
    const std::vector<int32_t> targets = {5, 12, 3, 3, 0, 7, 7, 2, 11, 12};
    const float scale = 1.0f / N;
    const uint64_t dropout_seed = 42;
    model.upload(params.data());
    model.zero_grads();
    model.forward(acts, tokens.data(), targets.data(), dropout_seed, scale);
    model.backward(acts);
    QVERIFY(bool(device.synchronize(device.compute())));
    const std::vector<double> analytic(model.grads(), model.grads() + model.arena_size());
    auto loss = [&] {  // the mean token loss
      model.upload(params.data());
      return model.forward(acts, tokens.data(), targets.data(), dropout_seed, scale);
    };
    int checked = 0;
    for (const ParamTensor& t : model.layout().tensors()) {
      std::vector<size_t> indices;
      for (size_t i = 0; i < t.numel; i++) indices.push_back(t.offset + i);
      const std::string err =
          testing::check_gradient(t.name, params, analytic, loss, 1e-5, 1e-8, indices, 1e-5);
      QVERIFY2(err.empty(), qPrintable(QString("full recomputation: %1").arg(err.c_str())));
      checked += static_cast<int>(t.numel);
    }
    QVERIFY(checked > 1000);
  }

  void init_weights_writes_init_arenas_bits_direct_and_staged() {
    ModelShard later_stage;  // layer 1 of 2 with the final norm and the head's word embedding
    later_stage.layer_begin = 1;
    later_stage.pre = false;
    for (bool host_addressable : {true, false}) {
      const QString path = host_addressable ? "direct" : "staged";
      for (const ModelShard& shard : {ModelShard{}, later_stage}) {
        const std::string f = init_difference<float>(shard, host_addressable);
        QVERIFY2(f.empty(), qPrintable(path + " fp32: " + f.c_str()));
        const std::string d = init_difference<double>(shard, host_addressable);
        QVERIFY2(d.empty(), qPrintable(path + " fp64: " + d.c_str()));
      }
    }
  }

  void init_weights_rounds_the_16_bit_compute_copy_from_the_master() {
    CpuDevice device;
    auto gpu = GptModel<bf16>::create(small_config(), 2, device);
    QVERIFY(bool(gpu));
    QVERIFY(bool((*gpu)->init_weights(11)));
    const float* master = (*gpu)->params();
    const bf16* copy = (*gpu)->compute_params();
    for (size_t i = 0; i < (*gpu)->arena_size(); i++)
      QVERIFY2(
          from_bf16(copy[i]) == from_bf16(to_bf16(master[i])),
          qPrintable(
              QString("element %1: %2, master %3").arg(i).arg(from_bf16(copy[i])).arg(master[i])));
  }

  // One training step of two layers with dropout marks each op it queues, under its Op.
  void op_times_mark_every_op_of_a_step() {
    const ModelConfig c = small_config();
    const int L = c.num_layers, N = 2 * c.seq_length;
    for (const char* granularity : {"", "selective"}) {
      CpuDevice device;
      auto gpu = GptModel<float>::create(c, 2, device, ModelShard{}, nullptr,
                                         RecomputePlan::make(granularity, "", 0, L));
      QVERIFY(bool(gpu));
      GptModel<float>& g = **gpu;
      auto made = g.new_activations();
      QVERIFY(bool(made));
      GptActivations<float>& acts = **made;
      QVERIFY(bool(g.init_weights(3)));
      const std::vector<int32_t> tokens = sequence(N, 7, 1, c.vocab_size);
      const std::vector<int32_t> targets = sequence(N, 11, 2, c.vocab_size);
      g.zero_grads();
      g.forward(acts, tokens.data(), targets.data(), 5, 1.0f / N);  // op times off
      g.backward(acts);
      g.collect_op_times();
      for (int op = 0; op < static_cast<int>(Op::kCount); op++)
        QCOMPARE(g.profiler().calls(static_cast<Op>(op)), int64_t{0});
      g.set_op_times(true);
      g.forward(acts, tokens.data(), targets.data(), 5, 1.0f / N);
      g.backward(acts);
      QVERIFY(bool(device.synchronize(device.compute())));
      g.collect_op_times();
      const bool sel = std::strcmp(granularity, "selective") == 0;
      const std::pair<Op, int64_t> want[] = {
          {Op::kEmbedding, 2},                       // lookup; its backward
          {Op::kLayerNorm, 4 * L + 2},               // ln1, ln2 (fused adds) and lnf, both ways
          {Op::kMatmulForward, 4 * L},               // QKV, projection, FC1 (+ GELU), FC2
          {Op::kMatmulBackward, 4 * L},              // the same four
          {Op::kAttentionForward, L},  // selective reruns nothing (gpt_layer.cpp)
          {Op::kAttentionBackward, L},
          {Op::kGelu, L},                     // backward only: the epilogue is FC1's
          {Op::kResidualDropout, 4 * L + 2},  // embedding, projection, FC2, both ways
          {Op::kLmHeadForward, 1},
          {Op::kLmHeadBackward, 1},
          {Op::kCrossEntropy, 1},
          {Op::kTensorParallelComm, 0},  // TP 1
      };
      double total = 0;
      for (const auto& [op, calls] : want) {
        QVERIFY2(g.profiler().calls(op) == calls, qPrintable(QString("%1%2: %3 calls, expected %4")
                                                                 .arg(op_name(op))
                                                                 .arg(sel ? " (selective)" : "")
                                                                 .arg(g.profiler().calls(op))
                                                                 .arg(calls)));
        QVERIFY2(g.profiler().seconds(op) >= 0, op_name(op));
        total += g.profiler().seconds(op);
      }
      QVERIFY(total > 0);
      // Collected marks are forgotten: a second collect adds nothing.
      const int64_t before = g.profiler().calls(Op::kLayerNorm);
      g.collect_op_times();
      QCOMPARE(g.profiler().calls(Op::kLayerNorm), before);
    }
  }

  // One micro-batch in flight (global batch = micro batch): each stage's planned activations are
  // what its chunk allocates on the CPU device, model and one micro-batch's activations.
  void planner_counts_the_activations_the_model_takes() {
    const QStringList recomputes[] = {{},
                                      {"--recompute-granularity", "selective"},
                                      {"--recompute-granularity", "full", "--recompute-method",
                                       "uniform", "--recompute-num-layers", "1"},
                                      {"--recompute-granularity", "full", "--recompute-method",
                                       "block", "--recompute-num-layers", "1"}};
    for (const char* precision : {"", "--bf16", "--fp64"})
      for (int pp : {1, 2})
        for (const QStringList& recompute : recomputes) {
          QStringList flags = {"--num-layers",
                               "4",
                               "--hidden-size",
                               "64",
                               "--num-attention-heads",
                               "4",
                               "--seq-length",
                               "32",
                               "--max-position-embeddings",
                               "32",
                               "--vocab-size",
                               "100",
                               "--micro-batch-size",
                               "2",
                               "--global-batch-size",
                               "2",
                               "--pipeline-model-parallel-size",
                               QString::number(pp)};
          if (precision[0] != '\0') flags << precision;
          flags += recompute;
          const QString name = flags.join(' ');
          std::vector<std::string> args;
          for (const QString& f : flags) args.push_back(f.toStdString());
          Result<TrainOptions> o = parse_train_flags(args);
          QVERIFY2(bool(o), qPrintable(name));
          Result<ParallelLayout> layout = make_layout(*o, pp);
          QVERIFY2(bool(layout), qPrintable(name));
          const MemoryEstimate est = estimate_memory(*o, *layout);
          for (int p = 0; p < pp; p++) {
            const ModelShard shard = shard_of(*layout, {0, 0, p}, 0, false);
            const ParallelOptions& par = o->parallel;
            const RecomputePlan plan =
                RecomputePlan::make(par.recompute_granularity, par.recompute_method,
                                    par.recompute_num_layers, shard.num_layers(o->model));
            CpuDevice device;
            auto taken = [&]<typename A>() -> size_t {
              auto model = GptModel<A>::create(o->model, 2, device, shard, nullptr, plan);
              if (!model) return 0;
              auto acts = (*model)->new_activations();
              if (!acts) return 0;
              return device.usage(MemoryCategory::kActivations).current;
            };
            const size_t bytes = precision == std::string("--bf16")   ? taken.operator()<bf16>()
                                 : precision == std::string("--fp64") ? taken.operator()<double>()
                                                                      : taken.operator()<float>();
            QVERIFY2(bytes == est.stages[p].activation_bytes,
                     qPrintable(QString("%1, pp rank %2: the model takes %3 bytes, the planner "
                                        "says %4")
                                    .arg(name)
                                    .arg(p)
                                    .arg(bytes)
                                    .arg(est.stages[p].activation_bytes)));
          }
        }
  }

  // MPI moves non-blocking messages only inside MPI calls: the model lets the device test its
  // side streams after every layer's forward and backward.
  void progress_runs_after_every_layer_of_both_directions() {
    const ModelConfig c = small_config();
    const int N = 2 * c.seq_length;
    WatchedDevice device;
    auto gpu = GptModel<float>::create(c, 2, device);
    QVERIFY(bool(gpu));
    QVERIFY(bool((*gpu)->init_weights(3)));
    auto acts = (*gpu)->new_activations();
    QVERIFY(bool(acts));
    const std::vector<int32_t> tokens = sequence(N, 7, 1, c.vocab_size);
    const std::vector<int32_t> targets = sequence(N, 11, 2, c.vocab_size);
    device.progress_calls = 0;
    (*gpu)->forward(**acts, tokens.data(), targets.data(), 5, 1.0f / N);
    QCOMPARE(device.progress_calls, c.num_layers);
    (*gpu)->backward(**acts);
    QCOMPARE(device.progress_calls, 2 * c.num_layers);
  }
};

QTEST_APPLESS_MAIN(GptChecks)
#include "test_gpt_checks.moc"
