// The planner with MoE layers and the five axes (issue 25): per-rank expert and router counts on
// the expert grid (E / EP experts per rank, each split over ETP = TP; routers whole), the
// distributed optimizer sharding experts over EDP and the rest over DP x CP, the expert rows at
// the capacity factor, the dispatch buffers, the all-to-all and CP ring step terms, and a search
// that finds CP and EP layouts when only they fit. The counts are worked out by hand here; the
// measured side (a real run per layout) is tests/parallel/test_parallel_memory's MoE rows.
#include <QtTest/QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <cmath>

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

// 4 layers of hidden 64 (GPT-2's kind: GELU, LayerNorm, biases, learned positions), MoE on layers
// 0 and 2: 8 experts of width 128, top-2. Sequence 32, micro-batch 2: N = 64 tokens a rank.
QStringList moe(const QStringList& extra) {
  return QStringList{"--num-layers",          "4",    "--hidden-size",         "64",
                     "--num-attention-heads", "4",    "--seq-length",          "32",
                     "--vocab-size",          "1000", "--num-experts",         "8",
                     "--moe-router-topk",     "2",    "--moe-ffn-hidden-size", "128",
                     "--moe-layer-freq",      "2",    "--micro-batch-size",    "2",
                     "--global-batch-size",   "16"} +
         extra;
}

// One expert whole: fc1 (128, 64) + bias 128, fc2 (64, 128) + bias 64.
constexpr int64_t kExpert = 128 * 64 + 128 + 64 * 128 + 64;  // 16576
// Of it, what ETP splits (all but fc2's bias).
constexpr int64_t kExpertSplit = kExpert - 64;  // 16512
constexpr int64_t kRouter = 8 * 64;             // (E, C)
constexpr int kMoeLayers = 2;

lattice::MemoryEstimate memory(const QStringList& flags, int world) {
  const lattice::TrainOptions o = options(moe(flags));
  return lattice::estimate_memory(o, layout_of(o, world));
}

}  // namespace

class PlannerMoeTest : public QObject {
  Q_OBJECT

 private slots:
  // EP 1: every expert whole on the rank, as the model counts it (num_parameters).
  void one_rank_holds_every_expert() {
    const lattice::TrainOptions o = options(moe({}));
    const lattice::MemoryEstimate est = lattice::estimate_memory(o, layout_of(o, 1));
    const lattice::StageEstimate& st = est.stages[0];
    QCOMPARE(st.parameters, o.model.num_parameters());
    QCOMPARE(st.expert_parameters, kMoeLayers * 8 * kExpert);
    QCOMPARE(st.router_parameters, kMoeLayers * kRouter);
    QCOMPARE(st.weight_bytes, static_cast<size_t>(o.model.num_parameters()) * 4);  // fp32
  }

  // EP 4 on 8 ranks (TP 1, DP 8, EDP 2): 2 of the 8 experts per layer; the other 6 are elsewhere.
  void expert_parallelism_holds_e_over_ep_experts() {
    const lattice::TrainOptions o = options(moe({"--expert-model-parallel-size", "4"}));
    const lattice::ParallelLayout l = layout_of(o, 8);
    QCOMPARE(l.edp, 2);
    const lattice::StageEstimate st = lattice::estimate_memory(o, l).stages[0];
    QCOMPARE(st.expert_parameters, kMoeLayers * 2 * kExpert);  // 66304
    QCOMPARE(st.router_parameters, kMoeLayers * kRouter);      // replicated on every rank
    QCOMPARE(st.parameters, o.model.num_parameters() - kMoeLayers * 6 * kExpert);
  }

  // ETP = TP 2 with EP 2 on 8 ranks (DP 4, EDP 2): 4 experts a rank, each's fc1 / fc2 halved,
  // fc2's bias whole; the router whole on both TP ranks.
  void expert_tensor_parallelism_splits_each_expert() {
    const lattice::TrainOptions o =
        options(moe({"--expert-model-parallel-size", "2", "--tensor-model-parallel-size", "2"}));
    const lattice::ParallelLayout l = layout_of(o, 8);
    QCOMPARE(l.etp, 2);
    QCOMPARE(l.edp, 2);
    const lattice::StageEstimate st = lattice::estimate_memory(o, l).stages[0];
    QCOMPARE(st.expert_parameters, kMoeLayers * 4 * (kExpertSplit / 2 + 64));  // 66560
    QCOMPARE(st.router_parameters, kMoeLayers * kRouter);
    // Replicated on the rank: the dense layers' and MoE layers' norms and row biases, the
    // routers, the experts' fc2 biases, the position table and the final norm.
    const int64_t norms = 2 * (2 * 64);
    const int64_t dense_layer = norms + 2 * 64, moe_layer = norms + 64 + kRouter + 4 * 64;
    QCOMPARE(st.replicated_parameters,
             2 * dense_layer + kMoeLayers * moe_layer + o.model.max_positions() * 64 + 2 * 64);
  }

  // The distributed optimizer shards the experts over EDP 2 and the rest over DP 8 (fp32: the
  // moments, 8 bytes a parameter), each rounded up.
  void distributed_optimizer_shards_experts_over_edp() {
    const lattice::TrainOptions o =
        options(moe({"--expert-model-parallel-size", "4", "--use-distributed-optimizer"}));
    const lattice::StageEstimate st = lattice::estimate_memory(o, layout_of(o, 8)).stages[0];
    const int64_t experts = kMoeLayers * 2 * kExpert;
    const int64_t dense = o.model.num_parameters() - kMoeLayers * 8 * kExpert;
    auto up = [](int64_t n, int64_t d) { return (n + d - 1) / d; };
    QCOMPARE(st.optimizer_bytes, static_cast<size_t>(up(dense, 8) * 8 + up(experts, 2) * 8));
    // EP 1: EDP = DP, one arena sharded once (the engine's).
    const lattice::TrainOptions one = options(moe({"--use-distributed-optimizer"}));
    const lattice::StageEstimate all = lattice::estimate_memory(one, layout_of(one, 8)).stages[0];
    QCOMPARE(all.optimizer_bytes, static_cast<size_t>(up(one.model.num_parameters(), 8) * 8));
  }

  // Expert rows per layer and micro-batch: N k = 128 with EP 1 (the engine's buffers); with EP 4
  // the worst case N EP min(k, E/EP) = 64 x 4 x 2 = 512, and the capacity factor caps it at
  // E ceil(N k / E f): f 1 gives 8 x 16 = 128, f 2 gives 256. Balanced routing gives N k = 128.
  void expert_rows_follow_the_capacity_factor() {
    QCOMPARE(memory({}, 1).stages[0].expert_rows, int64_t{128});
    QCOMPARE(memory({"--expert-model-parallel-size", "4"}, 8).stages[0].expert_rows, int64_t{512});
    QCOMPARE(memory({"--expert-model-parallel-size", "4"}, 8).stages[0].expert_rows_expected,
             int64_t{128});
    QCOMPARE(memory({"--expert-model-parallel-size", "4", "--moe-expert-capacity-factor", "1.0"}, 8)
                 .stages[0]
                 .expert_rows,
             int64_t{128});
    QCOMPARE(memory({"--expert-model-parallel-size", "4", "--moe-expert-capacity-factor", "2.0"}, 8)
                 .stages[0]
                 .expert_rows,
             int64_t{256});
    // EP 8, one expert a rank: a token sends it at most one of its k routes.
    QCOMPARE(memory({"--expert-model-parallel-size", "8"}, 8).stages[0].expert_rows, int64_t{512});
  }

  // The MoE activations and dispatch buffers at EP 4 (fp32, S = 512 rows, N k = 128 routes), by
  // hand per MoE layer: FC1 and GELU outputs max(S Fm, N F) = 65536 each, the expert rows' input
  // S C and the routes' outputs N k C (floats); router probabilities N E = 512 and route weights
  // 128 (floats); routes, slots and rows (3 x 128), two per-expert counts 16 and every EP rank's
  // counts 4 x 8 (int32).
  void moe_activations_and_dispatch_by_hand() {
    const lattice::StageEstimate st = memory({"--expert-model-parallel-size", "4"}, 8).stages[0];
    const size_t layer =
        4 * (2 * 65536 + (512 + 128) * 64) + 4 * (512 + 128) + 4 * (3 * 128 + 16 + 4 * 8);
    QCOMPARE(st.moe_activation_bytes_per_micro_batch, kMoeLayers * layer);
    // Once per chunk: logits N E, the routes' rows' grads N k C, the activation's grads S Fm
    // (floats), the route weights' grads N k and the 4 layers' aux losses (floats), and the
    // all-to-all buffers: the rank's routes going out N k C, the rows its experts receive and
    // hold regrouped 2 S C.
    const size_t dispatch =
        4 * (512 + 128 * 64 + 512 * 128) + 4 * (128 + 4) + 4 * (128 + 2 * 512) * 64;
    QCOMPARE(st.dispatch_bytes, dispatch);
    QCOMPARE(st.total_bytes(), st.weight_bytes + st.grad_bytes + st.optimizer_bytes +
                                   st.activation_bytes + st.dispatch_bytes + st.workspace_bytes +
                                   st.comm_buffer_bytes);
    QCOMPARE(memory({}, 1).stages[0].dispatch_bytes,
             size_t{4 * (512 + 128 * 64 + 128 * 128) + 4 * (128 + 4)});
  }

  // EP all-to-alls: none at EP 1; at EP 4 on one node of 8 H100s, per MoE layer and micro-batch
  // 4 (dispatch + combine, forward and backward) of 3/4 of the rank's routes x hidden x 2 bytes;
  // growing with EP at the same world.
  void all_to_all_term_grows_with_ep() {
    const lattice::ClusterSpec c = cluster("h100", 1, 8);
    auto step = [&](int ep) {
      const lattice::TrainOptions o =
          options(moe({"--bf16", "--expert-model-parallel-size", QString::number(ep)}));
      return lattice::estimate_step(o, layout_of(o, 8), c);
    };
    QCOMPARE(step(1).ep_comm_s, 0.0);
    const double routes = 32 * 2 * 2, bytes = routes * 64 * 2;  // M = 16 / (2 x 8) = 1
    const double want = 1 * 4 * kMoeLayers * 0.75 * bytes / c.device.intra_node_bandwidth;
    QVERIFY2(std::abs(step(4).ep_comm_s - want) <= 1e-12 * want,
             qPrintable(QString("%1 vs %2").arg(step(4).ep_comm_s).arg(want)));
    QVERIFY(step(2).ep_comm_s > 0);
    QVERIFY(step(4).ep_comm_s > step(2).ep_comm_s);
    QVERIFY(step(8).ep_comm_s > step(4).ep_comm_s);
    const lattice::StepEstimate s = step(4);
    QVERIFY(std::abs(s.compute_s + s.tp_comm_s + s.cp_comm_s + s.ep_comm_s + s.pp_comm_s +
                     s.pp_bubble_s + s.dp_comm_s + s.optimizer_s - s.total_s) <= 1e-12 * s.total_s);
  }

  // Expert GEMMs count k of the E experts a token: 8 experts or 64 at top-2 cost the same
  // compute (the router aside), while the weights grow eightfold.
  void expert_compute_counts_k_experts_not_e() {
    const lattice::ClusterSpec c = cluster("h100", 1, 8);
    auto compute = [&](const char* experts) {
      QStringList flags = moe({"--bf16"});
      flags[flags.indexOf("--num-experts") + 1] = experts;
      const lattice::TrainOptions o = options(flags);
      return lattice::estimate_step(o, layout_of(o, 8), c).compute_s;
    };
    const double router_share = 2.0 * 64 * (64 - 8);  // per token and MoE layer, forward
    const double per_token_8 = 2 * 64 * 192 + 2 * 64 * 64 + 2 * 32 * 64;  // attention part
    QVERIFY(compute("64") > compute("8"));
    QVERIFY2(compute("64") - compute("8") < compute("8") * router_share / per_token_8,
             "the 56 more experts should cost only their router columns");
  }

  // The CP ring: hidden behind the attention inside a node (NVLink), exposed across nodes.
  void cp_ring_is_hidden_in_a_node_and_not_across() {
    const QStringList flags = {"--num-layers",
                               "4",
                               "--hidden-size",
                               "1024",
                               "--num-attention-heads",
                               "8",
                               "--seq-length",
                               "8192",
                               "--vocab-size",
                               "50257",
                               "--micro-batch-size",
                               "1",
                               "--bf16",
                               "--context-parallel-size",
                               "2"};
    const lattice::TrainOptions o = options(flags);
    const lattice::StepEstimate inside =
        lattice::estimate_step(o, layout_of(o, 2), cluster("h100", 1, 2));
    QCOMPARE(inside.cp_comm_s, 0.0);
    const lattice::ClusterSpec c = cluster("h100", 2, 1);
    const lattice::StepEstimate across = lattice::estimate_step(o, layout_of(o, 2), c);
    // M = 1; K and V (2 x 1024 of the 3072-wide QKV) of 4096 tokens, 2 bytes, twice a layer
    // (forward, backward), and their gradients in fp32 once (Note [ring attention in 16 bits]).
    const double kv = 4096.0 * 2048 * 2;
    const double ring = (2 + 2) * 4 * kv / c.device.inter_node_bandwidth;
    const double attention =
        4096.0 * 3 * 4 * (2.0 * 8192 * 1024) / (c.device.peak_flops * c.compute_efficiency);
    QVERIFY2(std::abs(across.cp_comm_s - (ring - attention)) <= 1e-9 * ring,
             qPrintable(QString("%1 vs %2").arg(across.cp_comm_s).arg(ring - attention)));
    QVERIFY(across.cp_comm_s > 0);
  }

  // A sequence whose logits and activations fit one H100 only when CP splits it (one head: no
  // TP; one layer: no PP).
  void suggest_finds_cp_when_only_it_fits() {
    const lattice::TrainOptions base =
        options({"--num-layers", "1", "--hidden-size", "1024", "--num-attention-heads", "1",
                 "--seq-length", "262144", "--vocab-size", "64000", "--position-embedding-type",
                 "rope", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"});
    const lattice::ClusterSpec c = cluster("h100", 1, 8);
    lattice::SuggestStats stats;
    const std::vector<lattice::LayoutCandidate> list =
        lattice::suggest_layouts(base, c, 50, &stats);
    QVERIFY(!list.empty());
    QVERIFY2(stats.fitting > 0 && stats.fitting < stats.valid, "some CP layouts should fit");
    // Without CP (DP 8) the logits alone, 262144 x 64000 in fp32 and bf16, overflow the device.
    lattice::TrainOptions on = base;
    on.device = "cuda";  // as the search estimates for an H100 (flash attention's saved tensor)
    QVERIFY(!lattice::fits_in_memory(lattice::estimate_memory(on, layout_of(on, 8)), c));
    for (const lattice::LayoutCandidate& k : list) {
      if (!k.fits) continue;
      QVERIFY2(k.layout.cp > 1, lattice::layout_flags(k.options).c_str());
    }
    QVERIFY(list.front().fits);
    QVERIFY(lattice::layout_flags(list.front().options).find("--context-parallel-size") !=
            std::string::npos);
  }

  // Experts too large for one H100 unless EP splits them (one head: no TP; one layer: no PP).
  void suggest_finds_ep_when_only_it_fits() {
    const lattice::TrainOptions base = options({"--num-layers",
                                                "1",
                                                "--hidden-size",
                                                "4096",
                                                "--num-attention-heads",
                                                "1",
                                                "--seq-length",
                                                "512",
                                                "--vocab-size",
                                                "32000",
                                                "--position-embedding-type",
                                                "rope",
                                                "--num-experts",
                                                "8",
                                                "--moe-router-topk",
                                                "2",
                                                "--moe-ffn-hidden-size",
                                                "131072",
                                                "--swiglu",
                                                "--micro-batch-size",
                                                "1",
                                                "--global-batch-size",
                                                "8",
                                                "--bf16"});
    const lattice::ClusterSpec c = cluster("h100", 1, 8);
    lattice::SuggestStats stats;
    const std::vector<lattice::LayoutCandidate> list =
        lattice::suggest_layouts(base, c, 50, &stats);
    QVERIFY(!list.empty());
    QVERIFY2(stats.fitting > 0 && stats.fitting < stats.valid, "some EP layouts should fit");
    // EP 1 with the distributed optimizer (DP 8): 12.9 B expert parameters at 6 + 12 / 8 bytes
    // (the fp32 master sharded with the moments), 97 GB.
    lattice::TrainOptions one = base;
    one.parallel.use_distributed_optimizer = true;
    one.device = "cuda";
    QVERIFY(!lattice::fits_in_memory(lattice::estimate_memory(one, layout_of(one, 8)), c));
    for (const lattice::LayoutCandidate& k : list) {
      if (!k.fits) continue;
      QVERIFY2(k.layout.ep > 1, lattice::layout_flags(k.options).c_str());
    }
    QVERIFY(list.front().fits);
    QVERIFY(lattice::layout_flags(list.front().options).find("--expert-model-parallel-size") !=
            std::string::npos);
  }

  // `lattice plan` prints the MoE lines and the all-to-all, and --json carries them.
  void plan_prints_the_moe_terms() {
    const QStringList flags = QStringList{"plan", "--world-size", "8", "--device", "h100"} +
                              moe({"--bf16", "--expert-model-parallel-size", "4"});
    const lattice::testing::Run r =
        lattice::testing::run_process(LATTICE_CLI_PATH, flags, {}, 60000);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    for (const char* part : {"MoE per rank: 2 of 8 experts", "EP all-to-all", "dispatch"})
      QVERIFY2(r.out.contains(part), qPrintable(QString(part) + " missing from:\n" + r.out));
    const lattice::testing::Run j =
        lattice::testing::run_process(LATTICE_CLI_PATH, flags + QStringList{"--json"}, {}, 60000);
    QVERIFY2(j.exit_code == 0, qPrintable(j.err));
    const QJsonObject doc = QJsonDocument::fromJson(j.out.toUtf8()).object();
    const QJsonObject stage = doc["memory"].toObject()["stages"].toArray()[0].toObject();
    QCOMPARE(stage["moe"].toObject()["expert_parameters"].toInteger(), kMoeLayers * 2 * kExpert);
    QVERIFY(doc["step"].toObject()["ep_comm_s"].toDouble() > 0);
  }
};

QTEST_GUILESS_MAIN(PlannerMoeTest)
#include "test_planner_moe.moc"
