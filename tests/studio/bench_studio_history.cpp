// Benchmark (not a test): History on a store of 10,000 runs (a sweep of lr x micro-batch size x
// seed, each with `lattice train`'s full recorded configuration and a few metrics over 20
// steps), written with the run store's API. Times, at 1280x800 offscreen, each as the user
// waits for it (the model or panel updated and the view painted): opening History, filtering by
// text and by a setting, sorting by a column, grouping by a setting, reading the grouped curves
// (off the UI thread), opening the parallel-coordinates view and finding the hovered line.
// Prints a table (operation, ms, target 200 ms); docs/studio.md quotes it.
// Run: QT_QPA_PLATFORM=offscreen build/release/tests/studio/bench_studio_history [runs [db]]
// (db: keep the written store there and reuse it on the next run; default a temporary one)
#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QLineEdit>
#include <QTableView>
#include <QTemporaryDir>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "history/group_panel.h"
#include "history/history_view.h"
#include "history/parallel_view.h"
#include "history/run_filter_model.h"
#include "history/run_table_model.h"
#include "lattice/storage/run_store.h"
#include "lattice/train_options.h"
#include "wait_for.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

constexpr int kSteps = 20;
const char* const kLrs[] = {"1e-4", "3e-4", "6e-4", "1e-3"};
const int kBatches[] = {2, 4, 8};

QString loadAverage() {
  QFile f("/proc/loadavg");
  return f.open(QIODevice::ReadOnly) ? QString(f.readAll()).section(' ', 0, 2) : QString("?");
}

std::string config(int i, const std::string& name) {
  const std::vector<std::string> flags = {"--num-layers",
                                          "4",
                                          "--hidden-size",
                                          "256",
                                          "--num-attention-heads",
                                          "8",
                                          "--seq-length",
                                          "256",
                                          "--max-position-embeddings",
                                          "256",
                                          "--micro-batch-size",
                                          std::to_string(kBatches[(i / 4) % 3]),
                                          "--global-batch-size",
                                          "32",
                                          "--train-iters",
                                          std::to_string(kSteps),
                                          "--lr",
                                          kLrs[i % 4],
                                          "--seed",
                                          std::to_string(1 + i / 12),
                                          "--mock-data",
                                          "--run-name",
                                          name};
  Result<TrainOptions> options = parse_train_flags(flags);
  if (!options) qFatal("%s", options.status().message().c_str());
  return train_options_json(*options);
}

void writeRuns(const QString& db, int runs) {
  auto opened = storage::RunStore::open(db.toStdString());
  if (!opened) qFatal("%s", opened.status().message().c_str());
  storage::RunStore& store = **opened;
  for (int i = 0; i < runs; ++i) {
    storage::NewRun run;
    run.name = "sweep-" + std::to_string(i);
    run.host = "benchhost";
    run.command_line = "lattice train --run-name " + run.name;
    run.config_json = config(i, run.name);
    run.tags = {i % 2 ? "odd" : "even"};
    const std::int64_t id = store.create_run(run).value();
    if (!store.mark_running(id)) qFatal("mark_running");
    const double lr = std::atof(kLrs[i % 4]);
    std::vector<storage::StepRecord> steps;
    for (int s = 1; s <= kSteps; ++s) {
      const double loss = 4 + 6 * std::exp(-s * lr * 400) + 0.01 * ((i * 7 + s) % 11);
      storage::StepRecord r{s,
                            {{"lm loss", loss},
                             {"learning rate", lr},
                             {"grad norm", 1.0 + 0.1 * s},
                             {"tokens per second", 4e4 + i % 97}},
                            {}};
      if (s == kSteps) r.values["validation lm loss"] = loss + 0.05;
      steps.push_back(std::move(r));
    }
    if (!store.log_steps(id, steps) || !store.finish(id, storage::RunStatus::kFinished))
      qFatal("cannot log run %d", i);
  }
}

struct Row {
  QString operation;
  double ms;
};

// The median of `repeat` timings of act() followed by a full repaint of the view.
double timed(HistoryView& view, int repeat, const std::function<void(int)>& act) {
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    QElapsedTimer t;
    t.start();
    act(i);
    QApplication::processEvents();
    view.repaint();
    ms.push_back(t.nsecsElapsed() / 1e6);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  const int runs = argc > 1 ? std::atoi(argv[1]) : 10000;
  QTemporaryDir dir;
  const QString db = argc > 2 ? QString(argv[2]) : dir.filePath("runs.sqlite");
  std::printf("load average at start: %s\n", qPrintable(loadAverage()));
  if (!QFileInfo::exists(db)) {
    QElapsedTimer t;
    t.start();
    writeRuns(db, runs);
    std::printf("wrote %d runs of %d steps in %.1f s (%.0f MiB)\n", runs, kSteps,
                t.elapsed() / 1000.0, QFileInfo(db).size() / 1048576.0);
  }

  HistoryView view;
  view.resize(1280, 800);
  view.show();
  waitFor([&] { return view.isVisible(); }, 1000);
  QApplication::processEvents();
  std::vector<Row> rows;

  {
    int refreshed = 0;
    QObject counting;  // the connection ends with the block, as the counter does
    int parsed = 0;
    QObject::connect(&view, &HistoryView::refreshed, &counting, [&refreshed] { ++refreshed; });
    QObject::connect(&view, &HistoryView::settingsParsed, &counting, [&parsed] { ++parsed; });
    QElapsedTimer t;
    t.start();
    view.setDatabase(db);
    if (!waitFor([&] { return refreshed > 0; }, 60000)) qFatal("no refresh");
    const double read = t.nsecsElapsed() / 1e6;
    view.repaint();
    rows.push_back({QString("open History: read %1 runs, fill the model, first paint")
                        .arg(view.tableModel()->rowCount()),
                    t.nsecsElapsed() / 1e6});
    std::printf("  (of which the read, off the UI thread: %.0f ms)\n", read);
    if (!waitFor([&] { return parsed > 0; }, 60000)) qFatal("no settings");
    rows.push_back(
        {"  then every run's settings read and parsed, off the UI thread", t.nsecsElapsed() / 1e6});
    refreshed = 0;
    t.restart();
    view.refresh();
    if (!waitFor([&] { return refreshed > 0; }, 60000)) qFatal("no refresh");
    rows.push_back(
        {"periodic refresh (unchanged runs keep their settings)", t.nsecsElapsed() / 1e6});
  }
  auto* filter = view.findChild<QLineEdit*>(QStringLiteral("historyFilter"));
  QTableView* table = view.tableView();
  rows.push_back({"filter by text (\"sweep-12\", then cleared)", timed(view, 6, [&](int i) {
                    filter->setText(i % 2 ? QString() : QStringLiteral("sweep-12"));
                  })});
  rows.push_back({"filter by a setting (\"lr=3e-4\", then cleared)", timed(view, 6, [&](int i) {
                    filter->setText(i % 2 ? QString() : QStringLiteral("lr=3e-4"));
                  })});
  std::printf("  (lr=3e-4 shows %d runs)\n", [&] {
    filter->setText(QStringLiteral("lr=3e-4"));
    const int n = view.filterModel()->rowCount();
    filter->setText({});
    return n;
  }());
  rows.push_back({"sort by a column (loss, name)", timed(view, 6, [&](int i) {
                    table->sortByColumn(i % 2 ? RunTableModel::kName : RunTableModel::kLoss,
                                        Qt::AscendingOrder);
                  })});
  table->sortByColumn(RunTableModel::kId, Qt::DescendingOrder);
  GroupPanel* groups = view.groupPanel();
  rows.push_back({"open the Groups tab (every run)",
                  timed(view, 1, [&](int) { view.setAnalysisTab(HistoryView::kGroupsTab); })});
  {
    int shown = 0;
    QObject counting;
    QObject::connect(groups, &GroupPanel::curvesShown, &counting, [&shown] { ++shown; });
    QElapsedTimer t;
    t.start();
    rows.push_back({"group by a setting (lr): groups and their final metrics",
                    timed(view, 1, [&](int) { groups->setGroupSetting(QStringLiteral("lr")); })});
    if (!waitFor([&] { return shown > 0 && !groups->readingCurves(); }, 120000))
      qFatal("no curves");
    view.repaint();
    rows.push_back({QString("grouped curves of %1 runs, read off the UI thread").arg(runs),
                    t.nsecsElapsed() / 1e6});
    rows.push_back({"regroup by micro-batch-size", timed(view, 1, [&](int) {
                      groups->setGroupSetting(QStringLiteral("micro-batch-size"));
                    })});
    waitFor([&] { return !groups->readingCurves(); }, 120000);
  }
  rows.push_back({"open the Parallel coordinates tab (every run)",
                  timed(view, 1, [&](int) { view.setAnalysisTab(HistoryView::kParallelTab); })});
  ParallelPlot* plot = view.parallelPanel()->plotWidget();
  {
    std::vector<double> ms;
    for (int i = 0; i < 20; ++i) {
      QElapsedTimer t;
      t.start();
      plot->lineAt(QPointF(plot->width() * (0.1 + 0.04 * i), plot->height() / 2.0));
      ms.push_back(t.nsecsElapsed() / 1e6);
    }
    std::sort(ms.begin(), ms.end());
    rows.push_back({"hover: the line under the mouse", ms[ms.size() / 2]});
  }
  rows.push_back(
      {"select every run (Ctrl+A), parallel coordinates of the selection", timed(view, 1, [&](int) {
         table->selectAll();
         view.updateAnalysisNow();
       })});

  std::printf("\n| operation (%d runs, 1280x800 offscreen) | ms | target |\n|---|---:|---:|\n",
              runs);
  for (const Row& r : rows) std::printf("| %s | %.0f | 200 |\n", qPrintable(r.operation), r.ms);
  std::printf("load average at end: %s\n", qPrintable(loadAverage()));
  return 0;
}
