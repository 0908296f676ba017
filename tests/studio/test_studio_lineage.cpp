// One curve across resumes on real runs: `lattice train` 10 steps saving at 5 and 10, then a
// rollback that loads step 5 with another learning rate and trains to 12. The Dashboard on the
// second run draws the first run's steps 1-5 solid, its steps 6-10 (done again) faded and
// dashed, a marker at step 5, and the second run's own points from step 6; the toggle and the
// time axis hide the ancestors; the first run alone has none.
#include <qcustomplot.h>
#include <QCheckBox>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>

#include "common/process.h"
#include "dashboard/dashboard_view.h"
#include "dashboard/lineage_series.h"
#include "dashboard/metric_chart.h"
#include "dashboard/series_store.h"
#include "lattice/storage/run_store.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

const QStringList kTiny = {"--num-layers",
                           "2",
                           "--hidden-size",
                           "64",
                           "--num-attention-heads",
                           "4",
                           "--seq-length",
                           "64",
                           "--vocab-size",
                           "512",
                           "--threads",
                           "2",
                           "--mock-data",
                           "--log-interval",
                           "1"};

QString textOf(const testing::Run& r) {
  return "exit " + QString::number(r.exit_code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

// The x and y of every point of a graph.
QVector<QPointF> pointsOf(const QCPGraph* g) {
  QVector<QPointF> points;
  for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
    points << QPointF(it->key, it->value);
  return points;
}

}  // namespace

class TestStudioLineage : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db_;
  qint64 first_ = 0, second_ = 0;
  std::vector<storage::StepValue> firstLoss_;  // the first run's "lm loss", steps 1..10

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("runs.sqlite");
    const QString ckpt = dir_.filePath("ckpt");
    testing::Run a = testing::run_process(
        LATTICE_CLI_PATH, QStringList{"train", "--train-iters", "10", "--save", ckpt,
                                      "--save-interval", "5", "--db", db_, "--run-name", "first"} +
                              kTiny);
    QVERIFY2(a.exit_code == 0, qPrintable(textOf(a)));
    testing::Run b = testing::run_process(
        LATTICE_CLI_PATH, QStringList{"train", "--train-iters", "12", "--load", ckpt, "--ckpt-step",
                                      "5", "--lr", "0.0001", "--db", db_, "--run-name", "second"} +
                              kTiny);
    QVERIFY2(b.exit_code == 0, qPrintable(textOf(b)));
    QVERIFY2(
        b.out.contains("recording run second in " + db_ + "; resumed from run 'first' at step 5"),
        qPrintable(textOf(b)));
    auto store = storage::RunStore::open(db_.toStdString());
    QVERIFY(store);
    first_ = (*store)->find_run("first").value().id;
    second_ = (*store)->find_run("second").value().id;
    firstLoss_ = (*store)->series(first_, "lm loss", 0, 100).value();
    QCOMPARE(firstLoss_.size(), std::size_t{10});
  }

  void the_assembled_series_keeps_steps_to_the_resume_and_discards_the_rest() {
    DashboardView view;
    view.setDatabase(db_);
    view.showRuns({second_});
    const LineageCurve* curve = view.store()->lineage(second_, "lm loss");
    QVERIFY(curve);
    QCOMPARE(curve->pieces.size(), 2);
    const LineagePiece& kept = curve->pieces[0];
    const LineagePiece& tail = curve->pieces[1];
    QVERIFY(!kept.discarded && tail.discarded);
    QCOMPARE(kept.run, first_);
    QCOMPARE(tail.run, first_);
    QCOMPARE(kept.steps, (QVector<qint64>{1, 2, 3, 4, 5}));
    QCOMPARE(tail.steps, (QVector<qint64>{6, 7, 8, 9, 10}));
    for (int i = 0; i < 5; i++) {
      QCOMPARE(kept.values[i], firstLoss_[i].value);
      QCOMPARE(tail.values[i], firstLoss_[i + 5].value);
    }
    QCOMPARE(curve->resumes.size(), 1);
    QCOMPARE(curve->resumes[0].step, qint64(5));
    QCOMPARE(curve->resumes[0].name, QString("second"));
  }

  void the_chart_draws_the_ancestor_solid_and_its_tail_faded() {
    DashboardView view;
    view.resize(1280, 800);
    view.setSmoothing(0);  // the drawn values are the logged ones
    view.setDatabase(db_);
    view.showRuns({second_});
    view.show();
    MetricChart* loss = view.chart("lm loss");
    QTRY_COMPARE(loss->plottedPoints(second_, "lm loss"), 7);  // steps 6..12
    view.replotNow();
    // The toggle is there while a shown run has ancestors (and on).
    auto* toggle = view.findChild<QCheckBox*>("dashboard-lineage");
    QVERIFY(toggle && toggle->isVisible() && toggle->isChecked());
    const QCPGraph* own = loss->rawGraph(second_, "lm loss");
    QCOMPARE(own->data()->constBegin()->key, 6.0);

    const LineageOverlay& overlay = loss->lineage();
    const QCPGraph* kept = overlay.keptGraph(second_, 0);
    const QCPGraph* tail = overlay.tailGraph(second_, 0);
    const QCPGraph* markers = overlay.markerGraph(second_, 0);
    QVERIFY(kept && tail && markers);
    const QVector<QPointF> solid = pointsOf(kept), faded = pointsOf(tail);
    QCOMPARE(solid.size(), 5);
    QCOMPARE(faded.size(), 5);
    for (int i = 0; i < 5; i++) {
      QCOMPARE(solid[i], QPointF(i + 1, firstLoss_[i].value));
      QCOMPARE(faded[i], QPointF(i + 6, firstLoss_[i + 5].value));
    }
    // Solid in the run's colour; the tail the same colour faded and dashed.
    QCOMPARE(kept->pen().style(), Qt::SolidLine);
    QCOMPARE(kept->pen().color(), loss->smoothGraph(second_, "lm loss")->pen().color());
    QCOMPARE(tail->pen().style(), Qt::DashLine);
    QVERIFY2(tail->pen().color().alphaF() < 0.5,
             qPrintable(QString("tail alpha %1").arg(tail->pen().color().alphaF())));
    QCOMPARE(tail->pen().color().rgb(), kept->pen().color().rgb());
    QCOMPARE(pointsOf(markers), (QVector<QPointF>{QPointF(5, firstLoss_[4].value)}));
    QCOMPARE(overlay.labels(), QStringList{"↺ second resumed at 5"});
    // The x axis follows the whole lineage, from the first run's first step.
    QVERIFY2(loss->plot()->xAxis->range().lower <= 1.0,
             qPrintable(QString::number(loss->plot()->xAxis->range().lower)));
    // A chart of a key the ancestor logged too (the learning rate) has its lineage as well.
    QVERIFY(view.chart("learning rate")->lineage().keptGraph(second_, 0));

    view.setLineageVisible(false);
    QVERIFY(!kept->visible() && !tail->visible() && !markers->visible());
    view.setLineageVisible(true);
    QVERIFY(kept->visible() && tail->visible());
    // The time axis has no place for another run's clock.
    view.setXAxisMode(XAxisMode::kTime);
    view.replotNow();
    QVERIFY(!loss->lineage().keptGraph(second_, 0));
  }

  void a_run_that_never_resumed_has_no_lineage() {
    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db_);
    view.showRuns({first_});
    view.show();
    MetricChart* loss = view.chart("lm loss");
    QTRY_COMPARE(loss->plottedPoints(first_, "lm loss"), 10);
    view.replotNow();
    QVERIFY(!view.store()->lineage(first_, "lm loss"));
    QVERIFY(!view.findChild<QCheckBox*>("dashboard-lineage")->isVisible());
    QVERIFY(loss->lineage().graphs().isEmpty());
  }
};

QTEST_MAIN(TestStudioLineage)
#include "test_studio_lineage.moc"
