// The planner with a LLaVA-style vision tower (issue 27; Note [vision tower in the plan] in
// engine/src/plan/vision_estimate.cpp): the tower's parameters and activation bytes are what a
// VisionEncoder on the CPU device takes (to the element and the byte, fp32 and fp64), its
// forward FLOPs are 2 x rows x elements of every weight matrix it multiplies plus the
// attention's 4 T^2 C and its backward the gradients the engine computes (none for a frozen
// encoder), the trained parameters are those ParamLayout leaves unfrozen under --freeze-LM,
// --freeze-ViT and LoRA, the first stage alone holds it in the planner's categories, the first
// stage's compute grows by its forward and backward, and `lattice plan` (text and --json) shows
// it. test_parallel_memory checks the categories against training runs.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QtTest/QtTest>

#include "common/process.h"
#include "common/train_flags.h"
#include "device/cpu_device.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"
#include "model/param_layout.h"
#include "model/vision_encoder.h"
#include "optim/optimizer_shard.h"
#include "parallel/model_chunks.h"

using namespace lattice;

namespace {

using lattice::testing::options;

// A small GPT-2 whose sequence has room for a tower's 16 or 12 image tokens.
const QStringList kText = {"--num-layers",          "4",  "--hidden-size",      "64",
                           "--num-attention-heads", "4",  "--vocab-size",       "300",
                           "--seq-length",          "32", "--micro-batch-size", "2",
                           "--global-batch-size",   "16"};
// CLIP-shaped: class token, 3 layers of which 2 run (--vision-select-layer -2, the default).
const QStringList kClip = {"--vision-model-type",
                           "clip",
                           "--vision-num-layers",
                           "3",
                           "--vision-hidden-size",
                           "32",
                           "--patch-dim",
                           "8",
                           "--vision-num-attention-heads",
                           "2",
                           "--img-h",
                           "32",
                           "--img-w",
                           "32"};
// No class token, a patch bias, 24 x 16 images, an odd MLP width, every layer run.
const QStringList kPlain = {"--vision-model-type",
                            "clip",
                            "--vision-num-layers",
                            "2",
                            "--vision-hidden-size",
                            "24",
                            "--vision-num-attention-heads",
                            "3",
                            "--vision-ffn-hidden-size",
                            "40",
                            "--patch-dim",
                            "4",
                            "--img-h",
                            "24",
                            "--img-w",
                            "16",
                            "--disable-vision-class-token",
                            "--vision-patch-bias",
                            "--vision-select-layer",
                            "-1"};

void add_towers() {
  QTest::addColumn<QStringList>("tower");
  QTest::newRow("clip-shaped") << kClip;
  QTest::newRow("plain") << kPlain;
}

using lattice::testing::Run;

Run lattice_cli(const QStringList& args) {
  return lattice::testing::run_process(LATTICE_CLI_PATH, args, {}, 60000);
}

// The layer a tensor name belongs to ("vision_model.encoder.layers.3.mlp.fc1.weight": 3), -1
// outside the layers.
int layer_of(const std::string& name) {
  const std::string key = "encoder.layers.";
  const size_t at = name.find(key);
  return at == std::string::npos ? -1 : std::stoi(name.substr(at + key.size()));
}

// The step estimates of kText and kText + kClip under `layout` (two ranks) on two H100s of one
// node: the tower's share is their difference.
struct TowerSteps {
  StepEstimate text, vlm;
  VisionEstimate vision;
  double micro_batches = 0;
  double rate = 0;       // the device's FLOP/s at the planner's efficiency
  double bandwidth = 0;  // the node's link
};
TowerSteps tower_steps(const QStringList& layout) {
  const TrainOptions text = options(kText + layout), vlm = options(kText + layout + kClip);
  const ParallelLayout l = *make_layout(vlm, 2);
  ClusterSpec cluster;
  cluster.devices_per_node = 2;
  cluster.device = *find_device("h100", "fp32");
  const MemoryEstimate ma = estimate_memory(text, l), mb = estimate_memory(vlm, l);
  TowerSteps s;
  s.text = estimate_step(text, l, cluster, ma);
  s.vlm = estimate_step(vlm, l, cluster, mb);
  s.vision = estimate_vision(vlm);
  s.micro_batches = static_cast<double>(mb.micro_batches);
  s.rate = cluster.device.peak_flops * cluster.compute_efficiency;
  s.bandwidth = cluster.device.intra_node_bandwidth;
  return s;
}

// A step figure grew by `expected` seconds (to rounding).
void expect_growth(const char* what, double grew, double expected) {
  QVERIFY2(std::abs(grew - expected) <= 1e-9 * expected,
           qPrintable(QString("%1 grew by %2 s, expected %3 s").arg(what).arg(grew).arg(expected)));
}

}  // namespace

class PlannerVisionTest : public QObject {
  Q_OBJECT

 private slots:
  void the_towers_counts_are_what_the_vision_encoder_takes_data() { add_towers(); }

  // VisionEncoder::create on the CPU device with a micro-batch of images: its parameter count
  // and the bytes it allocates for weights, for activations and for its scratch (fp32, and double
  // for --fp64), whole and on each rank of TP 2 and 4 where TP divides the tower (Note [tower
  // tensor parallelism] in model/vision_encoder.cpp; the planner refuses the others), and at CP
  // 2, where a rank encodes half the micro-batch's images (Note [images under context
  // parallelism] in model/gpt_vision.cpp).
  void the_towers_counts_are_what_the_vision_encoder_takes() {
    QFETCH(QStringList, tower);
    for (const auto& [tp, cp] : {std::pair{1, 1}, {2, 1}, {4, 1}, {1, 2}, {2, 2}})
      for (const bool fp64 : {false, true}) {
        const TrainOptions o =
            options(kText + tower + (fp64 ? QStringList{"--fp64"} : QStringList{}) +
                    QStringList{"--tensor-model-parallel-size", QString::number(tp),
                                "--context-parallel-size", QString::number(cp)});
        const std::vector<std::string> tp_errors = o.vision_config().tensor_parallel_errors(tp);
        if (!tp_errors.empty()) {
          const std::vector<std::string> layout = layout_errors(o, tp * cp);
          QVERIFY2(std::find(layout.begin(), layout.end(), tp_errors.front()) != layout.end(),
                   tp_errors.front().c_str());
          continue;
        }
        for (int rank = 0; rank < tp; rank++) check_tower_rank(o, fp64, rank);
      }
  }

  void a_tower_rank_holds_its_share_of_every_split_tensor() {
    // kClip at TP 2: qkv_proj (96, 32) by rows, whole heads [16 r, 16 r + 16) of the grouped
    // layout in each third; out_proj (32, 32) by columns; fc1 (128, 32) rows; fc2 (32, 128)
    // columns; linear_1 (64, 32) rows; linear_2 (64, 64) columns; the rest whole, counted in the
    // norm by rank 0 alone.
    const VisionConfig v = options(kText + kClip).vision_config();
    const std::vector<ParamTensor> whole = ParamLayout::vision_tensors(v);
    for (int rank = 0; rank < 2; rank++) {
      const std::vector<ParamTensor> mine = ParamLayout::vision_tensors(v, rank, 2);
      QCOMPARE(mine.size(), whole.size());
      for (size_t i = 0; i < mine.size(); i++) {
        const ParamTensor &t = mine[i], &w = whole[i];
        QCOMPARE(t.name, w.name);
        QCOMPARE(t.global_shape, w.shape);
        const bool rows = t.name.find("qkv_proj") != std::string::npos ||
                          t.name.find("fc1") != std::string::npos ||
                          t.name.find("linear_1") != std::string::npos;
        const bool columns = t.name.find("out_proj.weight") != std::string::npos ||
                             t.name.find("fc2.weight") != std::string::npos ||
                             t.name.find("linear_2.weight") != std::string::npos;
        QVERIFY2(t.split_dim == (rows ? 0 : columns ? 1 : -1), t.name.c_str());
        if (t.split_dim < 0) {
          QCOMPARE(t.shape, w.shape);
          QCOMPARE(t.counts_in_norm, rank == 0);
          continue;
        }
        QCOMPARE(t.shape[t.split_dim] * 2, w.shape[t.split_dim]);
        QCOMPARE(t.split_begin, rank * t.shape[t.split_dim]);
        QVERIFY(t.counts_in_norm);
      }
    }
  }

 private:
  void check_tower_rank(const TrainOptions& o, bool fp64, int rank) {
    const int tp = o.model.tensor_model_parallel_size;
    const std::vector<std::string> errors = o.validate(false);
    QVERIFY2(errors.empty(), errors.empty() ? "" : errors[0].c_str());
    const VisionEstimate e = estimate_vision(o);
    CpuDevice device;
    // The group's sum is never called: create() only allocates.
    TowerParallel<float> tp_float{rank, tp, [](float*, size_t) {}};
    TowerParallel<double> tp_double{rank, tp, [](double*, size_t) {}};
    auto check = [&]<typename A>(TowerParallel<A> share) {
      auto made =
          VisionEncoder<A>::create(o.vision_config(), e.images_per_rank, device, true, share);
      QVERIFY2(made.is_ok(), made.status().message().c_str());
      const VisionEncoder<A>& encoder = **made;
      size_t numel = 0, replicated = 0;
      for (const ParamTensor& t : encoder.tensors()) {
        numel += t.numel;
        if (t.split_dim < 0) replicated += t.numel;
      }
      QVERIFY(numel <= encoder.num_params());  // + the 16-element alignment gaps
      QVERIFY(encoder.num_params() < numel + 16 * encoder.tensors().size());
      QCOMPARE(e.parameters, static_cast<int64_t>(encoder.num_params()));
      QCOMPARE(e.replicated_parameters, static_cast<int64_t>(replicated));
      {
        QCOMPARE(device.usage(MemoryCategory::kWeights).current, encoder.num_params() * sizeof(A));
        const size_t taken = device.usage(MemoryCategory::kActivations).current;
        QVERIFY2(taken == e.activation_bytes_per_micro_batch,
                 qPrintable(QString("%1 images in %2 on TP rank %3 of %4: the encoder takes %5 "
                                    "activation bytes, the planner says %6")
                                .arg(o.micro_batch_size)
                                .arg(fp64 ? "double" : "float")
                                .arg(rank)
                                .arg(tp)
                                .arg(taken)
                                .arg(e.activation_bytes_per_micro_batch)));
        // Its scratch: the CPU block attention's workspace per kernel thread, and the rest.
        const size_t scratch = device.usage(MemoryCategory::kWorkspace).current;
        QVERIFY2(scratch == e.encoder_workspace_bytes,
                 qPrintable(QString("TP rank %1 of %2: the encoder takes %3 workspace bytes, the "
                                    "planner says %4")
                                .arg(rank)
                                .arg(tp)
                                .arg(scratch)
                                .arg(e.encoder_workspace_bytes)));
      }
    };
    if (fp64)
      check(tp_double);
    else
      check(tp_float);
    QCOMPARE(e.images_per_micro_batch, o.micro_batch_size);
    const int cp = o.parallel.context_parallel_size;
    QCOMPARE(e.images_per_rank, (o.micro_batch_size + cp - 1) / cp);
    QCOMPARE(e.layers_run, o.vision_config().layers_run());
  }

 private slots:

  void forward_flops_count_every_matrix_product_data() { add_towers(); }

  // Independently of the planner's formula: every weight matrix the forward multiplies (the
  // patch embedding and projector on Np rows, the layers run on T rows) costs 2 x rows x its
  // elements; the attention 4 T^2 C per layer run; layers past --vision-select-layer nothing.
  // Backward (VisionEncoder::backward): each trained matrix's weight gradient costs its forward
  // again, and its input gradient too where something before it trains (not the patch
  // embedding: the images take no gradient); the attention's backward twice its forward. A
  // frozen encoder (--freeze-ViT, LoRA) runs no backward: the projector's first matrix computes
  // its weight gradient alone.
  void forward_flops_count_every_matrix_product() {
    QFETCH(QStringList, tower);
    for (const QStringList& freeze :
         {QStringList{}, QStringList{"--freeze-ViT"}, QStringList{"--lora-rank", "4"}}) {
      const TrainOptions o = options(kText + tower + freeze);
      const VisionConfig v = o.vision_config();
      const bool encoder_trains = freeze.isEmpty();
      CpuDevice device;
      auto made = VisionEncoder<float>::create(v, 1, device);
      QVERIFY2(made.is_ok(), made.status().message().c_str());
      double flops = 0, training = 0;
      for (const ParamTensor& t : (*made)->tensors()) {
        const std::string& n = t.name;
        const bool matrix =
            t.shape.size() >= 2 && n.find("position_embedding") == std::string::npos;
        if (!matrix) continue;
        const int layer = layer_of(n);
        if (layer >= v.layers_run()) continue;  // not run
        const double rows = layer >= 0 ? v.seq_length() : v.patches();
        const double forward = 2 * rows * static_cast<double>(t.numel);
        const bool projector = n.rfind("multi_modal_projector.", 0) == 0;
        const bool trains = projector || encoder_trains;
        const bool input_grad = n.find("linear_2") != std::string::npos ||
                                (encoder_trains && n.find("patch_embedding") == std::string::npos);
        flops += forward;
        training += forward * (1 + (trains ? 1 : 0) + (input_grad ? 1 : 0));
      }
      const double attention =
          v.layers_run() * 4.0 * v.seq_length() * v.seq_length() * v.hidden_size;
      flops += attention;
      training += attention * (encoder_trains ? 3 : 1);
      const VisionEstimate e = estimate_vision(o);
      QVERIFY2(
          e.forward_flops_per_image == flops,
          qPrintable(QString("planner %1, counted %2").arg(e.forward_flops_per_image).arg(flops)));
      QVERIFY2(e.training_flops_per_image == training,
               qPrintable(QString("%1: planner %2 training FLOPs per image, counted %3")
                              .arg(freeze.join(' '))
                              .arg(e.training_flops_per_image)
                              .arg(training)));
      QCOMPARE(e.flops_per_iteration, training * o.global_batch_size);
    }
  }

  // The engine's runs beyond the per-image count: PP 2 with 8 micro-batches per DP rank, 1F1B
  // runs one warm-up forward on the first stage, so every backward follows another
  // micro-batch's forward and re-runs the tower's forward first (GptModel::vision_backward):
  // each image's forward twice. One micro-batch (global batch 2): none. --freeze-LM: the
  // language model's matrices (every layer's QKV, proj, FC1, FC2 and the tied LM head, counted
  // from the ParamLayout here) compute no weight gradient, so their backward is one forward,
  // the attention products' (2 s h per token and layer, causal) still two; in the FLOPs and in
  // the step's compute.
  void pipelined_and_frozen_runs_count_what_the_engine_runs() {
    const QStringList pp2 = {"--pipeline-model-parallel-size", "2"};
    for (const QStringList& tower : {kClip, kPlain}) {
      const TrainOptions o = options(kText + tower + pp2);
      const VisionEstimate per_image = estimate_vision(o);
      const double images = o.global_batch_size;
      const ParallelLayout l2 = *make_layout(o, 2);
      const VisionEstimate v = estimate_vision(o, l2);
      QCOMPARE(v.reruns_per_iteration, 8);
      QCOMPARE(v.flops_per_iteration,
               images * (per_image.training_flops_per_image + per_image.forward_flops_per_image));
      QCOMPARE(estimate_memory(o, l2).vision.flops_per_iteration, v.flops_per_iteration);
      const TrainOptions one =
          options(kText + tower + pp2 + QStringList{"--global-batch-size", "2"});
      const VisionEstimate w = estimate_vision(one, *make_layout(one, 2));
      QCOMPARE(w.reruns_per_iteration, 0);
      QCOMPARE(w.flops_per_iteration, 2 * per_image.training_flops_per_image);
      // PP 1 runs each backward right after its forward.
      const TrainOptions flat = options(kText + tower);
      QCOMPARE(estimate_vision(flat, *make_layout(flat, 1)).reruns_per_iteration, 0);

      const TrainOptions frozen = options(kText + tower + QStringList{"--freeze-LM"});
      const ParamLayout layout(frozen.model);
      double weights = 0;  // elements of the matrices the language model multiplies
      for (const ParamTensor& t : layout.tensors())
        if (t.name.rfind("decoder.layers.", 0) == 0 ? t.shape.size() == 2 && t.decay
                                                    : t.name == "embedding.word_embeddings.weight")
          weights += static_cast<double>(t.numel);
      const ModelConfig& m = frozen.model;
      const double tokens = static_cast<double>(frozen.global_batch_size) * m.seq_length;
      const double matrices = 2 * tokens * weights;
      const double attention = tokens * m.num_layers * 2.0 * m.seq_length * m.hidden_size;
      const double tower_flops = estimate_vision(frozen).flops_per_iteration;
      const ParallelLayout l1 = *make_layout(frozen, 1);
      QCOMPARE(estimate_memory(options(kText + tower), l1).flops_per_iteration,
               3 * (matrices + attention) + tower_flops);
      QCOMPARE(estimate_memory(frozen, l1).flops_per_iteration,
               2 * matrices + 3 * attention + tower_flops);
      // The step's compute on one H100 shrinks by those weight gradients at the device's rate.
      ClusterSpec cluster;
      cluster.device = *find_device("h100", "fp32");
      const TrainOptions whole = options(kText + tower);
      const double saved =
          estimate_step(whole, l1, cluster, estimate_memory(whole, l1)).compute_s -
          estimate_step(frozen, l1, cluster, estimate_memory(frozen, l1)).compute_s;
      const double expected = matrices / (cluster.device.peak_flops * cluster.compute_efficiency);
      QVERIFY2(
          std::abs(saved - expected) <= 1e-9 * expected,
          qPrintable(QString("--freeze-LM saves %1 s, expected %2 s").arg(saved).arg(expected)));
    }
  }

  // The distributed optimizer keeps, on each rank, moments for the trained elements of its
  // shards of the whole arena's buckets (optim/optimizer_shard.h): with frozen tensors the
  // ranks differ. DP 3 with small buckets (many shard boundaries, inside tensors and gaps) and
  // PP 2: the planner's every rank is the engine's optimizer_shard for that rank.
  void distributed_optimizer_ranks_are_the_engines_shards_data() {
    QTest::addColumn<QStringList>("flags");
    const QStringList dp3 = {"--use-distributed-optimizer", "--ddp-bucket-size", "5000"};
    QTest::newRow("projector only") << kClip + dp3 + QStringList{"--freeze-LM", "--freeze-ViT"};
    QTest::newRow("freeze-LM") << kPlain + dp3 + QStringList{"--freeze-LM"};
    QTest::newRow("LoRA") << kClip + dp3 + QStringList{"--lora-rank", "4"};
    QTest::newRow("text LoRA pp2")
        << dp3 + QStringList{"--lora-rank", "4", "--pipeline-model-parallel-size", "2"};
    QTest::newRow("freeze-ViT") << kPlain + dp3 + QStringList{"--freeze-ViT"};
  }
  void distributed_optimizer_ranks_are_the_engines_shards() {
    QFETCH(QStringList, flags);
    const TrainOptions o = options(kText + flags + QStringList{"--global-batch-size", "12"});
    const int pp = o.parallel.pipeline_model_parallel_size, world = 3 * pp;
    const ParallelLayout l = *make_layout(o, world);
    const MemoryEstimate m = estimate_memory(o, l);
    for (int rank = 0; rank < world; rank++) {
      const ParallelLayout::Coord c = l.coord(rank);
      const ParamLayout layout(o.model, shard_of(l, c, 0, false));
      const size_t engine = optimizer_shard(o, layout, 3, c.dp).state_numel * 2 * sizeof(float);
      const StageEstimate& s = m.stages[c.pp];
      QCOMPARE(static_cast<int>(s.optimizer_bytes_by_rank.size()), 3);
      QVERIFY2(s.optimizer_bytes_by_rank[rank % 3] == engine,
               qPrintable(QString("rank %1: planner %2 optimizer bytes, engine %3")
                              .arg(rank)
                              .arg(s.optimizer_bytes_by_rank[rank % 3])
                              .arg(engine)));
      QVERIFY(s.optimizer_bytes >= engine);
    }
    // `lattice plan --json` lists them.
    const QJsonArray listed = QJsonDocument::fromJson(QByteArray::fromStdString(plan_json(l, m)))
                                  .object()["memory"]
                                  .toObject()["stages"]
                                  .toArray()[0]
                                  .toObject()["optimizer_bytes_by_rank"]
                                  .toArray();
    QCOMPARE(listed.size(), 3);
    for (int i = 0; i < 3; i++)
      QCOMPARE(listed[i].toInteger(), static_cast<qint64>(m.stages[0].optimizer_bytes_by_rank[i]));
  }

  void the_trained_parameters_are_the_layouts_unfrozen_ones_data() {
    QTest::addColumn<QStringList>("freeze");
    QTest::newRow("full") << QStringList{};
    QTest::newRow("projector only") << QStringList{"--freeze-LM", "--freeze-ViT"};
    QTest::newRow("freeze-ViT") << QStringList{"--freeze-ViT"};
    QTest::newRow("freeze-LM") << QStringList{"--freeze-LM"};
    QTest::newRow("LoRA") << QStringList{"--lora-rank", "4"};
  }

  // One process: the planner's trainable parameters are ParamLayout::trainable_numel() of the
  // model the trainer builds (its frozen flags, Note [vision tensors]); the optimizer state
  // is their moments, the weights every parameter's, the grads the gradient arena's.
  void the_trained_parameters_are_the_layouts_unfrozen_ones() {
    QFETCH(QStringList, freeze);
    for (const QStringList& tower : {kClip, kPlain}) {
      const TrainOptions o = options(kText + tower + freeze);
      const MemoryEstimate m = estimate_memory(o, *make_layout(o, 1));
      const ParamLayout layout(o.model);
      const StageEstimate& s = m.stages[0];
      QCOMPARE(s.trainable_parameters, static_cast<int64_t>(layout.trainable_numel()));
      QCOMPARE(s.optimizer_bytes, layout.trainable_numel() * 8);
      // The gradient arena the model allocates: the tower's block whole and the language
      // model's trained tensors (Note [LoRA] in model/param_layout.h), less than the whole
      // arena when the language model is frozen.
      QCOMPARE(s.grad_bytes, layout.grad_numel() * 4);
      const bool lm_frozen = o.model.freeze_lm || o.model.lora();
      QCOMPARE(layout.grad_numel() < layout.total_numel(), lm_frozen);
    }
  }

  // TP 2 x PP 2 x DP 2, distributed optimizer, 4 micro-batches per DP rank (2 in flight on the
  // first stage): the tower's parameters on pp 0 only, a TP rank's share (its whole tensors in
  // the replicated count), in weights, grads and the sharded optimizer; its activations per
  // micro-batch in flight; its FLOPs in the model's.
  void the_first_stage_holds_the_tower() {
    const QStringList layout = {"--tensor-model-parallel-size", "2",
                                "--pipeline-model-parallel-size", "2",
                                "--use-distributed-optimizer"};
    const TrainOptions text = options(kText + layout), vlm = options(kText + layout + kClip);
    const ParallelLayout l = *make_layout(vlm, 8);
    const MemoryEstimate a = estimate_memory(text, l), b = estimate_memory(vlm, l);
    const VisionEstimate v = estimate_vision(vlm);
    QVERIFY(v.parameters > 0 && v.activation_bytes_per_micro_batch > 0);
    QCOMPARE(b.micro_batches, int64_t{4});
    const StageEstimate &a0 = a.stages[0], &b0 = b.stages[0];
    QCOMPARE(b0.vision_parameters, v.parameters);
    QCOMPARE(b0.parameters - a0.parameters, v.parameters);
    QCOMPARE(b0.replicated_parameters - a0.replicated_parameters, v.replicated_parameters);
    QVERIFY(v.replicated_parameters > 0 && v.replicated_parameters < v.parameters / 2);
    QCOMPARE(b0.trainable_parameters, b0.parameters);
    QCOMPARE(b0.weight_bytes - a0.weight_bytes, static_cast<size_t>(v.parameters) * 4);
    QCOMPARE(b0.grad_bytes - a0.grad_bytes, static_cast<size_t>(v.parameters) * 4);
    QCOMPARE(b0.optimizer_bytes, (static_cast<size_t>(b0.parameters) + 1) / 2 * 8);  // / DP 2
    // The images' inputs: (2, 3, 32, 32) floats, image_slot and embed_tokens (2 x 32) and
    // image_rows (2 x 16) int32.
    QCOMPARE(v.input_bytes_per_micro_batch, size_t{2 * 3 * 32 * 32 * 4 + (2 * 64 + 32) * 4});
    QCOMPARE(b0.vision_activation_bytes_per_micro_batch,
             v.activation_bytes_per_micro_batch + v.input_bytes_per_micro_batch);
    QCOMPARE(b0.activation_bytes_per_micro_batch - a0.activation_bytes_per_micro_batch,
             b0.vision_activation_bytes_per_micro_batch);
    QCOMPARE(b0.micro_batches_in_flight, 2.0);
    // The tower's buffers once (shared by the micro-batches in flight), the inputs per
    // micro-batch.
    QCOMPARE(b0.activation_bytes - a0.activation_bytes,
             v.activation_bytes_per_micro_batch + 2 * v.input_bytes_per_micro_batch);
    // The last stage does not see the tower.
    const StageEstimate &a1 = a.stages[1], &b1 = b.stages[1];
    QCOMPARE(b1.vision_parameters, int64_t{0});
    QCOMPARE(b1.parameters, a1.parameters);
    QCOMPARE(b1.total_bytes(), a1.total_bytes());
    // Its FLOPs with the pipeline's re-runs (4 micro-batches, every backward re-runs).
    const VisionEstimate run = estimate_vision(vlm, l);
    QCOMPARE(run.reruns_per_iteration, 4);
    QCOMPARE(b.flops_per_iteration - a.flops_per_iteration, run.flops_per_iteration);
  }

  // PP 1 on one H100: the step's compute grows by the training FLOPs of every micro-batch's
  // images at the device's rate; the MFU counts the tower's FLOPs.
  void the_step_time_adds_the_towers_compute() {
    const TrainOptions text = options(kText), vlm = options(kText + kClip);
    const ParallelLayout l = *make_layout(vlm, 1);
    ClusterSpec cluster;
    cluster.device = *find_device("h100", "fp32");
    const MemoryEstimate ma = estimate_memory(text, l), mb = estimate_memory(vlm, l);
    const StepEstimate a = estimate_step(text, l, cluster, ma);
    const StepEstimate b = estimate_step(vlm, l, cluster, mb);
    const VisionEstimate v = estimate_vision(vlm);
    const double expected = mb.micro_batches * v.images_per_micro_batch *
                            v.training_flops_per_image /
                            (cluster.device.peak_flops * cluster.compute_efficiency);
    QVERIFY2(std::abs((b.compute_s - a.compute_s) - expected) <= 1e-9 * expected,
             qPrintable(QString("compute grew by %1 s, expected %2 s")
                            .arg(b.compute_s - a.compute_s)
                            .arg(expected)));
    QVERIFY(std::abs(b.mfu - mb.flops_per_iteration /
                                 (b.total_s * cluster.device.peak_flops * l.world)) < 1e-12);
  }

  // TP 2 on two H100s of a node: the tower's compute on a rank is its share (the patch GEMM
  // whole, the layers and projector halved), and the tensor-parallel time grows by its sums,
  // counted here from the shapes: per image forward 2 (T, C) per layer run and the projector's
  // (Np, H), backward 2 (T, C) per layer run and (Np, C), each an all-reduce of 2 (t - 1) / t of
  // its bytes.
  void the_step_time_adds_a_tp_ranks_share_of_the_tower() {
    const TowerSteps s = tower_steps({"--tensor-model-parallel-size", "2"});
    const VisionEstimate whole = estimate_vision(options(kText + kClip));
    QCOMPARE(s.vision.training_flops_per_image, whole.training_flops_per_image);
    QVERIFY(s.vision.rank_training_flops_per_image < 0.6 * whole.training_flops_per_image);
    QVERIFY(s.vision.rank_training_flops_per_image > 0.5 * whole.training_flops_per_image);
    const double images = s.micro_batches * s.vision.images_per_rank;
    expect_growth("compute", s.vlm.compute_s - s.text.compute_s,
                  images * s.vision.rank_training_flops_per_image / s.rate);
    // kClip: T 17 rows of C 32, 2 layers run, Np 16 patches, H 64; fp32.
    const double per_image = 4.0 * (2 * 2 * 17 * 32 + 16 * 64) + 4.0 * (2 * 2 * 17 * 32 + 16 * 32);
    expect_growth("TP time", s.vlm.tp_comm_s - s.text.tp_comm_s,
                  images * 2.0 * (2 - 1) / 2 * per_image / s.bandwidth);
  }

  // CP 2 on two H100s of a node: a rank's tower encodes half of each micro-batch's 2 images, so
  // the compute grows by one image's training FLOPs per micro-batch, and the CP time by the
  // patches' all-gather and their gradient's reduce-scatter, (CP - 1) / CP of CP x 1 image's
  // (Np, H) each, counted here from the shapes.
  void the_step_time_adds_a_cp_ranks_share_of_the_images() {
    const TowerSteps s = tower_steps({"--context-parallel-size", "2"});
    QCOMPARE(s.vision.images_per_micro_batch, 2);
    QCOMPARE(s.vision.images_per_rank, 1);
    expect_growth("compute", s.vlm.compute_s - s.text.compute_s,
                  s.micro_batches * s.vision.training_flops_per_image / s.rate);
    // kClip: Np 16 patches of H 64, fp32.
    expect_growth("CP time", s.vlm.cp_comm_s - s.text.cp_comm_s,
                  s.micro_batches * 2 * 0.5 * (4.0 * 2 * 16 * 64) / s.bandwidth);
  }

  // `lattice plan` at TP 2 says the tower is split and counts a rank's share; a TP that does
  // not divide the tower's heads is refused in a sentence naming both flags.
  void lattice_plan_splits_the_tower_over_tp() {
    const QStringList tp = {
        "plan", "--device", "h100", "--world-size", "2", "--tensor-model-parallel-size", "2"};
    const Run r = lattice_cli(tp + kText + kClip);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const TrainOptions o =
        options(kText + kClip + QStringList{"--tensor-model-parallel-size", "2"});
    const QString line = QString(
                             "MLP projector to 64; %1 parameters on each pp 0 rank (heads, MLP "
                             "and projector split over TP)\n")
                             .arg(estimate_vision(o).parameters);
    QVERIFY2(r.out.contains(line), qPrintable("no \"" + line + "\" in:\n" + r.out));
    const Run bad = lattice_cli(tp + kText + kPlain);  // 3 heads
    QVERIFY(bad.exit_code != 0);
    QVERIFY2(bad.err.contains("--tensor-model-parallel-size 2 does not divide "
                              "--vision-num-attention-heads 3"),
             qPrintable(bad.err));
  }

  // `lattice plan`: the first stage names the tower, a line gives its size, memory and FLOPs
  // share; --json has the same figures as the library.
  void lattice_plan_shows_the_tower() {
    const QStringList flags = QStringList{"plan", "--device",
                                          "h100", "--world-size",
                                          "2",    "--pipeline-model-parallel-size",
                                          "2"} +
                              kText + kClip;
    const Run r = lattice_cli(flags);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const TrainOptions o =
        options(kText + kClip + QStringList{"--pipeline-model-parallel-size", "2"});
    const VisionEstimate v = estimate_vision(o, *make_layout(o, 2));
    for (const QString& part :
         {QString("layers [0,2)  + word and position embeddings, vision tower"),
          QString("vision tower: CLIP ViT 3 layers (2 run), width 32, 2 heads, MLP 128; 32 x 32 "
                  "images in 8 px patches (16 patches + class token); MLP projector to 64; %1 "
                  "parameters on each pp 0 rank\n")
              .arg(v.parameters)})
      QVERIFY2(r.out.contains(part), qPrintable("no \"" + part + "\" in:\n" + r.out));
    QVERIFY2(r.out.contains(QRegularExpression("activations [0-9.]+ MiB per micro-batch \\(2 "
                                               "images\\); [0-9.e+]+ forward FLOPs per image, "
                                               "[0-9.]+ % of the model FLOPs")),
             qPrintable(r.out));

    const Run j = lattice_cli(flags + QStringList{"--json"});
    QVERIFY2(j.exit_code == 0, qPrintable(j.err));
    const QJsonObject memory =
        QJsonDocument::fromJson(j.out.toUtf8()).object()["memory"].toObject();
    const QJsonObject vision = memory["vision"].toObject();
    QCOMPARE(vision["parameters"].toInteger(), v.parameters);
    QCOMPARE(vision["forward_flops_per_image"].toDouble(), v.forward_flops_per_image);
    QCOMPARE(vision["reruns_per_iteration"].toInt(), v.reruns_per_iteration);
    QCOMPARE(vision["flops_share"].toDouble(),
             v.flops_per_iteration / memory["flops_per_iteration"].toDouble());
    const QJsonArray stages = memory["stages"].toArray();
    QCOMPARE(stages[0].toObject()["vision"].toObject()["parameters"].toInteger(), v.parameters);
    QCOMPARE(
        stages[0].toObject()["vision"].toObject()["activation_bytes_per_micro_batch"].toInteger(),
        static_cast<qint64>(v.activation_bytes_per_micro_batch + v.input_bytes_per_micro_batch));
    QVERIFY(!stages[1].toObject().contains("vision"));

    // Without the tower nothing of it is printed.
    const Run t = lattice_cli(QStringList{"plan", "--device", "h100"} + kText);
    QVERIFY2(t.exit_code == 0, qPrintable(t.err));
    QVERIFY2(!t.out.contains("vision"), qPrintable(t.out));
  }
};

QTEST_GUILESS_MAIN(PlannerVisionTest)
#include "test_planner_vision.moc"
