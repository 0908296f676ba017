// The Studio as a user drives it: one window launches three tiny runs one after another
// (mock data, one rank, `lattice train` itself), and each one, as it is recorded, opens in the
// Dashboard with its points and status and is listed in History beside the runs before it.
// This is the run store's Note "header through the VFS" (storage/src/file_header.h) seen from
// the Studio: the Dashboard holds the store open while the Launch view and History open and
// close theirs, and every trainer that ends must leave that open store intact.
#include <QLabel>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "app/main_window.h"
#include "common/studio_plans.h"
#include "dashboard/dashboard_view.h"
#include "dashboard/series_store.h"
#include "history/history_view.h"
#include "history/run_table_model.h"
#include "launch/launch_form.h"
#include "launch/launch_view.h"
#include "plan/plan_model.h"

using namespace lattice::ui;

namespace {

constexpr int kIterations = 3;

LaunchEnvironment testEnvironment(const QString& dir) {
  LaunchEnvironment env;
  env.lattice = LATTICE_CLI_PATH;
  env.mpirun = "/usr/bin/mpirun";  // one rank: not used
  env.cores = 2;
  env.root = false;
  env.dataDir = dir;
  env.defaultDatabase = dir + "/runs.sqlite";
  return env;
}

}  // namespace

class TestStudioRunAfterRun : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

  void threeRunsInARowEachOpenInTheDashboardAndAppearInHistory() {
    QTemporaryDir dir;
    const QString db = dir.filePath("studio.sqlite");
    MainWindow::Options options;
    options.useSettings = false;
    options.measureCpu = false;
    options.environment = testEnvironment(dir.path());
    options.database = db;
    MainWindow window(options);
    window.show();
    lattice::testing::tinyOneRankPlan(*window.planModel());
    QVERIFY(window.planModel()->isValid());
    LaunchView& launch = *window.launchView();
    auto* record = launch.findChild<QLabel*>("run-record");
    auto* console = launch.findChild<QPlainTextEdit*>("console");
    QList<qint64> launched;
    for (int i = 1; i <= 3; i++) {
      const QString name = QString("run-after-run-%1").arg(i);
      window.showView(MainWindow::View::kLaunch);
      LaunchSettings s;
      s.data = DataSource::kMock;
      s.runName = name;
      s.database = db;
      s.extraFlags =
          QString("--train-iters %1 --log-interval 1 --eval-iters 0 --threads 1").arg(kIterations);
      launch.form()->setSettings(s);
      QVERIFY2(launch.command().canStart(), qPrintable(launch.command().errors.join('\n')));
      QCOMPARE(launch.command().ranks, 1);
      QSignalSpy recorded(&launch, &LaunchView::runRecorded);
      QSignalSpy ended(&launch, &LaunchView::runEnded);
      launch.startRun();
      QVERIFY2(launch.isRunning(), qPrintable(name));
      QVERIFY2(ended.wait(60000), qPrintable(name + " did not end within 60 s"));
      QVERIFY2(ended.front().at(0).toBool(), qPrintable(console->toPlainText().right(3000)));
      // The Launch view found the run in the store (it used to wait for it forever).
      if (recorded.isEmpty()) recorded.wait(5000);
      QVERIFY2(!recorded.isEmpty(),
               qPrintable(
                   QString("%1 never appeared to the Launch view: %2").arg(name, record->text())));
      QTRY_VERIFY2_WITH_TIMEOUT(record->text().contains("finished"), qPrintable(record->text()),
                                5000);

      // The Dashboard opened it and read its points and its end.
      QCOMPARE(window.currentView(), MainWindow::View::kDashboard);
      const QList<qint64> shown = window.dashboardView()->runs();
      QCOMPARE(shown.size(), 1);
      const qint64 id = shown.front();
      QVERIFY2(!launched.contains(id), qPrintable(name + " opened an earlier run"));
      launched << id;
      const SeriesStore* series = window.dashboardView()->store();
      QTRY_VERIFY2_WITH_TIMEOUT(series->meta(id) && series->meta(id)->name == name &&
                                    series->meta(id)->status == "finished",
                                qPrintable(name + " is not shown finished in the Dashboard"),
                                10000);
      QTRY_COMPARE_WITH_TIMEOUT(series->lastStep(id), qint64{kIterations}, 10000);
      MetricChart* loss = window.dashboardView()->chart("lm loss");
      QTRY_COMPARE_WITH_TIMEOUT(loss->plottedPoints(id, "lm loss"), kIterations, 10000);

      // History lists it beside the earlier runs, selected.
      HistoryView* history = window.historyView();
      history->refresh();
      QTRY_VERIFY2_WITH_TIMEOUT(history->tableModel()->rowOfRun(id) >= 0,
                                qPrintable(name + " is not in History: " + history->errorText()),
                                10000);
      for (qint64 earlier : launched) QVERIFY(history->tableModel()->rowOfRun(earlier) >= 0);
      QCOMPARE(history->tableModel()->rowCount(), i);
      QVERIFY2(history->errorText().isEmpty(), qPrintable(history->errorText()));
      QCOMPARE(history->selectedRuns(), QList<qint64>{id});
    }
  }
};

QTEST_MAIN(TestStudioRunAfterRun)
#include "test_studio_run_after_run.moc"
