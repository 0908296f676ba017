// The Dashboard's MoE page on real runs (docs/studio.md "MoE"): a tiny `lattice train` with MoE
// on layers 0 and 2 (4 experts, top-2, reports at iterations 1, 2, 4 and 6) shows the page with
// the expert-load chart (one line per expert, a point per reported iteration, the shares of a
// step summing to 100 %) and the load-balancing loss (a point per iteration); a dense run does
// not show the page. With LATTICE_STUDIO_SCREENSHOTS=DIR the page is saved there as a PNG.
#include <qcustomplot.h>
#include <QTemporaryDir>
#include <QtTest>
#include <map>

#include "common/process.h"
#include "dashboard/dashboard_view.h"
#include "dashboard/expert_load_chart.h"
#include "dashboard/metric_chart.h"
#include "dashboard/series_store.h"
#include "lattice/storage/run_store.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

const QStringList kTiny =
    QString(
        "train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 "
        "--seq-length 16 --vocab-size 255 --micro-batch-size 2 --global-batch-size 4 "
        "--eval-iters 0 --lr 1e-2 --threads 1")
        .split(' ');
const QStringList kMoe = QString(
                             "--train-iters 6 --log-interval 2 --num-experts 4 --moe-router-topk "
                             "2 --moe-aux-loss-coeff 0.1 --moe-layer-freq 2")
                             .split(' ');
constexpr int kExperts = 4, kIterations = 6;
const QVector<double> kReported = {1, 2, 4, 6};

QString textOf(const testing::Run& r) {
  return "exit " + QString::number(r.exit_code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

}  // namespace

class TestStudioMoe : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db_;
  qint64 moe_ = 0, dense_ = 0;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("runs.sqlite");
    testing::Run a = testing::run_process(
        LATTICE_CLI_PATH, kTiny + kMoe + QStringList{"--db", db_, "--run-name", "moe"});
    QVERIFY2(a.exit_code == 0, qPrintable(textOf(a)));
    testing::Run b = testing::run_process(
        LATTICE_CLI_PATH,
        kTiny + QStringList{"--train-iters", "3", "--db", db_, "--run-name", "dense"});
    QVERIFY2(b.exit_code == 0, qPrintable(textOf(b)));
    auto store = storage::RunStore::open(db_.toStdString());
    QVERIFY(store);
    moe_ = (*store)->find_run("moe").value().id;
    dense_ = (*store)->find_run("dense").value().id;
  }

  void an_moe_run_shows_each_experts_load_and_the_aux_loss() {
    DashboardView view;
    view.resize(1280, 800);
    view.setSmoothing(0);
    view.setDatabase(db_);
    view.showRuns({moe_});
    view.show();
    QTRY_VERIFY(view.isPageShown(DashboardView::kMoePage));
    view.setCurrentPage(DashboardView::kMoePage);
    ExpertLoadChart* load = view.expertLoadChart();
    QTRY_COMPARE(load->expertGraphs().size(), kExperts);
    QTRY_COMPARE(load->expertGraphs()[0]->data()->size(), kReported.size());
    QCOMPARE(load->run(), moe_);
    QCOMPARE(load->layers(), (QList<int>{0, 2}));
    for (int layer : {0, 2}) {
      load->setLayer(layer);
      QCOMPARE(load->layer(), layer);
      // The layer's past is read when it is chosen; the Dashboard replots when it arrives.
      QTRY_COMPARE(load->expertGraphs()[kExperts - 1]->data()->size(), kReported.size());
      std::map<double, double> sum;  // step -> the experts' shares
      for (int e = 0; e < kExperts; e++) {
        const QCPGraph* g = load->expertGraphs()[e];
        QCOMPARE(g->name(), QString("expert %1").arg(e));
        QVector<double> steps;
        for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) {
          steps << it->key;
          sum[it->key] += it->value;
          QVERIFY2(
              it->value >= 0 && it->value <= 100,
              qPrintable(QString("expert %1 at step %2: %3 %").arg(e).arg(it->key).arg(it->value)));
        }
        QCOMPARE(steps, kReported);
      }
      for (const auto& [step, total] : sum)
        QVERIFY2(std::abs(total - 100) < 1e-9,
                 qPrintable(QString("layer %1 step %2: the shares sum to %3 %")
                                .arg(layer)
                                .arg(step)
                                .arg(total)));
    }
    MetricChart* aux = view.chart("moe aux loss");
    QVERIFY(aux);
    QTRY_COMPARE(aux->plottedPoints(moe_, "moe aux loss"), kIterations);

    const QString shots = qEnvironmentVariable("LATTICE_STUDIO_SCREENSHOTS");
    if (!shots.isEmpty()) {
      load->setLayer(0);
      view.replotNow();
      QTest::qWait(200);
      QVERIFY(view.grab().save(shots + "/studio-dashboard-moe-1280x800.png"));
    }
  }

  void a_dense_run_hides_the_moe_page() {
    DashboardView view;
    view.setDatabase(db_);
    view.showRuns({dense_});
    QTRY_COMPARE(view.store()->lastStep(dense_), qint64(3));
    view.replotNow();
    QVERIFY(!view.isPageShown(DashboardView::kMoePage));
    QVERIFY(!view.expertLoadChart()->hasLoad());
  }
};

QTEST_MAIN(TestStudioMoe)
#include "test_studio_moe.moc"
