// What each rank of 39 layouts (ten dense GPT-2 incl. LoRA, bf16 under the distributed
// optimizer, bf16 LoRA and two threads, two of the Llama family's, eleven with MoE layers incl.
// TP, EP, EP x TP and expert TP 1 and 2 under TP, eleven with a vision tower trained whole,
// projector-only, with --freeze-ViT, --freeze-LM or LoRA, projector-only and LoRA on DP 2 with
// the distributed optimizer, in bf16, split over TP 2 and over TP 2 with SP x DP 2, its images
// over CP 2; five with context parallelism, fp32, bf16, two threads, selective recomputation and
// TP x CP) really holds, against the planner's count (ARCHITECTURE.md "Memory estimate"):
// weights, gradients, optimizer state, activations, and workspace with communication buffers,
// per rank to the byte (the planner counts the one model's buffers and each chunk's pool of
// micro-batches). The trainer measures the device's categories; the run store receives every
// rank's memory through the communicator; the planner computes from the config alone.
#include <QtTest/QtTest>

#include <QTemporaryDir>

#include "common/process.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/storage/run_store.h"
#include "lattice/train_options.h"

class ParallelMemory : public QObject {
  Q_OBJECT
 private slots:
  void ranks_hold_what_the_planner_says_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QStringList>("layout");
    QTest::newRow("tp2 pp2 dp2 distributed optimizer")
        << 8
        << QStringList{"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                       "--use-distributed-optimizer"};
    QTest::newRow("dp2") << 2 << QStringList{};
    // The CPU attention's workspace is per thread (Note [workspace in the plan]).
    QTest::newRow("two threads") << 1 << QStringList{"--threads", "2"};
    // LoRA: the adapters end every layer, so each rank's half of the arena holds its own
    // share of them (Note [distributed optimizer in the plan]).
    QTest::newRow("lora dp2 distributed optimizer")
        << 2 << QStringList{"--lora-rank", "4", "--use-distributed-optimizer"};
    QTest::newRow("pp2 interleaved") << 2
                                     << QStringList{"--pipeline-model-parallel-size", "2",
                                                    "--num-layers-per-virtual-pipeline-stage", "1"};
    QTest::newRow("tp2 sequence parallel selective")
        << 2
        << QStringList{"--tensor-model-parallel-size", "2", "--sequence-parallel",
                       "--recompute-granularity", "selective"};
    QTest::newRow("pp2 full recompute") << 2
                                        << QStringList{"--pipeline-model-parallel-size",
                                                       "2",
                                                       "--recompute-granularity",
                                                       "full",
                                                       "--recompute-method",
                                                       "uniform",
                                                       "--recompute-num-layers",
                                                       "1"};
  }

  // Every category to the byte, activations at each chunk's pool peak of the schedule.
  void ranks_hold_what_the_planner_says() {
    QFETCH(int, ranks);
    QFETCH(QStringList, layout);
    check(ranks, layout);
  }

  // bf16 runs (the CPU's 16-bit op list; fp32 GEMMs on widened copies where the CPU has no bf16
  // GEMMs, the same buffers either way): the weights are the bf16 copy alone, the optimizer
  // state the fp32 master and the moments of the trained elements (Note [master weights in the
  // optimizer] in optim/adamw.h; docs/design-notes.md "Bytes per parameter by precision"), as
  // Megatron: on DP 2 sharded by the distributed optimizer; with LoRA the frozen base has its
  // bf16 copy alone, with or without it.
  void bf16_ranks_hold_what_the_planner_says_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QStringList>("layout");
    QTest::newRow("bf16 dp2 distributed optimizer")
        << 2 << QStringList{"--bf16", "--use-distributed-optimizer"};
    QTest::newRow("bf16 lora") << 1 << QStringList{"--bf16", "--lora-rank", "4"};
    QTest::newRow("bf16 lora dp2 distributed optimizer")
        << 2 << QStringList{"--bf16", "--lora-rank", "4", "--use-distributed-optimizer"};
  }
  void bf16_ranks_hold_what_the_planner_says() {
    QFETCH(int, ranks);
    QFETCH(QStringList, layout);
    struct WidenedGemms {
      WidenedGemms() { qputenv("LATTICE_CPU_BF16_GEMM", "widened"); }
      ~WidenedGemms() { qunsetenv("LATTICE_CPU_BF16_GEMM"); }
    } widened;
    check(ranks, layout);
  }

  // Context parallelism (Note [context parallelism] in model/gpt_layer.cpp): each rank's T / CP
  // rows, and the ring's log-sum-exps as the attention's saved tensor (not the scores, which
  // selective recomputation would drop), in fp32 and bf16.
  void context_parallel_ranks_hold_what_the_planner_says_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QStringList>("layout");
    const QStringList cp = {"--context-parallel-size", "2", "--attention-dropout", "0"};
    QTest::newRow("cp2") << 2 << cp;
    QTest::newRow("cp2 selective recomputation")
        << 2 << cp + QStringList{"--recompute-granularity", "selective"};
    QTest::newRow("cp2 bf16") << 2 << cp + QStringList{"--bf16"};
    QTest::newRow("cp2 two threads") << 2 << cp + QStringList{"--threads", "2"};
    QTest::newRow("cp2 tp2 sequence parallel")
        << 4 << cp + QStringList{"--tensor-model-parallel-size", "2", "--sequence-parallel"};
  }

  void context_parallel_ranks_hold_what_the_planner_says() {
    QFETCH(int, ranks);
    QFETCH(QStringList, layout);
    struct WidenedGemms {  // --bf16 on the CPU's 16-bit list on every CPU
      WidenedGemms() { qputenv("LATTICE_CPU_BF16_GEMM", "widened"); }
      ~WidenedGemms() { qunsetenv("LATTICE_CPU_BF16_GEMM"); }
    } widened;
    check(ranks, layout);
  }

  // A bf16 vision-language run (Note [tower precision] in model/gpt_vision.cpp): the tower's
  // activations and the images in bf16, its statistics and log-sum-exps in fp32, at PP 2 (two
  // micro-batches in flight share the tower's buffers); and its scratch, the 16-bit splice's
  // widened rows and patches included, is the extra workspace over the text model's.
  void vlm_bf16_ranks_hold_what_the_planner_says() {
    struct WidenedGemms {
      WidenedGemms() { qputenv("LATTICE_CPU_BF16_GEMM", "widened"); }
      ~WidenedGemms() { qunsetenv("LATTICE_CPU_BF16_GEMM"); }
    } widened;
    check(2, kVlm + QStringList{"--bf16", "--pipeline-model-parallel-size", "2"});
    if (QTest::currentTestFailed()) return;
    expect_tower_scratch({"--bf16"});
  }

  // --fp16 on the CPU runs the loss scaler over fp32 weights and arithmetic (Trainer<float>):
  // the planner sizes it as fp32 (compute_precision), not as a 16-bit run.
  void cpu_fp16_ranks_hold_what_the_planner_says() {
    check(2, {"--fp16", "--use-distributed-optimizer"});
  }

  // The Llama family (issue 23): 8 heads in 2 query groups, SwiGLU, RMSNorm, RoPE, an untied
  // output layer on the last stage, no biases (and Qwen2's QKV bias). Passes once the engine's
  // model holds the Llama tensors and buffers; the planner's side is pinned by hand in
  // tests/plan/test_planner_llama.
  void llama_ranks_hold_what_the_planner_says_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QStringList>("layout");
    QTest::newRow("llama tp2 pp2 dp2 distributed optimizer")
        << 8
        << kLlama + QStringList{"--tensor-model-parallel-size", "2",
                                "--pipeline-model-parallel-size", "2",
                                "--use-distributed-optimizer"};
    QTest::newRow("qwen2 tp2 sequence parallel selective")
        << 2
        << kLlama + QStringList{"--add-qkv-bias",      "--tensor-model-parallel-size", "2",
                                "--sequence-parallel", "--recompute-granularity",      "selective"};
  }

  void llama_ranks_hold_what_the_planner_says() {
    QFETCH(int, ranks);
    QFETCH(QStringList, layout);
    check(ranks, layout);
  }

  // MoE layers (issue 25): 4 experts of width 64, top-2, on layers 0 and 2 (--moe-layer-freq 2),
  // in the layouts the trainer runs. The planner's expert grid (E / EP experts per rank split over
  // ETP = TP, routers whole, experts sharded over EDP) is the formula the EP and TP rows will
  // meet: a new layout is one more row here (e.g. `<< 4 << QStringList{"--expert-model-parallel-
  // size", "2", ...}` once the trainer runs EP).
  void moe_ranks_hold_what_the_planner_says_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QStringList>("layout");
    QTest::newRow("moe one process") << 1 << kMoe;
    QTest::newRow("moe dp2") << 2 << kMoe;
    QTest::newRow("moe pp2") << 2 << kMoe + QStringList{"--pipeline-model-parallel-size", "2"};
    QTest::newRow("moe tp2") << 2 << kMoe + QStringList{"--tensor-model-parallel-size", "2"};
    // Expert parallelism: each rank 2 of the 4 experts; TP 2 splits them; the distributed
    // optimizer shards them over expert-data (1 with DP 2, 2 with DP 4) and the rest over DP.
    QTest::newRow("moe ep2 dp2") << 2 << kMoe + QStringList{"--expert-model-parallel-size", "2"};
    QTest::newRow("moe ep2 tp2 dp2 distributed optimizer")
        << 4
        << kMoe + QStringList{"--expert-model-parallel-size", "2", "--tensor-model-parallel-size",
                              "2", "--use-distributed-optimizer"};
    QTest::newRow("moe ep2 dp4 distributed optimizer")
        << 4
        << kMoe + QStringList{"--expert-model-parallel-size", "2", "--use-distributed-optimizer"};
    QTest::newRow("moe dp2 distributed optimizer")
        << 2 << kMoe + QStringList{"--use-distributed-optimizer"};
    // Expert TP 1 under TP 2: the experts whole (2 of 4 per rank at EP 2, all 4 at EP 1), the
    // expert-data group spanning TP ranks (2 at EP 2, 4 at EP 1 on 4 ranks).
    QTest::newRow("moe etp1 tp2 ep2 dp2 sequence parallel")
        << 4
        << kMoe + QStringList{
                      "--expert-tensor-parallel-size", "1", "--tensor-model-parallel-size", "2",
                      "--expert-model-parallel-size",  "2", "--sequence-parallel"};
    QTest::newRow("moe etp1 tp2 ep2 dp2 distributed optimizer")
        << 4
        << kMoe + QStringList{
                      "--expert-tensor-parallel-size", "1", "--tensor-model-parallel-size", "2",
                      "--expert-model-parallel-size",  "2", "--use-distributed-optimizer"};
    QTest::newRow("moe etp1 tp2 ep1 dp2 distributed optimizer")
        << 4
        << kMoe + QStringList{"--expert-tensor-parallel-size", "1", "--tensor-model-parallel-size",
                              "2", "--use-distributed-optimizer"};
    // Expert TP 2 under TP 4: each expert split over its expert-TP group of 2 TP ranks (fc2's
    // bias replicated there), expert-data 2 at EP 1 (the two groups' ranks of one slice), 1 at
    // EP 2 (each rank 2 of the 4 experts' slices).
    QTest::newRow("moe etp2 tp4 ep1") << 4
                                      << kMoe + QStringList{"--expert-tensor-parallel-size", "2",
                                                            "--tensor-model-parallel-size", "4"};
    QTest::newRow("moe etp2 tp4 ep2 sequence parallel")
        << 4
        << kMoe + QStringList{
                      "--expert-tensor-parallel-size", "2", "--tensor-model-parallel-size", "4",
                      "--expert-model-parallel-size",  "2", "--sequence-parallel"};
    QTest::newRow("moe capacity factor full recompute")
        << 1
        << kMoe + QStringList{
                      "--moe-expert-capacity-factor", "1.0",     "--recompute-granularity", "full",
                      "--recompute-method",           "uniform", "--recompute-num-layers",  "1"};
  }

  void moe_ranks_hold_what_the_planner_says() {
    QFETCH(int, ranks);
    QFETCH(QStringList, layout);
    check(ranks, layout);
  }

  // A LLaVA-style vision tower (issue 27; Note [vision tower in the plan] in
  // engine/src/plan/vision_estimate.cpp) on the first stage: its weights and gradients whole
  // whatever is frozen, optimizer moments for what trains (the projector always; the encoder
  // unless --freeze-ViT or LoRA; the language model unless --freeze-LM, its adapters alone with
  // LoRA), its activation buffers once and each micro-batch's images and row maps. PP 2: two
  // micro-batches in flight on the first stage share the tower's buffers.
  void vlm_ranks_hold_what_the_planner_says_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QStringList>("layout");
    QTest::newRow("vlm pp2 full") << 2 << kVlm + QStringList{"--pipeline-model-parallel-size", "2"};
    QTest::newRow("vlm projector only") << 1 << kVlm + QStringList{"--freeze-LM", "--freeze-ViT"};
    QTest::newRow("vlm freeze-ViT") << 1 << kVlm + QStringList{"--freeze-ViT"};
    QTest::newRow("vlm freeze-LM") << 1 << kVlm + QStringList{"--freeze-LM"};
    QTest::newRow("vlm lora") << 1 << kVlm + QStringList{"--lora-rank", "4"};
    // The distributed optimizer shards the whole arena (the tower first): rank 0's half holds
    // the projector, rank 1's the LoRA adapters of the later layers, so the ranks' moments
    // differ (Note [distributed optimizer in the plan]).
    QTest::newRow("vlm projector only dp2 distributed optimizer")
        << 2 << kVlm + QStringList{"--freeze-LM", "--freeze-ViT", "--use-distributed-optimizer"};
    QTest::newRow("vlm lora dp2 distributed optimizer")
        << 2 << kVlm + QStringList{"--lora-rank", "4", "--use-distributed-optimizer"};
    // The tower split over TP (Note [tower tensor parallelism] in model/vision_encoder.cpp):
    // each rank's share of its weights, gradients, moments and activations.
    QTest::newRow("vlm tp2") << 2 << kVlm + QStringList{"--tensor-model-parallel-size", "2"};
    // The images shared over CP (Note [images under context parallelism] in
    // model/gpt_vision.cpp): each rank's tower buffers hold half the micro-batch's images.
    QTest::newRow("vlm cp2") << 2
                             << kVlm + QStringList{"--context-parallel-size", "2",
                                                   "--attention-dropout", "0"};
    QTest::newRow("vlm tp2 sp dp2 distributed optimizer")
        << 4
        << kVlm + QStringList{"--tensor-model-parallel-size", "2", "--sequence-parallel",
                              "--use-distributed-optimizer"};
  }

  void vlm_ranks_hold_what_the_planner_says() {
    QFETCH(int, ranks);
    QFETCH(QStringList, layout);
    check(ranks, layout);
  }

  // The dispatch buffers (GptModel::allocate's MoE workspace) are what an MoE run's workspace
  // holds beyond the same model's dense run (the rest of the workspace is the same buffers).
  void moe_dispatch_buffers_are_the_extra_workspace() {
    std::vector<lattice::storage::MemorySample> dense, moe;
    measure(1, kBase, dense);
    if (QTest::currentTestFailed()) return;
    measure(1, kBase + kMoe, moe);
    if (QTest::currentTestFailed()) return;
    std::vector<std::string> args;
    for (const QString& f : kBase + kMoe) args.push_back(f.toStdString());
    auto options = lattice::parse_train_options(args);
    QVERIFY2(options, options.status().message().c_str());
    const lattice::MemoryEstimate estimate =
        lattice::estimate_memory(*options, *lattice::make_layout(*options, 1));
    const std::int64_t extra = moe[0].workspace - dense[0].workspace;
    qInfo("MoE workspace beyond dense: measured %lld bytes, planner dispatch %zu",
          static_cast<long long>(extra), estimate.stages[0].dispatch_bytes);
    QCOMPARE(extra, static_cast<std::int64_t>(estimate.stages[0].dispatch_bytes));
  }

  // The vision tower's scratch (VisionEncoder::allocate's kWorkspace and GptModel's splice
  // buffers) is what a vision-language run's workspace holds beyond the same language model's
  // (the rest of the workspace is the same buffers; a frozen layout would add GptModel's
  // norm_discard_ to both sides' difference, so both train whole).
  void vlm_tower_scratch_is_the_extra_workspace() { expect_tower_scratch({}); }
  // Under CP 2 each rank's tower holds one of the micro-batch's 2 images, and the model the
  // gathered patches (Note [images under context parallelism] in model/gpt_vision.cpp).
  void vlm_tower_scratch_over_cp_is_the_extra_workspace() {
    expect_tower_scratch({"--context-parallel-size", "2", "--attention-dropout", "0"}, 2);
  }

 private:
  void expect_tower_scratch(const QStringList& flags, int ranks = 1) {
    std::vector<lattice::storage::MemorySample> text, vlm;
    measure(ranks, kBase + flags, text);
    if (QTest::currentTestFailed()) return;
    measure(ranks, kBase + kVlm + flags, vlm);
    if (QTest::currentTestFailed()) return;
    std::vector<std::string> args;
    for (const QString& f : kBase + kVlm + flags) args.push_back(f.toStdString());
    auto options = lattice::parse_train_options(args);
    QVERIFY2(options, options.status().message().c_str());
    const lattice::MemoryEstimate estimate =
        lattice::estimate_memory(*options, *lattice::make_layout(*options, ranks));
    QCOMPARE(static_cast<int>(text.size()), ranks);
    QCOMPARE(static_cast<int>(vlm.size()), ranks);
    auto of_rank = [](const std::vector<lattice::storage::MemorySample>& all, int rank) {
      for (const auto& s : all)
        if (s.rank == rank) return s.workspace;
      return std::int64_t{-1};
    };
    for (int r = 0; r < ranks; r++) {
      const std::int64_t extra = of_rank(vlm, r) - of_rank(text, r);
      qInfo("tower workspace%s, rank %d: measured %lld bytes, planner %zu",
            qPrintable(flags.isEmpty() ? QString() : " " + flags.join(" ")), r,
            static_cast<long long>(extra), estimate.stages[0].vision_workspace_bytes);
      QCOMPARE(extra, static_cast<std::int64_t>(estimate.stages[0].vision_workspace_bytes));
    }
  }

  static inline const QStringList kLlama = {"--num-attention-heads",
                                            "8",
                                            "--group-query-attention",
                                            "--num-query-groups",
                                            "2",
                                            "--ffn-hidden-size",
                                            "320",
                                            "--swiglu",
                                            "--normalization",
                                            "RMSNorm",
                                            "--norm-epsilon",
                                            "1e-6",
                                            "--position-embedding-type",
                                            "rope",
                                            "--untie-embeddings-and-output-weights",
                                            "--disable-bias-linear"};

  static inline const QStringList kMoe = {"--num-experts",         "4",   "--moe-router-topk", "2",
                                          "--moe-ffn-hidden-size", "64",  "--moe-layer-freq",  "2",
                                          "--moe-aux-loss-coeff",  "0.01"};

  // A CLIP-shaped tower: 2 layers of width 32 (1 run), 16 x 16 images in 8 px patches (4 patches
  // and a class token).
  static inline const QStringList kVlm = {"--vision-model-type",
                                          "clip",
                                          "--vision-num-layers",
                                          "2",
                                          "--vision-hidden-size",
                                          "32",
                                          "--vision-num-attention-heads",
                                          "2",
                                          "--img-h",
                                          "16",
                                          "--img-w",
                                          "16",
                                          "--patch-dim",
                                          "8"};

  // A 4-layer model trained two steps; a row's flags come after these and win.
  static inline const QStringList kBase = {
      "--mock-data", "--num-layers",        "4",  "--hidden-size", "128",  "--num-attention-heads",
      "4",           "--seq-length",        "64", "--vocab-size",  "2047", "--micro-batch-size",
      "2",           "--global-batch-size", "8",  "--train-iters", "2",    "--eval-iters",
      "0",           "--threads",           "1"};

  // Trains kBase + `layout` on `ranks` ranks and compares every rank's recorded memory with the
  // planner's stage.
  void check(int ranks, const QStringList& layout) {
    const QStringList flags = kBase + layout;
    std::vector<lattice::storage::MemorySample> samples;
    measure(ranks, flags, samples);
    if (QTest::currentTestFailed()) return;

    std::vector<std::string> args;
    for (const QString& f : flags) args.push_back(f.toStdString());
    auto options = lattice::parse_train_options(args);
    QVERIFY2(options, options.status().message().c_str());
    auto parallel = lattice::make_layout(*options, ranks);
    QVERIFY2(parallel, parallel.status().message().c_str());
    const lattice::MemoryEstimate estimate = lattice::estimate_memory(*options, *parallel);
    QCOMPARE(static_cast<int>(samples.size()), ranks);
    for (const auto& s : samples) {
      const lattice::StageEstimate& want = estimate.stages[parallel->coord(s.rank).pp];
      // The distributed optimizer's ranks differ (frozen tensors): this rank's own figure.
      const int per_stage = parallel->world / parallel->pp;
      const double optimizer = want.optimizer_bytes_by_rank.empty()
                                   ? double(want.optimizer_bytes)
                                   : double(want.optimizer_bytes_by_rank[s.rank % per_stage]);
      const struct {
        const char* what;
        double got, expected;
      } rows[] = {{"weights", double(s.weights), double(want.weight_bytes)},
                  {"grads", double(s.grads), double(want.grad_bytes)},
                  {"optimizer state", double(s.optimizer_state), optimizer}};
      for (const auto& row : rows) {
        const double rel = std::abs(row.got - row.expected) / row.expected;
        qInfo("rank %d %s: measured %.0f bytes, planner %.0f (%.1f %%)", s.rank, row.what, row.got,
              row.expected, 100 * rel);
        QVERIFY2(row.got == row.expected,
                 qPrintable(QString("rank %1 %2: measured %3 bytes, planner %4")
                                .arg(s.rank)
                                .arg(row.what)
                                .arg(row.got)
                                .arg(row.expected)));
      }
      // The run store keeps workspace and communication buffers as one figure (run_recorder).
      const size_t comm = want.comm_buffer_bytes_of(static_cast<size_t>(s.rank % per_stage));
      const std::int64_t buffers = static_cast<std::int64_t>(want.all_workspace_bytes() + comm);
      qInfo("rank %d workspace and communication buffers: measured %lld bytes, planner %lld "
            "(workspace %zu, comm buffers %zu)",
            s.rank, static_cast<long long>(s.workspace), static_cast<long long>(buffers),
            want.all_workspace_bytes(), comm);
      QVERIFY2(s.workspace == buffers,
               qPrintable(QString("rank %1 workspace and communication buffers: measured %2 "
                                  "bytes, planner %3")
                              .arg(s.rank)
                              .arg(s.workspace)
                              .arg(buffers)));
      const double act_rel = std::abs(double(s.activations) - double(want.activation_bytes)) /
                             double(want.activation_bytes);
      qInfo("rank %d activations: measured %lld bytes, planner %zu (%.1f %%)", s.rank,
            static_cast<long long>(s.activations), want.activation_bytes, 100 * act_rel);
      QVERIFY2(s.activations == static_cast<std::int64_t>(want.activation_bytes),
               qPrintable(QString("rank %1 activations: measured %2 bytes, "
                                  "planner %3")
                              .arg(s.rank)
                              .arg(s.activations)
                              .arg(want.activation_bytes)));
    }
  }

  // Trains `flags` on `ranks` ranks with --log-memory and reads every rank's memory after the
  // first iteration back from the run store.
  void measure(int ranks, const QStringList& flags,
               std::vector<lattice::storage::MemorySample>& samples) {
    QTemporaryDir dir;
    const lattice::testing::Run job = lattice::testing::run_lattice(
        ranks, QStringList{"train", "--log-memory", "--db", dir.filePath("runs.sqlite"),
                           "--run-name", "mem"} +
                   flags);
    QVERIFY2(job.exit_code == 0, qPrintable(job.out + job.err));
    QVERIFY2(job.out.contains(QString("[Rank %1] ").arg(ranks - 1)) &&
                 job.out.contains("(after 1 iterations) memory (MiB)"),
             qPrintable(job.out));
    auto store = lattice::storage::RunStore::open(dir.filePath("runs.sqlite").toStdString());
    QVERIFY(store);
    auto run = (*store)->find_run("mem");
    QVERIFY(run);
    auto read = (*store)->memory_at(run->id, 1);
    QVERIFY(read);
    samples = *read;
  }
};

QTEST_GUILESS_MAIN(ParallelMemory)
#include "test_parallel_memory.moc"
