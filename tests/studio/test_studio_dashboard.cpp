// The Dashboard on a real run store: it follows rows another process writes while it is
// open; its smoothing is TensorBoard's debiased EMA; the pipeline timeline has one lane per
// stage and a box per event; long series are read down-sampled per pixel and refined to
// exact points when zoomed in; memory and timer bars; the three export formats.
#include <qcustomplot.h>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <tuple>

#include "dashboard/dashboard_view.h"
#include "dashboard/metric_chart.h"
#include "dashboard/rank_bars_chart.h"
#include "dashboard/series_store.h"
#include "dashboard/smoothing.h"
#include "dashboard/timeline_chart.h"
#include "lattice/instability.h"
#include "lattice/storage/run_store.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

std::unique_ptr<storage::RunStore> openStore(const QString& path) {
  auto store = storage::RunStore::open(path.toStdString());
  if (!store) qFatal("%s", store.status().message().c_str());
  return std::move(*store);
}

qint64 newRunningRun(storage::RunStore& store, const std::string& name,
                     const std::string& config = R"({"seq-length": 64})") {
  storage::NewRun r;
  r.name = name;
  r.host = "test-host";
  r.config_json = config;
  auto id = store.create_run(r);
  if (!id) qFatal("%s", id.status().message().c_str());
  if (!store.mark_running(*id)) qFatal("mark_running");
  return *id;
}

// A deterministic, noisy value: buckets have distinct min and max.
double wiggle(std::int64_t step) {
  return 5 + std::sin(step * 0.37) + (step % 7) * 0.01;
}

void compareSeries(const QVector<double>& got, const QVector<double>& want, const char* what) {
  QCOMPARE(got.size(), want.size());
  for (int i = 0; i < got.size(); i++) {
    if (std::isnan(want[i])) {
      QVERIFY2(std::isnan(got[i]), qPrintable(QString("%1[%2]: want NaN").arg(what).arg(i)));
      continue;
    }
    QVERIFY2(std::fabs(got[i] - want[i]) < 1e-9,
             qPrintable(QString("%1[%2] = %3, want %4 (tolerance 1e-9)")
                            .arg(what)
                            .arg(i)
                            .arg(got[i], 0, 'g', 12)
                            .arg(want[i], 0, 'g', 12)));
  }
}

std::vector<storage::TimelineEvent> twoStageFixture(double scale) {
  // PP 2, 4 micro-batches, DP 2 (ranks 2 and 3 replicate ranks 0 and 1 and are not drawn).
  std::vector<storage::TimelineEvent> ev;
  for (int rank : {0, 1, 2, 3}) {
    const int stage = rank % 2;
    double t = stage * 1.0;
    for (int mb = 0; mb < 4; mb++, t += 1)
      ev.push_back({rank, stage, mb, "forward", t * scale, (t + 0.9) * scale});
    if (stage == 0) {
      ev.push_back({rank, stage, 0, "pipeline wait", t * scale, (t + 1) * scale});
      t += 1;
    }
    for (int mb = 0; mb < 4; mb++, t += 2)
      ev.push_back({rank, stage, mb, "backward", t * scale, (t + 1.8) * scale});
    ev.push_back({rank, stage, 0, "optimizer", t * scale, (t + 0.5) * scale});
  }
  return ev;
}

}  // namespace

class TestStudioDashboard : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

  // ---- (b) smoothing -------------------------------------------------------------------
  void smoothingIsTensorBoardsDebiasedEma() {
    // w = 0.5: last = 0.5, 1.25, 2.125; debias 1 - 0.5^n = 0.5, 0.75, 0.875.
    compareSeries(emaSmooth({1, 2, 3}, 0.5), {1.0, 1.25 / 0.75, 2.125 / 0.875}, "ema(w=0.5)");
    // A constant stays constant at any weight (what the debias is for).
    compareSeries(emaSmooth({5, 5, 5, 5}, 0.9), {5, 5, 5, 5}, "ema(constant, w=0.9)");
    // w = 0.9, [10, 0]: last = 1, 0.9; debias 0.1, 0.19.
    compareSeries(emaSmooth({10, 0}, 0.9), {10, 0.9 / 0.19}, "ema(w=0.9)");
  }

  void smoothingPassesNaNThroughWithoutCountingIt() {
    // The NaN stays NaN and the next point is debiased by 1 - w^2 (two finite points).
    const double nan = std::nan("");
    compareSeries(emaSmooth({1, nan, 3}, 0.5), {1, nan, 1.75 / 0.75}, "ema(NaN, w=0.5)");
    compareSeries(emaSmooth({nan, 4}, 0.5), {nan, 4}, "ema(leading NaN)");
  }

  void smoothingWeightZeroIsTheRawSeries() {
    const double nan = std::nan("");
    compareSeries(emaSmooth({3, -1, nan, 7}, 0), {3, -1, nan, 7}, "ema(w=0)");
    QCOMPARE(emaSmooth({}, 0.6).size(), 0);
  }

  // Issue 26 item 5: the recorder's instability keys (lattice/instability.h) drawn as markers
  // alone at their steps on the loss and grad-norm charts.
  void instabilityEventsAreMarkersAtTheirSteps() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    qint64 run = 0;
    {
      auto store = openStore(db);
      run = newRunningRun(*store, "spiky");
      for (int step = 1; step <= 60; step++) {
        std::map<std::string, double> v = {{"lm loss", wiggle(step)}, {"grad norm", 1.5}};
        if (step == 30) v["grad norm"] = 900;
        if (step == 45) v["lm loss"] = 40;
        QVERIFY(store->log_step(run, step, v, {}));
      }
      lattice::InstabilityEvent norm{lattice::InstabilityEvent::kGradNormSpike, 30, 900, 1.5, 0.1,
                                     8985, 20};
      lattice::InstabilityEvent loss{lattice::InstabilityEvent::kLossSpike, 45, 40, 3, 0.5, 74, 20};
      QVERIFY(store->log_step(run, 30, lattice::instability_values(norm), {}));
      QVERIFY(store->log_step(run, 45, lattice::instability_values(loss), {}));
    }
    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db);
    view.showRuns({run});
    view.show();
    MetricChart* lossChart = view.chart("lm loss");
    MetricChart* normChart = view.chart("grad norm");
    QTRY_COMPARE(lossChart->plottedPoints(run, "loss spike value"), 1);
    QTRY_COMPARE(normChart->plottedPoints(run, "grad norm spike value"), 1);
    for (auto [chart, key, step, value] :
         {std::tuple{lossChart, QString("loss spike value"), 45.0, 40.0},
          std::tuple{normChart, QString("grad norm spike value"), 30.0, 900.0}}) {
      const QCPGraph* g = chart->smoothGraph(run, key);
      QVERIFY(g && g->visible());
      QCOMPARE(g->data()->size(), 1);
      QCOMPARE(g->data()->constBegin()->key, step);
      QCOMPARE(g->data()->constBegin()->value, value);
      QCOMPARE(g->lineStyle(), QCPGraph::lsNone);
      QCOMPARE(g->scatterStyle().shape(), QCPScatterStyle::ssTriangle);
    }
  }

  // Issue 29: the EMA ran over the few validation points (each a new evaluation, not noise
  // around a trend) and over the learning-rate schedule, and showed neither as logged.
  void validationPointsAndTheLearningRateAreDrawnAsLogged() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    qint64 run = 0;
    const QVector<double> validation = {9, 5, 3, 2};  // every 25 steps
    {
      auto store = openStore(db);
      run = newRunningRun(*store, "sparse");
      for (int step = 1; step <= 100; step++) {
        std::map<std::string, double> v = {{"lm loss", wiggle(step)},
                                           {"learning rate", 1e-3 * std::min(1.0, step / 10.0)}};
        if (step % 25 == 0) v["validation lm loss"] = validation[step / 25 - 1];
        QVERIFY(store->log_step(run, step, v, {}));
      }
    }
    DashboardView view;
    view.resize(1280, 800);
    view.setSmoothing(0.9);
    view.setDatabase(db);
    view.showRuns({run});
    view.show();
    MetricChart* loss = view.chart("lm loss");
    MetricChart* lr = view.chart("learning rate");
    QTRY_COMPARE(loss->plottedPoints(run, "lm loss"), 100);
    QTRY_COMPARE(loss->plottedPoints(run, "validation lm loss"), 4);
    QTRY_COMPARE(lr->plottedPoints(run, "learning rate"), 100);
    auto values = [](const QCPGraph* g) {
      QVector<double> out;
      for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) out << it->value;
      return out;
    };
    const QCPGraph* shown = loss->smoothGraph(run, "validation lm loss");
    compareSeries(values(shown), validation, "validation lm loss as drawn");
    QVERIFY2(shown->scatterStyle().shape() != QCPScatterStyle::ssNone,
             "four points need markers to be seen as points");
    QVector<double> schedule;
    for (int step = 1; step <= 100; step++) schedule << 1e-3 * std::min(1.0, step / 10.0);
    compareSeries(values(lr->smoothGraph(run, "learning rate")), schedule, "learning rate");
    // The training loss is still smoothed.
    QVector<double> raw;
    for (int step = 1; step <= 100; step++) raw << wiggle(step);
    compareSeries(values(loss->smoothGraph(run, "lm loss")), emaSmooth(raw, 0.9), "lm loss EMA");
  }

  // ---- (c) timeline --------------------------------------------------------------------
  void timelineLayoutHasOneLanePerStageAndABoxPerEvent() {
    const TimelineLayout l = layoutTimeline(twoStageFixture(1e-3));
    QCOMPARE(l.laneStage, (QList<int>{0, 1}));
    QCOMPARE(l.laneRank, (QList<int>{0, 1}));  // replicas 2 and 3 are not drawn
    // stage 0: 4 forward, 1 wait, 4 backward, 1 optimizer; stage 1: 4 + 4 + 1.
    QCOMPARE(l.boxes.size(), 19);
    QCOMPARE(std::count_if(l.boxes.begin(), l.boxes.end(),
                           [](const TimelineBox& b) { return b.lane == 0; }),
             10);
    const TimelineBox& b = l.boxes[1];  // stage 0, forward of micro-batch 1
    QCOMPARE(b.kind, QString("forward"));
    QCOMPARE(b.microbatch, 1);
    QCOMPARE(b.start, 1e-3);
    QCOMPARE(b.end, 1.9e-3);
    QCOMPARE(l.start, 0.0);
  }

  void timelineChartDrawsTheChosenIteration() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    qint64 run = 0;
    {
      auto store = openStore(db);
      run = newRunningRun(*store, "timeline");
      QVERIFY(store->log_step(run, 5, {{"lm loss", 3}}));
      QVERIFY(store->log_timeline(run, 5, twoStageFixture(1e-3)));
      QVERIFY(store->log_step(run, 10, {{"lm loss", 2}}));
      auto ten = twoStageFixture(2e-3);
      ten.resize(9);  // rank 0's forward, wait, backward
      QVERIFY(store->log_timeline(run, 10, ten));
    }
    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db);
    view.showRuns({run});
    view.setCurrentPage(DashboardView::kSystemPage);
    view.show();
    TimelineChart* t = view.timelineChart();
    QTRY_COMPARE(t->step(), qint64(10));  // the newest iteration first
    QCOMPARE(t->boxCount(), 9);
    QCOMPARE(t->layout().laneStage, QList<int>{0});
    view.selectTimelineStep(5);
    QTRY_COMPARE(t->step(), qint64(5));
    QCOMPARE(t->boxCount(), 19);
    QCOMPARE(t->layout().laneStage, (QList<int>{0, 1}));
    // Box positions are the events' times in milliseconds, lanes at y = lane.
    QList<QCPItemRect*> rects;
    for (int i = 0; i < t->plot()->itemCount(); i++)
      if (auto* r = qobject_cast<QCPItemRect*>(t->plot()->item(i))) rects << r;
    QCOMPARE(rects.size(), 19);
    QCPItemRect* rect = rects[1];  // stage 0, forward of micro-batch 1
    QCOMPARE(rect->topLeft->coords().x(), 1.0);
    QVERIFY(std::fabs(rect->bottomRight->coords().x() - 1.9) < 1e-9);
    QVERIFY(rect->topLeft->coords().y() < 0 && rect->bottomRight->coords().y() > 0);
    // 1 ms boxes on a ~1200 px axis of ~11 ms are wide enough for their micro-batch.
    QCOMPARE(t->visibleLabelCount(), 16);
  }

  // ---- (d) down-sampling ---------------------------------------------------------------
  void longSeriesAreReadPerPixelAndRefinedOnZoom() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    constexpr int kPoints = 200000;
    qint64 run = 0;
    {
      auto store = openStore(db);
      run = newRunningRun(*store, "long");
      std::vector<storage::StepRecord> batch;
      for (int step = 0; step < kPoints; step++) {
        batch.push_back({step, {{"lm loss", wiggle(step)}}, {}});
        if (batch.size() == 20000) {
          QVERIFY(store->log_steps(run, batch));
          batch.clear();
        }
      }
    }
    DashboardView view;
    view.resize(1280, 800);
    view.setSmoothing(0);
    view.setDatabase(db);
    view.showRuns({run});
    view.show();
    MetricChart* loss = view.chart("lm loss");
    QVERIFY(loss);
    QTRY_VERIFY(loss->rawGraph(run, "lm loss") && loss->plottedPoints(run, "lm loss") > 0);
    const int width = loss->plot()->axisRect()->width();
    const int points = loss->plottedPoints(run, "lm loss");
    QVERIFY2(points >= 1.5 * width && points <= 3 * width,
             qPrintable(QString("%1 points plotted for %2 stored on a %3 px axis: want 1.5-3x the "
                                "width")
                            .arg(points)
                            .arg(kPoints)
                            .arg(width)));
    // The extremes survive: the plotted maximum is the series' maximum.
    bool ok = false;
    const QCPRange values = loss->rawGraph(run, "lm loss")->getValueRange(ok);
    double most = -1e9;
    for (int s = 0; s < kPoints; s++) most = std::max(most, wiggle(s));
    QCOMPARE(values.upper, most);

    // Zoomed to 301 steps: re-read at the pixel width, which is every point exactly.
    loss->plot()->xAxis->setRange(100000, 100300);
    QVERIFY(!loss->following());
    QTRY_COMPARE(loss->plottedPoints(run, "lm loss"), 301);
    const QCPGraph* g = loss->rawGraph(run, "lm loss");
    for (int i : {0, 123, 300}) {
      const QCPGraphData d = *(g->data()->constBegin() + i);
      QCOMPARE(d.key, 100000.0 + i);
      QCOMPARE(d.value, wiggle(100000 + i));
    }
    // Double-click semantics: follow again reads the whole range at the pixel width.
    view.setFollow(true);
    QTRY_VERIFY(loss->plottedPoints(run, "lm loss") >= 1.5 * width);
  }

  // ---- (a) live rows from another process ------------------------------------------------
  void picksUpRowsWrittenByAnotherProcess() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    qint64 run = 0;
    {
      auto store = openStore(db);
      run = newRunningRun(*store, "live");
    }
    DashboardView view;
    view.resize(1280, 800);
    view.setSmoothing(0);
    view.setDatabase(db);
    view.showRuns({run});
    view.show();
    MetricChart* loss = view.chart("lm loss");
    QTRY_COMPARE(view.store()->meta(run)->name, QString("live"));
    QCOMPARE(loss->plottedPoints(run, "lm loss"), 0);

    constexpr int kSteps = 300;
    QProcess writer;
    writer.start(LATTICE_DASHBOARD_WRITER,
                 {db, QString::number(run), QString::number(kSteps), "10"});
    QVERIFY2(writer.waitForStarted(), qPrintable(writer.errorString()));
    // Rows show up while the writer is still writing...
    QTRY_VERIFY_WITH_TIMEOUT(loss->plottedPoints(run, "lm loss") > 0, 10000);
    QVERIFY2(writer.state() == QProcess::Running, "the writer ended before the chart saw a row");
    QVERIFY(loss->plottedPoints(run, "lm loss") < kSteps);
    // ...and all of them by the end.
    QVERIFY(writer.waitForFinished(60000));
    QCOMPARE(writer.exitCode(), 0);
    QTRY_COMPARE_WITH_TIMEOUT(loss->plottedPoints(run, "lm loss"), kSteps, 10000);
    const QCPGraph* g = loss->rawGraph(run, "lm loss");
    QCOMPARE(g->data()->constBegin()->key, 1.0);
    QCOMPARE((g->data()->constEnd() - 1)->key, double(kSteps));
    QCOMPARE((g->data()->constEnd() - 1)->value, 10.0 - kSteps / 100.0);
    QVERIFY(loss->following());
    QCOMPARE(loss->plot()->xAxis->range().upper, double(kSteps));

    // Tokens on x: consumed samples (8 per step) x seq-length 64 from the run's configuration.
    view.setXAxisMode(XAxisMode::kTokens);
    view.replotNow();
    QCOMPARE((g->data()->constEnd() - 1)->key, 8.0 * kSteps * 64);
    // The crosshair names the run and its value at the hovered step.
    const QString text = loss->crosshairText(8.0 * 150 * 64);
    QVERIFY2(text.contains("live") && text.contains("8.5") && text.contains("step 150"),
             qPrintable(text));
  }

  void waitsForADatabaseThatDoesNotExistYet() {
    QTemporaryDir dir;
    const QString db = dir.filePath("later.sqlite");
    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db);
    view.showRuns({1});
    view.show();
    QTest::qWait(300);
    QVERIFY2(!QFileInfo::exists(db), "the dashboard must not create the run store");
    {
      auto store = openStore(db);
      const qint64 run = newRunningRun(*store, "later");
      QCOMPARE(run, qint64(1));
      for (int s = 1; s <= 5; s++) QVERIFY(store->log_step(run, s, {{"lm loss", 1.0 * s}}));
    }
    QTRY_COMPARE(view.chart("lm loss")->plottedPoints(1, "lm loss"), 5);
  }

  // ---- every page of two full runs (LATTICE_DASHBOARD_GRAB_DIR: saves the pages as PNG) ----
  void everyChartShowsBothRuns() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    QList<qint64> runs;
    {
      auto store = openStore(db);
      for (int r = 0; r < 2; r++) {
        const qint64 run = newRunningRun(*store, r == 0 ? "gpt-tiny-lr3e-4" : "gpt-tiny-lr1e-3");
        runs << run;
        for (int step = 1; step <= 400; step++) {
          const double lr = (r == 0 ? 3e-4 : 1e-3) * std::min(1.0, step / 40.0) *
                            (0.55 + 0.45 * std::cos(M_PI * step / 400));
          std::map<std::string, double> v = {
              {"lm loss", 2.5 + 8 * std::exp(-step / (r == 0 ? 120.0 : 70.0)) +
                              0.15 * std::sin(step * 1.7 + r)},
              {"learning rate", lr},
              {"grad norm", 1.5 * std::exp(-step / 200.0) + 0.2 + 0.1 * std::sin(step * 0.9)},
              {"loss scale", 1},
              {"skipped iterations", 0},
              {"consumed samples", 8.0 * step},
              {"step time", 0.11 + 0.01 * std::sin(step)},
              {"tokens per second", 4600 + 150 * std::sin(step * 0.3) - 300 * r},
              {"TFLOP/s per device", 0.21 + 0.01 * std::sin(step * 0.3)},
              {"MFU", 0.18 + 0.01 * std::sin(step * 0.3)}};
          if (step % 50 == 0)
            v["validation lm loss"] = 2.7 + 8 * std::exp(-step / (r == 0 ? 120.0 : 70.0));
          std::vector<storage::MemorySample> memory;
          if (step % 50 == 0) {
            for (int k = 0; k < 4; k++) {
              const std::string p = "rank " + std::to_string(k) + " ";
              v[p + "forward time"] = 0.030 + 0.002 * k;
              v[p + "backward time"] = 0.060 + 0.003 * k;
              v[p + "pipeline wait time"] = 0.010 * (3 - k % 2);
              v[p + "data-parallel comm time"] = 0.008;
              v[p + "optimizer time"] = 0.004;
              const std::int64_t m = 1 << 20;
              memory.push_back({k, 120 * m, 120 * m, 240 * m, (90 - 20 * (k % 2)) * m, 30 * m,
                                (640 - 20 * (k % 2)) * m});
            }
          }
          QVERIFY(store->log_step(run, step, v, memory));
          if (step % 100 == 0)
            QVERIFY(store->log_timeline(run, step, twoStageFixture(2e-3 + r * 1e-3)));
        }
      }
    }
    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db);
    view.showRuns(runs);
    view.show();
    const QString grab = qEnvironmentVariable("LATTICE_DASHBOARD_GRAB_DIR");
    for (auto page : {DashboardView::kTrainingPage, DashboardView::kThroughputPage}) {
      view.setCurrentPage(page);
      for (MetricChart* c : view.metricCharts()) {
        if (!c->isVisible()) continue;
        for (qint64 run : runs)
          QTRY_VERIFY2(c->plottedPoints(run, c->firstKey()) == 400, qPrintable(c->title()));
      }
      if (!grab.isEmpty()) {
        QTest::qWait(200);
        view.grab().save(grab + QString("/dashboard-%1.png").arg(int(page)));
      }
    }
    QCOMPARE(view.chart("lm loss")->plottedPoints(runs[1], "validation lm loss"), 8);
    if (!grab.isEmpty()) {  // the crosshair on the loss chart, zoomed in
      view.setCurrentPage(DashboardView::kTrainingPage);
      view.setLogScale(true);
      QCustomPlot* plot = view.chart("lm loss")->plot();
      plot->xAxis->setRange(100, 300);
      QTest::qWait(400);
      QTest::mouseMove(plot, plot->axisRect()->rect().center());
      QTest::qWait(100);
      view.grab().save(grab + "/dashboard-hover.png");
    }
    view.setCurrentPage(DashboardView::kSystemPage);
    QTRY_COMPARE(view.memoryChart()->rankCount(), 4);
    QTRY_COMPARE(view.phaseChart()->rankCount(), 4);
    QTRY_COMPARE(view.timelineChart()->step(), qint64(400));
    QCOMPARE(view.memoryChart()->capacityBytes(), 0.0);  // "test-host" is not this machine
    if (!grab.isEmpty()) {
      QTest::qWait(200);
      view.grab().save(grab + "/dashboard-2.png");
    }
  }

  // ---- memory and timers, exports --------------------------------------------------------
  void memoryAndPhaseBarsShowTheLatestStep() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    qint64 run = 0;
    constexpr std::int64_t kMiB = 1 << 20;
    {
      auto store = openStore(db);
      run = newRunningRun(*store, "memory");
      std::vector<storage::MemorySample> memory = {
          {0, 100 * kMiB, 100 * kMiB, 200 * kMiB, 50 * kMiB, 10 * kMiB, 500 * kMiB},
          {1, 90 * kMiB, 90 * kMiB, 180 * kMiB, 40 * kMiB, 10 * kMiB, 450 * kMiB}};
      std::map<std::string, double> times;
      for (int r = 0; r < 2; r++)
        for (int p = 0; p < kPhaseCount; p++)
          times["rank " + std::to_string(r) + " " + kPhaseKeys[p]] = 0.001 * (p + 1) * (r + 1);
      QVERIFY(store->log_step(run, 10, times, memory));
    }
    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db);
    view.showRuns({run});
    view.setCurrentPage(DashboardView::kSystemPage);
    view.show();
    RankBarsChart* m = view.memoryChart();
    QTRY_COMPARE(m->rankCount(), 2);
    QCOMPARE(m->bars()[2]->data()->at(1)->value, 180.0);  // rank 1's optimizer state, MiB
    RankBarsChart* p = view.phaseChart();
    QTRY_COMPARE(p->rankCount(), 2);
    QCOMPARE(p->bars()[1]->data()->at(1)->value, 4.0);  // rank 1's backward, ms
    // The engine logs each phase's mean per iteration over the log interval: the chart says so.
    QCOMPARE(p->plot()->yAxis->label(), QString("ms per iteration"));
  }

  // Issue 29: the tied-embedding all-reduce (first and last pipeline stage) was drawn as
  // data-parallel communication; the engine now logs it as "embedding comm".
  void theEmbeddingAllReduceIsItsOwnPhaseAndTimelineKind() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    qint64 run = 0;
    {
      auto store = openStore(db);
      run = newRunningRun(*store, "pp2");
      std::map<std::string, double> times;
      for (int r = 0; r < 2; r++) {
        const std::string p = "rank " + std::to_string(r) + " ";
        times[p + "forward time"] = 0.010;
        times[p + "backward time"] = 0.020;
        times[p + "pipeline wait time"] = 0.001;
        times[p + "embedding comm time"] = 0.003;
        times[p + "data-parallel comm time"] = 0.002;
        times[p + "optimizer time"] = 0.004;
      }
      QVERIFY(store->log_step(run, 10, times, {}));
      QVERIFY(store->log_timeline(run, 10,
                                  {{0, 0, 0, "forward", 0.000, 0.010},
                                   {0, 0, 0, "backward", 0.012, 0.032},
                                   {0, 0, -1, "embedding comm", 0.032, 0.035},
                                   {0, 0, -1, "dp comm", 0.035, 0.037},
                                   {0, 0, -1, "optimizer", 0.037, 0.041}}));
    }
    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db);
    view.showRuns({run});
    view.setCurrentPage(DashboardView::kSystemPage);
    view.show();
    RankBarsChart* phases = view.phaseChart();
    QTRY_COMPARE(phases->rankCount(), 2);
    QMap<QString, double> rank1;  // phase name -> rank 1's milliseconds
    for (const QCPBars* b : phases->bars()) rank1[b->name()] = b->data()->at(1)->value;
    QVERIFY2(rank1.contains("embedding comm"), qPrintable(QStringList(rank1.keys()).join(", ")));
    QCOMPARE(rank1["embedding comm"], 3.0);
    QCOMPARE(rank1["data-parallel comm"], 2.0);

    const QColor embedding = TimelineChart::kindColor("embedding comm");
    QVERIFY2(embedding != TimelineChart::kindColor("dp comm") &&
                 embedding != TimelineChart::kindColor("an unknown kind"),
             "the embedding all-reduce needs a colour of its own in the timeline");
    QTRY_COMPARE(view.timelineChart()->step(), qint64(10));
    QStringList legend;
    QCustomPlot* plot = view.timelineChart()->plot();
    for (int i = 0; i < plot->legend->itemCount(); i++)
      if (auto* item = qobject_cast<QCPPlottableLegendItem*>(plot->legend->item(i)))
        legend << item->plottable()->name();
    QCOMPARE(legend,
             (QStringList{"forward", "backward", "embedding comm", "dp comm", "optimizer"}));
  }

  void exportsPictureAndData() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.sqlite");
    qint64 run = 0;
    {
      auto store = openStore(db);
      run = newRunningRun(*store, "export");
      for (int s = 1; s <= 20; s++) QVERIFY(store->log_step(run, s, {{"lm loss", 10.0 / s}}));
    }
    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db);
    view.showRuns({run});
    view.show();
    MetricChart* loss = view.chart("lm loss");
    QTRY_COMPARE(loss->plottedPoints(run, "lm loss"), 20);
    QVERIFY(loss->exportPng(dir.filePath("loss.png")));
    QVERIFY(QImage(dir.filePath("loss.png")).width() > 100);
    QVERIFY(loss->exportSvg(dir.filePath("loss.svg")));
    QFile svg(dir.filePath("loss.svg"));
    QVERIFY(svg.open(QIODevice::ReadOnly));
    QVERIFY(svg.readAll().contains("<svg"));
    QVERIFY(loss->exportCsv(dir.filePath("loss.csv")));
    QFile csv(dir.filePath("loss.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly | QIODevice::Text));
    const QStringList lines = QString(csv.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 21);
    QCOMPARE(lines[0], QString("run,series,first_step,last_step,x,min,max,last,count,smoothed"));
    QVERIFY2(lines[20].startsWith("export,lm loss,20,20,20,0.5,0.5,0.5,1,"), qPrintable(lines[20]));
  }
};

QTEST_MAIN(TestStudioDashboard)
#include "test_studio_dashboard.moc"
