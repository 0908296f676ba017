// The Suggest table is a well-behaved item model (QAbstractItemModelTester), shows the engine's
// candidates in the engine's order, and Apply sets the plan's layout as one undoable step.
#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QtTest>

#include "plan/plan_model.h"
#include "plan/suggest_dialog.h"
#include "plan/suggest_model.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

// The demo model on one node of 8 H100s.
Plan eightGpus() {
  Plan p = defaultPlan();
  p.cluster.devices_per_node = 8;
  p.cluster.device = "h100";
  return p;
}

}  // namespace

class TestStudioSuggest : public QObject {
  Q_OBJECT

 private slots:
  void theTablePassesTheItemModelTester() {
    SuggestModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    const Plan plan = eightGpus();
    const PlanAnalysis a = analyzePlan(plan, 0);
    std::vector<LayoutCandidate> candidates = suggest_layouts(plan.options, a.cluster, 40);
    QVERIFY2(!candidates.empty(), "the demo model has layouts on 8 devices");
    const size_t n = candidates.size();
    model.setCandidates(std::move(candidates), a.cluster.device.memory_bytes);
    QCOMPARE(model.rowCount(), static_cast<int>(n));
    QCOMPARE(model.columnCount(), static_cast<int>(SuggestModel::kColumnCount));
    // Row 0 is the engine's best; ranks are 1-based.
    QCOMPARE(model.data(model.index(0, SuggestModel::kRank)).toInt(), 1);
    const LayoutCandidate& best = model.candidate(0);
    QCOMPARE(model.data(model.index(0, SuggestModel::kTp)).toInt(), best.layout.tp);
    QCOMPARE(model.data(model.index(0, SuggestModel::kTokens), SuggestModel::kSortRole).toDouble(),
             best.step.tokens_per_second);
    QVERIFY(!model.data(model.index(0, 0), Qt::ToolTipRole).toString().isEmpty());
    model.setCandidates({}, 0);
    QCOMPARE(model.rowCount(), 0);
  }

  void applyingASuggestionSetsThePlanAndUndoRestoresIt() {
    PlanModel model;
    model.resetPlan(eightGpus());
    const Plan before = model.plan();
    SuggestDialog dialog(&model);
    QSignalSpy finished(&dialog, &SuggestDialog::searchFinished);
    dialog.search();
    QVERIFY2(finished.wait(20000), "the search did not finish in 20 s");
    QVERIFY(dialog.tableModel()->rowCount() > 0);
    const LayoutCandidate chosen = dialog.tableModel()->candidate(0);
    dialog.applyRow(0);
    QCOMPARE(model.plan().options.model.tensor_model_parallel_size, chosen.layout.tp);
    QCOMPARE(model.plan().options.parallel.pipeline_model_parallel_size, chosen.layout.pp);
    QCOMPARE(model.plan().options.micro_batch_size, chosen.options.micro_batch_size);
    QCOMPARE(model.plan().cluster, before.cluster);
    QVERIFY(model.isValid());
    model.undoStack()->undo();
    QVERIFY(samePlan(model.plan(), before));
  }
};

QTEST_MAIN(TestStudioSuggest)
#include "test_studio_suggest.moc"
