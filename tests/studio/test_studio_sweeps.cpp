// Many runs at once, on a real run store (SQLite in a temporary directory, runs written with
// the store's API and `lattice train`'s recorded configuration): the runs of a sweep grouped by
// a setting, each group's mean curve and its min-max and +-1 std band at every step (runs of
// different lengths, a NaN point), as the pure functions compute them and as History's Groups
// tab draws them; the parallel-coordinates model (axes, categories, line positions) and its
// view naming the hovered run; and the text filter's "setting=value" words.
#include <qcustomplot.h>

#include <QApplication>
#include <QLabel>
#include <QLineEdit>
#include <QMouseEvent>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <limits>

#include "history/group_panel.h"
#include "history/history_io.h"
#include "history/history_view.h"
#include "history/parallel_view.h"
#include "history/run_filter_model.h"
#include "lattice/storage/run_store.h"
#include "lattice/storage/run_sweep.h"
#include "lattice/train_options.h"

using namespace lattice;
using namespace lattice::ui;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct SweepRunSpec {
  std::string name, lr, decay;
  int seed = 1;
  std::vector<double> loss;  // lm loss at steps 1, 2, ...
  double tokens = 0;
};

// lr 3e-4 over three seeds (the third stopped after two steps, the second logged a NaN at step
// 3), lr 1e-3 over two seeds.
const std::vector<SweepRunSpec> kSweep = {
    {"lr3e-4-s1", "3e-4", "cosine", 1, {4.0, 3.0, 2.0, 1.0}, 1000},
    {"lr3e-4-s2", "3e-4", "cosine", 2, {5.0, 4.0, kNaN, 2.0}, 1100},
    {"lr3e-4-s3", "3e-4", "cosine", 3, {6.0, 2.0}, 1200},
    {"lr1e-3-s1", "1e-3", "linear", 1, {3.0, 2.5, 2.0, 1.5}, 2000},
    {"lr1e-3-s2", "1e-3", "linear", 2, {3.5, 2.5, 1.5, 0.5}, 2200},
};

std::string trainConfig(const SweepRunSpec& s) {
  const std::vector<std::string> flags = {"--num-layers",
                                          "2",
                                          "--hidden-size",
                                          "64",
                                          "--num-attention-heads",
                                          "4",
                                          "--seq-length",
                                          "32",
                                          "--max-position-embeddings",
                                          "32",
                                          "--micro-batch-size",
                                          "2",
                                          "--global-batch-size",
                                          "4",
                                          "--train-iters",
                                          "4",
                                          "--lr",
                                          s.lr,
                                          "--lr-decay-style",
                                          s.decay,
                                          "--seed",
                                          std::to_string(s.seed),
                                          "--mock-data",
                                          "--run-name",
                                          s.name};
  Result<TrainOptions> options = parse_train_flags(flags);
  if (!options) qFatal("the test's flags do not parse: %s", options.status().message().c_str());
  return train_options_json(*options);
}

// Writes the sweep; returns the run ids in kSweep's order.
QList<qint64> writeSweep(const QString& path) {
  auto store = storage::RunStore::open(path.toStdString());
  if (!store) qFatal("%s", store.status().message().c_str());
  QList<qint64> ids;
  for (const SweepRunSpec& s : kSweep) {
    storage::NewRun run;
    run.name = s.name;
    run.config_json = trainConfig(s);
    const std::int64_t id = (*store)->create_run(run).value();
    if (!(*store)->mark_running(id)) qFatal("mark_running");
    for (std::size_t i = 0; i < s.loss.size(); ++i) {
      std::map<std::string, double> values = {{"lm loss", s.loss[i]},
                                              {"tokens per second", s.tokens}};
      if (i + 1 == s.loss.size()) values["validation lm loss"] = s.loss[i] + 0.5;
      if (!(*store)->log_step(id, static_cast<std::int64_t>(i + 1), values)) qFatal("log_step");
    }
    if (!(*store)->finish(id, storage::RunStatus::kFinished)) qFatal("finish");
    ids << id;
  }
  return ids;
}

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::fabs(a - b) <= 1e-12 * std::max(1.0, std::fabs(b));
}

// Compares a plotted graph's values with the expected ones at steps 1..n.
QString graphMismatch(const QCPGraph* g, const std::vector<double>& expected) {
  if (!g) return QStringLiteral("no graph");
  if (g->dataCount() != static_cast<int>(expected.size()))
    return QStringLiteral("%1 points, expected %2").arg(g->dataCount()).arg(expected.size());
  for (int i = 0; i < g->dataCount(); ++i) {
    const auto d = g->data()->at(i);
    if (d->key != i + 1 || !same(d->value, expected[i]))
      return QStringLiteral("point %1: step %2 value %3, expected step %4 value %5")
          .arg(i)
          .arg(d->key)
          .arg(d->value, 0, 'g', 17)
          .arg(i + 1)
          .arg(expected[i], 0, 'g', 17);
  }
  return {};
}

// Shows the store and waits for its runs and, parsed after them, their settings.
bool load(HistoryView& view, const QString& db) {
  QSignalSpy refreshed(&view, &HistoryView::refreshed);
  QSignalSpy parsed(&view, &HistoryView::settingsParsed);
  view.setDatabase(db);
  return refreshed.wait(10000) && (parsed.count() > 0 || parsed.wait(10000));
}

}  // namespace

class TestStudioSweeps : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  int dbs_ = 0;
  QString freshDb() { return dir_.filePath(QStringLiteral("runs%1.sqlite").arg(++dbs_)); }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  // The store's runs, grouped by lr with the pure functions: the 3e-4 group's mean and spread
  // at each step, counted over the runs that logged the step (not the NaN, not the short run).
  void groupCurveIsTheMeanAndSpreadOverTheRunsAtEachStep() {
    const QString db = freshDb();
    const QList<qint64> ids = writeSweep(db);
    RunsRead read = readRuns(db);
    QVERIFY2(read.problem.isEmpty(), qPrintable(read.problem));
    std::vector<qint64> runIds;
    for (const storage::RunInfo& r : read.runs) runIds.push_back(r.id);
    const SettingsRead parsed = readSettings(db, runIds);
    QVERIFY2(parsed.problem.isEmpty(), qPrintable(parsed.problem));
    const SettingsIndex& settings = parsed.settings;
    QCOMPARE(settings.size(), 5);
    std::vector<std::optional<std::string>> lrs;
    for (const storage::RunInfo& r : read.runs) {
      const storage::RunSettings& s = settings.value(r.id)->settings;
      lrs.push_back(s.count("lr") ? std::optional<std::string>(s.at("lr")) : std::nullopt);
    }
    const std::vector<storage::SettingGroup> groups = storage::group_by_value(lrs);
    QCOMPARE(groups.size(), std::size_t{2});
    QCOMPARE(storage::setting_text(*groups[0].value), std::string("0.0003"));  // smaller first
    QCOMPARE(groups[0].members, (std::vector<std::size_t>{0, 1, 2}));
    QCOMPARE(groups[1].members, (std::vector<std::size_t>{3, 4}));

    const SeriesRead series = readGroupSeries(db, ids, "lm loss", 4);
    QVERIFY2(series.problem.isEmpty(), qPrintable(series.problem));
    const storage::GroupCurve c = storage::group_curve(
        {series.series.value(ids[0]), series.series.value(ids[1]), series.series.value(ids[2])});
    QCOMPARE(c.steps, (std::vector<std::int64_t>{1, 2, 3, 4}));
    QCOMPARE(c.runs, (std::vector<int>{3, 3, 1, 2}));
    const std::vector<double> mean = {5.0, 3.0, 2.0, 1.5};
    const std::vector<double> low = {4.0, 2.0, kNaN, 1.0}, high = {6.0, 4.0, kNaN, 2.0};
    // Sample standard deviations: {4,5,6} -> 1, {3,4,2} -> 1, one run -> none, {1,2} -> 0.7071.
    const std::vector<double> sd = {1.0, 1.0, kNaN, std::sqrt(0.5)};
    for (std::size_t i = 0; i < 4; ++i) {
      QVERIFY2(same(c.mean[i], mean[i]) && same(c.min[i], low[i]) && same(c.max[i], high[i]) &&
                   same(c.stddev[i], sd[i]),
               qPrintable(QStringLiteral("step %1: mean %2 min %3 max %4 std %5, expected %6 %7 "
                                         "%8 %9")
                              .arg(c.steps[i])
                              .arg(c.mean[i])
                              .arg(c.min[i])
                              .arg(c.max[i])
                              .arg(c.stddev[i])
                              .arg(mean[i])
                              .arg(low[i])
                              .arg(high[i])
                              .arg(sd[i])));
    }
  }

  // History's Groups tab over the same store: the groups table, the legend "lr=0.0003 (3 runs)"
  // and the plotted mean and band, first min-max, then +-1 std.
  void theGroupsTabDrawsEachGroupsMeanOverItsBand() {
    const QString db = freshDb();
    writeSweep(db);
    HistoryView view;
    view.resize(1280, 800);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QVERIFY(load(view, db));
    view.setAnalysisTab(HistoryView::kGroupsTab);
    GroupPanel* panel = view.groupPanel();
    QStringList choices = panel->settingChoices();
    QVERIFY2(choices.contains("lr") && choices.contains("lr-decay-style"),
             qPrintable(choices.join(' ')));
    QVERIFY2(!choices.contains("seed") && !choices.contains("run-name"),
             "seeds are what a group averages over; a run's name is no setting");
    QSignalSpy shown(panel, &GroupPanel::curvesShown);
    panel->setGroupSetting("lr");
    QVERIFY(shown.wait(10000));
    QCOMPARE(panel->groups().size(), 2);
    QCOMPARE(panel->groups()[0].value, QString("0.0003"));
    QCOMPARE(panel->groupsTable()->item(0, 0)->text(), QString("lr=0.0003"));
    QCOMPARE(panel->groupsTable()->item(0, 1)->text(), QString("3"));
    // Final losses 1.0, 2.0 and 2.0: mean 1.6667, sample std 0.5774.
    QCOMPARE(panel->groupsTable()->item(0, 2)->text(), QString("1.6667 ± 0.5774"));
    GroupCurvesChart* chart = panel->chart();
    QCOMPARE(chart->meanGraph(0)->name(), QString("lr=0.0003 (3 runs)"));
    QCOMPARE(chart->meanGraph(1)->name(), QString("lr=0.001 (2 runs)"));
    QString m = graphMismatch(chart->meanGraph(0), {5.0, 3.0, 2.0, 1.5});
    QVERIFY2(m.isEmpty(), qPrintable("lr=0.0003 mean: " + m));
    m = graphMismatch(chart->lowGraph(0), {4.0, 2.0, kNaN, 1.0});
    QVERIFY2(m.isEmpty(), qPrintable("lr=0.0003 band low: " + m));
    m = graphMismatch(chart->highGraph(0), {6.0, 4.0, kNaN, 2.0});
    QVERIFY2(m.isEmpty(), qPrintable("lr=0.0003 band high: " + m));
    m = graphMismatch(chart->meanGraph(1), {3.25, 2.5, 1.75, 1.0});
    QVERIFY2(m.isEmpty(), qPrintable("lr=0.001 mean: " + m));
    bool legendSaysBand = false;
    for (int i = 0; i < chart->plot()->graphCount(); ++i)
      legendSaysBand |= chart->plot()->graph(i)->name() == bandText(BandKind::kMinMax);
    QVERIFY2(legendSaysBand, "the legend says which band is shaded");

    panel->setBand(BandKind::kStd);
    m = graphMismatch(chart->highGraph(0), {6.0, 4.0, kNaN, 1.5 + std::sqrt(0.5)});
    QVERIFY2(m.isEmpty(), qPrintable("lr=0.0003 mean + std: " + m));
    m = graphMismatch(chart->lowGraph(1), {3.25 - std::sqrt(0.125), 2.5, 1.75 - std::sqrt(0.125),
                                           1.0 - std::sqrt(0.5)});
    QVERIFY2(m.isEmpty(), qPrintable("lr=0.001 mean - std: " + m));
  }

  // The pure model: settings that differ and final metrics as axes; a categorical axis lists
  // its values; numeric ones span their range; each run's line sits where its values do.
  void parallelCoordinatesPlaceEachRunOnEveryAxis() {
    const storage::ParallelCoordinates pc = storage::parallel_coordinates({
        {"lr-decay-style", {"\"cosine\"", "\"linear\"", "\"cosine\""}},
        {"lr", {"0.0003", "0.001", "0.0006"}},
        {"final loss", {"2.0", "1.0", std::nullopt}},
        {"lr-warmup", {"1", "10000", "100"}},
    });
    QCOMPARE(pc.axes.size(), std::size_t{4});
    QVERIFY(pc.axes[0].categorical);
    QCOMPARE(pc.axes[0].categories, (std::vector<std::string>{"\"cosine\"", "\"linear\""}));
    QVERIFY(!pc.axes[1].categorical && !pc.axes[1].log_scale);
    QCOMPARE(pc.axes[1].low, 0.0003);
    QCOMPARE(pc.axes[1].high, 0.001);
    QVERIFY2(pc.axes[3].log_scale, "1 .. 10000 spans 100x: a log axis");
    const std::vector<std::vector<double>> expected = {
        {0.0, 0.0, 1.0, 0.0}, {1.0, 1.0, 0.0, 1.0}, {0.0, 3.0 / 7.0, kNaN, 0.5}};
    for (int r = 0; r < 3; ++r)
      for (int a = 0; a < 4; ++a)
        QVERIFY2(same(pc.lines[r][a], expected[r][a]),
                 qPrintable(QStringLiteral("run %1 on axis %2: %3, expected %4")
                                .arg(r)
                                .arg(QString::fromStdString(pc.axes[a].name))
                                .arg(pc.lines[r][a])
                                .arg(expected[r][a])));
  }

  // The tab over the real store: the axes are the settings that differ and the final metrics;
  // hovering a run's line names it, clicking it selects it in the table.
  void theParallelTabNamesTheHoveredRun() {
    const QString db = freshDb();
    const QList<qint64> ids = writeSweep(db);
    HistoryView view;
    view.resize(1280, 800);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QVERIFY(load(view, db));
    view.setAnalysisTab(HistoryView::kParallelTab);
    ParallelPlot* plot = view.parallelPanel()->plotWidget();
    QStringList axes;
    for (const storage::ParallelAxis& a : plot->model().axes)
      axes << QString::fromStdString(a.name);
    QCOMPARE(axes, (QStringList{"lr", "lr-decay-style", "seed", "final loss", "final val loss",
                                "tokens/s"}));
    QCOMPARE(plot->model().lines.size(), std::size_t{5});
    // The table shows the newest run first; the lines follow the table's order.
    const int line = 0;  // lr1e-3-s2
    const storage::ParallelAxis& lr = plot->model().axes[0];
    QCOMPARE(lr.low, 0.0003);
    QCOMPARE(plot->model().lines[line][0], 1.0);
    QTest::qWait(50);
    const QPointF at = (plot->pointOf(line, 3) + plot->pointOf(line, 4)) / 2;
    QCOMPARE(plot->lineAt(at), line);
    QMouseEvent move(QEvent::MouseMove, at, plot->mapToGlobal(at), Qt::NoButton, Qt::NoButton,
                     Qt::NoModifier);
    QApplication::sendEvent(plot, &move);
    QCOMPARE(view.parallelPanel()->hoverText(), QString("run %1 · lr1e-3-s2").arg(ids[4]));
    QTest::mouseClick(plot, Qt::LeftButton, Qt::NoModifier, at.toPoint());
    QCOMPARE(view.selectedRuns(), (QList<qint64>{ids[4]}));
  }

  // "lr=3e-4" in the filter keeps the runs whose lr is 0.0003 (numbers by value); text values
  // match without their quotes, case aside; an unknown setting matches nothing.
  void settingWordsFilterByValue() {
    const QString db = freshDb();
    writeSweep(db);
    HistoryView view;
    QVERIFY(load(view, db));
    RunFilterModel* proxy = view.filterModel();
    auto* filter = view.findChild<QLineEdit*>("historyFilter");
    filter->setText("lr=3e-4");
    QCOMPARE(proxy->rowCount(), 3);
    filter->setText("lr-decay-style=Linear");
    QCOMPARE(proxy->rowCount(), 2);
    filter->setText("lr=3e-4 s2");
    QCOMPARE(proxy->rowCount(), 1);
    filter->setText("no-such-setting=1");
    QCOMPARE(proxy->rowCount(), 0);
    filter->clear();
    QCOMPARE(proxy->rowCount(), 5);
  }
};

QTEST_MAIN(TestStudioSweeps)
#include "test_studio_sweeps.moc"
