// Benchmark (not a test): the Dashboard on 8 series of 1,000,000 points (one run, eight keys)
// in a run store: time to rebuild and replot every line chart at 1280x800 offscreen (median
// and max of N) and the process's resident memory; then a writer thread (its own connection)
// adds 1000 rows/s while the Dashboard follows live, and a 5 ms QTimer's lateness measures
// the event loop's latency. Prints tables; docs/studio.md quotes them.
// Run: QT_QPA_PLATFORM=offscreen build/release/tests/studio/bench_studio_dashboard [points [db]]
// (db: keep the written run store there and reuse it on the next run; default a temporary one)
#include <qcustomplot.h>
#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTimer>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "dashboard/dashboard_view.h"
#include "dashboard/metric_chart.h"
#include "dashboard/series_store.h"
#include "lattice/storage/run_store.h"
#include "wait_for.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

const char* const kKeys[] = {"lm loss",           "learning rate",      "grad norm", "loss scale",
                             "tokens per second", "TFLOP/s per device", "MFU",       "step time"};

double rssMiB() {
  QFile f("/proc/self/status");
  if (!f.open(QIODevice::ReadOnly)) return 0;
  for (const QByteArray& line : f.readAll().split('\n'))
    if (line.startsWith("VmRSS:")) return line.mid(6).trimmed().split(' ')[0].toDouble() / 1024;
  return 0;
}

QString loadAverage() {
  QFile f("/proc/loadavg");
  return f.open(QIODevice::ReadOnly) ? QString(f.readAll()).section(' ', 0, 2) : QString("?");
}

double value(int key, std::int64_t step) {
  return (key + 1) * (1 + 0.5 * std::sin(step * 1e-3) + 0.05 * std::sin(step * 0.7));
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  const std::int64_t points = argc > 1 ? std::atoll(argv[1]) : 1000000;
  QTemporaryDir dir;
  const QString db = argc > 2 ? QString(argv[2]) : dir.filePath("runs.sqlite");
  const bool reuse = QFileInfo::exists(db);
  std::printf("load average at start: %s\n", qPrintable(loadAverage()));

  QElapsedTimer clock;
  clock.start();
  qint64 run = 1;
  if (!reuse) {
    auto store = std::move(*storage::RunStore::open(db.toStdString()));
    storage::NewRun r;
    r.name = "bench";
    r.config_json = R"({"seq-length": 1024})";
    run = *store->create_run(r);
    (void)store->mark_running(run);
    std::vector<storage::StepRecord> batch;
    for (std::int64_t s = 0; s < points; s++) {
      storage::StepRecord rec{s, {}, {}};
      for (int k = 0; k < 8; k++) rec.values[kKeys[k]] = value(k, s);
      batch.push_back(std::move(rec));
      if (batch.size() == 20000) {
        (void)store->log_steps(run, batch);
        batch.clear();
      }
    }
    if (!batch.empty()) (void)store->log_steps(run, batch);
  }
  if (!reuse)
    std::printf("wrote 8 x %lld points in %.1f s (%.0f MiB database)\n",
                static_cast<long long>(points), clock.elapsed() / 1e3,
                QFileInfo(db).size() / 1048576.0);

  const double rssBefore = rssMiB();
  DashboardView view;
  view.resize(1280, 800);
  view.setDatabase(db);
  clock.restart();
  view.showRuns({run});
  view.show();
  QList<MetricChart*> charts;
  for (const char* k : kKeys) charts << view.chart(k);
  // Both pages of line charts, so that every one of the 8 series is read and drawn.
  auto loaded = [&] {
    for (MetricChart* c : charts)
      if (c->plottedPoints(run, c->firstKey()) == 0) return false;
    return true;
  };
  for (auto page : {DashboardView::kThroughputPage, DashboardView::kTrainingPage}) {
    view.setCurrentPage(page);
    waitFor([&] { return false; }, 300, 20);
  }
  auto refreshAll = [&] {
    for (MetricChart* c : charts) {
      c->refresh();
      c->plot()->replot();
    }
  };
  const bool ok = waitFor(
      [&] {
        refreshAll();
        return loaded();
      },
      120000, 20);
  std::printf("first full picture of 8 series: %.2f s%s\n", clock.elapsed() / 1e3,
              ok ? "" : " (timed out)");
  int plotted = 0;
  for (MetricChart* c : charts) plotted += c->plottedPoints(run, c->firstKey());

  std::vector<double> times, rebuild;
  constexpr int kReplots = 30;
  for (int i = 0; i < kReplots; i++) {
    QElapsedTimer t;
    t.start();
    for (MetricChart* c : charts) c->refresh();
    rebuild.push_back(t.nsecsElapsed() / 1e6);
    for (MetricChart* c : charts) c->plot()->replot();
    times.push_back(t.nsecsElapsed() / 1e6);
    QApplication::processEvents();
  }
  const double rssAfter = rssMiB();
  std::printf("\n%-52s %10s %10s\n", "8 x 1M points, 1280x800 offscreen", "median", "max");
  std::printf("%-52s %8.1f ms %7.1f ms   (target <= 30 ms)\n",
              "rebuild + replot all 8 line charts (N=30)", percentile(times, 0.5),
              *std::max_element(times.begin(), times.end()));
  std::printf("%-52s %8.1f ms %7.1f ms\n", "  of which rebuild from the series store",
              percentile(rebuild, 0.5), *std::max_element(rebuild.begin(), rebuild.end()));
  std::printf("%-52s %10d\n", "points plotted (all 8 series)", plotted);
  std::printf("%-52s %7.0f MiB -> %.0f MiB\n", "resident memory before -> after loading", rssBefore,
              rssAfter);

  // ---- live: 1000 rows/s from a writer thread, event-loop latency ----
  std::atomic<bool> stop{false};
  std::atomic<long> written{0};
  std::thread writer([&] {
    auto store = std::move(*storage::RunStore::open(db.toStdString()));
    std::int64_t step = points;  // after the newest step (a reused store grew last time)
    if (auto info = store->find_run(std::to_string(run)); info && info->latest_step)
      step = *info->latest_step + 1;
    auto next = std::chrono::steady_clock::now();
    while (!stop) {
      std::map<std::string, double> values;
      for (int k = 0; k < 8; k++) values[kKeys[k]] = value(k, step);
      (void)store->log_step(run, step++, values);  // 8 rows; 125 steps/s = 1000 rows/s
      written += 8;
      next += std::chrono::microseconds(8000);
      std::this_thread::sleep_until(next);
    }
  });
  std::vector<double> late;
  QElapsedTimer tick;
  tick.start();
  qint64 last = tick.nsecsElapsed();
  QTimer probe;
  probe.setTimerType(Qt::PreciseTimer);
  probe.setInterval(5);
  QObject::connect(&probe, &QTimer::timeout, [&] {
    const qint64 now = tick.nsecsElapsed();
    late.push_back(std::max(0.0, (now - last) / 1e6 - 5));
    last = now;
  });
  const int replotsBefore = view.replotCount();
  const qint64 rowsBefore = view.store()->rowsSeen();
  probe.start();
  waitFor([&] { return tick.elapsed() > 10000; }, 20000, 20);
  probe.stop();
  stop = true;
  writer.join();
  const int replots = view.replotCount() - replotsBefore;
  const qint64 rows = view.store()->rowsSeen() - rowsBefore;
  std::printf("\n%-52s %8s %8s %8s\n", "live, 1000 rows/s for 10 s", "p50", "p99", "max");
  std::printf("%-52s %5.1f ms %5.1f ms %5.1f ms   (target <= 50 ms)\n",
              "5 ms timer lateness (event-loop latency)", percentile(late, 0.5),
              percentile(late, 0.99), *std::max_element(late.begin(), late.end()));
  std::printf("%-52s %ld written, %lld seen, %d replots (%.1f/s)\n", "rows", written.load(),
              static_cast<long long>(rows), replots, replots / 10.0);
  std::printf("%-52s %.0f MiB\n", "resident memory at the end", rssMiB());
  std::printf("load average at end: %s (2 shared cores)\n", qPrintable(loadAverage()));
  return 0;
}
