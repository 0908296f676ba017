// The experts' load in the run store (IterationMetrics::moe_expert_load, docs/studio.md "MoE"):
// a tiny `lattice train` with MoE on layers 0 and 2 (4 experts, top-2) writes "moe load/layer
// L/expert e" rows on the iterations it reports (1 and every --log-interval) and on no other,
// for the MoE layers alone; each layer's counts sum to the iteration's tokens x top-k. With MPI,
// DP 2 (each rank routes its own half of the batch) and PP 2 (each stage holds one MoE layer)
// write the same counts as one process: the ranks' counts are summed before rank 0 writes.
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "common/process.h"
#include "lattice/run_record.h"
#include "lattice/storage/run_store.h"

namespace {

using lattice::testing::Run;

// 4 x 16 = 64 tokens an iteration; with top-2 every layer gives out 128 routes.
const QStringList kRun =
    QString(
        "train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 "
        "--seq-length 16 --vocab-size 255 --micro-batch-size 2 --global-batch-size 4 "
        "--train-iters 5 --log-interval 2 --num-experts 4 --moe-router-topk 2 "
        "--moe-aux-loss-coeff 0.5 --moe-layer-freq 2 --fp64 --lr 1e-2 --eval-iters 0 "
        "--hidden-dropout 0 --attention-dropout 0 --threads 1")
        .split(' ');
constexpr int kTokens = 4 * 16, kTopK = 2, kExperts = 4;
const std::set<int> kMoeLayers = {0, 2};
const std::set<int64_t> kLoggedSteps = {1, 2, 4};

// (step, layer, expert) -> routes, from every "moe load/..." row of the run.
using Load = std::map<std::tuple<int64_t, int, int>, double>;

Load recorded_load(const QString& db, const QString& name) {
  Load load;
  auto store = lattice::storage::RunStore::open(db.toStdString());
  if (!store) qFatal("%s", store.status().message().c_str());
  auto run = (*store)->find_run(name.toStdString());
  if (!run) qFatal("%s", run.status().message().c_str());
  auto rows = (*store)->rows_after(0, run->id);
  if (!rows) qFatal("%s", rows.status().message().c_str());
  for (const auto& row : *rows) {
    int layer = -1, expert = -1;
    if (lattice::parse_moe_load_key(row.key, &layer, &expert))
      load[{row.step, layer, expert}] = row.value;
  }
  return load;
}

}  // namespace

class MoeLoad : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  Load one_;  // the one-process run's

  Load train(int ranks, const QString& name, const QStringList& extra = {}) {
    const QString db = dir_.filePath(name + ".sqlite");
    const Run r = lattice::testing::run_lattice(
        ranks, kRun + extra + QStringList{"--db", db, "--run-name", name});
    if (r.exit_code != 0) qFatal("%s", qPrintable(r.out + r.err));
    return recorded_load(db, name);
  }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void keys_round_trip() {
    int layer = -1, expert = -1;
    QCOMPARE(QString::fromStdString(lattice::moe_load_key(2, 3)),
             QString("moe load/layer 2/expert 3"));
    QVERIFY(lattice::parse_moe_load_key("moe load/layer 12/expert 7", &layer, &expert));
    QCOMPARE(layer, 12);
    QCOMPARE(expert, 7);
    for (const char* other :
         {"moe aux loss", "moe load/layer 2/expert 3x", "moe load/layer -1/expert 0",
          "moe load/layer 02/expert 3", "moe load/layer 2"})
      QVERIFY2(!lattice::parse_moe_load_key(other, &layer, &expert), other);
  }

  void one_process_writes_tokens_times_topk_per_layer() {
    one_ = train(1, "one");
    std::map<std::pair<int64_t, int>, double> per_layer;
    std::set<int64_t> steps;
    for (const auto& [at, routes] : one_) {
      const auto [step, layer, expert] = at;
      QVERIFY2(kMoeLayers.count(layer),
               qPrintable(QString("a load row for dense layer %1").arg(layer)));
      QVERIFY2(expert >= 0 && expert < kExperts, qPrintable(QString("expert %1").arg(expert)));
      QVERIFY2(routes >= 0, "a negative count");
      per_layer[{step, layer}] += routes;
      steps.insert(step);
    }
    QCOMPARE(steps, kLoggedSteps);
    QCOMPARE(one_.size(), kLoggedSteps.size() * kMoeLayers.size() * kExperts);
    double total = 0;
    for (const auto& [at, sum] : per_layer) {
      QVERIFY2(sum == kTokens * kTopK,
               qPrintable(QString("step %1 layer %2: the experts' routes sum to %3, not %4 tokens "
                                  "x top-%5")
                              .arg(at.first)
                              .arg(at.second)
                              .arg(sum)
                              .arg(kTokens)
                              .arg(kTopK)));
      total += sum;
    }
    QCOMPARE(total, double(kTokens) * kTopK * kLoggedSteps.size() * kMoeLayers.size());
  }

  void data_and_pipeline_parallel_ranks_sum_to_the_same_load() {
#ifndef LATTICE_MPIEXEC
    QSKIP("built without MPI");
#else
    QVERIFY2(!one_.empty(), "the one-process run comes first");
    QVERIFY2(train(2, "dp2") == one_, "DP 2 wrote other counts than one process");
    QVERIFY2(train(2, "pp2", {"--pipeline-model-parallel-size", "2"}) == one_,
             "PP 2 wrote other counts than one process");
#endif
  }
};

QTEST_GUILESS_MAIN(MoeLoad)
#include "test_moe_load.moc"
