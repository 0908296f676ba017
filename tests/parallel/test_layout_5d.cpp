// The 5D layout, TP x CP x EP x DP x PP, as a user of Megatron-LM expects it: the dense grid in
// the order tp-cp-dp-pp and the expert grid etp-ep-edp-pp over the same ranks, every group list
// equal to Megatron's (hand-derived tables, and megatron_groups.py, an independent
// implementation of Megatron's documented definition, over many layouts), one sentence per
// broken rule, `lattice plan` (text and JSON) with the five axes, and the trainer refusing
// CP and EP until they run.
#include <QtTest/QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include "common/process.h"
#include "device/backends.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"

using lattice::ParallelLayout;
using Groups = std::vector<std::vector<int>>;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

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

// What a layout with EP > 1 adds to its flags: the experts it splits (two per expert rank).
QStringList expert_flags(int ep) {
  return {"--num-experts", QString::number(2 * ep)};
}

// The flags of a layout; 8 layers, 12 heads and sequences of 96 tokens fit every size used here.
QStringList layout_flags(int tp, int cp, int pp, int ep, int etp) {
  QStringList flags = {"--num-layers",          "8",  "--hidden-size", "96",
                       "--num-attention-heads", "12", "--seq-length",  "96"};
  flags << "--tensor-model-parallel-size" << QString::number(tp) << "--context-parallel-size"
        << QString::number(cp) << "--pipeline-model-parallel-size" << QString::number(pp)
        << "--expert-model-parallel-size" << QString::number(ep) << "--expert-tensor-parallel-size"
        << QString::number(etp);
  return ep > 1 ? flags + expert_flags(ep) : flags;
}

ParallelLayout layout(int world, int tp, int cp, int pp, int ep = 1, int etp = 0) {
  const lattice::TrainOptions o =
      lattice::with_default_global_batch(options(layout_flags(tp, cp, pp, ep, etp)), world);
  lattice::Result<ParallelLayout> l = lattice::make_layout(o, world);
  if (!l) qFatal("bad test layout: %s", l.status().message().c_str());
  return *l;
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

QString show(const QJsonValue& v) {
  Groups groups;
  for (const QJsonValue& g : v.toArray()) {
    std::vector<int>& ranks = groups.emplace_back();
    for (const QJsonValue& r : g.toArray()) ranks.push_back(r.toInt());
  }
  return show(groups);
}

QString joined(const std::vector<std::string>& lines) {
  QStringList out;
  for (const std::string& l : lines) out << QString::fromStdString(l);
  return out.join("\n");
}

using lattice::testing::Run;

Run lattice_cli(const QStringList& args) {
  return lattice::testing::run_process(LATTICE_CLI_PATH, args, {}, 60000);
}

// Every group list of `l` under Megatron's names: the dense RankGenerator's tokens, then the
// expert one's with an "e:" prefix.
QMap<QString, Groups> lattice_groups(const ParallelLayout& l) {
  return {{"tp", l.tensor_groups()},
          {"cp", l.context_groups()},
          {"dp", l.data_groups()},
          {"dp-cp", l.data_context_groups()},
          {"tp-cp", l.tensor_context_groups()},
          {"tp-pp", l.model_groups()},
          {"pp", l.pipeline_groups()},
          {"embedding", l.embedding_groups()},
          {"e:ep", l.expert_groups()},
          {"e:tp", l.expert_tensor_groups()},
          {"e:dp", l.expert_data_groups()},
          {"e:tp-ep", l.expert_tensor_model_groups()}};
}

}  // namespace

class Layout5dTest : public QObject {
  Q_OBJECT
 private slots:
  // world 16 = TP 2 x CP 2 x DP 2 x PP 2: rank = tp + 2 cp + 4 dp + 8 pp.
  void context_parallel_groups_by_hand() {
    const ParallelLayout l = layout(16, 2, 2, 2);
    QCOMPARE(l.dp, 2);
    QCOMPARE(show(l.tensor_groups()),
             QString("[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]"));
    QCOMPARE(show(l.context_groups()),
             QString("[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]"));
    QCOMPARE(show(l.data_groups()),
             QString("[0,4] [1,5] [2,6] [3,7] [8,12] [9,13] [10,14] [11,15]"));
    QCOMPARE(show(l.data_context_groups()),
             QString("[0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]"));
    QCOMPARE(show(l.tensor_context_groups()),
             QString("[0,1,2,3] [4,5,6,7] [8,9,10,11] [12,13,14,15]"));
    QCOMPARE(show(l.pipeline_groups()),
             QString("[0,8] [1,9] [2,10] [3,11] [4,12] [5,13] [6,14] [7,15]"));
    QCOMPARE(show(l.model_groups()), QString("[0,1,8,9] [2,3,10,11] [4,5,12,13] [6,7,14,15]"));
    QCOMPARE(show(l.embedding_groups()), show(l.pipeline_groups()));
    // The experts (ETP = TP 2, EP 1): their data-parallel group spans DP x CP.
    QCOMPARE(l.etp, 2);
    QCOMPARE(l.edp, 4);
    QCOMPARE(show(l.expert_data_groups()), show(l.data_context_groups()));
    QCOMPARE(show(l.expert_tensor_groups()), show(l.tensor_groups()));
    QCOMPARE(l.expert_groups().size(), size_t{16});
  }

  // world 8, TP 2, EP 2, ETP 1: DP 4 (rank = tp + 2 dp); experts rank = ep + 2 edp, EDP 4.
  void expert_groups_with_their_own_tensor_size_by_hand() {
    const ParallelLayout l = layout(8, 2, 1, 1, 2, 1);
    QCOMPARE(l.dp, 4);
    QCOMPARE(l.edp, 4);
    QCOMPARE(show(l.data_groups()), QString("[0,2,4,6] [1,3,5,7]"));
    QCOMPARE(show(l.expert_groups()), QString("[0,1] [2,3] [4,5] [6,7]"));
    QCOMPARE(show(l.expert_data_groups()), QString("[0,2,4,6] [1,3,5,7]"));
    QCOMPARE(show(l.expert_tensor_groups()), QString("[0] [1] [2] [3] [4] [5] [6] [7]"));
  }

  // world 8, TP 2, EP 2, ETP 2: the expert grid is etp + 2 ep + 4 edp, EDP 2.
  void expert_groups_over_tensor_parallel_experts_by_hand() {
    const ParallelLayout l = layout(8, 2, 1, 1, 2, 0);
    QCOMPARE(l.etp, 2);
    QCOMPARE(l.edp, 2);
    QCOMPARE(show(l.expert_groups()), QString("[0,2] [1,3] [4,6] [5,7]"));
    QCOMPARE(show(l.expert_data_groups()), QString("[0,4] [1,5] [2,6] [3,7]"));
    QCOMPARE(show(l.expert_tensor_groups()), QString("[0,1] [2,3] [4,5] [6,7]"));
    QCOMPARE(show(l.expert_tensor_model_groups()), QString("[0,1,2,3] [4,5,6,7]"));
    QCOMPARE(show(l.data_groups()), QString("[0,2,4,6] [1,3,5,7]"));  // DP 4
  }

  // world 8, TP 1, CP 2, EP 2, PP 2: dense rank = cp + 2 dp + 4 pp; experts ep + 2 edp + 4 pp.
  void context_and_expert_with_a_pipeline_by_hand() {
    const ParallelLayout l = layout(8, 1, 2, 2, 2);
    QCOMPARE(l.dp, 2);
    QCOMPARE(l.edp, 2);
    QCOMPARE(show(l.context_groups()), QString("[0,1] [2,3] [4,5] [6,7]"));
    QCOMPARE(show(l.data_groups()), QString("[0,2] [1,3] [4,6] [5,7]"));
    QCOMPARE(show(l.data_context_groups()), QString("[0,1,2,3] [4,5,6,7]"));
    QCOMPARE(show(l.pipeline_groups()), QString("[0,4] [1,5] [2,6] [3,7]"));
    QCOMPARE(show(l.model_groups()), QString("[0,4] [1,5] [2,6] [3,7]"));
    QCOMPARE(show(l.expert_groups()), QString("[0,1] [2,3] [4,5] [6,7]"));
    QCOMPARE(show(l.expert_data_groups()), QString("[0,2] [1,3] [4,6] [5,7]"));
    for (int r = 0; r < 8; r++) QCOMPARE(l.expert_coord(r).pp, l.coord(r).pp);
  }

  // Every group list of every layout of 8, 12, 16 and 24 ranks against megatron_groups.py.
  void every_group_matches_megatrons_definition() {
    if (lattice::testing::run_process(kPython, {"-c", "pass"}, {}, 30000).exit_code != 0)
      QSKIP("python3 is not installed (installers/install-deps.sh --tests)");
    struct Sizes {
      int world, tp, cp, pp, ep, etp;
    };
    std::vector<Sizes> layouts;
    QByteArray input;
    for (int world : {8, 12, 16, 24})
      for (int tp : {1, 2, 4})
        for (int cp : {1, 2, 3})
          for (int pp : {1, 2, 4})
            for (int ep : {1, 2, 4})
              for (int etp : {0, 1, 2}) {
                if (world % (tp * cp * pp) != 0) continue;
                if (world % ((etp > 0 ? etp : tp) * ep * pp) != 0) continue;
                layouts.push_back({world, tp, cp, pp, ep, etp});
                input += QString("%1 %2 %3 %4 %5 %6\n")
                             .arg(world)
                             .arg(tp)
                             .arg(cp)
                             .arg(pp)
                             .arg(ep)
                             .arg(etp)
                             .toUtf8();
              }
    QVERIFY2(layouts.size() > 200, qPrintable(QString::number(layouts.size())));
    const QString script = QString(LATTICE_SOURCE_DIR) + "/tests/parallel/megatron_groups.py";
    const Run r = lattice::testing::run_process(kPython, {script}, input, 60000);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const QStringList lines = r.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), static_cast<qsizetype>(layouts.size()));
    for (size_t i = 0; i < layouts.size(); i++) {
      const Sizes& s = layouts[i];
      const ParallelLayout l = layout(s.world, s.tp, s.cp, s.pp, s.ep, s.etp);
      const QJsonObject doc =
          QJsonDocument::fromJson(lines[static_cast<qsizetype>(i)].toUtf8()).object();
      QMap<QString, QString> megatron;
      const QJsonObject dense = doc["dense"].toObject(), expert = doc["expert"].toObject();
      for (auto it = dense.begin(); it != dense.end(); ++it) megatron[it.key()] = show(it.value());
      for (auto it = expert.begin(); it != expert.end(); ++it)
        if (it.key() != "pp") megatron["e:" + it.key()] = show(it.value());
      megatron["embedding"] = show(doc["embedding"]);
      // Megatron asserts that the two grids' pipeline groups are the same.
      QCOMPARE(show(expert["pp"]), show(l.pipeline_groups()));
      const QMap<QString, Groups> ours = lattice_groups(l);
      QCOMPARE(ours.keys(), megatron.keys());
      for (const QString& token : ours.keys())
        QVERIFY2(show(ours[token]) == megatron[token],
                 qPrintable(QString("world %1 tp %2 cp %3 pp %4 ep %5 etp %6, %7: lattice %8, "
                                    "Megatron %9")
                                .arg(s.world)
                                .arg(s.tp)
                                .arg(s.cp)
                                .arg(s.pp)
                                .arg(s.ep)
                                .arg(s.etp)
                                .arg(token, show(ours[token]), megatron[token])));
    }
  }

  void coordinates_round_trip_in_both_grids() {
    for (auto [world, tp, cp, pp, ep, etp] : {std::tuple{16, 2, 2, 2, 2, 1},
                                              {24, 2, 3, 2, 3, 2},
                                              {8, 1, 2, 2, 2, 1},
                                              {12, 3, 1, 1, 2, 1}}) {
      const ParallelLayout l = layout(world, tp, cp, pp, ep, etp);
      for (int r = 0; r < world; r++) {
        const ParallelLayout::Coord c = l.coord(r);
        QVERIFY(c.tp < l.tp && c.cp < l.cp && c.dp < l.dp && c.pp < l.pp);
        QCOMPARE(c.tp + l.tp * (c.cp + l.cp * (c.dp + l.dp * c.pp)), r);
        QCOMPARE(l.rank(c), r);
        const ParallelLayout::ExpertCoord e = l.expert_coord(r);
        QVERIFY(e.etp < l.etp && e.ep < l.ep && e.edp < l.edp);
        QCOMPARE(e.etp + l.etp * (e.ep + l.ep * (e.edp + l.edp * e.pp)), r);
        QCOMPARE(l.expert_rank(e), r);
        QCOMPARE(e.pp, c.pp);
      }
    }
  }

  // CP = EP = 1: the expert grid is the dense one (ETP = TP, EDP = DP), so the existing 3D
  // groups and ranks are what they were (test_layout pins them).
  void without_cp_and_ep_the_expert_grid_is_the_dense_one() {
    const ParallelLayout l = layout(16, 2, 1, 4);
    QCOMPARE(l.cp, 1);
    QCOMPARE(l.etp, 2);
    QCOMPARE(l.ep, 1);
    QCOMPARE(l.edp, l.dp);
    QCOMPARE(show(l.expert_data_groups()), show(l.data_groups()));
    QCOMPARE(show(l.data_context_groups()), show(l.data_groups()));
    QCOMPARE(show(l.expert_tensor_groups()), show(l.tensor_groups()));
  }

  void each_rule_is_one_sentence_naming_the_flag_data() {
    QTest::addColumn<QStringList>("flags");
    QTest::addColumn<int>("world");
    QTest::addColumn<QString>("message");
    QTest::newRow("cp positive") << QStringList{"--context-parallel-size", "0"} << 1
                                 << "--context-parallel-size must be positive, got 0";
    QTest::newRow("ep positive") << QStringList{"--expert-model-parallel-size", "0"} << 1
                                 << "--expert-model-parallel-size must be positive, got 0";
    QTest::newRow("etp positive")
        << QStringList{"--expert-tensor-parallel-size", "-1"} << 1
        << "--expert-tensor-parallel-size must be positive (0: as --tensor-model-parallel-size), "
           "got -1";
    QTest::newRow("world of the dense grid")
        << QStringList{"--tensor-model-parallel-size", "2", "--context-parallel-size", "2"} << 6
        << "world size 6 (--world-size, or the ranks started) is not a multiple of "
           "--tensor-model-parallel-size 2 x --context-parallel-size 2 x "
           "--pipeline-model-parallel-size 1 = 4";
    QTest::newRow("world of the expert grid")
        << QStringList{"--expert-model-parallel-size", "4", "--expert-tensor-parallel-size", "1"} +
               expert_flags(4)
        << 6
        << "world size 6 (--world-size, or the ranks started) is not a multiple of "
           "--expert-tensor-parallel-size 1 x --expert-model-parallel-size 4 x "
           "--pipeline-model-parallel-size 1 = 4 (the expert layers' grid)";
    QTest::newRow("sequence in 2 x CP chunks")
        << QStringList{"--context-parallel-size", "4", "--seq-length", "36"} << 4
        << "--context-parallel-size 4 needs --seq-length 36 to be a multiple of 2 x 4 = 8 (each "
           "context-parallel rank holds 2 of 2 x CP equal chunks, Megatron's causal load "
           "balance)";
    QTest::newRow("sequence parallel within a CP rank")
        << QStringList{"--context-parallel-size",
                       "2",
                       "--tensor-model-parallel-size",
                       "4",
                       "--sequence-parallel",
                       "--seq-length",
                       "36"}
        << 8
        << "--tensor-model-parallel-size 4 does not divide the 18 tokens of each "
           "context-parallel rank (--seq-length 36 / --context-parallel-size 2), which "
           "--sequence-parallel splits";
    QTest::newRow("global batch over DP, not CP")
        << QStringList{"--context-parallel-size", "2", "--global-batch-size", "4",
                       "--micro-batch-size",      "2"}
        << 8
        << "--global-batch-size 4 is not a multiple of --micro-batch-size 2 x data-parallel size "
           "4 = 8 (data-parallel size = world size 8 / (TP 1 x CP 2 x PP 1))";
  }

  void each_rule_is_one_sentence_naming_the_flag() {
    QFETCH(QStringList, flags);
    QFETCH(int, world);
    QFETCH(QString, message);
    QCOMPARE(joined(lattice::layout_errors(options(flags), world)), message);
    QVERIFY(!lattice::make_layout(options(flags), world).is_ok());
  }

  void megatrons_default_global_batch_counts_dp_without_cp() {
    const lattice::TrainOptions o =
        options({"--context-parallel-size", "2", "--micro-batch-size", "3"});
    QCOMPARE(lattice::with_default_global_batch(o, 8).global_batch_size, 3 * 4);  // DP 8 / 2
  }

  // CP trains (test_context_parallel) without what its ring cannot reproduce yet; EP trains
  // (test_expert_parallel) without --save-hf and --eval-tasks.
  void the_trainer_refuses_what_cp_and_ep_cannot_run() {
    const lattice::TrainOptions o =
        options(QStringList{"--context-parallel-size", "2", "--expert-model-parallel-size", "2",
                            "--sequence-parallel", "--tensor-model-parallel-size", "2"} +
                expert_flags(2));
    QVERIFY(lattice::layout_errors(o, 8).empty());  // `lattice plan` lays it out
    QCOMPARE(joined(lattice::refusals(o, 8, lattice::cpu_capabilities())),
             QString("--context-parallel-size 2 needs --attention-dropout 0 (the ring attention "
                     "has no dropout)"));
    const QStringList no_dropout = {"--context-parallel-size", "2", "--attention-dropout", "0"};
    QVERIFY(lattice::refusals(options(no_dropout), 4, lattice::cpu_capabilities()).empty());
    // MoE with CP trains (test_moe_layouts, test_expert_parallel).
    QVERIFY(lattice::refusals(options(no_dropout + expert_flags(2)), 4, lattice::cpu_capabilities())
                .empty());
    // CUDA's op lists have the ring in every compute type (Note [ring attention on a device],
    // Note [ring attention in 16 bits]); a backend without it is refused in one sentence.
    for (const QStringList& type : {QStringList{}, QStringList{"--bf16"}, QStringList{"--fp16"}})
      QVERIFY2(
          !joined(lattice::refusals(options(no_dropout + type), 4, lattice::cuda_capabilities()))
               .contains("--context-parallel-size"),
          qPrintable(type.join(" ")));
    lattice::Capabilities no_ring = lattice::cuda_capabilities();
    no_ring.context_parallel = false;
    QVERIFY(joined(lattice::refusals(options(no_dropout), 4, no_ring))
                .contains("--context-parallel-size > 1: the cuda backend has no ring attention "
                          "(parallel/ring_attention.h) yet; use --device cpu"));
    QVERIFY(lattice::refusals(options({}), 4, lattice::cpu_capabilities()).empty());
    const QStringList ep = QStringList{"--expert-model-parallel-size", "2"} + expert_flags(2);
    QVERIFY(lattice::refusals(options(ep), 4, lattice::cpu_capabilities()).empty());
    QVERIFY(lattice::refusals(options(ep + QStringList{"--use-distributed-optimizer"}), 4,
                              lattice::cpu_capabilities())
                .empty());
    // The whole model is gathered with each expert from its owner (test_expert_parallel_export).
    QVERIFY(
        lattice::refusals(options(ep + QStringList{"--save-hf", "out", "--eval-tasks", "t.jsonl"}),
                          4, lattice::cpu_capabilities())
            .empty());
  }

#ifdef LATTICE_MPIEXEC
  void lattice_train_refuses_cp_with_dropout_in_one_sentence() {
    const Run r = lattice::testing::run_lattice(
        2, {"train", "--mock-data", "--context-parallel-size", "2", "--train-iters", "1", "--no-db",
            "--micro-batch-size", "1", "--hidden-dropout", "0"});
    QVERIFY2(r.exit_code != 0, qPrintable(r.out));
    QVERIFY2(r.err.contains("--context-parallel-size 2 needs --attention-dropout 0 (the ring "
                            "attention has no dropout)"),
             qPrintable(r.err));
  }
#endif

  void plan_json_lists_the_five_axes_and_their_groups() {
    const Run r = lattice_cli(QStringList{"plan", "--world-size", "16", "--json"} +
                              layout_flags(2, 2, 2, 2, 1));
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    const QJsonObject doc = QJsonDocument::fromJson(r.out.toUtf8()).object();
    const ParallelLayout l = layout(16, 2, 2, 2, 2, 1);
    QCOMPARE(doc["tp"].toInt(), 2);
    QCOMPARE(doc["cp"].toInt(), 2);
    QCOMPARE(doc["dp"].toInt(), 2);
    QCOMPARE(doc["pp"].toInt(), 2);
    QCOMPARE(doc["ep"].toInt(), 2);
    QCOMPARE(doc["etp"].toInt(), 1);
    QCOMPARE(doc["edp"].toInt(), 4);
    const QJsonObject g = doc["groups"].toObject();
    QCOMPARE(show(g["tensor"]), show(l.tensor_groups()));
    QCOMPARE(show(g["data"]), show(l.data_groups()));
    QCOMPARE(show(g["pipeline"]), show(l.pipeline_groups()));
    QCOMPARE(show(g["model"]), show(l.model_groups()));
    QCOMPARE(show(g["embedding"]), show(l.embedding_groups()));
    QCOMPARE(show(g["context"]), show(l.context_groups()));
    QCOMPARE(show(g["data_context"]), show(l.data_context_groups()));
    QCOMPARE(show(g["expert"]), show(l.expert_groups()));
    QCOMPARE(show(g["expert_tensor"]), show(l.expert_tensor_groups()));
    QCOMPARE(show(g["expert_data"]), show(l.expert_data_groups()));
    QCOMPARE(show(g["expert"]), QString("[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]"));
    // Each pipeline stage is a block of world / PP ranks.
    const QJsonArray ranks = doc["stages"].toArray()[1].toObject()["ranks"].toArray();
    QCOMPARE(ranks.size(), 8);
    QCOMPARE(ranks.first().toInt(), 8);
  }

  void plan_text_names_the_five_axes() {
    const Run r =
        lattice_cli(QStringList{"plan", "--world-size", "16"} + layout_flags(2, 2, 2, 2, 1));
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    for (const char* part : {"world 16 = TP 2 x CP 2 x PP 2 x DP 2; experts: ETP 1 x EP 2 x PP 2 "
                             "x EDP 4",
                             "context", "[0,2] [1,3]", "expert", "pp 1   ranks 8-15"})
      QVERIFY2(r.out.contains(part), qPrintable(QString(part) + " missing from:\n" + r.out));
    const Run plain = lattice_cli({"plan", "--world-size", "4"});
    QVERIFY2(plain.out.contains("world 4 = TP 1 x PP 1 x DP 4 (CP 1, EP 1)"),
             qPrintable(plain.out));
  }

  // Plan's default world is the smallest both grids fit.
  void plan_without_a_world_size_takes_the_smallest_both_grids_fit() {
    const Run r = lattice_cli(QStringList{"plan", "--json"} + layout_flags(2, 2, 1, 3, 1));
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).object()["world"].toInt(), 12);
  }

  // Megatron's sequence split: each CP rank holds 1/CP of every sequence's activations; the
  // weights are whole on every CP rank and the distributed optimizer shards over DP x CP.
  void memory_estimate_splits_the_sequence_over_cp() {
    auto stage = [](int cp, bool distributed) {
      QStringList flags = {"--num-layers",
                           "4",
                           "--seq-length",
                           "128",
                           "--context-parallel-size",
                           QString::number(cp),
                           "--global-batch-size",
                           "4",
                           "--micro-batch-size",
                           "2",
                           "--vocab-size",
                           "1000"};
      if (distributed) flags << "--use-distributed-optimizer";
      const lattice::TrainOptions o = options(flags);
      return lattice::estimate_memory(o, *lattice::make_layout(o, 2 * cp)).stages[0];
    };
    const lattice::StageEstimate one = stage(1, false), two = stage(2, false);
    // The weights, and each CP rank's global positions of its rows ((B, T / CP) int32).
    QCOMPARE(two.weight_bytes, one.weight_bytes + 2 * (128 / 2) * sizeof(int32_t));
    QCOMPARE(two.optimizer_bytes, one.optimizer_bytes);
    QVERIFY2(two.activation_bytes_per_micro_batch < one.activation_bytes_per_micro_batch,
             qPrintable(QString("%1 vs %2")
                            .arg(two.activation_bytes_per_micro_batch)
                            .arg(one.activation_bytes_per_micro_batch)));
    // Every part scales with the rank's tokens, the attention's saved log-sum-exps too ((T / CP)
    // per head), so CP 2 halves them (exact against training: test_parallel_memory's CP rows).
    QCOMPARE(two.activation_bytes_per_micro_batch * 2, one.activation_bytes_per_micro_batch);
    const size_t n = static_cast<size_t>(one.parameters);
    QCOMPARE(stage(2, true).optimizer_bytes, 8 * ((n + 3) / 4));  // DP 2 x CP 2
  }
};

QTEST_GUILESS_MAIN(Layout5dTest)
#include "test_layout_5d.moc"
