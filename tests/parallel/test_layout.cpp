// The parallel layout and the planner as a user of Megatron-LM expects them: Megatron's rank
// order and groups, the layers each (virtual) stage holds, one sentence per broken rule, exact
// parameter counts per rank, and `lattice plan` as a process.
#include <QtTest/QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <numeric>

#include "common/process.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"
#include "model/param_layout.h"

using lattice::ParallelLayout;
using Groups = std::vector<std::vector<int>>;

namespace {

ParallelLayout grid(int world, int tp, int pp, int vpp = 1, int num_layers = 8) {
  ParallelLayout l;
  l.world = world;
  l.tp = tp;
  l.pp = pp;
  l.dp = world / (tp * pp);
  l.vpp = vpp;
  l.num_layers = num_layers;
  return l;
}

std::vector<std::string> to_args(const QStringList& list) {
  std::vector<std::string> args;
  for (const QString& s : list) args.push_back(s.toStdString());
  return args;
}

lattice::TrainOptions options(const QStringList& flags) {
  lattice::Result<lattice::TrainOptions> o = lattice::parse_train_flags(to_args(flags));
  if (!o) qFatal("bad test flags: %s", o.status().message().c_str());
  return *o;
}

QString joined(const std::vector<std::string>& lines) {
  QStringList out;
  for (const std::string& l : lines) out << QString::fromStdString(l);
  return out.join("\n");
}

QString show(const Groups& groups) {
  QStringList out;
  for (const auto& g : groups) {
    QStringList ranks;
    for (int r : g) ranks << QString::number(r);
    out << "[" + ranks.join(",") + "]";
  }
  return out.join(" ");
}

using lattice::testing::Run;

// `lattice args` as one process, given 60 s.
Run lattice_cli(const QStringList& args) {
  return lattice::testing::run_process(LATTICE_CLI_PATH, args, {}, 60000);
}

Groups json_groups(const QJsonValue& v) {
  Groups groups;
  for (const QJsonValue& g : v.toArray()) {
    std::vector<int>& ranks = groups.emplace_back();
    for (const QJsonValue& r : g.toArray()) ranks.push_back(r.toInt());
  }
  return groups;
}

// Megatron's published example (parallel_state.initialize_model_parallel's docstring).
const QStringList kMegatronExample = {"plan", "--world-size",
                                      "16",   "--tensor-model-parallel-size",
                                      "2",    "--pipeline-model-parallel-size",
                                      "4",    "--num-layers",
                                      "8",    "--global-batch-size",
                                      "16",   "--micro-batch-size",
                                      "2"};

}  // namespace

class LayoutTest : public QObject {
  Q_OBJECT
 private slots:
  void megatron_example_groups_exactly() {
    const ParallelLayout l = grid(16, 2, 4);
    QCOMPARE(show(l.tensor_groups()),
             QString("[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]"));
    QCOMPARE(show(l.data_groups()),
             QString("[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]"));
    QCOMPARE(show(l.pipeline_groups()), QString("[0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]"));
    QCOMPARE(show(l.model_groups()), QString("[0,1,4,5,8,9,12,13] [2,3,6,7,10,11,14,15]"));
    QCOMPARE(show(l.embedding_groups()), QString("[0,12] [1,13] [2,14] [3,15]"));
  }

  void one_stage_embedding_group_is_the_rank_itself() {
    QCOMPARE(show(grid(4, 2, 1).embedding_groups()), QString("[0] [1] [2] [3]"));
  }

  void coord_and_rank_round_trip() {
    for (auto [world, tp, pp] :
         {std::tuple{16, 2, 4}, {12, 3, 2}, {8, 1, 8}, {6, 6, 1}, {1, 1, 1}}) {
      const ParallelLayout l = grid(world, tp, pp);
      for (int r = 0; r < world; r++) {
        const ParallelLayout::Coord c = l.coord(r);
        QVERIFY2(c.tp < tp && c.dp < l.dp && c.pp < pp, qPrintable(QString::number(r)));
        QCOMPARE(c.tp + tp * (c.dp + l.dp * c.pp), r);
        QCOMPARE(l.rank(c), r);
      }
    }
  }

  void every_rank_is_in_one_group_of_each_kind() {
    const ParallelLayout l = grid(24, 2, 3);
    for (const Groups& groups :
         {l.tensor_groups(), l.data_groups(), l.pipeline_groups(), l.model_groups()}) {
      std::vector<int> seen(24, 0);
      for (const auto& g : groups) {
        QVERIFY(std::is_sorted(g.begin(), g.end()));
        for (int r : g) seen[r]++;
      }
      QCOMPARE(std::count(seen.begin(), seen.end(), 1), 24L);
    }
  }

  void stages_hold_consecutive_layers() {
    const ParallelLayout l = grid(4, 1, 4, 1, 24);
    for (int p = 0; p < 4; p++) {
      QCOMPARE(l.stage_layers(p, 0).begin, 6 * p);
      QCOMPARE(l.stage_layers(p, 0).end, 6 * p + 6);
    }
  }

  void uneven_split_gives_first_and_last_their_layers() {
    // 9 layers on 4 stages: 3 on the first, 2 on the last (it also holds the LM head), the
    // two between share 4.
    lattice::Result<ParallelLayout> l =
        lattice::make_layout(options({"--num-layers", "9", "--pipeline-model-parallel-size", "4",
                                      "--decoder-first-pipeline-num-layers", "3",
                                      "--decoder-last-pipeline-num-layers", "2"}),
                             4);
    QVERIFY2(l.is_ok(), l.status().message().c_str());
    const int begins[] = {0, 3, 5, 7}, ends[] = {3, 5, 7, 9};
    for (int p = 0; p < 4; p++) {
      QCOMPARE(l->stage_layers(p, 0).begin, begins[p]);
      QCOMPARE(l->stage_layers(p, 0).end, ends[p]);
      QCOMPARE(l->stage_num_layers(p), ends[p] - begins[p]);
    }
  }

  void virtual_stages_interleave_layers() {
    // 8 layers, PP 2, 2 layers per virtual stage: virtual stage c * PP + p on rank p.
    lattice::Result<ParallelLayout> l = lattice::make_layout(
        options({"--num-layers", "8", "--pipeline-model-parallel-size", "2",
                 "--num-layers-per-virtual-pipeline-stage", "2", "--global-batch-size", "8"}),
        2);
    QVERIFY2(l.is_ok(), l.status().message().c_str());
    QCOMPARE(l->vpp, 2);
    auto range = [&](int p, int c) {
      const ParallelLayout::LayerRange r = l->stage_layers(p, c);
      return QPair<int, int>(r.begin, r.end);
    };
    QCOMPARE(range(0, 0), (QPair<int, int>(0, 2)));
    QCOMPARE(range(0, 1), (QPair<int, int>(4, 6)));
    QCOMPARE(range(1, 0), (QPair<int, int>(2, 4)));
    QCOMPARE(range(1, 1), (QPair<int, int>(6, 8)));
  }

  void make_layout_reads_the_flags() {
    lattice::Result<ParallelLayout> l = lattice::make_layout(
        options({"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                 "--global-batch-size", "8"}),
        8);
    QVERIFY2(l.is_ok(), l.status().message().c_str());
    QCOMPARE(l->dp, 2);
    QCOMPARE(l->vpp, 1);
    QCOMPARE(l->num_layers, 2);
  }

  // Megatron's default: --global-batch-size not given is --micro-batch-size x DP.
  void global_batch_defaults_to_micro_batch_times_data_parallel() {
    const lattice::TrainOptions o =
        options({"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4",
                 "--num-layers", "8", "--micro-batch-size", "3"});
    QCOMPARE(o.global_batch_size, 0);
    const lattice::TrainOptions resolved = lattice::with_default_global_batch(o, 16);
    QCOMPARE(resolved.global_batch_size, 3 * 2);  // DP = 16 / (2 x 4)
    QVERIFY(lattice::layout_errors(resolved, 16).empty());
    QCOMPARE(lattice::with_default_global_batch(o, 64).global_batch_size, 3 * 8);
    // A given batch is kept; a world that TP x PP does not divide leaves it for layout_errors.
    lattice::TrainOptions given = o;
    given.global_batch_size = 12;
    QCOMPARE(lattice::with_default_global_batch(given, 16).global_batch_size, 12);
    QCOMPARE(lattice::with_default_global_batch(o, 12).global_batch_size, 0);
  }

  void plan_without_a_global_batch_uses_megatrons_default() {
    const Run r = lattice_cli({"plan", "--world-size", "16", "--tensor-model-parallel-size", "2",
                               "--pipeline-model-parallel-size", "4", "--num-layers", "8",
                               "--micro-batch-size", "2"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains("batch: global 4 = micro 2 x DP 2 x 1 micro-batches"),
             qPrintable(r.out));
  }

  void each_rule_is_one_sentence_naming_the_flag_data() {
    QTest::addColumn<QStringList>("flags");
    QTest::addColumn<int>("world");
    QTest::addColumn<QString>("message");
    QTest::newRow("world size") << QStringList{"--tensor-model-parallel-size", "2",
                                               "--pipeline-model-parallel-size", "2"}
                                << 6
                                << "world size 6 (--world-size, or the ranks started) is not a "
                                   "multiple of --tensor-model-parallel-size 2 x "
                                   "--pipeline-model-parallel-size 2 = 4";
    QTest::newRow("world positive")
        << QStringList{} << 0
        << "world size 0 (--world-size, or the ranks started) must be positive";
    QTest::newRow("tp positive") << QStringList{"--tensor-model-parallel-size", "0"} << 1
                                 << "--tensor-model-parallel-size must be positive, got 0";
    QTest::newRow("pp positive") << QStringList{"--pipeline-model-parallel-size", "0"} << 1
                                 << "--pipeline-model-parallel-size must be positive, got 0";
    QTest::newRow("heads")
        << QStringList{"--tensor-model-parallel-size",
                       "3",
                       "--num-attention-heads",
                       "16",
                       "--hidden-size",
                       "48"}
        << 3 << "--tensor-model-parallel-size 3 does not divide --num-attention-heads 16";
    QTest::newRow("ffn") << QStringList{"--tensor-model-parallel-size", "2", "--ffn-hidden-size",
                                        "129"}
                         << 2
                         << "--tensor-model-parallel-size 2 does not divide the MLP hidden size "
                            "129 (--ffn-hidden-size)";
    QTest::newRow("layers") << QStringList{"--pipeline-model-parallel-size", "4", "--num-layers",
                                           "6"}
                            << 4
                            << "--pipeline-model-parallel-size 4 does not divide --num-layers 6 "
                               "(or set --decoder-first-pipeline-num-layers / "
                               "--decoder-last-pipeline-num-layers)";
    QTest::newRow("uneven split needs pp")
        << QStringList{"--decoder-first-pipeline-num-layers", "1"} << 1
        << "--decoder-first-pipeline-num-layers 1 split the pipeline unevenly, which needs "
           "--pipeline-model-parallel-size > 1";
    QTest::newRow("uneven split shares")
        << QStringList{"--pipeline-model-parallel-size",     "3", "--num-layers", "8",
                       "--decoder-last-pipeline-num-layers", "1"}
        << 3
        << "--decoder-last-pipeline-num-layers 1 leave 7 of --num-layers 8 for 2 other pipeline "
           "stage(s), which must share them evenly (at least one each)";
    QTest::newRow("uneven split not interleaved")
        << QStringList{"--pipeline-model-parallel-size",
                       "2",
                       "--num-layers",
                       "8",
                       "--decoder-first-pipeline-num-layers",
                       "5",
                       "--num-layers-per-virtual-pipeline-stage",
                       "1"}
        << 2
        << "--decoder-first-pipeline-num-layers 5 cannot be combined with "
           "--num-layers-per-virtual-pipeline-stage";
    QTest::newRow("virtual negative")
        << QStringList{"--num-layers-per-virtual-pipeline-stage", "-1"} << 1
        << "--num-layers-per-virtual-pipeline-stage must not be negative, got -1";
    QTest::newRow("virtual layers")
        << QStringList{"--num-layers",
                       "8",
                       "--pipeline-model-parallel-size",
                       "2",
                       "--num-layers-per-virtual-pipeline-stage",
                       "3",
                       "--global-batch-size",
                       "8"}
        << 2
        << "--num-layers-per-virtual-pipeline-stage 3 does not divide the 4 layers of each "
           "pipeline stage (--num-layers 8 / --pipeline-model-parallel-size 2)";
    QTest::newRow("virtual needs pp")
        << QStringList{"--num-layers", "4", "--num-layers-per-virtual-pipeline-stage", "2"} << 1
        << "--num-layers-per-virtual-pipeline-stage 2 interleaves pipeline stages, which needs "
           "--pipeline-model-parallel-size > 1";
    QTest::newRow("virtual micro-batches")
        << QStringList{"--num-layers",
                       "8",
                       "--pipeline-model-parallel-size",
                       "2",
                       "--num-layers-per-virtual-pipeline-stage",
                       "2",
                       "--global-batch-size",
                       "12"}
        << 2
        << "--num-layers-per-virtual-pipeline-stage (interleaved 1F1B) needs the 3 micro-batches "
           "per data-parallel rank (--global-batch-size 12 / (--micro-batch-size 4 x "
           "data-parallel size 1)) to be a multiple of --pipeline-model-parallel-size 2";
    QTest::newRow("global batch")
        << QStringList{"--global-batch-size", "8"} << 4
        << "--global-batch-size 8 is not a multiple of --micro-batch-size 4 x data-parallel size "
           "4 = 16 (data-parallel size = world size 4 / (TP 1 x PP 1))";
    QTest::newRow("sequence parallel needs tp")
        << QStringList{"--sequence-parallel"} << 1
        << "--sequence-parallel splits the sequence over tensor-parallel ranks, which needs "
           "--tensor-model-parallel-size > 1";
    QTest::newRow("sequence parallel seq")
        << QStringList{"--sequence-parallel", "--tensor-model-parallel-size", "2", "--seq-length",
                       "63"}
        << 2
        << "--tensor-model-parallel-size 2 does not divide --seq-length 63, which "
           "--sequence-parallel splits";
  }

  void each_rule_is_one_sentence_naming_the_flag() {
    QFETCH(QStringList, flags);
    QFETCH(int, world);
    QFETCH(QString, message);
    const std::vector<std::string> errors = lattice::layout_errors(options(flags), world);
    QCOMPARE(joined(errors), message);
    QVERIFY(!lattice::make_layout(options(flags), world).is_ok());
  }

  void every_broken_rule_is_reported_at_once() {
    const lattice::TrainOptions o = options(
        {"--tensor-model-parallel-size", "3", "--pipeline-model-parallel-size", "3", "--num-layers",
         "4", "--num-attention-heads", "4", "--sequence-parallel", "--seq-length", "64"});
    const std::vector<std::string> errors = lattice::layout_errors(o, 10);
    QCOMPARE(errors.size(), size_t{5});
    const QString all = joined(errors);
    for (const char* part : {"world size 10", "does not divide --num-attention-heads 4",
                             "does not divide the MLP hidden size 256",
                             "does not divide --num-layers 4", "does not divide --seq-length 64"})
      QVERIFY2(all.contains(part), qPrintable(all));
    lattice::Result<ParallelLayout> l = lattice::make_layout(o, 10);
    QCOMPARE(QString::fromStdString(l.status().message()), all);
  }

  void model_rules_are_left_to_train_options() {
    // hidden % heads is ModelConfig::validate's; the layout does not repeat it.
    const lattice::TrainOptions o = options({"--hidden-size", "30", "--num-attention-heads", "4"});
    QVERIFY(lattice::layout_errors(o, 1).empty());
    QVERIFY(joined(o.validate(false))
                .contains("--num-attention-heads 4 does not divide --hidden-size 30"));
  }

  void stage_parameters_sum_to_the_model_data() {
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<int>("virtual_layers");
    for (int tp : {1, 2, 4})
      for (int pp : {1, 2, 4}) QTest::addRow("tp%d pp%d", tp, pp) << tp << pp << 0;
    QTest::newRow("tp2 pp2 interleaved") << 2 << 2 << 2;
  }

  void stage_parameters_sum_to_the_model() {
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(int, virtual_layers);
    const lattice::TrainOptions o = options(
        {"--num-layers", "8", "--hidden-size", "64", "--num-attention-heads", "4", "--vocab-size",
         "1000", "--max-position-embeddings", "128", "--tensor-model-parallel-size",
         QString::number(tp), "--pipeline-model-parallel-size", QString::number(pp),
         "--num-layers-per-virtual-pipeline-stage", QString::number(virtual_layers),
         "--global-batch-size", "16"});
    lattice::Result<ParallelLayout> l = lattice::make_layout(o, tp * pp);
    QVERIFY2(l.is_ok(), l.status().message().c_str());
    const lattice::MemoryEstimate est = lattice::estimate_memory(o, *l);
    QCOMPARE(est.stages.size(), size_t(pp));
    int64_t sum = 0;
    for (const lattice::StageEstimate& s : est.stages)
      sum += tp * (s.parameters - s.replicated_parameters) + s.replicated_parameters;
    const int64_t tied_copy = pp > 1 ? int64_t{o.model.padded_vocab_size()} * 64 : 0;
    QCOMPARE(sum, o.model.num_parameters() + tied_copy);
  }

  void stage_parameters_match_the_engines_param_layout() {
    const lattice::TrainOptions o =
        options({"--num-layers", "8", "--hidden-size", "64", "--num-attention-heads", "4",
                 "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                 "--num-layers-per-virtual-pipeline-stage", "2", "--global-batch-size", "16"});
    const ParallelLayout l = *lattice::make_layout(o, 4);
    const lattice::MemoryEstimate est = lattice::estimate_memory(o, l);
    for (int p = 0; p < l.pp; p++) {
      int64_t numel = 0, replicated = 0;
      for (int c = 0; c < l.vpp; c++) {
        lattice::ModelShard shard;
        shard.tp_rank = 1;
        shard.tp_size = l.tp;
        shard.layer_begin = l.stage_layers(p, c).begin;
        shard.layer_end = l.stage_layers(p, c).end;
        shard.pre = p == 0 && c == 0;
        shard.post = p == l.pp - 1 && c == l.vpp - 1;
        const lattice::ParamLayout chunk(o.model, shard);
        for (const lattice::ParamTensor& t : chunk.tensors()) {
          numel += static_cast<int64_t>(t.numel);
          if (t.split_dim < 0) replicated += static_cast<int64_t>(t.numel);
        }
      }
      QCOMPARE(est.stages[p].parameters, numel);
      QCOMPARE(est.stages[p].replicated_parameters, replicated);
    }
  }

  void bytes_per_parameter_follow_fp32_adamw() {
    const lattice::TrainOptions plain = options({"--global-batch-size", "16"});
    const lattice::TrainOptions sharded =
        options({"--global-batch-size", "16", "--use-distributed-optimizer"});
    const lattice::StageEstimate a =
        lattice::estimate_memory(plain, *lattice::make_layout(plain, 4)).stages[0];
    const lattice::StageEstimate b =
        lattice::estimate_memory(sharded, *lattice::make_layout(sharded, 4)).stages[0];
    const size_t n = static_cast<size_t>(a.parameters);
    QCOMPARE(a.weight_bytes, 4 * n);
    QCOMPARE(a.grad_bytes, 4 * n);
    QCOMPARE(a.optimizer_bytes, 8 * n);
    QCOMPARE(b.optimizer_bytes, 8 * ((n + 3) / 4));  // sharded over DP 4
  }

  void activations_count_the_models_buffers() {
    // Two more layers add two of the one model's layers (model/gpt.h take_layer_acts), fp32
    // on the CPU: ln1, res_mid, ln2 and the layer's output in the residual stream (4 sbh); qkv
    // and the attention output (4 sbh); FC1 and GELU outputs (2 sbF); four LayerNorm statistics
    // (4 sb) and the attention's saved log-sum-exps (b a s).
    auto per_micro_batch = [](const char* layers) {
      const lattice::TrainOptions o = options({"--num-layers", layers, "--micro-batch-size", "2"});
      return lattice::estimate_memory(o, *lattice::make_layout(o, 1))
          .stages[0]
          .activation_bytes_per_micro_batch;
    };
    const double s = 64, b = 2, h = 64, a = 4, F = 4 * h, N = s * b;
    const double layer = 4 * (4 * N * h + N * (4 * h + 2 * F)) + 4 * (4 * N + b * a * s);
    QCOMPARE(static_cast<double>(per_micro_batch("4") - per_micro_batch("2")), 2 * layer);
  }

  void recomputation_and_sequence_parallelism_shrink_activations() {
    auto activations = [](QStringList extra) {
      const lattice::TrainOptions o =
          options(QStringList{"--num-layers", "8", "--tensor-model-parallel-size", "2"} + extra);
      return lattice::estimate_memory(o, *lattice::make_layout(o, 2)).stages[0].activation_bytes;
    };
    const size_t none = activations({});
    const size_t sp = activations({"--sequence-parallel"});
    const size_t selective = activations({"--recompute-granularity", "selective"});
    const size_t full = activations({"--recompute-granularity", "full", "--recompute-method",
                                     "uniform", "--recompute-num-layers", "1"});
    QVERIFY2(sp < none, qPrintable(QString("%1 vs %2").arg(sp).arg(none)));
    // Selective keeps what none keeps: the attention has no scores to drop.
    QCOMPARE(selective, none);
    QVERIFY2(full < none, qPrintable(QString("%1 vs %2").arg(full).arg(none)));
  }

  void first_stage_holds_pp_micro_batches_and_interleaving_more() {
    const lattice::TrainOptions plain = options(
        {"--num-layers", "16", "--pipeline-model-parallel-size", "4", "--global-batch-size", "32"});
    const lattice::MemoryEstimate a =
        lattice::estimate_memory(plain, *lattice::make_layout(plain, 4));
    for (int p = 0; p < 4; p++) QCOMPARE(a.stages[p].micro_batches_in_flight, double(4 - p));
    const lattice::TrainOptions interleaved =
        options({"--num-layers", "16", "--pipeline-model-parallel-size", "4",
                 "--num-layers-per-virtual-pipeline-stage", "2", "--global-batch-size", "32"});
    const lattice::MemoryEstimate b =
        lattice::estimate_memory(interleaved, *lattice::make_layout(interleaved, 4));
    QCOMPARE(b.stages[0].micro_batches_in_flight, 4 * (1 + 3.0 / (4 * 2)));  // VPP 2
    // As many micro-batches as stages: the interleaved warm-up runs every forward first.
    const lattice::TrainOptions all =
        options({"--num-layers", "16", "--pipeline-model-parallel-size", "4",
                 "--num-layers-per-virtual-pipeline-stage", "2", "--global-batch-size", "16"});
    const lattice::MemoryEstimate c = lattice::estimate_memory(all, *lattice::make_layout(all, 4));
    for (int p = 0; p < 4; p++) QCOMPARE(c.stages[p].micro_batches_in_flight, 4.0);
    // Fewer micro-batches than stages: only those are ever in flight.
    const lattice::TrainOptions few = options(
        {"--num-layers", "16", "--pipeline-model-parallel-size", "4", "--global-batch-size", "8"});
    QCOMPARE(lattice::estimate_memory(few, *lattice::make_layout(few, 4))
                 .stages[0]
                 .micro_batches_in_flight,
             2.0);
  }

  void plan_prints_groups_and_stages() {
    const Run r = lattice_cli(kMegatronExample);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    for (const char* part :
         {"world 16 = TP 2 x PP 4 x DP 2", "[0,1] [2,3]", "[0,2] [1,3] [4,6] [5,7]",
          "[0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]", "[0,1,4,5,8,9,12,13]",
          "[0,12] [1,13] [2,14] [3,15]", "layers [0,2)", "layers [6,8)", "most loaded: pp rank"})
      QVERIFY2(r.out.contains(part), qPrintable(QString(part) + " missing from:\n" + r.out));
  }

  void plan_json_has_the_groups_and_the_estimate() {
    const Run r = lattice_cli(kMegatronExample + QStringList{"--json"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QJsonParseError error;
    const QJsonObject doc = QJsonDocument::fromJson(r.out.toUtf8(), &error).object();
    QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
    QCOMPARE(doc["world"].toInt(), 16);
    QCOMPARE(doc["dp"].toInt(), 2);
    const ParallelLayout l = grid(16, 2, 4);
    const QJsonObject groups = doc["groups"].toObject();
    QCOMPARE(show(json_groups(groups["tensor"])), show(l.tensor_groups()));
    QCOMPARE(show(json_groups(groups["data"])), show(l.data_groups()));
    QCOMPARE(show(json_groups(groups["pipeline"])), show(l.pipeline_groups()));
    QCOMPARE(show(json_groups(groups["model"])), show(l.model_groups()));
    QCOMPARE(show(json_groups(groups["embedding"])), show(l.embedding_groups()));
    const QJsonArray stages = doc["stages"].toArray();
    QCOMPARE(stages.size(), 4);
    const QJsonArray last =
        stages[3].toObject()["chunks"].toArray()[0].toObject()["layers"].toArray();
    QCOMPARE(last.size(), 2);
    QCOMPARE(last[0].toInt(), 6);
    QCOMPARE(last[1].toInt(), 8);
    const QJsonArray memory = doc["memory"].toObject()["stages"].toArray();
    QCOMPARE(memory.size(), 4);
    QVERIFY(memory[0].toObject()["total_bytes"].toDouble() > 0);
  }

  void plan_lists_every_broken_rule_and_exits_2() {
    const Run r = lattice_cli({"plan", "--world-size", "10", "--tensor-model-parallel-size", "3",
                               "--pipeline-model-parallel-size", "3", "--num-layers", "4",
                               "--hidden-size", "30", "--num-attention-heads", "4"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY(r.out.isEmpty());
    for (const char* part :
         {"lattice plan: world size 10", "does not divide --num-attention-heads 4",
          "does not divide --num-layers 4",
          "--num-attention-heads 4 does not divide --hidden-size 30"})
      QVERIFY2(r.err.contains(part), qPrintable(QString(part) + " missing from:\n" + r.err));
    QVERIFY2(!r.err.contains("training data"), qPrintable(r.err));
  }

  void plan_help_names_its_flags() {
    const Run r = lattice_cli({"plan", "--help"});
    QCOMPARE(r.exit_code, 0);
    for (const char* part : {"--world-size", "--json", "--tensor-model-parallel-size",
                             "--num-layers-per-virtual-pipeline-stage", "--config"})
      QVERIFY2(r.out.contains(part), qPrintable(QString(part) + " missing from:\n" + r.out));
  }
};

QTEST_GUILESS_MAIN(LayoutTest)
#include "test_layout.moc"
