// The planner's step-time model and layout search as a user choosing a layout expects them:
// 16-bit bytes per parameter, activations by element type and device beside Megatron's published
// example, step terms that move
// the right way with DP and with TP across nodes, and a search that returns only valid
// layouts, fitting ones first by throughput, fast enough for GPT-3 175B on 1024 GPUs.
#include <QtTest/QtTest>

#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <algorithm>
#include <thread>

#include "common/process.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"

namespace {

lattice::TrainOptions options(const QStringList& flags) {
  std::vector<std::string> args;
  for (const QString& s : flags) args.push_back(s.toStdString());
  lattice::Result<lattice::TrainOptions> o = lattice::parse_train_flags(args);
  if (!o) qFatal("bad test flags: %s", o.status().message().c_str());
  return *o;
}

lattice::ParallelLayout layout_of(const lattice::TrainOptions& o, int world) {
  lattice::Result<lattice::ParallelLayout> l = lattice::make_layout(o, world);
  if (!l) qFatal("bad test layout: %s", l.status().message().c_str());
  return *l;
}

lattice::ClusterSpec cluster(const char* device, int nodes, int per_node,
                             const std::string& precision = "bf16") {
  lattice::ClusterSpec c;
  c.nodes = nodes;
  c.devices_per_node = per_node;
  c.device = *lattice::find_device(device, precision);
  return c;
}

// GPT-3 175B as Brown et al. and Narayanan et al. train it.
const QStringList kGpt3_175B = {
    "--num-layers", "96",   "--hidden-size", "12288", "--num-attention-heads", "96",
    "--seq-length", "2048", "--vocab-size",  "50257", "--global-batch-size",   "1536",
    "--bf16"};

// A 1.3B-class model for step-time comparisons.
QStringList gpt_1b(const QStringList& extra) {
  return QStringList{
             "--num-layers",        "24",   "--hidden-size", "2048",  "--num-attention-heads", "16",
             "--seq-length",        "2048", "--vocab-size",  "50257", "--micro-batch-size",    "2",
             "--global-batch-size", "512",  "--bf16"} +
         extra;
}

using lattice::testing::Run;

// `lattice args` as one process, given 60 s.
Run lattice_cli(const QStringList& args) {
  return lattice::testing::run_process(LATTICE_CLI_PATH, args, {}, 60000);
}

}  // namespace

class PlannerTest : public QObject {
  Q_OBJECT

 private slots:
  // In the engine's categories (Note [master weights in the optimizer] in optim/adamw.h): the
  // weights are the bf16 copy, the optimizer state the fp32 master copy and the moments, as
  // Megatron counts them (2 + 4 + 12).
  void bf16_training_keeps_18_bytes_per_parameter() {
    const lattice::TrainOptions plain = options({"--global-batch-size", "16", "--bf16"});
    const lattice::StageEstimate a = lattice::estimate_memory(plain, layout_of(plain, 4)).stages[0];
    const size_t n = static_cast<size_t>(a.parameters);
    QCOMPARE(a.weight_bytes, 2 * n);      // bf16 weights
    QCOMPARE(a.grad_bytes, 4 * n);        // fp32 main grads
    QCOMPARE(a.optimizer_bytes, 12 * n);  // fp32 master weights, AdamW m and v
    QCOMPARE(a.weight_bytes + a.grad_bytes + a.optimizer_bytes, 18 * n);
  }

  // The distributed optimizer shards a 16-bit run's fp32 master with the moments: 6 + 12 / DP,
  // as Megatron. On the CPU, --fp16 is the loss scaler over fp32 weights and arithmetic
  // (compute_precision): 8 + 8 / DP, as fp32.
  void distributed_optimizer_keeps_6_plus_12_over_dp() {
    const QStringList flags = {"--global-batch-size", "16", "--fp16",
                               "--use-distributed-optimizer"};
    const lattice::TrainOptions o = options(flags + QStringList{"--device", "cuda"});
    const lattice::StageEstimate a = lattice::estimate_memory(o, layout_of(o, 4)).stages[0];
    const size_t n = static_cast<size_t>(a.parameters);
    QCOMPARE(a.weight_bytes, 2 * n);                  // the fp16 copy
    QCOMPARE(a.grad_bytes, 4 * n);                    // fp32 main grads
    QCOMPARE(a.optimizer_bytes, 12 * ((n + 3) / 4));  // master, m and v over DP 4
    const lattice::TrainOptions cpu = options(flags);
    const lattice::StageEstimate c = lattice::estimate_memory(cpu, layout_of(cpu, 4)).stages[0];
    QCOMPARE(c.weight_bytes + c.grad_bytes, 8 * n);
    QCOMPARE(c.optimizer_bytes, 8 * ((n + 3) / 4));
  }

  // The distributed optimizer's all-gather moves the weights the kernels read: a bf16 run
  // gathers its 16-bit copy (its master is the optimizer's), so its data-parallel traffic is a
  // reduce-scatter of 4 bytes a parameter and an all-gather of 2, three quarters of an fp32
  // run's (4 + 4).
  void distributed_optimizer_gathers_the_16_bit_weights() {
    auto dp_total = [](const char* precision) {
      QStringList flags = {"--global-batch-size", "16", "--use-distributed-optimizer"};
      if (*precision) flags << precision;
      const lattice::TrainOptions o = options(flags);
      return lattice::estimate_step(o, layout_of(o, 4), cluster("h100", 1, 4)).dp_comm_total_s;
    };
    QVERIFY(dp_total("") > 0);
    QCOMPARE(dp_total("--bf16"), 0.75 * dp_total(""));
  }

  void activations_follow_the_element_types_and_the_device() {
    // Two more layers add two of the one model's layers: A-typed tensors (4 sbh + 4 sbh + 2 sbF:
    // ln1, res_mid, ln2, the layer's output; qkv, attention output; FC1, GELU) and G-typed ones
    // (four LayerNorm statistics, the attention's saved tensor: the CPU's (b, a, s, s)
    // probabilities, CUDA's (b, a, s) log-sum-exps). A, G: fp32 4, 4; bf16 2, 4; fp64 8, 8.
    auto per_micro_batch = [](const char* layers, QStringList extra) {
      const lattice::TrainOptions o =
          options(QStringList{"--num-layers", layers, "--micro-batch-size", "2"} + extra);
      return static_cast<double>(
          lattice::estimate_memory(o, layout_of(o, 1)).stages[0].activation_bytes_per_micro_batch);
    };
    auto added = [&](QStringList extra) {
      return per_micro_batch("4", extra) - per_micro_batch("2", extra);
    };
    const double s = 64, b = 2, h = 64, a = 4, F = 4 * h, N = s * b;
    auto layers = [&](double A, double G, double saved) {
      return 2 * (A * (4 * N * h + N * (4 * h + 2 * F)) + G * (4 * N + saved));
    };
    // Every device's attention keeps its log-sum-exps, nothing of s x s.
    const double log_sum_exps = b * a * s;
    QCOMPARE(added({}), layers(4, 4, log_sum_exps));
    QCOMPARE(added({"--bf16"}), layers(2, 4, log_sum_exps));
    QCOMPARE(added({"--fp64"}), layers(8, 8, log_sum_exps));
    QCOMPARE(added({"--device", "cuda"}), layers(4, 4, log_sum_exps));
    QCOMPARE(added({"--device", "cuda", "--bf16"}), layers(2, 4, log_sum_exps));
    // Selective recomputation has nothing to drop.
    QCOMPARE(added({"--recompute-granularity", "selective"}), layers(4, 4, log_sum_exps));
    QCOMPARE(added({"--device", "cuda", "--recompute-granularity", "selective"}),
             layers(4, 4, log_sum_exps));
  }

  // Note [workspace in the plan] (plan/memory_estimate.cpp), by hand for the default model
  // (hidden 64, 4 heads, FFN 256, sequence 64, vocabulary 512) at micro-batch 2, one rank:
  // the backward's scratch in A (4 (N, C) rows, FC1's (N, F), QKV's (N, 3C), the attention
  // output's (N, C)), the attention's workspace in G (a thread's on the CPU: 3 min(s, 64) rows
  // of s + 16 and a head's keys and values packed three times, 2 HS (s + 64) + s (HS + 64);
  // CUDA's (b, a, s)), the trainer's token losses (N M in G, 4 bytes of flag) and the
  // optimizer's norm (8).
  // test_parallel_memory holds the engine to these figures on every rank of its layouts.
  void workspace_and_buffers_follow_the_engine() {
    auto stage = [](QStringList extra, int world = 1, int p = 0) {
      const lattice::TrainOptions o = options(
          QStringList{"--micro-batch-size", "2", "--global-batch-size", "4"} + extra);
      return lattice::estimate_memory(o, layout_of(o, world)).stages[p];
    };
    const double s = 64, b = 2, h = 64, a = 4, F = 4 * h, N = s * b, M = 2;
    auto workspace = [&](double A, double G, double attention) {
      return A * (4 * N * h + N * (F + 3 * h + h)) + G * attention + G * N * M + 4 + 8;
    };
    const double HS = h / a, thread = 3 * s * (s + 16) + 2 * HS * (s + 64) + s * (HS + 64);
    QCOMPARE(double(stage({"--threads", "1"}).workspace_bytes), workspace(4, 4, thread));
    QCOMPARE(double(stage({"--threads", "3"}).workspace_bytes), workspace(4, 4, 3 * thread));
    QCOMPARE(double(stage({"--bf16", "--threads", "1"}).workspace_bytes),
             workspace(2, 4, thread));
    QCOMPARE(double(stage({"--device", "cuda"}).workspace_bytes), workspace(4, 4, b * a * s));
    // Past 64 rows a thread's attention workspace is three blocks of 64 rows, not s x s: at s =
    // 256, two more threads take 2 x (3 x 64 x (256 + 16) + the packed heads) floats more.
    const QStringList s256 = {"--seq-length", "256", "--max-position-embeddings", "256"};
    QCOMPARE(double(stage(s256 + QStringList{"--threads", "3"}).workspace_bytes) -
                 double(stage(s256 + QStringList{"--threads", "1"}).workspace_bytes),
             4.0 * 2 * (3 * 64 * (256 + 16) + 2 * HS * (256 + 64) + 256 * (HS + 64)));
    QCOMPARE(stage({"--threads", "1"}).comm_buffer_bytes, size_t{0});
    // PP 2 (1F1B over 2 micro-batches): the first stage's pool of 2 micro-batches each sends
    // its output's gradient rows back (N, C), the last's pool of 1 receives them; the first
    // stage discards its last norm's statistics (2 N in G), the last one does not.
    const lattice::StageEstimate first = stage({"--pipeline-model-parallel-size", "2"}, 2, 0);
    const lattice::StageEstimate last = stage({"--pipeline-model-parallel-size", "2"}, 2, 1);
    QCOMPARE(double(first.comm_buffer_bytes), 2 * 4 * N * h);
    QCOMPARE(double(last.comm_buffer_bytes), 1 * 4 * N * h);
    QCOMPARE(double(first.workspace_bytes) - double(last.workspace_bytes), 4 * 2 * N);
    // The distributed optimizer on the CPU: each rank's receive buffer is its shard of the
    // gradients (fp32), the whole arena over the ranks; CUDA reduces in place.
    const QStringList dp2 = {"--use-distributed-optimizer", "--global-batch-size", "8"};
    const lattice::StageEstimate sharded = stage(dp2, 2);
    QCOMPARE(sharded.comm_buffer_bytes_by_rank.size(), size_t{2});
    QCOMPARE(sharded.comm_buffer_bytes_by_rank[0] + sharded.comm_buffer_bytes_by_rank[1],
             size_t(4 * sharded.parameters));
    QCOMPARE(sharded.comm_buffer_bytes, std::max(sharded.comm_buffer_bytes_by_rank[0],
                                                 sharded.comm_buffer_bytes_by_rank[1]));
    QCOMPARE(stage(dp2 + QStringList{"--device", "cuda"}, 2).comm_buffer_bytes, size_t{0});
    QCOMPARE(sharded.total_bytes(), sharded.weight_bytes + sharded.grad_bytes +
                                        sharded.optimizer_bytes + sharded.activation_bytes +
                                        sharded.workspace_bytes + sharded.comm_buffer_bytes);
  }

  // A plan for CPU ranks without --threads sizes each rank's per-thread workspace for the
  // threads the trainer would give it: this machine's cores shared among the node's ranks.
  void a_cpu_plan_gives_each_rank_the_trainers_threads() {
    lattice::ClusterSpec cpu;
    cpu.devices_per_node = 4;
    cpu.device.key = "cpu";
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const lattice::TrainOptions planned = lattice::planned_options(options({}), cpu);
    QCOMPARE(planned.device, std::string("cpu"));
    QCOMPARE(planned.threads, std::max(1, cores / 4));
    QCOMPARE(lattice::planned_options(options({"--threads", "3"}), cpu).threads, 3);
    const lattice::TrainOptions gpu = lattice::planned_options(options({}), cluster("h100", 1, 8));
    QCOMPARE(gpu.device, std::string("cuda"));
    QCOMPARE(gpu.threads, 0);
  }

  void megatron_published_example_against_its_formula() {
    // Korthikanti et al. 2022: TP 2, PP 2, DP 4, SP + selective recomputation, bf16.
    const lattice::TrainOptions o = options({"--num-layers",
                                             "32",
                                             "--hidden-size",
                                             "4096",
                                             "--num-attention-heads",
                                             "32",
                                             "--vocab-size",
                                             "32000",
                                             "--seq-length",
                                             "4096",
                                             "--micro-batch-size",
                                             "1",
                                             "--global-batch-size",
                                             "32",
                                             "--tensor-model-parallel-size",
                                             "2",
                                             "--pipeline-model-parallel-size",
                                             "2",
                                             "--sequence-parallel",
                                             "--recompute-granularity",
                                             "selective",
                                             "--bf16",
                                             "--device",
                                             "cuda"});
    const lattice::ParallelLayout l = layout_of(o, 16);
    QCOMPARE(l.dp, 4);
    const lattice::MemoryEstimate est = lattice::estimate_memory(o, l);
    QCOMPARE(est.micro_batches, int64_t{8});
    const double s = 4096, b = 1, h = 4096, t = 2, layers_per_stage = 16, pp = 2;
    // Megatron's formula: sbh * 34 / t per layer with SP + selective; the first stage holds PP
    // micro-batches of its L / PP layers (= L layers' worth, the paper's "first stage" total).
    const double per_layer = s * b * h * 34 / t;
    const double megatron_first_stage = per_layer * layers_per_stage * pp;
    const lattice::StageEstimate& first = est.stages[0];
    const lattice::StageEstimate& last = est.stages[1];
    // The one model on CUDA (flash attention) keeps per layer, with SP, in bf16 (A 2 bytes) and
    // fp32 (G 4): ln1, res_mid, ln2 (3 sbh/t), qkv and the attention output (4 sbh/t), FC1 and
    // GELU (8 sbh/t), four LayerNorm statistics (4 sb/t) and the log-sum-exps (b a s / t); each
    // chunk adds its residual stream's input and every layer's output ((L + 1) sbh/t) and the
    // tokens, targets and packed positions (3 sb int32). Megatron's 34 counts dropout masks and
    // outputs that the engine regenerates from the mask hash instead
    // (docs/design-notes.md#dropout-masks).
    const double N = s * b, a = 32;
    const double layer = 2 * (3 * N * h / t + N * 12 * h / t) + 4 * (4 * N / t + b * a / t * s);
    const double chunk =
        3 * N * 4 + 2 * (layers_per_stage + 1) * N * h / t + layers_per_stage * layer;
    qInfo(
        "Megatron example, activations per rank: Megatron's formula %.1f MiB (first stage: "
        "%d micro-batches x 16 layers x %.1f MiB); planner (the engine's buffers) first stage "
        "%.1f MiB (%.2f micro-batches in flight, %.1f MiB per layer, %.1f %% under Megatron's), "
        "last stage %.1f MiB",
        megatron_first_stage / (1 << 20), static_cast<int>(pp), per_layer / (1 << 20),
        first.activation_bytes / double(1 << 20), first.micro_batches_in_flight, layer / (1 << 20),
        100 * (1 - first.activation_bytes / megatron_first_stage),
        last.activation_bytes / double(1 << 20));
    QCOMPARE(first.micro_batches_in_flight, 2.0);
    QCOMPARE(static_cast<double>(first.activation_bytes), pp * chunk);
    QVERIFY(first.activation_bytes < megatron_first_stage);
    qInfo(
        "Megatron example, most loaded rank: weights %.2f GiB, grads %.2f GiB, optimizer "
        "%.2f GiB, activations %.2f GiB, total %.2f GiB (pp rank %d)",
        est.stages[est.most_loaded].weight_bytes / double(1 << 30),
        est.stages[est.most_loaded].grad_bytes / double(1 << 30),
        est.stages[est.most_loaded].optimizer_bytes / double(1 << 30),
        est.stages[est.most_loaded].activation_bytes / double(1 << 30),
        est.stages[est.most_loaded].total_bytes() / double(1 << 30), est.most_loaded);
  }

  void device_table_uses_dense_published_rates() {
    const lattice::DeviceSpec h100 = *lattice::find_device("h100", "bf16");
    QCOMPARE(h100.peak_flops, 989e12);
    QCOMPARE(h100.intra_node_bandwidth, 450e9);  // NVLink 900 GB/s both directions
    QCOMPARE(h100.inter_node_bandwidth, 50e9);   // 400 Gb/s InfiniBand per GPU
    QCOMPARE(lattice::find_device("H100 SXM 80GB", "fp32")->peak_flops, 67e12);  // not TF32
    QVERIFY(lattice::find_device("h200", "bf16")->memory_bytes > 140e9);
    QCOMPARE(lattice::known_devices("bf16").size(), size_t{5});
    QCOMPARE(lattice::find_device("h100-pcie", "bf16")->peak_flops, 756e12);
    QVERIFY(!lattice::find_device("tpu", "bf16"));
    const lattice::DeviceSpec cpu = lattice::this_machine_cpu(100, 2);
    QCOMPARE(cpu.peak_flops, 50e9);  // each of 2 ranks gets half
    QVERIFY(cpu.memory_bytes > 0 && cpu.intra_node_bandwidth > 0 && cpu.memory_bandwidth > 0);
  }

  // The GPU trainer's MFU divides by the peak of the board CUDA reports, so a PCIe H100 must
  // not get the SXM figure, and a board the table lacks gets none.
  void cuda_device_names_map_to_their_board() {
    const auto key = [](const char* cuda_name) {
      const std::optional<lattice::DeviceSpec> d = lattice::device_for_gpu_name(cuda_name, "bf16");
      return d ? QString::fromStdString(d->key) : QString("none");
    };
    QCOMPARE(key("NVIDIA H100 80GB HBM3"), QString("h100"));
    QCOMPARE(key("NVIDIA H100 PCIe"), QString("h100-pcie"));
    QCOMPARE(key("NVIDIA H100 NVL"), QString("none"));
    QCOMPARE(key("NVIDIA H200"), QString("h200"));
    QCOMPARE(key("NVIDIA A100-SXM4-40GB"), QString("a100-40gb"));
    QCOMPARE(key("NVIDIA A100 80GB PCIe"), QString("a100-80gb"));
    QCOMPARE(key("NVIDIA GeForce RTX 4090"), QString("none"));
    QCOMPARE(lattice::device_for_gpu_name("NVIDIA H100 PCIe", "bf16")->peak_flops, 756e12);
  }

  void step_terms_add_up_and_the_bubble_follows_1f1b() {
    const lattice::TrainOptions o =
        options(gpt_1b({"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4",
                        "--num-layers-per-virtual-pipeline-stage", "3", "--sequence-parallel"}));
    const lattice::ParallelLayout l = layout_of(o, 32);
    const lattice::ClusterSpec c = cluster("h100", 4, 8);
    const lattice::MemoryEstimate mem = lattice::estimate_memory(o, l);
    const lattice::StepEstimate s = lattice::estimate_step(o, l, c, mem);
    const double sum =
        s.compute_s + s.tp_comm_s + s.pp_comm_s + s.pp_bubble_s + s.dp_comm_s + s.optimizer_s;
    QVERIFY2(std::abs(sum - s.total_s) <= 1e-12 * s.total_s,
             qPrintable(QString("terms %1 s vs total %2 s").arg(sum).arg(s.total_s)));
    const double M = static_cast<double>(mem.micro_batches);  // 512 / (2 x 4) = 64
    QCOMPARE(M, 64.0);
    QCOMPARE(s.pp_bubble_s, 3 / (2 * M) * (s.compute_s + s.tp_comm_s + s.pp_comm_s));
    QCOMPARE(s.tokens_per_second, 512 * 2048 / s.total_s);
    QCOMPARE(s.mfu, mem.flops_per_iteration / (s.total_s * 989e12 * 32));
    QVERIFY(s.mfu > 0 && s.mfu < c.compute_efficiency);
  }

  void recomputation_costs_compute() {
    auto compute = [](const QStringList& extra) {
      const lattice::TrainOptions o = options(gpt_1b(extra));
      return lattice::estimate_step(o, layout_of(o, 8), cluster("h100", 1, 8)).compute_s;
    };
    const double none = compute({});
    const double selective = compute({"--recompute-granularity", "selective"});
    const double full = compute({"--recompute-granularity", "full", "--recompute-method", "uniform",
                                 "--recompute-num-layers", "1"});
    QCOMPARE(selective, none);  // it repeats nothing (Note [selective recomputation])
    QVERIFY2(none < full, qPrintable(QString("%1 %2").arg(none).arg(full)));
    QVERIFY2(full < none * 4 / 3, "full recomputation repeats one forward of the layers only");
  }

  void more_data_parallelism_helps_until_communication_dominates() {
    // TP 8 in a node, one node per data-parallel replica: compute per rank halves with each
    // doubling of DP while the gradient all-reduce per rank stays nearly the same.
    double previous_tokens = 0, previous_dp_total = 0;
    for (int nodes : {1, 2, 4, 8}) {
      const lattice::TrainOptions o =
          options(gpt_1b({"--tensor-model-parallel-size", "8", "--sequence-parallel"}));
      const lattice::StepEstimate s =
          lattice::estimate_step(o, layout_of(o, 8 * nodes), cluster("h100", nodes, 8));
      qInfo("DP %d: %.0f tokens/s, compute %.1f ms, DP %.1f ms of which %.1f ms not hidden", nodes,
            s.tokens_per_second, 1e3 * s.compute_s, 1e3 * s.dp_comm_total_s, 1e3 * s.dp_comm_s);
      QVERIFY2(s.tokens_per_second > previous_tokens,
               qPrintable(QString("DP %1: %2 tokens/s after %3")
                              .arg(nodes)
                              .arg(s.tokens_per_second)
                              .arg(previous_tokens)));
      QVERIFY(s.dp_comm_total_s >= previous_dp_total);
      previous_tokens = s.tokens_per_second;
      previous_dp_total = s.dp_comm_total_s;
    }
    // A small global batch on many nodes: each rank computes little, the reduction is exposed.
    const lattice::TrainOptions tiny =
        options(gpt_1b({"--global-batch-size", "64", "--tensor-model-parallel-size", "8"}));
    const lattice::StepEstimate few =
        lattice::estimate_step(tiny, layout_of(tiny, 8 * 4), cluster("h100", 4, 8));
    const lattice::StepEstimate many =
        lattice::estimate_step(tiny, layout_of(tiny, 8 * 32), cluster("h100", 32, 8));
    qInfo(
        "global batch 64, DP 32: compute %.1f ms, DP %.1f ms not hidden; %.0f tokens/s vs "
        "%.0f at DP 4",
        1e3 * many.compute_s, 1e3 * many.dp_comm_s, many.tokens_per_second, few.tokens_per_second);
    QVERIFY2(many.dp_comm_s > many.compute_s,
             qPrintable(QString("DP 32: exposed %1 s vs compute %2 s")
                            .arg(many.dp_comm_s)
                            .arg(many.compute_s)));
    QVERIFY(many.tokens_per_second < 8 * few.tokens_per_second);  // far from linear
  }

  void tensor_parallelism_across_nodes_is_slower_than_inside_one() {
    const lattice::TrainOptions o =
        options(gpt_1b({"--tensor-model-parallel-size", "8", "--sequence-parallel"}));
    const lattice::ParallelLayout l = layout_of(o, 16);
    const lattice::StepEstimate inside = lattice::estimate_step(o, l, cluster("h100", 2, 8));
    const lattice::StepEstimate across = lattice::estimate_step(o, l, cluster("h100", 4, 4));
    QCOMPARE(across.tp_comm_s / inside.tp_comm_s, 450.0 / 50.0);  // NVLink vs InfiniBand
    QVERIFY(across.tokens_per_second < inside.tokens_per_second);
  }

  void suggest_returns_valid_layouts_fitting_first_by_throughput() {
    const lattice::TrainOptions base = options(gpt_1b({}));
    lattice::ClusterSpec c = cluster("a100-40gb", 2, 8);
    const std::vector<lattice::LayoutCandidate> list = lattice::suggest_layouts(base, c, 500);
    QVERIFY(list.size() > 20);
    bool seen_misfit = false;
    for (size_t i = 0; i < list.size(); i++) {
      const lattice::LayoutCandidate& k = list[i];
      const QString where = QString("candidate %1 (%2)")
                                .arg(i)
                                .arg(QString::fromStdString(lattice::layout_flags(k.options)));
      const std::vector<std::string> layout_rules = lattice::layout_errors(k.options, 16);
      const std::vector<std::string> rules = k.options.validate(false);
      QVERIFY2(layout_rules.empty() && rules.empty(), qPrintable(where));
      QCOMPARE(k.layout.world, 16);
      QCOMPARE(k.fits, lattice::fits_in_memory(k.memory, c));
      QCOMPARE(k.options.global_batch_size, 512);
      QVERIFY2(!(seen_misfit && k.fits), qPrintable(where + " fits but follows one that does not"));
      seen_misfit = seen_misfit || !k.fits;
      if (i > 0 && k.fits == list[i - 1].fits)
        QVERIFY2(k.step.tokens_per_second <= list[i - 1].step.tokens_per_second,
                 qPrintable(where + " is faster than the one before"));
    }
    QVERIFY(list.front().fits);
    // Only some layouts fit a 3 GiB device: they come first, the best of the rest follow.
    c.device.memory_bytes = 3.0 * (1 << 30);
    lattice::SuggestStats stats;
    lattice::suggest_layouts(base, c, 1, &stats);
    qInfo("3 GiB devices: %lld of %lld valid layouts fit", static_cast<long long>(stats.fitting),
          static_cast<long long>(stats.valid));
    QVERIFY(stats.fitting > 0 && stats.fitting + 10 < stats.valid);
    const std::vector<lattice::LayoutCandidate> tight =
        lattice::suggest_layouts(base, c, static_cast<int>(stats.fitting) + 10);
    QCOMPARE(static_cast<int64_t>(tight.size()), stats.fitting + 10);
    for (size_t i = 0; i < tight.size(); i++)
      QCOMPARE(tight[i].fits, static_cast<int64_t>(i) < stats.fitting);
  }

  void suggest_searches_gpt3_175b_on_1024_gpus_quickly() {
    const lattice::TrainOptions base = options(kGpt3_175B);
    const lattice::ClusterSpec c = cluster("h100", 128, 8);
    QElapsedTimer timer;
    timer.start();
    lattice::SuggestStats stats;
    const std::vector<lattice::LayoutCandidate> list =
        lattice::suggest_layouts(base, c, 20, &stats);
    const qint64 ms = timer.elapsed();
    qInfo("GPT-3 175B on 1024 H100: %lld valid layouts, %lld fit",
          static_cast<long long>(stats.valid), static_cast<long long>(stats.fitting));
    QVERIFY(!list.empty());
    const lattice::LayoutCandidate& best = list.front();
    qInfo(
        "GPT-3 175B on 128 x 8 H100: searched in %lld ms; best %s: %.0f tokens/s, MFU %.1f %%, "
        "%.1f GiB per rank",
        static_cast<long long>(ms), lattice::layout_flags(best.options).c_str(),
        best.step.tokens_per_second, 100 * best.step.mfu,
        best.memory.stages[best.memory.most_loaded].total_bytes() / double(1 << 30));
    QVERIFY(best.fits);
    QVERIFY2(ms < 5000, qPrintable(QString("%1 ms").arg(ms)));  // the target is 1 s
  }

  void plan_prints_the_step_estimate_and_json() {
    const QStringList model =
        gpt_1b({"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                "--sequence-parallel"});
    const Run r = lattice_cli(
        QStringList{"plan", "--nodes", "2", "--devices-per-node", "8", "--device", "h100"} + model);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    for (const char* part :
         {"world 16 = TP 2 x PP 2 x DP 4", "H100 SXM 80GB", "compute", "TP collectives",
          "PP bubble", "DP not hidden", "tokens/s", "MFU", "fits: yes"})
      QVERIFY2(r.out.contains(part), qPrintable(QString(part) + " missing from:\n" + r.out));
    const Run j = lattice_cli(QStringList{"plan", "--nodes", "2", "--devices-per-node", "8",
                                          "--device", "h100", "--json"} +
                              model);
    QVERIFY2(j.exit_code == 0, qPrintable(j.err));
    const QJsonObject doc = QJsonDocument::fromJson(j.out.toUtf8()).object();
    const QJsonObject step = doc["step"].toObject();
    QVERIFY(step["total_s"].toDouble() > 0);
    QVERIFY(step["tokens_per_second"].toDouble() > 0);
    QCOMPARE(doc["cluster"].toObject()["device"].toObject()["key"].toString(), QString("h100"));
    QVERIFY(doc["fits"].toBool());
    QCOMPARE(doc["memory"].toObject()["stages"].toArray().size(), 2);
  }

  void plan_on_this_cpu_with_a_given_peak() {
    const Run r = lattice_cli(
        {"plan", "--world-size", "2", "--peak-gflops", "100", "--tensor-model-parallel-size", "2"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains("this machine's CPU (1/2 per rank)"), qPrintable(r.out));
    QVERIFY2(r.out.contains("peak 50 GFLOP/s"), qPrintable(r.out));
  }

  void plan_suggest_prints_a_ranked_table_and_json() {
    const QStringList model = gpt_1b({});
    const Run r = lattice_cli(QStringList{"plan", "--suggest", "5", "--nodes", "2",
                                          "--devices-per-node", "8", "--device", "a100-80gb"} +
                              model);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    for (const char* part : {"TP", "PP", "VPP", "recompute", "distopt", "tokens/s", "MFU",
                             "#1 as flags: --tensor-model-parallel-size", "valid layouts in"})
      QVERIFY2(r.out.contains(part), qPrintable(QString(part) + " missing from:\n" + r.out));
    const Run j = lattice_cli(QStringList{"plan", "--suggest", "5", "--json", "--nodes", "2",
                                          "--devices-per-node", "8", "--device", "a100-80gb"} +
                              model);
    QVERIFY2(j.exit_code == 0, qPrintable(j.err));
    const QJsonArray list =
        QJsonDocument::fromJson(j.out.toUtf8()).object()["candidates"].toArray();
    QCOMPARE(list.size(), 5);
    const QJsonObject best = list[0].toObject();
    QVERIFY(best["fits"].toBool());
    QCOMPARE(best["tp"].toInt() * best["cp"].toInt() * best["pp"].toInt() * best["dp"].toInt(), 16);
    QCOMPARE(best["ep"].toInt(), 1);  // a dense model has no experts to split
    QVERIFY(best["step"].toObject()["tokens_per_second"].toDouble() >=
            list[4].toObject()["step"].toObject()["tokens_per_second"].toDouble());
    QVERIFY(best["flags"].toString().contains("--global-batch-size 512"));
  }

  void plan_reports_a_cluster_that_does_not_add_up() {
    const Run r = lattice_cli({"plan", "--world-size", "16", "--nodes", "3", "--device", "h200"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("world size 16 does not split over --nodes 3"), qPrintable(r.err));
    const Run d = lattice_cli({"plan", "--device", "tpu-v5"});
    QCOMPARE(d.exit_code, 2);
    QVERIFY2(d.err.contains("--device tpu-v5 is not one of h100, h100-pcie, h200"),
             qPrintable(d.err));
  }

  void plan_help_documents_the_cluster_and_the_search() {
    const Run r = lattice_cli({"plan", "--help"});
    QCOMPARE(r.exit_code, 0);
    for (const char* part : {"--nodes", "--devices-per-node", "--device", "--peak-gflops",
                             "--efficiency", "--suggest", "--bf16"})
      QVERIFY2(r.out.contains(part), qPrintable(QString(part) + " missing from:\n" + r.out));
  }
};

QTEST_GUILESS_MAIN(PlannerTest)
#include "test_planner.moc"
