// The GPU trainer's checkpoint glue (engine/src/gpu/gpu_checkpoint.h) on the CPU, over a
// stand-in for the device that keeps its arenas as the GPU trainer does (ParamLayout order,
// alignment gaps between tensors, AdamW moments indexed like the weights). Specifies that:
//   - the host AdamW packs its moments without the gaps, one span per tensor;
//   - a checkpoint saved from the device loads into the CPU engine's GptModel and AdamW with
//     every weight, moment, step count and loss-scaler field unchanged, and --save-retain works;
//   - a CPU checkpoint restores the device exactly (--ckpt-step; --finetune: weights only),
//     and the gaps between the device's moment tensors are never written;
//   - a fresh run starts from GptModel::init_weights(--seed); --save-hf and --load-hf carry
//     the device's weights through a GPT-2 file;
//   - with --tensor-model-parallel-size 2 (this program rerun as two MPI ranks, each holding a
//     device of its shard): the two shards save a checkpoint that loads into the whole model of
//     one CPU process (resharded, padding rows dropped), their --save-hf file is the whole
//     model, and a TP 1 checkpoint, a GPT-2 file or --seed restore each rank's slices;
//   - the same with --pipeline-model-parallel-size 2: each stage's shard (the last stage's
//     tied LM head a copy of the word embedding) saves, loads whole, and restores; and with
//     the interleaved schedule (two chunks per rank, one device state each).
//   - with --use-distributed-optimizer at DP 2 (two MPI ranks): each rank owns the CPU engine's
//     shard (GradReducer::owned_ranges) and saves the moments of its pieces alone (the other
//     elements of its device's moment arena are never read); the checkpoint loads into one CPU
//     process without the distributed optimizer and into the CPU engine's DP 2 distributed
//     optimizer, and a TP 1 checkpoint restores each rank's pieces and writes nothing else.
// The device itself (cudaMemcpy, the bf16 copy) is tested by tests/cuda/test_gpu_training.cpp.
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/hf_gpt2.h"
#include "common/mpi_worker.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "gpu/gpu_checkpoint.h"
#include "lattice/layout.h"
#include "model/gpt.h"
#include "model/init_weights.h"
#include "optim/grad_buckets.h"
#include "optim/grad_reducer.h"
#include "parallel/groups.h"

using namespace lattice;

namespace {

// One chunk's weights (a HostChunk) and a zero gradient arena on the host, for a rank's shard
// where the whole model's host constructor (GptModel(config, micro_batch)) does not fit.
struct HostShard {
  HostShard(const ModelConfig& config, const ModelShard& shard)
      : config(config), weights(config, shard), grad_arena(weights.params.size()) {}
  // The weights every model draws for `seed` (GptModel::init_weights).
  void init_weights(uint64_t seed) {
    if (init_arena(config, weights.layout, seed, weights.params.data()) != 0)
      throw std::runtime_error("init_arena: out of host memory");
  }
  const ParamLayout& layout() const { return weights.layout; }
  float* params() { return weights.params.data(); }
  float* grads() { return grad_arena.data(); }
  ModelConfig config;
  HostChunk weights;
  std::vector<float> grad_arena;
};

// Marks the device's alignment gaps: must never reach a checkpoint or be overwritten.
constexpr float kGap = -7777.0f;

// The device as the GPU trainer lays it out, in host memory.
class HostDevice : public gpu::DeviceState {
 public:
  explicit HostDevice(const ParamLayout& layout)
      : params(layout.total_numel(), kGap),
        exp_avg(layout.total_numel(), kGap),
        exp_avg_sq(layout.total_numel(), kGap) {}
  Status download_params(float* host) override {
    std::copy(params.begin(), params.end(), host);
    return Status::ok();
  }
  Status upload_params(const float* host) override {
    std::copy_n(host, params.size(), params.begin());
    param_uploads++;
    return Status::ok();
  }
  Status download_moments(size_t offset, size_t n, float* m, float* v) override {
    if (offset + n > exp_avg.size()) return Status::internal("moment copy out of range");
    std::copy_n(exp_avg.begin() + offset, n, m);
    std::copy_n(exp_avg_sq.begin() + offset, n, v);
    return Status::ok();
  }
  Status upload_moments(size_t offset, size_t n, const float* m, const float* v) override {
    if (offset + n > exp_avg.size()) return Status::internal("moment copy out of range");
    std::copy_n(m, n, exp_avg.begin() + offset);
    std::copy_n(v, n, exp_avg_sq.begin() + offset);
    moment_uploads++;
    return Status::ok();
  }
  std::vector<float> params, exp_avg, exp_avg_sq;  // (numel) each
  int param_uploads = 0, moment_uploads = 0;
};

class Messages : public MetricsSink {
 public:
  void on_message(const std::string& m) override { text += m + "\n"; }
  std::string text;
};

// Values that differ at every arena index, so that any shift between layouts shows.
float moment_value(size_t i, int which) {
  const float v = 1e-3f * static_cast<float>(i % 997 + 1) * static_cast<float>(which);
  return i % 2 ? -v : v;
}

TrainOptions options() {
  TrainOptions o;
  // Hidden 40: tensors of 40 elements leave alignment gaps in the arena (GPT-2's sizes, all
  // multiples of 16, leave none; an --ffn-hidden-size of 8 mod 16 does). Vocabulary 100, padded
  // to 128: the word embedding has padding rows.
  o.model = testing::tiny_config(2, 40, 4, 16, 100);
  o.tokenizer.vocab_size = 99;
  o.micro_batch_size = 1;
  o.global_batch_size = 2;
  o.train_iters = 10;
  o.mock_data = true;
  o.seed = 11;
  return o;
}

// The moment a tensor's global element g holds in the TP tests: the same whatever the layout
// that stores it, so shards and the whole model can be compared.
float global_moment(const std::string& name, size_t g, int which) {
  return moment_value(g + 31 * name.size(), which);
}

// The TP 2 tests' run: options() on two tensor-parallel ranks. Its padded vocabulary (256) is
// larger than TP 1's (128): the checkpoint code drops or zero-fills the difference.
TrainOptions tp2_options() {
  TrainOptions o = options();
  o.model.tensor_model_parallel_size = 2;
  return o;
}

// The PP tests' run: options() as two pipeline stages of one layer each.
TrainOptions pp2_options() {
  TrainOptions o = options();
  o.parallel.pipeline_model_parallel_size = 2;
  return o;
}

// The whole model a two-rank run is compared with: options(), four layers for "pp2i".
TrainOptions whole_options(const std::string& run) {
  TrainOptions o = options();
  if (run == "pp2i") o.model.num_layers = 4;
  return o;
}

// The two-rank run a worker plays: "tp2", "tp2sp" (TP 2 with --sequence-parallel), "pp2" or
// "pp2i" (PP 2, interleaved: two chunks of one layer per rank).
TrainOptions two_rank_options(const std::string& run) {
  if (run == "tp2") return tp2_options();
  if (run == "tp2sp") {
    TrainOptions o = tp2_options();
    o.parallel.sequence_parallel = true;
    return o;
  }
  TrainOptions o = pp2_options();
  o.model = whole_options(run).model;
  if (run == "pp2i") o.parallel.num_layers_per_virtual_pipeline_stage = 1;
  return o;
}

// The distributed-optimizer runs: options() with buckets of 1000 elements (several buckets,
// shards that cut tensors) on two data-parallel ranks; "dp2": two ranks, "pp2i": four ranks,
// PP 2 x DP 2 interleaved (four layers, two chunks of one layer per rank, each chunk its own
// shard of its own buckets, as the CPU engine's GradReducer per chunk).
TrainOptions dopt_options(const std::string& run) {
  TrainOptions o = options();
  o.parallel.use_distributed_optimizer = true;
  o.parallel.ddp_bucket_size = 1000;
  if (run == "pp2i") {
    o.model.num_layers = 4;
    o.parallel.pipeline_model_parallel_size = 2;
    o.parallel.num_layers_per_virtual_pipeline_stage = 1;
    o.global_batch_size = 4;  // two micro-batches per data-parallel rank
  }
  return o;
}

// Global element index of element i of the slice `t` holds.
size_t global_index(const ParamTensor& t, size_t i) {
  const checkpoint_format::SliceMap map{t.global_shape, t.split_dim, t.split_begin,
                                        t.split_dim >= 0 ? t.shape[t.split_dim] : 0};
  return map.global_index(i);
}

// "" or the first element of tensor `name` where got != want.
QString first_difference(const std::string& name, const float* got, const float* want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(got[i] == want[i]))
      return QString("%1[%2]: got %3, want %4")
          .arg(QString::fromStdString(name))
          .arg(i)
          .arg(got[i], 0, 'g', 9)
          .arg(want[i], 0, 'g', 9);
  return {};
}

// "" or the first weight where the arenas `got` and `want` (laid out by `layout`) differ.
QString weights_difference(const ParamLayout& layout, const float* got, const float* want) {
  for (const ParamTensor& t : layout.tensors())
    if (QString d = first_difference(t.name, got + t.offset, want + t.offset, t.numel);
        !d.isEmpty())
      return d;
  return {};
}

// The CPU trainer's state of one process and its RankParts (as train/trainer.cpp's parts()).
struct CpuRank {
  explicit CpuRank(const TrainOptions& o) : model(o.model, 1), adam(model.layout(), o.optim) {
    layout.num_layers = o.model.num_layers;  // TP 1, PP 1, DP 1
  }
  RankParts parts() {
    RankParts p;
    p.layout = &layout;
    p.chunks = {{&model.layout(), model.params()}};
    p.moments = {moment_pieces(adam)};
    return p;
  }
  ParallelLayout layout;
  GptModel<float> model;
  AdamW<float> adam;
};

}  // namespace

class GpuCheckpointHost : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  std::unique_ptr<Comm> world_ = make_local_comm();

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void moment_spans_map_the_gapped_arena_to_the_packed_optimizer() {
    const TrainOptions o = options();
    const ParamLayout layout(o.model);
    AdamW<float> whole(layout, o.optim);
    const OptimizerShard arena = whole_arena_shard(layout);
    Result<std::vector<gpu::MomentSpan>> spans = gpu::moment_spans(arena, whole);
    QVERIFY2(spans, spans ? "" : spans.status().message().c_str());
    QCOMPARE(spans->size(), layout.tensors().size());
    size_t packed = 0;
    bool gaps = false;
    for (size_t i = 0; i < spans->size(); i++) {
      const ParamTensor& t = layout.tensors()[i];
      const gpu::MomentSpan& s = (*spans)[i];
      QCOMPARE(s.offset, t.offset);
      QCOMPARE(s.numel, t.numel);
      QVERIFY2(s.exp_avg == whole.exp_avg().data() + packed, t.name.c_str());
      QVERIFY2(s.exp_avg_sq == whole.exp_avg_sq().data() + packed, t.name.c_str());
      gaps = gaps || t.offset != packed;
      packed += t.numel;
    }
    QCOMPARE(packed, whole.exp_avg().size());
    // Why the spans exist: the arena has gaps the packed state does not.
    QVERIFY2(gaps, "this model's arena has no alignment gap: the test proves nothing");
    // A distributed-optimizer shard is not the whole model's state ...
    AdamW<float> half(layout, o.optim, {{0, layout.total_numel() / 2}});
    QVERIFY(!gpu::moment_spans(arena, half));
    // ... but the host AdamW over a shard's owned ranges has that shard's pieces.
    const OptimizerShard shard = distributed_shard(layout, 1000, 2, 1);
    AdamW<float> owned(layout, o.optim, shard.owned);
    spans = gpu::moment_spans(shard, owned);
    QVERIFY2(spans, spans ? "" : spans.status().message().c_str());
    QCOMPARE(spans->size(), shard.pieces.size());
    QVERIFY(!gpu::moment_spans(shard, whole));
  }

  void a_device_checkpoint_loads_in_the_cpu_engine() {
    TrainOptions o = options();
    o.save = dir_.filePath("from-device").toStdString();
    o.save_retain = 1;
    const ParamLayout layout(o.model);
    HostDevice device(layout);
    GptModel<float> drawn(o.model, 1);
    drawn.init_weights(5);
    for (const ParamTensor& t : layout.tensors()) {
      std::copy_n(drawn.params() + t.offset, t.numel, device.params.begin() + t.offset);
      for (size_t i = t.offset; i < t.offset + t.numel; i++) {
        device.exp_avg[i] = moment_value(i, 1);
        device.exp_avg_sq[i] = std::abs(moment_value(i, 2));
      }
    }
    TrainState state{3, 6, 2, 2, 1, 0};
    state.loss_scale = 32768;
    state.loss_scale_growth_tracker = 5;
    state.loss_scale_hysteresis_tracker = 1;
    Result<SavedCheckpoint> first = gpu::save_gpu_checkpoint(o, o.model, *world_, state, device);
    QVERIFY2(first, first ? "" : first.status().message().c_str());
    state.iteration = 6;
    state.consumed_samples = 12;
    Result<SavedCheckpoint> saved = gpu::save_gpu_checkpoint(o, o.model, *world_, state, device);
    QVERIFY2(saved, saved ? "" : saved.status().message().c_str());
    QVERIFY(saved->bytes > 0);
    QVERIFY2(!std::filesystem::exists(first->path), "--save-retain 1 keeps the newest only");

    // The CPU trainer's --load (train/trainer.cpp): its RankParts for one process.
    Result<CheckpointRef> ref = find_checkpoint(o.save, 0);
    QVERIFY2(ref, ref ? "" : ref.status().message().c_str());
    QCOMPARE(ref->iteration, 6);
    CpuRank rank(o);
    GptModel<float>& cpu = rank.model;
    AdamW<float>& adam = rank.adam;
    TrainState loaded;
    Status s = load_checkpoint(*ref, rank.parts(), false, &loaded);
    QVERIFY2(s, s.message().c_str());
    QCOMPARE(loaded.iteration, 6);
    QCOMPARE(loaded.consumed_samples, int64_t{12});
    QCOMPARE(loaded.valid_consumed, int64_t{2});
    QCOMPARE(loaded.steps_taken, 2);
    QCOMPARE(loaded.skipped_iterations, 1);
    QCOMPARE(loaded.loss_scale, 32768.0);
    QCOMPARE(loaded.loss_scale_growth_tracker, 5);
    QCOMPARE(loaded.loss_scale_hysteresis_tracker, 1);
    const QString d = weights_difference(layout, cpu.params(), drawn.params());
    QVERIFY2(d.isEmpty(), qPrintable(d));
    for (const auto& view : adam.state_views()) {
      const QString m = first_difference("exp_avg at " + std::to_string(view.offset), view.exp_avg,
                                         device.exp_avg.data() + view.offset, view.numel);
      QVERIFY2(m.isEmpty(), qPrintable(m));
      const QString v =
          first_difference("exp_avg_sq at " + std::to_string(view.offset), view.exp_avg_sq,
                           device.exp_avg_sq.data() + view.offset, view.numel);
      QVERIFY2(v.isEmpty(), qPrintable(v));
    }
  }

  void a_cpu_checkpoint_restores_the_device() {
    TrainOptions o = options();
    const std::string dir = dir_.filePath("from-cpu").toStdString();
    CpuRank rank(o);
    GptModel<float>& cpu = rank.model;
    for (int iteration : {4, 8}) {
      cpu.init_weights(static_cast<uint64_t>(iteration));
      for (auto& view : rank.adam.state_views())
        for (size_t i = 0; i < view.numel; i++) {
          view.exp_avg[i] = moment_value(view.offset + i, iteration);
          view.exp_avg_sq[i] = std::abs(moment_value(view.offset + i, iteration + 1));
        }
      const TrainState state{iteration, 2 * iteration, 0, iteration, 0, 0};
      Result<SavedCheckpoint> saved =
          save_checkpoint(*world_, dir, state, o.model, train_options_json(o), rank.parts(), 0);
      QVERIFY2(saved, saved ? "" : saved.status().message().c_str());
    }
    // --load DIR --ckpt-step 4: the older one, weights and moments and progress.
    o.load = dir;
    o.ckpt_step = 4;
    cpu.init_weights(4);
    const ParamLayout& layout = cpu.layout();
    HostDevice device(layout);
    Messages messages;
    Result<TrainState> state = gpu::restore_gpu_state(o, o.model, *world_, device, messages);
    QVERIFY2(state, state ? "" : state.status().message().c_str());
    QCOMPARE(state->iteration, 4);
    QCOMPARE(state->consumed_samples, int64_t{8});
    QCOMPARE(state->steps_taken, 4);
    QVERIFY2(messages.text.find("continuing after iteration 4") != std::string::npos,
             messages.text.c_str());
    QCOMPARE(device.param_uploads, 1);
    const QString d = weights_difference(layout, device.params.data(), cpu.params());
    QVERIFY2(d.isEmpty(), qPrintable(d));
    size_t gap_elements = 0;
    const std::vector<ParamTensor>& tensors = layout.tensors();
    for (size_t i = 0, t = 0; i < device.exp_avg.size(); i++) {
      while (t < tensors.size() && i >= tensors[t].offset + tensors[t].numel) t++;
      const bool inside = t < tensors.size() && i >= tensors[t].offset;
      if (!inside) {
        gap_elements++;
        QVERIFY2(device.exp_avg[i] == kGap && device.exp_avg_sq[i] == kGap,
                 qPrintable(QString("moment gap element %1 was written").arg(i)));
        continue;
      }
      if (device.exp_avg[i] != moment_value(i, 4) ||
          device.exp_avg_sq[i] != std::abs(moment_value(i, 5)))
        QFAIL(qPrintable(QString("moments at arena index %1 (tensor %2): got %3 / %4")
                             .arg(i)
                             .arg(QString::fromStdString(tensors[t].name))
                             .arg(device.exp_avg[i])
                             .arg(device.exp_avg_sq[i])));
    }
    QVERIFY(gap_elements > 0);

    // --finetune: the latest checkpoint's weights only; progress and moments start afresh.
    o.ckpt_step = 0;
    o.finetune = true;
    HostDevice fresh(layout);
    Messages fine;
    Result<TrainState> weights = gpu::restore_gpu_state(o, o.model, *world_, fresh, fine);
    QVERIFY2(weights, weights ? "" : weights.status().message().c_str());
    QCOMPARE(weights->iteration, 0);
    QCOMPARE(weights->consumed_samples, int64_t{0});
    QCOMPARE(weights->steps_taken, 0);
    QCOMPARE(fresh.moment_uploads, 0);
    QVERIFY2(fine.text.find("weights only: --finetune") != std::string::npos, fine.text.c_str());
    cpu.init_weights(8);
    const QString f = weights_difference(layout, fresh.params.data(), cpu.params());
    QVERIFY2(f.isEmpty(), qPrintable(f));
  }

  void a_fresh_run_starts_from_the_cpu_initialisation() {
    const TrainOptions o = options();
    GptModel<float> cpu(o.model, 1);
    cpu.init_weights(o.seed);
    HostDevice device(cpu.layout());
    Messages messages;
    Result<TrainState> state = gpu::restore_gpu_state(o, o.model, *world_, device, messages);
    QVERIFY2(state, state ? "" : state.status().message().c_str());
    QCOMPARE(state->iteration, 0);
    QCOMPARE(device.moment_uploads, 0);
    const QString d = first_difference("the whole arena", device.params.data(), cpu.params(),
                                       device.params.size());
    QVERIFY2(d.isEmpty(), qPrintable(d));
  }

  void gpt2_weights_pass_through_the_device_both_ways() {
    TrainOptions o = options();
    o.save_hf = dir_.filePath("gpt2.safetensors").toStdString();
    GptModel<float> cpu(o.model, 1);
    cpu.init_weights(21);
    const ParamLayout& layout = cpu.layout();
    HostDevice device(layout);
    device.params.assign(cpu.params(), cpu.params() + cpu.arena_size());
    Messages saved;
    Status s = gpu::save_gpu_hf(o, o.model, *world_, device, saved);
    QVERIFY2(s, s.message().c_str());
    QVERIFY2(saved.text.find("saved GPT-2 weights to") != std::string::npos, saved.text.c_str());

    TrainOptions back = options();
    back.load_hf = o.save_hf;
    HostDevice loaded(layout);
    Messages messages;
    Result<TrainState> state = gpu::restore_gpu_state(back, back.model, *world_, loaded, messages);
    QVERIFY2(state, state ? "" : state.status().message().c_str());
    QVERIFY2(messages.text.find("loaded GPT-2 weights from") != std::string::npos,
             messages.text.c_str());
    for (const ParamTensor& t : layout.tensors()) {
      // GPT-2 files hold the vocabulary's rows only: padding rows come back as zeros.
      size_t n = t.numel;
      if (t.name == "embedding.word_embeddings.weight") {
        n = static_cast<size_t>(o.model.vocab_size) * o.model.hidden_size;
        for (size_t i = n; i < t.numel; i++)
          QVERIFY2(loaded.params[t.offset + i] == 0.0f,
                   qPrintable(QString("padding row element %1 is not zero").arg(i)));
      }
      const QString d =
          first_difference(t.name, loaded.params.data() + t.offset, cpu.params() + t.offset, n);
      QVERIFY2(d.isEmpty(), qPrintable(d));
    }
  }

#ifdef LATTICE_MPIEXEC
  void tensor_parallel_shards_save_and_restore() {
    two_ranks_save_and_restore("tp2");
  }
  // Sequence parallelism changes no tensor's place or slice: the same checkpoint as TP 2's,
  // with the flag recorded in its metadata as the CPU trainer records it.
  void sequence_parallel_tp_shards_save_and_restore() {
    two_ranks_save_and_restore("tp2sp");
  }
  void pipeline_stages_save_and_restore() {
    two_ranks_save_and_restore("pp2");
  }
  void interleaved_pipeline_chunks_save_and_restore() {
    two_ranks_save_and_restore("pp2i");
  }
  void distributed_optimizer_shards_save_and_restore() {
    dopt_save_and_restore("dp2", 2);
  }
  // PP 2 x DP 2, interleaved: every rank's two chunks, each its own shard of its buckets.
  void distributed_optimizer_over_interleaved_stages_saves_and_restores() {
    dopt_save_and_restore("pp2i", 4);
  }
#endif

 private:
#ifdef LATTICE_MPIEXEC
  // run: "tp2" (TP 2), "pp2" (PP 2) or "pp2i" (PP 2 interleaved), two MPI ranks of this
  // program (--tp-worker).
  void two_ranks_save_and_restore(const QString& run) {
    const std::string dir = dir_.filePath(run).toStdString();
    std::filesystem::create_directories(dir);
    const QString self =
        QString::fromStdString(std::filesystem::read_symlink("/proc/self/exe").string());
    const TrainOptions o = whole_options(run.toStdString());
    const ParamLayout layout(o.model);  // the whole model's, as GptModel(o.model, 1) has it
    // Two ranks save their shards (worker_save) ...
    testing::Run saved = testing::run_mpi(
        2, self, {"--tp-worker", "save", QString::fromStdString(dir), run}, {}, 120000);
    QVERIFY2(saved.exit_code == 0, qPrintable(run + " save: " + saved.err + saved.out));
    // ... which load into the whole model of one process: weights, moments, steps.
    Result<CheckpointRef> ref = find_checkpoint(dir + "/tp2", 0);
    QVERIFY2(ref, ref ? "" : ref.status().message().c_str());
    QCOMPARE(ref->iteration, 7);
    {
      std::ifstream meta(ref->path + "/metadata.json");
      std::string text((std::istreambuf_iterator<char>(meta)), std::istreambuf_iterator<char>());
      text.erase(std::remove_if(text.begin(), text.end(), ::isspace), text.end());
      const bool sp = text.find("\"sequence_parallel\":true") != std::string::npos;
      QVERIFY2(sp == (run == "tp2sp"), qPrintable(run + ": sequence_parallel in metadata.json"));
    }
    CpuRank rank(o);
    TrainState state;
    Status s = load_checkpoint(*ref, rank.parts(), false, &state);
    QVERIFY2(s, s.message().c_str());
    QCOMPARE(state.consumed_samples, int64_t{14});
    GptModel<float> drawn(o.model, 1);
    drawn.init_weights(5);  // rows [0, 128) of TP 2's 256-row word embedding draw the same
    const QString d = weights_difference(layout, rank.model.params(), drawn.params());
    QVERIFY2(d.isEmpty(), qPrintable(run + " checkpoint into TP 1: " + d));
    for (const auto& view : rank.adam.state_views()) {
      const ParamTensor* t = nullptr;
      for (const ParamTensor& x : layout.tensors())
        if (view.offset >= x.offset && view.offset < x.offset + x.numel) t = &x;
      QVERIFY(t);
      for (size_t j = 0; j < view.numel; j++) {
        const size_t g = view.offset - t->offset + j;
        QVERIFY2(view.exp_avg[j] == global_moment(t->name, g, 1) &&
                     view.exp_avg_sq[j] == global_moment(t->name, g, 2),
                 qPrintable(QString("moments of %1[%2] after " + run + " -> TP 1")
                                .arg(QString::fromStdString(t->name))
                                .arg(g)));
      }
    }
    // The shards' --save-hf file is the whole model.
    std::vector<float> hf(layout.total_numel(), 0.0f);
    s = import_hf_gpt2(dir + "/tp2.safetensors", o.model, layout, hf.data());
    QVERIFY2(s, s.message().c_str());
    for (const ParamTensor& t : layout.tensors()) {
      const size_t n = t.name == "embedding.word_embeddings.weight"
                           ? static_cast<size_t>(o.model.vocab_size) * o.model.hidden_size
                           : t.numel;
      const QString e =
          first_difference(t.name, hf.data() + t.offset, drawn.params() + t.offset, n);
      QVERIFY2(e.isEmpty(), qPrintable(run + " --save-hf: " + e));
    }

    // A TP 1 checkpoint and GPT-2 file restore the two shards (worker_restore checks them).
    CpuRank tp1(o);
    tp1.model.init_weights(8);
    for (auto& view : tp1.adam.state_views())
      for (const ParamTensor& t : layout.tensors())
        if (view.offset >= t.offset && view.offset < t.offset + t.numel)
          for (size_t j = 0; j < view.numel; j++) {
            view.exp_avg[j] = global_moment(t.name, view.offset - t.offset + j, 1);
            view.exp_avg_sq[j] = global_moment(t.name, view.offset - t.offset + j, 2);
          }
    Result<SavedCheckpoint> written = save_checkpoint(
        *world_, dir + "/tp1", {4, 8, 0, 4, 0, 0}, o.model, train_options_json(o), tp1.parts(), 0);
    QVERIFY2(written, written ? "" : written.status().message().c_str());
    GptModel<float> gpt2(o.model, 1);
    gpt2.init_weights(21);
    s = export_hf_gpt2(dir + "/tp1.safetensors", o.model, gpt2.layout(), gpt2.params());
    QVERIFY2(s, s.message().c_str());
    testing::Run restored = testing::run_mpi(
        2, self, {"--tp-worker", "restore", QString::fromStdString(dir), run}, {}, 120000);
    QVERIFY2(restored.exit_code == 0, qPrintable(run + " restore: " + restored.err + restored.out));
  }

  // The distributed optimizer's checkpoints over `ranks` MPI ranks of run `run`
  // (dopt_options).
  void dopt_save_and_restore(const QString& run, int ranks) {
    const std::string dir = dir_.filePath("dopt-" + run).toStdString();
    std::filesystem::create_directories(dir);
    const QString self =
        QString::fromStdString(std::filesystem::read_symlink("/proc/self/exe").string());
    TrainOptions o = options();  // the whole model of one process
    o.model.num_layers = dopt_options(run.toStdString()).model.num_layers;
    const ParamLayout layout(o.model);
    // The ranks save with the distributed optimizer (worker_dopt_save) ...
    testing::Run saved = testing::run_mpi(
        ranks, self, {"--tp-worker", "dopt-save", QString::fromStdString(dir), run}, {}, 180000);
    QVERIFY2(saved.exit_code == 0, qPrintable(run + " save: " + saved.err + saved.out));
    Result<CheckpointRef> ref = find_checkpoint(dir + "/dp2", 0);
    QVERIFY2(ref, ref ? "" : ref.status().message().c_str());
    Result<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::open(ref->path);
    QVERIFY2(reader, reader ? "" : reader.status().message().c_str());
    QVERIFY2((*reader)->layout_summary().find("distributed optimizer") != std::string::npos,
             (*reader)->layout_summary().c_str());
    // Every rank stored moments: each its own flat ranges.
    std::set<std::string> moment_files;
    for (const CheckpointPiece& p : (*reader)->pieces())
      if (p.kind == "exp_avg") moment_files.insert(p.file);
    QCOMPARE(moment_files.size(), static_cast<size_t>(ranks));
    // ... which load into the whole model of one process: weights, every moment, steps.
    CpuRank rank(o);
    TrainState state;
    Status s = load_checkpoint(*ref, rank.parts(), false, &state);
    QVERIFY2(s, s.message().c_str());
    GptModel<float> drawn(o.model, 1);
    drawn.init_weights(5);
    const QString d = weights_difference(layout, rank.model.params(), drawn.params());
    QVERIFY2(d.isEmpty(), qPrintable(run + " distributed checkpoint into DP 1: " + d));
    for (const auto& view : rank.adam.state_views()) {
      const ParamTensor* t = nullptr;
      for (const ParamTensor& x : layout.tensors())
        if (view.offset >= x.offset && view.offset < x.offset + x.numel) t = &x;
      QVERIFY(t);
      for (size_t j = 0; j < view.numel; j++) {
        const size_t g = view.offset - t->offset + j;
        QVERIFY2(view.exp_avg[j] == global_moment(t->name, g, 1) &&
                     view.exp_avg_sq[j] == global_moment(t->name, g, 2),
                 qPrintable(QString("moments of %1[%2] after %4 distributed -> DP 1: got %3")
                                .arg(QString::fromStdString(t->name))
                                .arg(g)
                                .arg(view.exp_avg[j])
                                .arg(run)));
      }
    }
    // A checkpoint without the distributed optimizer restores each rank's shard
    // (worker_dopt_restore checks it, and the DP 2 checkpoint above).
    CpuRank tp1(o);
    tp1.model.init_weights(8);
    for (auto& view : tp1.adam.state_views())
      for (const ParamTensor& t : layout.tensors())
        if (view.offset >= t.offset && view.offset < t.offset + t.numel)
          for (size_t j = 0; j < view.numel; j++) {
            view.exp_avg[j] = global_moment(t.name, view.offset - t.offset + j, 1);
            view.exp_avg_sq[j] = global_moment(t.name, view.offset - t.offset + j, 2);
          }
    Result<SavedCheckpoint> written = save_checkpoint(
        *world_, dir + "/dp1", {4, 8, 0, 4, 0, 0}, o.model, train_options_json(o), tp1.parts(), 0);
    QVERIFY2(written, written ? "" : written.status().message().c_str());
    testing::Run restored = testing::run_mpi(
        ranks, self, {"--tp-worker", "dopt-restore", QString::fromStdString(dir), run}, {}, 180000);
    QVERIFY2(restored.exit_code == 0, qPrintable(run + " restore: " + restored.err + restored.out));
  }
#endif
};

// ---- the TP 2 worker: this program as one of two MPI ranks --------------------------------

namespace {

// "" or the first element of the device's shard that differs from `want(t, g)` (g: the global
// index of the element); moments too when `moments` (exp_avg, exp_avg_sq = want * 1, * 2).
template <typename Want>
std::string shard_difference(const ParamLayout& layout, const HostDevice& device, Want want,
                             bool moments) {
  for (const ParamTensor& t : layout.tensors())
    for (size_t i = 0; i < t.numel; i++) {
      const size_t g = global_index(t, i);
      const float w = want(t, g, 0);
      const float got = device.params[t.offset + i];
      if (got != w)
        return t.name + "[" + std::to_string(i) + "] (global " + std::to_string(g) + "): got " +
               std::to_string(got) + ", want " + std::to_string(w);
      if (moments && (device.exp_avg[t.offset + i] != want(t, g, 1) ||
                      device.exp_avg_sq[t.offset + i] != want(t, g, 2)))
        return "moments of " + t.name + "[" + std::to_string(i) + "] (global " + std::to_string(g) +
               ")";
    }
  return "";
}

// save DIR: each rank's device holds its slices of init_weights(5) and global_moment values;
// a checkpoint in DIR/tp2 and a GPT-2 file DIR/tp2.safetensors.
std::string worker_save(Comm& world, const std::string& dir, const std::string& run) {
  TrainOptions o = two_rank_options(run);
  o.save = dir + "/tp2";
  o.save_hf = dir + "/tp2.safetensors";
  Result<gpu::GpuRankShard> me = gpu::gpu_rank_shard(o, world.size(), world.rank());
  if (!me) return me.status().message();
  std::vector<std::unique_ptr<HostDevice>> devices;  // one per chunk
  std::vector<gpu::DeviceState*> states;
  for (const ModelShard& shard : me->shards) {
    HostShard drawn(o.model, shard);
    drawn.init_weights(5);
    devices.push_back(std::make_unique<HostDevice>(drawn.layout()));
    HostDevice& device = *devices.back();
    for (const ParamTensor& t : drawn.layout().tensors())
      for (size_t i = 0; i < t.numel; i++) {
        device.params[t.offset + i] = drawn.params()[t.offset + i];
        device.exp_avg[t.offset + i] = global_moment(t.name, global_index(t, i), 1);
        device.exp_avg_sq[t.offset + i] = global_moment(t.name, global_index(t, i), 2);
      }
    states.push_back(&device);
  }
  const TrainState state{7, 14, 0, 7, 0, 0};
  Result<SavedCheckpoint> saved = gpu::save_gpu_checkpoint(o, o.model, world, state, states);
  if (!saved) return "save_gpu_checkpoint: " + saved.status().message();
  Messages messages;
  if (Status s = gpu::save_gpu_hf(o, o.model, world, states, messages); !s)
    return "save_gpu_hf: " + s.message();
  return "";
}

// restore DIR: a fresh run (--seed), DIR/tp1 (a TP 1 checkpoint of init_weights(8) and
// global_moment values) and DIR/tp1.safetensors (init_weights(21)) each restore this rank's
// slices; rows beyond TP 1's padded vocabulary come back as zeros.
std::string worker_restore(Comm& world, const std::string& dir, const std::string& run) {
  const TrainOptions o = two_rank_options(run);
  Result<gpu::GpuRankShard> me = gpu::gpu_rank_shard(o, world.size(), world.rank());
  if (!me) return me.status().message();
  std::vector<ParamLayout> layouts;  // one per chunk
  for (const ModelShard& shard : me->shards) layouts.emplace_back(o.model, shard);
  // A restore into fresh devices, one per chunk; "" or what failed.
  auto restore = [&](const TrainOptions& run_options, std::vector<std::unique_ptr<HostDevice>>& out,
                     TrainState* state) -> std::string {
    std::vector<gpu::DeviceState*> states;
    for (const ParamLayout& layout : layouts) {
      out.push_back(std::make_unique<HostDevice>(layout));
      states.push_back(out.back().get());
    }
    Messages messages;
    Result<TrainState> s = gpu::restore_gpu_state(run_options, o.model, world, states, messages);
    if (!s) return s.status().message();
    if (state) *state = *s;
    return "";
  };
  // A fresh run: this rank's slices of the initialisation every layout draws.
  std::vector<std::unique_ptr<HostDevice>> fresh;
  if (std::string e = restore(o, fresh, nullptr); !e.empty()) return "fresh run: " + e;
  for (size_t c = 0; c < layouts.size(); c++) {
    HostShard drawn(o.model, me->shards[c]);
    drawn.init_weights(o.seed);
    for (size_t i = 0; i < fresh[c]->params.size(); i++)
      if (fresh[c]->params[i] != drawn.params()[i])
        return "fresh run: chunk " + std::to_string(c) + " arena element " + std::to_string(i) +
               " is not init_weights(--seed)'s";
  }
  // --load of the TP 1 checkpoint: weights and moments resharded.
  const TrainOptions whole_run = whole_options(run);
  GptModel<float> whole(whole_run.model, 1);
  whole.init_weights(8);
  auto from_whole = [&](const ParamTensor& t, size_t g, int which) -> float {
    const ParamTensor& w = *whole.layout().find(t.name);
    if (g >= w.numel) return 0.0f;  // beyond TP 1's padded vocabulary
    return which == 0 ? whole.params()[w.offset + g] : global_moment(t.name, g, which);
  };
  TrainOptions load = o;
  load.load = dir + "/tp1";
  std::vector<std::unique_ptr<HostDevice>> loaded;
  TrainState state;
  if (std::string e = restore(load, loaded, &state); !e.empty()) return "--load: " + e;
  if (state.iteration != 4) return "--load: iteration " + std::to_string(state.iteration);
  for (size_t c = 0; c < layouts.size(); c++)
    if (std::string d = shard_difference(layouts[c], *loaded[c], from_whole, true); !d.empty())
      return "--load: " + d;
  // --load-hf: the vocabulary's rows of the GPT-2 file; padding rows zero.
  GptModel<float> hf(whole_run.model, 1);
  hf.init_weights(21);
  auto from_hf = [&](const ParamTensor& t, size_t g, int) -> float {
    const ParamTensor& w = *hf.layout().find(t.name);
    const bool padding = t.name == "embedding.word_embeddings.weight" &&
                         g >= static_cast<size_t>(o.model.vocab_size) * o.model.hidden_size;
    return padding ? 0.0f : hf.params()[w.offset + g];
  };
  TrainOptions load_hf = o;
  load_hf.load_hf = dir + "/tp1.safetensors";
  std::vector<std::unique_ptr<HostDevice>> imported;
  if (std::string e = restore(load_hf, imported, nullptr); !e.empty()) return "--load-hf: " + e;
  for (size_t c = 0; c < layouts.size(); c++)
    if (std::string d = shard_difference(layouts[c], *imported[c], from_hf, false); !d.empty())
      return "--load-hf: " + d;
  return "";
}

// "" or why this rank's optimizer shard of a chunk is not the CPU engine's for the same run
// (the ranges the CPU trainer's GradReducer of that chunk hand its AdamW). dp: the
// data-parallel group.
std::string shard_against_cpu(Comm& dp, const TrainOptions& o, const gpu::GpuRankShard& me,
                              const OptimizerShard& shard, HostShard& model) {
  if (!shard.distributed || me.layout.dp != 2) return "the optimizer shard is not DP 2's";
  GradReducer<float> cpu(model.layout(), &dp, true, ddp_bucket_elems(o.parallel, me.layout.dp),
                         model.grads(), model.params());
  if (cpu.owned_ranges() != shard.owned)
    return "owned ranges differ from the CPU engine's GradReducer::owned_ranges()";
  return "";
}

// dopt-save DIR RUN: each rank's device (one per chunk) holds init_weights(5) and, in the
// moments of its shard's pieces, global_moment values (kGap elsewhere: must never reach the
// checkpoint); a checkpoint in DIR/dp2 that the CPU engine's distributed optimizer of the same
// layout then loads.
std::string worker_dopt_save(Comm& world, const std::string& dir, const std::string& run) {
  TrainOptions o = dopt_options(run);
  o.save = dir + "/dp2";
  Result<gpu::GpuRankShard> me = gpu::gpu_rank_shard(o, world.size(), world.rank());
  if (!me) return me.status().message();
  Result<ProcessGroups> groups = make_process_groups(world, me->layout);
  if (!groups) return groups.status().message();
  std::vector<std::unique_ptr<HostShard>> drawn;  // one per chunk
  std::vector<std::unique_ptr<HostDevice>> devices;
  std::vector<gpu::DeviceState*> states;
  for (const ModelShard& chunk : me->shards) {
    drawn.push_back(std::make_unique<HostShard>(o.model, chunk));
    HostShard& model = *drawn.back();
    model.init_weights(5);
    const OptimizerShard shard = optimizer_shard(o, model.layout(), me->layout.dp, me->coord.dp);
    if (std::string e = shard_against_cpu(*groups->dp, o, *me, shard, model); !e.empty()) return e;
    devices.push_back(std::make_unique<HostDevice>(model.layout()));
    HostDevice& device = *devices.back();
    device.params.assign(model.params(), model.params() + model.layout().total_numel());
    const auto& tensors = model.layout().tensors();
    for (const OptimizerPiece& p : shard.pieces)
      for (size_t i = p.offset; i < p.offset + p.numel; i++) {
        const ParamTensor& t = tensors[p.tensor];
        device.exp_avg[i] = global_moment(t.name, i - t.offset, 1);
        device.exp_avg_sq[i] = global_moment(t.name, i - t.offset, 2);
      }
    states.push_back(&device);
  }
  const TrainState state{7, 14, 0, 7, 0, 0};
  Result<SavedCheckpoint> saved = gpu::save_gpu_checkpoint(o, o.model, world, state, states);
  if (!saved) return "save_gpu_checkpoint: " + saved.status().message();
  // The CPU trainer with the distributed optimizer resumes it: an AdamW per chunk over its
  // GradReducer's owned ranges.
  Result<CheckpointRef> ref = find_checkpoint(o.save, 0);
  if (!ref) return ref.status().message();
  std::vector<std::unique_ptr<HostShard>> cpu_models;
  std::vector<std::unique_ptr<GradReducer<float>>> cpu_buckets;
  std::vector<std::unique_ptr<AdamW<float>>> cpu_adams;
  RankParts parts;
  parts.layout = &me->layout;
  parts.distributed_optimizer = true;
  for (const ModelShard& chunk : me->shards) {
    cpu_models.push_back(std::make_unique<HostShard>(o.model, chunk));
    HostShard& m = *cpu_models.back();
    cpu_buckets.push_back(std::make_unique<GradReducer<float>>(
        m.layout(), groups->dp.get(), true, ddp_bucket_elems(o.parallel, me->layout.dp), m.grads(),
        m.params()));
    cpu_adams.push_back(
        std::make_unique<AdamW<float>>(m.layout(), o.optim, cpu_buckets.back()->owned_ranges()));
    parts.chunks.push_back({&m.layout(), m.params()});
    parts.moments.push_back(moment_pieces(*cpu_adams.back()));
  }
  if (Status s = load_checkpoint(*ref, parts, false, nullptr); !s)
    return "the CPU engine's distributed optimizer: " + s.message();
  for (size_t c = 0; c < cpu_models.size(); c++) {
    const auto& tensors = cpu_models[c]->layout().tensors();
    for (const auto& view : cpu_adams[c]->state_views()) {
      const ParamTensor* t = nullptr;
      for (const ParamTensor& x : tensors)
        if (view.offset >= x.offset && view.offset < x.offset + x.numel) t = &x;
      for (size_t j = 0; t && j < view.numel; j++) {
        const size_t g = view.offset - t->offset + j;
        if (view.exp_avg[j] != global_moment(t->name, g, 1) ||
            view.exp_avg_sq[j] != global_moment(t->name, g, 2))
          return "the CPU engine's distributed optimizer: chunk " + std::to_string(c) +
                 " moments of " + t->name + "[" + std::to_string(g) + "]";
      }
    }
  }
  return "";
}

// "" or the first element where the device's moments differ from want(t, i) in its shard's
// pieces, or were written outside them (kGap there).
template <typename Want>
std::string dopt_moment_difference(const ParamLayout& layout, const OptimizerShard& shard,
                                   const HostDevice& device, Want want) {
  std::vector<char> mine(layout.total_numel(), 0);
  for (const OptimizerPiece& p : shard.pieces)
    for (size_t i = p.offset; i < p.offset + p.numel; i++) {
      mine[i] = 1;
      const ParamTensor& t = layout.tensors()[p.tensor];
      if (device.exp_avg[i] != want(t, i - t.offset, 1) ||
          device.exp_avg_sq[i] != want(t, i - t.offset, 2))
        return "moments of " + t.name + "[" + std::to_string(i - t.offset) + "]: got " +
               std::to_string(device.exp_avg[i]) + ", want " +
               std::to_string(want(t, i - t.offset, 1));
    }
  for (size_t i = 0; i < mine.size(); i++)
    if (!mine[i] && (device.exp_avg[i] != kGap || device.exp_avg_sq[i] != kGap))
      return "arena element " + std::to_string(i) +
             " is not this rank's, but its moments were "
             "written";
  return "";
}

// dopt-restore DIR RUN: DIR/dp1 (one rank, no distributed optimizer: init_weights(8),
// global_moment) and DIR/dp2 (worker_dopt_save's) each restore every weight and this rank's
// moments of every chunk.
std::string worker_dopt_restore(Comm& world, const std::string& dir, const std::string& run) {
  const TrainOptions o = dopt_options(run);
  Result<gpu::GpuRankShard> me = gpu::gpu_rank_shard(o, world.size(), world.rank());
  if (!me) return me.status().message();
  Messages messages;
  auto moment = [](const ParamTensor& t, size_t g, int which) {
    return global_moment(t.name, g, which);
  };
  for (const auto& [name, seed] : {std::pair<std::string, int>{"dp1", 8}, {"dp2", 5}}) {
    std::vector<ParamLayout> layouts;
    std::vector<std::unique_ptr<HostDevice>> devices;
    std::vector<gpu::DeviceState*> states;
    for (const ModelShard& chunk : me->shards) {
      layouts.emplace_back(o.model, chunk);
      devices.push_back(std::make_unique<HostDevice>(layouts.back()));
      states.push_back(devices.back().get());
    }
    TrainOptions load = o;
    load.load = dir + "/" + name;
    Result<TrainState> state = gpu::restore_gpu_state(load, load.model, world, states, messages);
    if (!state) return name + ": " + state.status().message();
    for (size_t c = 0; c < layouts.size(); c++) {
      const std::string where = name + " chunk " + std::to_string(c) + ": ";
      HostShard drawn(o.model, me->shards[c]);
      drawn.init_weights(static_cast<uint64_t>(seed));
      if (QString w = weights_difference(layouts[c], devices[c]->params.data(), drawn.params());
          !w.isEmpty())
        return where + w.toStdString();
      const OptimizerShard shard = optimizer_shard(o, layouts[c], me->layout.dp, me->coord.dp);
      if (std::string e = dopt_moment_difference(layouts[c], shard, *devices[c], moment);
          !e.empty())
        return where + e;
    }
  }
  return "";
}

int tp_worker(const std::string& mode, const std::string& dir, const std::string& run) {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "worker: %s\n", world.status().message().c_str());
    return 1;
  }
  const std::string error = mode == "save"           ? worker_save(**world, dir, run)
                            : mode == "restore"      ? worker_restore(**world, dir, run)
                            : mode == "dopt-save"    ? worker_dopt_save(**world, dir, run)
                            : mode == "dopt-restore" ? worker_dopt_restore(**world, dir, run)
                                                     : "unknown worker mode " + mode;
  return testing::end_worker(*world, error);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--tp-worker")
    return tp_worker(argv[2], argv[3], argv[4]);
  GpuCheckpointHost test;
  return QTest::qExec(&test, argc, argv);
}
#include "test_gpu_checkpoint_host.moc"
