// The Dashboard's "System metrics" page (issue 26 item 8, dashboard/system_charts.h): a real
// 2-rank run's CPU use and resident memory drawn as one line per rank; GPU cards shown, one
// line per rank, only for a run that recorded NVML readings. With LATTICE_SYSTEM_GRAB_DIR set
// it saves the page of the real run (docs/images/studio-dashboard-system-1280x800.png).
#include <qcustomplot.h>
#include <QTemporaryDir>
#include <QtTest>

#include "common/process.h"
#include "dashboard/dashboard_view.h"
#include "dashboard/system_charts.h"
#include "lattice/storage/run_store.h"
#include "lattice/system_metrics.h"

using namespace lattice;
using namespace lattice::ui;

class StudioSystem : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString db_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("runs.sqlite");
  }

#ifdef LATTICE_MPIEXEC
  void aRealRunsCpuAndMemoryAreALinePerRank() {
    const testing::Run train = testing::run_mpi(
        2, LATTICE_CLI_PATH,
        QString("train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                "--seq-length 64 --vocab-size 256 --micro-batch-size 2 --global-batch-size 16 "
                "--pipeline-model-parallel-size 2 --train-iters 30 --log-interval 2 "
                "--eval-iters 0 --threads 1 --run-name system-pp2")
                .split(' ') +
            QStringList{"--db", db_});
    QVERIFY2(train.exit_code == 0, qPrintable(train.out + train.err));
    auto store = std::move(storage::RunStore::open(db_.toStdString()).value());
    const storage::RunInfo run = store->find_run("system-pp2").value();

    DashboardView view;
    view.resize(1280, 800);
    view.setDatabase(db_);
    view.showRuns({run.id});
    view.setCurrentPage(DashboardView::kSystemMetricsPage);
    view.show();
    SystemChart* cpu = view.systemMetrics()->chart(SystemChart::Quantity::kCpu);
    SystemChart* rss = view.systemMetrics()->chart(SystemChart::Quantity::kRss);
    // Reports at iterations 1, 2, 4, ..., 30: 16 points per rank.
    QTRY_VERIFY_WITH_TIMEOUT(cpu->lines().size() == 2 && cpu->lines()[1]->dataCount() == 16 &&
                                 rss->lines().size() == 2 && rss->lines()[1]->dataCount() == 16,
                             20000);
    QCOMPARE(cpu->ranks(), (QList<int>{0, 1}));
    QCOMPARE(rss->ranks(), (QList<int>{0, 1}));
    for (int r = 0; r < 2; r++) {
      QCOMPARE(cpu->lines()[r]->dataCount(), 16);
      QCOMPARE(cpu->lines()[r]->name(), QString("rank %1").arg(r));
      // The plotted value is the recorded one (MiB for the resident set).
      const auto last = store->series(run.id, "rank " + std::to_string(r) + " rss", 30, 30).value();
      QCOMPARE(last.size(), size_t{1});
      QCOMPARE((rss->lines()[r]->data()->constEnd() - 1)->value, last[0].value / (1024.0 * 1024));
    }
    // The CPU engine records no GPU readings: the GPU cards are hidden.
    QVERIFY(!view.systemMetrics()->chart(SystemChart::Quantity::kGpuUtilization)->isVisible());
    QVERIFY(cpu->isVisible());
    const QString grab = qEnvironmentVariable("LATTICE_SYSTEM_GRAB_DIR");
    if (!grab.isEmpty()) {
      QTest::qWait(300);
      QVERIFY(view.grab().save(grab + "/studio-dashboard-system-1280x800.png"));
    }
  }
#endif

  // A run with NVML readings (written here: this machine has no GPU) shows the four GPU
  // cards, one line per rank.
  void gpuReadingsShowTheGpuCardsALinePerRank() {
    std::int64_t id = 0;
    {
      auto store = std::move(storage::RunStore::open(db_.toStdString()).value());
      storage::NewRun run;
      run.name = "gpu dp 2";
      run.layout.dp = 2;
      run.world_size = 2;
      id = store->create_run(run).value();
      QVERIFY(store->mark_running(id));
      for (int step = 1; step <= 3; step++) {
        std::map<std::string, double> values = {{"lm loss", 3.0}};
        for (int r = 0; r < 2; r++) {
          const std::string p = "rank " + std::to_string(r) + " ";
          values[p + kCpuPercentKey] = 100;
          values[p + kRssKey] = 2e9;
          values[p + kGpuUtilizationKey] = 90 + r;
          values[p + kGpuMemoryKey] = 6e10;
          values[p + kGpuPowerKey] = 600;
          values[p + kGpuTemperatureKey] = 60;
        }
        QVERIFY(store->log_step(id, step, values, {}));
      }
      QVERIFY(store->finish(id, storage::RunStatus::kFinished, ""));
    }
    DashboardView view;
    view.setDatabase(db_);
    view.showRuns({id});
    view.setCurrentPage(DashboardView::kSystemMetricsPage);
    view.show();
    using Q = SystemChart::Quantity;
    for (Q q : {Q::kGpuUtilization, Q::kGpuMemory, Q::kGpuPower, Q::kGpuTemperature}) {
      SystemChart* c = view.systemMetrics()->chart(q);
      QTRY_VERIFY_WITH_TIMEOUT(c->lines().size() == 2 && c->lines()[1]->dataCount() == 3, 20000);
      QVERIFY2(c->isVisible(), qPrintable(c->title()));
      QCOMPARE(c->ranks(), (QList<int>{0, 1}));
    }
    const SystemChart* util = view.systemMetrics()->chart(Q::kGpuUtilization);
    QCOMPARE(util->lines()[1]->data()->constBegin()->value, 91.0);
    const SystemChart* memory = view.systemMetrics()->chart(Q::kGpuMemory);
    QCOMPARE(memory->lines()[0]->data()->constBegin()->value, 6e10 / (1024.0 * 1024 * 1024));
  }
};

QTEST_MAIN(StudioSystem)
#include "test_studio_system.moc"
