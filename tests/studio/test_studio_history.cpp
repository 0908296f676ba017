// The History view on a real run store (SQLite in a temporary directory): the runs table and
// its proxy are well-behaved item models while refreshes add, remove and change runs; numbers
// sort as numbers; the text, tag and status filters; a stale running run reads "crashed"; the
// comparison lists exactly the settings that differ (or all of them); rename, tags, notes and
// delete write through the store, and a refusal shows the store's message and changes nothing;
// a store shown read-only (a running cluster job's own, as the main window follows it) offers
// no edit and its file stays byte for byte as it was, until it is shown read-write again.
#include <sqlite3.h>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>
#include <nlohmann/json.hpp>

#include "app/main_window.h"
#include "common/files.h"
#include "dashboard/dashboard_view.h"
#include "history/compare_panel.h"
#include "history/history_io.h"
#include "history/history_view.h"
#include "history/run_filter_model.h"
#include "history/run_table_model.h"
#include "lattice/storage/run_store.h"
#include "lattice/train_options.h"
#include "launch/launch_view.h"

using namespace lattice;
using namespace lattice::ui;
using storage::RunStatus;
using storage::RunStore;

namespace {

// A realistic run configuration: what `lattice train` records, from the engine's own parser
// and train_options_json, for a small GPT on a layout of `tp` tensor-parallel ranks.
std::string trainConfig(const std::string& name, int tp, const std::string& lr) {
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
                                          "4",
                                          "--global-batch-size",
                                          "32",
                                          "--train-iters",
                                          "200",
                                          "--lr",
                                          lr,
                                          "--mock-data",
                                          "--tensor-model-parallel-size",
                                          std::to_string(tp),
                                          "--run-name",
                                          name,
                                          "--tag",
                                          "sweep"};
  Result<TrainOptions> options = parse_train_flags(flags);
  if (!options) qFatal("the test's flags do not parse: %s", options.status().message().c_str());
  return train_options_json(*options);
}

struct RunSpec {
  std::string name;
  int tp = 1;
  std::string lr = "3e-4";
  std::vector<std::string> tags;
  std::string notes;
  int steps = 0;  // logged steps 1..steps
  double loss = 0;
  double tokens = 0;
  RunStatus end = RunStatus::kFinished;  // kRunning: left running
};

RunSpec named(const std::string& name) {
  RunSpec s;
  s.name = name;
  return s;
}

std::unique_ptr<RunStore> openStore(const QString& path) {
  auto store = RunStore::open(path.toStdString());
  if (!store) qFatal("cannot open %s: %s", qPrintable(path), store.status().message().c_str());
  return std::move(store.value());
}

std::int64_t addRun(RunStore& store, const RunSpec& s) {
  storage::NewRun run;
  run.name = s.name;
  run.host = "testhost";
  run.command_line = "lattice train --run-name " + s.name;
  run.config_json = trainConfig(s.name, s.tp, s.lr);
  run.layout = {s.tp, 1, 2};
  run.world_size = 2 * s.tp;
  run.parameter_count = 124'439'808;
  run.tags = s.tags;
  run.notes = s.notes;
  const std::int64_t id = store.create_run(run).value();
  if (!store.mark_running(id)) qFatal("cannot start %s", s.name.c_str());
  for (int step = 1; step <= s.steps; ++step) {
    std::map<std::string, double> values = {{"lm loss", s.loss + (s.steps - step) * 0.01},
                                            {"tokens per second", s.tokens}};
    if (step == s.steps) values["validation lm loss"] = s.loss + 0.05;
    if (!store.log_step(id, step, values)) qFatal("cannot log %s", s.name.c_str());
  }
  if (s.end != RunStatus::kRunning && !store.finish(id, s.end, "")) qFatal("cannot finish");
  return id;
}

// Runs one statement on the database file behind the store's back.
void execSql(const QString& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.toUtf8().constData(), &db);
  char* error = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) qFatal("%s", error);
  sqlite3_close(db);
}

// Moves a run's heartbeat `seconds` into the past (a writer that died).
void ageHeartbeat(const QString& path, std::int64_t run, double seconds) {
  execSql(path, "UPDATE runs SET heartbeat_at = heartbeat_at - " + std::to_string(seconds) +
                    " WHERE id = " + std::to_string(run));
}

// Moves a run's whole life `seconds` into the past and makes it last `duration` seconds (its
// end, or its last heartbeat while running), so that pictures show real durations.
void backdate(const QString& path, std::int64_t run, double seconds, double duration) {
  const std::string start = "(strftime('%s','now') - " + std::to_string(seconds) + ")";
  const std::string end = start + " + " + std::to_string(duration);
  execSql(path, "UPDATE runs SET created_at = " + start + ", started_at = " + start +
                    ", ended_at = CASE WHEN ended_at IS NULL THEN NULL ELSE " + end +
                    " END, heartbeat_at = " + end + " WHERE id = " + std::to_string(run));
}

void setRunsFrom(RunTableModel& model, const QString& db) {
  RunsRead read = readRuns(db);
  if (!read.problem.isEmpty()) qFatal("%s", qPrintable(read.problem));
  model.setRuns(std::move(read.runs), read.now);
}

// The edit controls of the History view that are enabled: its buttons and the table's context
// actions, by name. "Open in Dashboard" and "Open in Playground" are not edits.
QStringList enabledEditControls(HistoryView& view) {
  QStringList on;
  for (const char* name :
       {"historyRename", "historyAddTag", "historyRemoveTag", "historyNotes", "historyDelete"}) {
    auto* button = view.findChild<QPushButton*>(name);
    if (!button) qFatal("no button %s", name);
    if (button->isEnabled()) on << QString::fromLatin1(name);
  }
  const QStringList edits = {"Rename", "Add tag…", "Remove tag…", "Notes…", "Delete…"};
  int found = 0;
  for (QAction* action : view.tableView()->actions()) {
    if (!edits.contains(action->text())) continue;
    ++found;
    if (action->isEnabled()) on << action->text();
  }
  if (found != edits.size()) qFatal("the table has %d of the %d edit actions", found, 5);
  return on;
}

// Until stopped, rejects every modal dialog that opens (a question, a tag or notes prompt)
// and records its title: a test that must not be asked anything checks it stays empty.
class DialogGuard {
 public:
  DialogGuard() {
    QObject::connect(&poll_, &QTimer::timeout, &poll_, [this] {
      if (auto* dialog = qobject_cast<QDialog*>(QApplication::activeModalWidget())) {
        asked_ << dialog->windowTitle();
        dialog->reject();
      }
    });
    poll_.start(10);
  }
  const QStringList& asked() const { return asked_; }

 private:
  QTimer poll_;
  QStringList asked_;
};

// The column's texts in the proxy's row order.
QStringList columnTexts(const QAbstractItemModel& m, int column) {
  QStringList out;
  for (int r = 0; r < m.rowCount(); ++r) out << m.index(r, column).data().toString();
  return out;
}

}  // namespace

class TestStudioHistory : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  int dbs_ = 0;
  QString freshDb() { return dir_.filePath(QStringLiteral("runs-%1.sqlite").arg(++dbs_)); }

  // Shows the view on `db` and waits for its first read.
  static bool load(HistoryView& view, const QString& db,
                   StoreAccess access = StoreAccess::kReadWrite) {
    QSignalSpy refreshed(&view, &HistoryView::refreshed);
    view.setDatabase(db, access);
    return refreshed.wait(10000);
  }
  // load, then waits until the runs' configs are read and parsed (after the table shows).
  static bool loadWithSettings(HistoryView& view, const QString& db) {
    QSignalSpy parsed(&view, &HistoryView::settingsParsed);
    return load(view, db) && (parsed.count() > 0 || parsed.wait(10000));
  }
  static bool reload(HistoryView& view) {
    QSignalSpy refreshed(&view, &HistoryView::refreshed);
    view.refresh();
    return refreshed.wait(10000);
  }
  // Runs `act` (which queues edits) and waits until they are written and a read after them is
  // shown; returns the store's messages for refused edits.
  static QStringList edit(HistoryView& view, const std::function<void()>& act) {
    QStringList errors;
    bool written = false, shown = false;
    QObject context;
    QObject::connect(&view, &HistoryView::editsApplied, &context, [&](const QStringList& e) {
      errors = e;
      written = true;
    });
    QObject::connect(&view, &HistoryView::refreshed, &context, [&] { shown = shown || written; });
    act();
    if (!QTest::qWaitFor([&] { return shown; }, 10000)) qFatal("the edits were not shown in 10 s");
    return errors;
  }
  static int rowOf(const QAbstractItemModel& m, qint64 id) {
    for (int r = 0; r < m.rowCount(); ++r) {
      if (m.index(r, 0).data(RunTableModel::kRunIdRole).toLongLong() == id) return r;
    }
    return -1;
  }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void theModelAndProxyStayConsistentWhileRunsComeChangeAndGo() {
    const QString db = freshDb();
    auto store = openStore(db);
    const std::int64_t a = addRun(*store, {"a", 1, "3e-4", {"x"}, "", 5, 2.0, 1000});
    const std::int64_t b =
        addRun(*store, {"b", 1, "3e-4", {}, "", 3, 3.0, 900, RunStatus::kRunning});
    const std::int64_t c = addRun(*store, {"c", 2, "3e-4", {}, "", 7, 1.5, 800});

    RunTableModel model;
    RunFilterModel proxy;
    proxy.setSourceModel(&model);
    QAbstractItemModelTester sourceTester(&model,
                                          QAbstractItemModelTester::FailureReportingMode::QtTest);
    QAbstractItemModelTester proxyTester(&proxy,
                                         QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.sort(RunTableModel::kLoss);
    setRunsFrom(model, db);
    QCOMPARE(model.rowCount(), 3);
    QCOMPARE(columnTexts(proxy, RunTableModel::kName), (QStringList{"c", "a", "b"}));

    QSignalSpy resets(&model, &QAbstractItemModel::modelAboutToBeReset);
    QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
    QSignalSpy removed(&model, &QAbstractItemModel::rowsRemoved);
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    const QPersistentModelIndex aCell = model.index(model.rowOfRun(a), RunTableModel::kName);
    const QPersistentModelIndex cCell = model.index(model.rowOfRun(c), RunTableModel::kName);

    // Nothing changed: no structural signal; only the running run's duration moves on.
    setRunsFrom(model, db);
    QCOMPARE(inserted.count() + removed.count() + resets.count(), 0);
    for (const QList<QVariant>& signal : changed) {
      const QModelIndex from = signal.at(0).toModelIndex(), to = signal.at(1).toModelIndex();
      QVERIFY2(from.column() == RunTableModel::kDuration &&
                   to.column() == RunTableModel::kDuration && from.row() == model.rowOfRun(b),
               "an unchanged run was announced as changed");
    }
    changed.clear();

    // b logs a step that makes it the best, d appears, a goes.
    QVERIFY(store->log_step(b, 4, {{"lm loss", 1.0}}).is_ok());
    const std::int64_t d = addRun(*store, {"d", 1, "3e-4", {}, "", 2, 2.5, 700});
    QVERIFY(store->delete_run(a).is_ok());
    setRunsFrom(model, db);
    QCOMPARE(resets.count(), 0);
    QCOMPARE(inserted.count(), 1);
    QCOMPARE(removed.count(), 1);
    QVERIFY2(changed.count() >= 1, "b's new step must be announced");
    QVERIFY2(!aCell.isValid(), "a's index must go with a");
    QVERIFY2(cCell.isValid() && cCell.data().toString() == "c", "c's index must follow c");
    QCOMPARE(model.rowOfRun(d), 2);
    QCOMPARE(model.index(model.rowOfRun(b), RunTableModel::kSteps).data().toString(), "4");
    QCOMPARE(columnTexts(proxy, RunTableModel::kName), (QStringList{"b", "c", "d"}));

    // Every run gone, then a new database's runs: still consistent.
    QVERIFY(store->finish(b, RunStatus::kFinished).is_ok());
    for (std::int64_t id : {b, c, d}) QVERIFY(store->delete_run(id).is_ok());
    setRunsFrom(model, db);
    QCOMPARE(model.rowCount(), 0);
    addRun(*store, named("e"));
    setRunsFrom(model, db);
    QCOMPARE(columnTexts(proxy, RunTableModel::kName), QStringList{"e"});
  }

  void theViewKeepsItsSelectionAcrossRefreshes() {
    const QString db = freshDb();
    auto store = openStore(db);
    const std::int64_t a = addRun(*store, {"a", 1, "3e-4", {}, "", 5, 2.0, 1000});
    const std::int64_t b =
        addRun(*store, {"b", 1, "3e-4", {}, "", 3, 3.0, 900, RunStatus::kRunning});
    const std::int64_t c = addRun(*store, {"c", 1, "3e-4", {}, "", 7, 1.5, 800});
    HistoryView view;
    QAbstractItemModelTester proxyTester(view.filterModel(),
                                         QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(load(view, db));
    view.selectRuns({a, b});
    QCOMPARE(view.selectedRuns().size(), 2);
    QVERIFY(store->log_step(b, 4, {{"lm loss", 1.0}}).is_ok());
    QVERIFY(store->delete_run(c).is_ok());
    addRun(*store, named("d"));
    QVERIFY(reload(view));
    QCOMPARE(view.tableModel()->rowCount(), 3);
    QList<qint64> selected = view.selectedRuns();
    std::sort(selected.begin(), selected.end());
    QCOMPARE(selected, (QList<qint64>{a, b}));
  }

  void numbersSortAsNumbers() {
    const QString db = freshDb();
    auto store = openStore(db);
    addRun(*store, {"nine", 1, "3e-4", {}, "", 9, 2.0, 950});
    addRun(*store, {"hundred", 1, "3e-4", {}, "", 100, 10.5, 12000});
    addRun(*store, {"ten", 1, "3e-4", {}, "", 10, 9.0, 100});
    addRun(*store, named("none"));  // no steps, no loss: sorts first
    RunTableModel model;
    RunFilterModel proxy;
    proxy.setSourceModel(&model);
    setRunsFrom(model, db);
    proxy.sort(RunTableModel::kSteps, Qt::AscendingOrder);
    QCOMPARE(columnTexts(proxy, RunTableModel::kSteps), (QStringList{"-", "9", "10", "100"}));
    proxy.sort(RunTableModel::kLoss, Qt::AscendingOrder);  // 2.0 < 9.0 < 10.5, not "10.5" < "2"
    QCOMPARE(columnTexts(proxy, RunTableModel::kName),
             (QStringList{"none", "nine", "ten", "hundred"}));
    proxy.sort(RunTableModel::kTokens, Qt::DescendingOrder);
    QCOMPARE(columnTexts(proxy, RunTableModel::kName),
             (QStringList{"hundred", "nine", "ten", "none"}));
    QCOMPARE(proxy.index(0, RunTableModel::kModelSize).data().toString(), "124.4 M");
    QCOMPARE(proxy.index(0, RunTableModel::kLayout).data().toString(), "1×1×2");
  }

  void textTagAndStatusFiltersNarrowTheTable() {
    const QString db = freshDb();
    auto store = openStore(db);
    addRun(*store, {"gpt-small", 1, "3e-4", {"baseline"}, "first try", 5, 2.0, 1000});
    addRun(*store, {"gpt-tp2", 2, "3e-4", {"sweep"}, "uses the new data mix", 5, 2.1, 900});
    addRun(*store, {"gpt-lr", 1, "6e-4", {"sweep", "lr"}, "", 5, 2.2, 800, RunStatus::kFailed});
    HistoryView view;
    QVERIFY(load(view, db));
    auto* text = view.findChild<QLineEdit*>("historyFilter");
    auto* tag = view.findChild<QComboBox*>("historyTagFilter");
    auto* status = view.findChild<QComboBox*>("historyStatusFilter");
    QVERIFY(text && tag && status);
    const QAbstractItemModel& shown = *view.filterModel();
    auto names = [&] {
      QStringList n = columnTexts(shown, RunTableModel::kName);
      n.sort();
      return n;
    };
    QCOMPARE(names(), (QStringList{"gpt-lr", "gpt-small", "gpt-tp2"}));
    text->setText("TP2");  // names, case-insensitive
    QCOMPARE(names(), QStringList{"gpt-tp2"});
    text->setText("data mix");  // notes, every word
    QCOMPARE(names(), QStringList{"gpt-tp2"});
    text->setText("baseline");  // tags
    QCOMPARE(names(), QStringList{"gpt-small"});
    text->clear();
    QCOMPARE(tag->count(), 4);  // All tags, baseline, lr, sweep
    tag->setCurrentIndex(tag->findData("sweep"));
    QCOMPARE(names(), (QStringList{"gpt-lr", "gpt-tp2"}));
    status->setCurrentIndex(status->findData("failed"));
    QCOMPARE(names(), QStringList{"gpt-lr"});
    tag->setCurrentIndex(tag->findData("baseline"));
    QCOMPARE(names(), QStringList{});
    tag->setCurrentIndex(0);
    status->setCurrentIndex(0);
    QCOMPARE(shown.rowCount(), 3);
  }

  void aRunningRunWithAStaleHeartbeatShowsAsCrashed() {
    const QString db = freshDb();
    auto store = openStore(db);
    const std::int64_t live =
        addRun(*store, {"live", 1, "3e-4", {}, "", 3, 2.0, 1000, RunStatus::kRunning});
    const std::int64_t dead =
        addRun(*store, {"dead", 1, "3e-4", {}, "", 3, 2.0, 1000, RunStatus::kRunning});
    ageHeartbeat(db, dead, 3600);  // list_runs' stale limit is 60 s
    HistoryView view;
    QVERIFY(load(view, db));
    const RunTableModel& m = *view.tableModel();
    QCOMPARE(m.index(m.rowOfRun(live), RunTableModel::kStatus).data().toString(), "running");
    QCOMPARE(m.index(m.rowOfRun(dead), RunTableModel::kStatus).data().toString(), "crashed");
    auto* status = view.findChild<QComboBox*>("historyStatusFilter");
    status->setCurrentIndex(status->findData("crashed"));
    QCOMPARE(columnTexts(*view.filterModel(), RunTableModel::kName), QStringList{"dead"});
  }

  // Runs are listed without their configs; the configs are read and parsed after the table
  // shows, and again only for runs whose record changed (an import that replaced a run that
  // progressed replaces its config with it), a config read again unchanged keeping its parse.
  void settingsFollowTheTableAndAreReadAgainOnlyForChangedRuns() {
    const QString db = freshDb();
    auto store = openStore(db);
    const std::int64_t a = addRun(*store, {"lr3", 1, "3e-4", {}, "", 2, 2.0, 100});
    const std::int64_t b = addRun(*store, {"lr6", 1, "6e-4", {}, "", 2, 2.5, 100});
    HistoryView view;
    QVERIFY(loadWithSettings(view, db));
    const RunTableModel& m = *view.tableModel();
    QVERIFY(m.run(a) && m.run(a)->config_json.empty());  // the rows come without configs
    const auto settingsA = m.settings(a), settingsB = m.settings(b);
    QVERIFY(settingsA && settingsB);
    QCOMPARE(settingsA->settings.at("lr"), std::string("0.0003"));
    QCOMPARE(settingsA->config_json, trainConfig("lr3", 1, "3e-4"));
    QVERIFY(!m.configsWanted());

    QVERIFY(reload(view));
    QVERIFY2(!m.configsWanted(), "unchanged runs: no config to read again");
    QCOMPARE(m.settings(a).get(), settingsA.get());

    // a's record and config change; b's record only: its config is read again, found the
    // same, and keeps its parse (the Groups and Parallel tabs then rebuild nothing for it).
    execSql(db, "UPDATE runs SET status = 'killed', config_json = '{\"lr\": 0.001}' WHERE id = " +
                    std::to_string(a));
    execSql(db, "UPDATE runs SET status = 'failed' WHERE id = " + std::to_string(b));
    QSignalSpy parsed(&view, &HistoryView::settingsParsed);
    QVERIFY(reload(view));
    QVERIFY(parsed.count() > 0 || parsed.wait(10000));
    QCOMPARE(m.settings(a)->settings.at("lr"), std::string("0.001"));
    QCOMPARE(m.settings(b).get(), settingsB.get());
  }

  void compareShowsExactlyTheSettingsThatDiffer() {
    const QString db = freshDb();
    auto store = openStore(db);
    const std::int64_t a =
        addRun(*store, {"tp1-lr3", 1, "3e-4", {"sweep"}, "", 200, 2.3456, 12000});
    const std::int64_t b =
        addRun(*store, {"tp2-lr6", 2, "6e-4", {"sweep"}, "", 150, 2.1, 9000, RunStatus::kKilled});
    addRun(*store, named("other"));
    HistoryView view;
    QVERIFY(loadWithSettings(view, db));  // Compare lists settings once they are read
    ComparePanel* compare = view.comparePanel();
    view.selectRuns({a});
    QVERIFY2(!compare->isVisibleTo(&view), "one run is nothing to compare");
    view.selectRuns({a, b});
    QVERIFY(compare->isVisibleTo(&view));
    // The runs differ in --tensor-model-parallel-size and --lr as asked, and in --run-name:
    // `lattice train` records its flags with the run's own name (train_options_json), so two
    // runs always differ there. Nothing else is derived from TP or the learning rate in the
    // recorded flags (DP, the padded vocabulary and the like are not flags).
    QCOMPARE(compare->shownSettings(),
             (QStringList{"lr", "run-name", "tensor-model-parallel-size"}));
    QTableWidget* settings = compare->settingsTable();
    QCOMPARE(settings->columnCount(), 2);
    QCOMPARE(settings->horizontalHeaderItem(0)->text(), "tp1-lr3");
    QCOMPARE(settings->horizontalHeaderItem(1)->text(), "tp2-lr6");
    QCOMPARE(settings->item(0, 0)->text(), "0.0003");
    QCOMPARE(settings->item(0, 1)->text(), "0.0006");
    QCOMPARE(settings->item(1, 1)->text(), "tp2-lr6");  // a JSON string, without its quotes
    QCOMPARE(settings->item(2, 0)->text(), "1");
    QCOMPARE(settings->item(2, 1)->text(), "2");

    QTableWidget* metrics = compare->metricsTable();
    QCOMPARE(metrics->item(ComparePanel::kStatusRow, 1)->text(), "killed");
    QCOMPARE(metrics->item(ComparePanel::kStepsRow, 0)->text(), "200");
    QCOMPARE(metrics->item(ComparePanel::kStepsRow, 1)->text(), "150");
    QCOMPARE(metrics->item(ComparePanel::kLossRow, 0)->text(), "2.3456");
    QCOMPARE(metrics->item(ComparePanel::kValidationRow, 1)->text(), "2.1500");
    QVERIFY2(metrics->item(ComparePanel::kLossRow, 1)->font().bold(), "the lower loss is bold");
    QVERIFY(!metrics->item(ComparePanel::kDurationRow, 0)->text().isEmpty());

    // "Show all settings": every flag lattice train records, the three above marked.
    const nlohmann::json config = nlohmann::json::parse(trainConfig("x", 1, "3e-4"));
    QStringList every;
    for (const auto& item : config.items()) every << QString::fromStdString(item.key());
    every.sort();
    QVERIFY(every.size() > 40);
    compare->setShowAllSettings(true);
    QCOMPARE(compare->shownSettings(), every);
    const int seedRow = static_cast<int>(every.indexOf("seed"));
    QCOMPARE(settings->item(seedRow, 0)->text(), settings->item(seedRow, 1)->text());
    QVERIFY(!settings->item(seedRow, 0)->font().bold());
    QVERIFY(settings->item(static_cast<int>(every.indexOf("lr")), 0)->font().bold());
    compare->setShowAllSettings(false);
    QCOMPARE(compare->shownSettings().size(), 3);

    QSignalSpy open(&view, &HistoryView::openInDashboard);
    view.findChild<QPushButton*>("historyCompareCurves")->click();
    QCOMPARE(open.count(), 1);
    QList<qint64> ids = open.at(0).at(0).value<QList<qint64>>();
    std::sort(ids.begin(), ids.end());
    QCOMPARE(ids, (QList<qint64>{a, b}));
  }

  void renamingToATakenNameShowsTheStoresMessageAndChangesNothing() {
    const QString db = freshDb();
    auto store = openStore(db);
    const std::int64_t a = addRun(*store, named("alpha"));
    addRun(*store, named("beta"));
    HistoryView view;
    QVERIFY(load(view, db));
    const QStringList errors = edit(view, [&] { view.renameRun(a, "beta"); });
    QCOMPARE(errors.size(), 1);
    QVERIFY2(errors[0].contains("is already named 'beta'"), qPrintable(errors[0]));
    QCOMPARE(view.errorText(), errors[0]);
    QCOMPARE(store->find_run("alpha")->id, a);
    const RunTableModel& m = *view.tableModel();
    QCOMPARE(m.index(m.rowOfRun(a), RunTableModel::kName).data().toString(), "alpha");

    // Editing the name cell renames (and clears the message).
    const QModelIndex cell = m.index(m.rowOfRun(a), RunTableModel::kName);
    QVERIFY(edit(view, [&] { view.tableModel()->setData(cell, "alpha-2"); }).isEmpty());
    QCOMPARE(m.index(m.rowOfRun(a), RunTableModel::kName).data().toString(), "alpha-2");
    QCOMPARE(store->find_run("alpha-2")->id, a);
    QVERIFY(view.errorText().isEmpty());
  }

  void deleteAsksNamingTheRunsAndRemovesThem() {
    const QString db = freshDb();
    auto store = openStore(db);
    const std::int64_t a = addRun(*store, {"doomed", 1, "3e-4", {}, "", 4, 2.0, 10});
    const std::int64_t live =
        addRun(*store, {"alive", 1, "3e-4", {}, "", 2, 2.0, 10, RunStatus::kRunning});
    HistoryView view;
    QVERIFY(load(view, db));

    // Answers the next confirmation with `button`, keeping its text.
    QString asked;
    auto answer = [&](QMessageBox::StandardButton button) {
      asked.clear();
      auto* poll = new QTimer(&view);
      QObject::connect(poll, &QTimer::timeout, poll, [&asked, poll, button] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        if (!box) return;
        asked = box->text();
        poll->stop();
        poll->deleteLater();
        box->button(button)->click();
      });
      poll->start(10);
    };

    answer(QMessageBox::Cancel);
    QVERIFY(!view.deleteRuns({a}));
    QVERIFY2(asked.contains("'doomed'") && asked.contains(QString::number(a)), qPrintable(asked));
    QVERIFY(store->find_run("doomed").is_ok());

    bool deleted = false;
    const QStringList errors = edit(view, [&] {
      answer(QMessageBox::Yes);
      deleted = view.deleteRuns({a, live});
    });
    QVERIFY(deleted);
    QVERIFY2(asked.contains("'doomed'") && asked.contains("'alive'"), qPrintable(asked));
    QVERIFY(!store->find_run("doomed").is_ok());
    QCOMPARE(view.tableModel()->rowOfRun(a), -1);
    // The live run is refused with the store's words, shown to the user, and stays.
    QCOMPARE(errors.size(), 1);
    QVERIFY2(errors[0].contains("is running"), qPrintable(errors[0]));
    QCOMPARE(view.errorText(), errors[0]);
    QVERIFY(view.tableModel()->rowOfRun(live) >= 0);
  }

  void notesAndTagsRoundTrip() {
    const QString db = freshDb();
    auto store = openStore(db);
    const std::int64_t a = addRun(*store, {"a", 1, "3e-4", {"old"}, ""});
    const std::int64_t b = addRun(*store, named("b"));
    HistoryView view;
    QVERIFY(load(view, db));
    const QString notes = "lr too high?\nrerun with warm-up";
    QVERIFY(edit(view, [&] {
              view.setNotes(a, notes);
              view.addTags({a, b}, {"x", "y"});
              view.removeTags({a}, {"old", "x"});
            }).isEmpty());
    QCOMPARE(QString::fromStdString(store->find_run("a")->notes), notes);
    QCOMPARE(store->find_run("a")->tags, (std::vector<std::string>{"y"}));
    QCOMPARE(store->find_run("b")->tags, (std::vector<std::string>{"x", "y"}));
    const RunTableModel& m = *view.tableModel();
    QCOMPARE(m.index(m.rowOfRun(a), RunTableModel::kNotes).data(Qt::EditRole).toString(), notes);
    QCOMPARE(m.index(m.rowOfRun(a), RunTableModel::kNotes).data().toString(), "lr too high? …");
    QCOMPARE(m.index(m.rowOfRun(b), RunTableModel::kTags).data().toString(), "x, y");

    // Editing the tags cell adds and removes the difference.
    const QModelIndex tags = m.index(m.rowOfRun(b), RunTableModel::kTags);
    QVERIFY(edit(view, [&] { view.tableModel()->setData(tags, "y, z ,"); }).isEmpty());
    QCOMPARE(store->find_run("b")->tags, (std::vector<std::string>{"y", "z"}));
    auto* tagFilter = view.findChild<QComboBox*>("historyTagFilter");
    QCOMPARE(tagFilter->count(), 3);  // All tags, y, z
  }

  // A running cluster job's store, as the main window shows it while it follows the job: read
  // read-only, every edit control disabled, every edit asked through the API refused, and the
  // file unchanged to the byte. Shown read-write (the local history again), the edits write.
  void aStoreShownReadOnlyIsNeverWrittenUntilShownReadWrite() {
    const QString db = freshDb();
    std::int64_t a = 0, b = 0;
    {
      auto store = openStore(db);
      a = addRun(*store, {"job-run", 1, "3e-4", {"cluster"}, "from the job", 3, 2.0, 100});
      b = addRun(*store, named("job-other"));
    }  // closed: the file holds every row, nothing is pending
    const std::string bytes = lattice::testing::slurp(db.toStdString());
    const QDateTime modified = QFileInfo(db).lastModified();
    QVERIFY(!bytes.empty());

    HistoryView view;
    QVERIFY(load(view, db, StoreAccess::kReadOnly));
    QCOMPARE(view.access(), StoreAccess::kReadOnly);
    QCOMPARE(view.tableModel()->rowCount(), 2);
    auto* banner = view.findChild<QLabel*>("historyReadOnly");
    QVERIFY(banner);
    QVERIFY2(banner->isVisibleTo(&view), "a read-only store says so above the table");
    QVERIFY2(banner->text().contains("cluster job") && banner->text().contains("imported"),
             qPrintable(banner->text()));
    view.selectRuns({a});
    QCOMPARE(view.selectedRuns(), QList<qint64>{a});
    QCOMPARE(enabledEditControls(view), QStringList{});
    const RunTableModel& m = *view.tableModel();
    for (int column : {RunTableModel::kName, RunTableModel::kTags, RunTableModel::kNotes})
      QVERIFY2(!(m.flags(m.index(m.rowOfRun(a), column)) & Qt::ItemIsEditable),
               qPrintable(QStringLiteral("column %1 is editable").arg(column)));

    // Every way in: the cells, the API, the (disabled) actions, delete.
    QSignalSpy requested(view.tableModel(), &RunTableModel::editRequested);
    const QStringList errors = edit(view, [&] {
      view.tableModel()->setData(m.index(m.rowOfRun(a), RunTableModel::kName), "cell-name");
      view.renameRun(a, "renamed");
      view.addTags({a, b}, {"mine"});
      view.removeTags({a}, {"cluster"});
      view.setNotes(a, "my notes");
    });
    QCOMPARE(requested.count(), 0);
    QCOMPARE(errors.size(), 1);
    QVERIFY2(errors[0].contains("read-only"), qPrintable(errors[0]));
    QCOMPARE(view.errorText(), errors[0]);
    {
      DialogGuard guard;
      for (QAction* action : view.tableView()->actions()) action->trigger();
      QVERIFY(!view.deleteRuns({a, b}));
      QTest::qWait(50);
      QVERIFY2(guard.asked().isEmpty(), qPrintable(guard.asked().join(", ")));
    }
    QVERIFY(reload(view));
    QCOMPARE(m.index(m.rowOfRun(a), RunTableModel::kName).data().toString(), "job-run");

    QCOMPARE(QFileInfo(db).lastModified(), modified);
    QVERIFY2(lattice::testing::slurp(db.toStdString()) == bytes,
             qPrintable(db + " changed while shown read-only"));
    {
      storage::OpenOptions readOnly;
      readOnly.read_only = true;
      auto store = RunStore::open(db.toStdString(), readOnly);
      QVERIFY(store);
      Result<storage::RunInfo> run = (*store)->find_run("job-run");
      QVERIFY(run);
      QCOMPARE(run->tags, std::vector<std::string>{"cluster"});
      QCOMPARE(run->notes, std::string("from the job"));
      QVERIFY((*store)->find_run("job-other").is_ok());
    }

    // The local history again (the job imported): editable, and edits write.
    QVERIFY(load(view, db, StoreAccess::kReadWrite));
    QVERIFY2(!banner->isVisibleTo(&view), "the banner goes with the read-only store");
    view.selectRuns({a});
    QCOMPARE(enabledEditControls(view).size(), 10);
    QVERIFY(m.flags(m.index(m.rowOfRun(a), RunTableModel::kName)) & Qt::ItemIsEditable);
    QVERIFY(edit(view, [&] {
              view.renameRun(a, "renamed");
              view.addTags({a}, {"mine"});
              view.setNotes(a, "my notes");
            }).isEmpty());
    QVERIFY(view.errorText().isEmpty());
    auto store = openStore(db);
    Result<storage::RunInfo> run = store->find_run("renamed");
    QVERIFY(run);
    QCOMPARE(run->id, a);
    QCOMPARE(run->tags, (std::vector<std::string>{"cluster", "mine"}));
    QCOMPARE(run->notes, std::string("my notes"));
    QCOMPARE(m.index(m.rowOfRun(a), RunTableModel::kName).data().toString(), "renamed");
  }

  // The main window's History follows a cluster job's store read-only while the job runs and
  // comes back to the local history read-write when the job's runs are imported; a run on
  // this machine is recorded in the local history, which stays editable.
  void theWindowShowsAJobsStoreReadOnlyUntilItIsImported() {
    const QString local = freshDb(), job = freshDb();
    openStore(local);
    RunSnapshot run;
    {
      auto store = openStore(job);
      run.id = addRun(*store, {"job", 1, "3e-4", {}, "", 2, 2.0, 10, RunStatus::kRunning});
    }
    run.found = true;
    run.name = "job";
    run.status = "running";
    LaunchEnvironment env;
    env.lattice = "lattice";
    env.dataDir = dir_.path();
    env.defaultDatabase = local;
    MainWindow::Options options;
    options.useSettings = false;
    options.measureCpu = false;
    options.environment = env;
    options.database = local;
    MainWindow window(options);
    HistoryView& history = *window.historyView();
    auto* banner = history.findChild<QLabel*>("historyReadOnly");
    QCOMPARE(history.database(), local);
    QCOMPARE(history.access(), StoreAccess::kReadWrite);

    emit window.launchView()->runRecorded(job, run, true);
    QCOMPARE(window.dashboardView()->database(), job);
    QCOMPARE(history.database(), job);
    QCOMPARE(history.access(), StoreAccess::kReadOnly);
    QVERIFY(banner->isVisibleTo(&history));
    QTRY_VERIFY_WITH_TIMEOUT(history.tableModel()->rowOfRun(run.id) >= 0, 10000);
    QCOMPARE(history.selectedRuns(), QList<qint64>{run.id});
    QCOMPARE(enabledEditControls(history), QStringList{});

    emit window.launchView()->jobImported(local, 0);
    QCOMPARE(history.database(), local);
    QCOMPARE(history.access(), StoreAccess::kReadWrite);
    QVERIFY(!banner->isVisibleTo(&history));

    emit window.launchView()->runRecorded(local, run, false);
    QCOMPARE(history.access(), StoreAccess::kReadWrite);
  }

  // Renders the view with several runs at both sizes (PNG in the temporary directory, or in
  // $LATTICE_HISTORY_SCREENSHOTS) and checks that no column is narrower than its contents
  // and that the table needs no horizontal scrolling.
  void theViewFitsAt1280x800And1920x1080() {
    const QString db = freshDb();
    auto store = openStore(db);
    std::vector<std::int64_t> ids;
    ids.push_back(addRun(*store, {"gpt2-124m-baseline",
                                  1,
                                  "6e-4",
                                  {"baseline"},
                                  "reference run on the demo corpus",
                                  2000,
                                  3.2871,
                                  41250}));
    ids.push_back(
        addRun(*store, {"gpt2-124m-tp2", 2, "6e-4", {"sweep", "tp"}, "", 2000, 3.2902, 38114}));
    ids.push_back(addRun(*store, {"gpt2-124m-lr3e-4",
                                  1,
                                  "3e-4",
                                  {"sweep", "lr"},
                                  "slower start, same end",
                                  2000,
                                  3.3310,
                                  41020}));
    ids.push_back(addRun(
        *store,
        {"gpt2-124m-tp4-pp2", 4, "6e-4", {"sweep"}, "", 640, 3.9123, 30550, RunStatus::kKilled}));
    ids.push_back(addRun(
        *store, {"demo-overnight", 1, "6e-4", {}, "", 12500, 2.9011, 40111, RunStatus::kRunning}));
    const std::int64_t crashed = addRun(
        *store,
        {"demo-crash", 2, "6e-4", {"debug"}, "node 3 lost", 311, 4.1, 39000, RunStatus::kRunning});
    const double hour = 3600;
    const double lives[][2] = {{30 * hour, 2.1 * hour}, {28 * hour, 2.3 * hour},
                               {26 * hour, 2.1 * hour}, {20 * hour, 0.8 * hour},
                               {5 * hour, 5 * hour},    {3 * hour, 0.6 * hour}};
    for (std::size_t i = 0; i < ids.size(); ++i) backdate(db, ids[i], lives[i][0], lives[i][1]);
    backdate(db, crashed, lives[5][0], lives[5][1]);
    const QString out = qEnvironmentVariable("LATTICE_HISTORY_SCREENSHOTS", dir_.path());
    for (const QSize size : {QSize(1280, 800), QSize(1920, 1080)}) {
      HistoryView view;
      view.resize(size);
      view.show();
      QVERIFY(QTest::qWaitForWindowExposed(&view));
      QVERIFY(load(view, db));
      view.selectRuns({ids[0], ids[1], ids[2]});
      QApplication::processEvents();
      QTableView* table = view.tableView();
      for (int c = 0; c < RunTableModel::kNotes; ++c) {
        const int need = std::max(table->horizontalHeader()->sectionSizeHint(c),
                                  static_cast<QAbstractItemView*>(table)->sizeHintForColumn(c));
        QVERIFY2(table->columnWidth(c) >= std::min(need, 220),
                 qPrintable(QStringLiteral("column %1 is %2 px, its contents need %3")
                                .arg(c)
                                .arg(table->columnWidth(c))
                                .arg(need)));
      }
      QVERIFY2(!table->horizontalScrollBar()->isVisible(), "the table scrolls sideways");
      const QString file = QDir(out).filePath(
          QStringLiteral("history-%1x%2.png").arg(size.width()).arg(size.height()));
      QVERIFY2(view.grab().save(file), qPrintable(file));
      view.comparePanel()->setShowAllSettings(true);
      const QString all = QDir(out).filePath(
          QStringLiteral("history-all-settings-%1x%2.png").arg(size.width()).arg(size.height()));
      QVERIFY2(view.grab().save(all), qPrintable(all));
    }
  }
};

QTEST_MAIN(TestStudioHistory)
#include "test_studio_history.moc"
