// The Suggest table is a well-behaved item model (QAbstractItemModelTester), shows the engine's
// candidates in the engine's order, and Apply sets the plan's layout as one undoable step.
#include <QAbstractItemModelTester>
#include <QLabel>
#include <QSignalSpy>
#include <QTableView>
#include <QtTest>

#include "plan/model_presets.h"
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

  // Issue 29: with nothing that fits, Suggest listed 200 layouts that do not fit and said so
  // only in the status line under them.
  void whenNothingFitsTheDialogSaysSoFirstAndListsTheClosestFirst() {
    PlanModel model;
    Plan big = eightGpus();
    applyPreset(big.options, modelPresets()[9]);  // GPT-3 175B on 8 H100s
    model.resetPlan(big);
    SuggestDialog dialog(&model);
    dialog.resize(980, 560);
    dialog.show();
    QSignalSpy finished(&dialog, &SuggestDialog::searchFinished);
    dialog.search();
    QVERIFY2(finished.wait(60000), "the search did not finish in 60 s");
    SuggestModel* table = dialog.tableModel();
    QVERIFY(table->rowCount() > 0);
    for (int r = 0; r < table->rowCount(); r++) QVERIFY(!table->candidate(r).fits);

    auto* verdict = dialog.findChild<QLabel*>("suggest-verdict");
    QVERIFY2(verdict && verdict->isVisible(), "no line says that nothing fits");
    QVERIFY2(verdict->text().startsWith("None of the"), qPrintable(verdict->text()));
    auto* view = dialog.findChild<QTableView*>();
    QVERIFY2(verdict->mapTo(&dialog, QPoint(0, 0)).y() < view->mapTo(&dialog, QPoint(0, 0)).y(),
             "the verdict must come before the table");
    // The rows closest to fitting first; nothing is selected for an Enter to apply.
    const QAbstractItemModel* shown = view->model();
    for (int r = 1; r < shown->rowCount(); r++)
      QVERIFY(shown->index(r - 1, SuggestModel::kMemory).data(SuggestModel::kSortRole).toDouble() <=
              shown->index(r, SuggestModel::kMemory).data(SuggestModel::kSortRole).toDouble());
    QVERIFY(!view->selectionModel()->hasSelection());

    model.resetPlan(eightGpus());  // the demo model fits: no verdict, the engine's order
    dialog.search();
    QVERIFY(finished.wait(60000));
    QVERIFY(!verdict->isVisible());
    QVERIFY(table->candidate(0).fits);
    QCOMPARE(shown->index(0, SuggestModel::kRank).data().toInt(), 1);
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
