// Specification of looking runs up and editing them afterwards: finding a run by id or name,
// tags, renaming under unique names, deleting every row of a run (and nothing else) in one
// transaction, reading a run's whole history for export, and comparing run configs.
#include <sqlite3.h>

#include <QStringList>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "lattice/storage/run_export.h"
#include "lattice/storage/run_store.h"
#include "storage/run_store_testing.h"

using lattice::storage::MemorySample;
using lattice::storage::NewRun;
using lattice::storage::RunStatus;
using lattice::storage::RunStore;
using lattice::storage::testing::open_or_fail;
using lattice::storage::testing::rows_of_run;

namespace {

std::int64_t create(RunStore& store, const std::string& name, bool running = true) {
  NewRun spec;
  spec.name = name;
  spec.tags = {"base"};
  const std::int64_t id = store.create_run(spec).value();
  if (running && !store.mark_running(id)) qFatal("cannot start run %s", name.c_str());
  return id;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A run with rows in every table: metrics over several summary blocks, memory of two ranks,
// timeline events, a log line and a checkpoint.
void fill(RunStore& store, std::int64_t run) {
  for (int s = 0; s < 300; ++s) {
    MemorySample m;
    m.rank = s % 2;
    m.peak = s;
    if (!store.log_step(run, s, {{"loss", 1.0 / (s + 1)}, {"lr", 0.1}}, {m})) qFatal("log_step");
  }
  if (!store.log_timeline(run, 1, {{0, 0, 0, "forward", 0.0, 0.5}})) qFatal("log_timeline");
  if (!store.log_message(run, "info", 0, "hello")) qFatal("log_message");
  if (!store.record_checkpoint(run, {299, "/ckpt/299", 1234})) qFatal("record_checkpoint");
}

}  // namespace

class TestRunStoreEdits : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string db_path(const char* name) const { return dir_.filePath(name).toStdString(); }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void a_run_is_found_by_id_or_name_and_a_miss_says_what_was_looked_for() {
    auto store = open_or_fail(db_path("find.db"));
    const std::int64_t alpha = create(*store, "alpha");
    const std::int64_t digits = create(*store, std::to_string(alpha));  // named "1"
    QCOMPARE(store->find_run("alpha")->id, alpha);
    QCOMPARE(store->find_run(std::to_string(digits))->name, std::to_string(alpha));
    auto ambiguous = store->find_run(std::to_string(alpha));
    QVERIFY(!ambiguous.is_ok());
    const std::string& why = ambiguous.status().message();
    QVERIFY2(contains(why, "is both the id of run 'alpha' and the name of run " +
                               std::to_string(digits)),
             why.c_str());
    auto missing = store->find_run("nope");
    QVERIFY(!missing.is_ok());
    QVERIFY2(contains(missing.status().message(), "no run has the id or name 'nope'"),
             missing.status().message().c_str());
    QVERIFY(!store->find_run("").is_ok());
  }

  void tags_are_added_once_and_removed() {
    auto store = open_or_fail(db_path("tags.db"));
    const std::int64_t run = create(*store, "tagged");
    QVERIFY(store->add_tags(run, {"b", "a", "a"}).is_ok());
    QCOMPARE(store->find_run("tagged")->tags, (std::vector<std::string>{"a", "b", "base"}));
    QVERIFY(store->remove_tags(run, {"a", "never-there"}).is_ok());
    QCOMPARE(store->find_run("tagged")->tags, (std::vector<std::string>{"b", "base"}));
    QVERIFY2(!store->add_tags(run, {"ok", ""}).is_ok(), "an empty tag is refused");
    QCOMPARE(store->find_run("tagged")->tags, (std::vector<std::string>{"b", "base"}));
    QVERIFY2(!store->add_tags(run + 1, {"x"}).is_ok(), "an unknown run is refused");
  }

  void rename_keeps_names_unique() {
    auto store = open_or_fail(db_path("rename.db"));
    const std::int64_t first = create(*store, "first");
    const std::int64_t second = create(*store, "second");
    QVERIFY(store->rename_run(first, "baseline").is_ok());
    QCOMPARE(store->find_run("baseline")->id, first);
    const lattice::Status taken = store->rename_run(second, "baseline");
    QVERIFY(!taken.is_ok());
    QVERIFY2(contains(taken.message(), "run " + std::to_string(first) +
                                           " is already named 'baseline'; run names are unique"),
             taken.message().c_str());
    QCOMPARE(store->find_run("second")->id, second);
    QVERIFY2(store->rename_run(first, "baseline").is_ok(), "its own name again is no change");
    QVERIFY(!store->rename_run(first, "").is_ok());
  }

  void notes_are_replaced_and_cleared() {
    auto store = open_or_fail(db_path("notes.db"));
    const std::int64_t run = create(*store, "noted");
    QVERIFY(store->set_notes(run, "lr too high; diverged at 3k").is_ok());
    QCOMPARE(store->find_run("noted")->notes, std::string("lr too high; diverged at 3k"));
    QVERIFY(store->set_notes(run, "").is_ok());
    QCOMPARE(store->find_run("noted")->notes, std::string());
    QVERIFY2(!store->set_notes(run + 1, "x").is_ok(), "an unknown run is refused");
  }

  void the_timeline_reads_back_by_step_rank_and_start() {
    auto store = open_or_fail(db_path("timeline.db"));
    const std::int64_t run = create(*store, "timed");
    const std::int64_t other = create(*store, "other");
    QVERIFY(store->log_timeline(run, 10, {{1, 1, 0, "forward", 0.2, 0.3},
                                          {0, 0, 1, "forward", 0.1, 0.2},
                                          {0, 0, 0, "forward", 0.0, 0.1}}).is_ok());
    QVERIFY(store->log_timeline(run, 5, {{0, 0, 0, "backward", 0.5, 0.9}}).is_ok());
    QVERIFY(store->log_timeline(other, 7, {{0, 0, 0, "forward", 0.0, 1.0}}).is_ok());
    QCOMPARE(store->timeline_steps(run).value(), (std::vector<std::int64_t>{5, 10}));
    const auto events = store->timeline(run, 10).value();
    QCOMPARE(events.size(), std::size_t{3});
    QCOMPARE(events[0].rank, 0);
    QCOMPARE(events[0].microbatch, 0);
    QCOMPARE(events[1].microbatch, 1);
    QCOMPARE(events[2].rank, 1);
    QCOMPARE(events[2].stage, 1);
    QCOMPARE(events[2].kind, std::string("forward"));
    QCOMPARE(events[2].start_s, 0.2);
    QCOMPARE(events[2].end_s, 0.3);
    QVERIFY(store->timeline(run, 11).value().empty());
  }

  void delete_removes_every_row_of_the_run_and_nothing_else() {
    const std::string path = db_path("delete.db");
    auto store = open_or_fail(path);
    const std::int64_t doomed = create(*store, "doomed");
    const std::int64_t kept = create(*store, "kept");
    fill(*store, doomed);
    fill(*store, kept);
    const auto before = rows_of_run(path, doomed);
    const auto kept_before = rows_of_run(path, kept);
    for (const char* table : {"runs", "run_tags", "metrics", "metric_blocks", "latest_metrics",
                              "memory_samples", "timeline_events", "log_events", "checkpoints"}) {
      QVERIFY2(before.count(table) && before.at(table) > 0, table);
    }

    const lattice::Status live = store->delete_run(doomed);
    QVERIFY2(!live.is_ok() && contains(live.message(), "is running"), live.message().c_str());
    QVERIFY2(rows_of_run(path, doomed) == before, "a refused delete must change nothing");

    QVERIFY(store->finish(doomed, RunStatus::kFinished).is_ok());
    QVERIFY(store->delete_run(doomed).is_ok());
    for (const auto& [table, rows] : rows_of_run(path, doomed)) {
      QVERIFY2(rows == 0, qPrintable(QString::fromStdString(table) + " still holds " +
                                     QString::number(rows) + " rows of the deleted run"));
    }
    QVERIFY2(rows_of_run(path, kept) == kept_before, "the other run lost rows");
    QVERIFY(!store->find_run("doomed").is_ok());
    QVERIFY(!store->delete_run(doomed).is_ok());
    // The other run goes on logging, and its plots stay exact.
    QVERIFY(store->log_step(kept, 300, {{"loss", 0.5}}).is_ok());
    QCOMPARE(store->downsample(kept, "loss", 0, 300, 1)->at(0).count, 301);
    // A running run that stopped beating (a crash) can be deleted.
    QVERIFY(store->delete_run(kept, /*stale_after_s=*/0).is_ok());
    QVERIFY(store->check_integrity().is_ok());
  }

  void history_holds_every_series_memory_sample_and_checkpoint() {
    auto store = open_or_fail(db_path("history.db"));
    const std::int64_t run = create(*store, "history");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    MemorySample m0, m1;
    m1.rank = 1;
    m0.peak = 10;
    m1.peak = 11;
    QVERIFY(store->log_step(run, 1, {{"lm loss", 3.0}, {"lr", 0.1}}).is_ok());
    QVERIFY(store->log_step(run, 2, {{"lm loss", nan}, {"validation lm loss", 2.5}}).is_ok());
    QVERIFY(store->log_step(run, 3, {{"lm loss", 2.0}}, {m1, m0}).is_ok());
    QVERIFY(store->record_checkpoint(run, {3, "/ckpt/3", 77}).is_ok());
    const auto h = store->history(run).value();
    QCOMPARE(h.run.name, std::string("history"));
    QCOMPARE(h.metrics.size(), std::size_t{3});
    QCOMPARE(h.metrics[0].key, std::string("lm loss"));
    QCOMPARE(h.metrics[0].points.size(), std::size_t{3});
    QVERIFY2(std::isnan(h.metrics[0].points[1].value), "a logged NaN reads back as NaN");
    QCOMPARE(h.metrics[2].key, std::string("validation lm loss"));
    QCOMPARE(h.metrics[2].points[0].step, 2);
    QCOMPARE(h.memory.size(), std::size_t{2});
    QCOMPARE(h.memory[0].sample.rank, 0);
    QCOMPARE(h.memory[1].sample.peak, 11);
    QCOMPARE(h.checkpoints.at(0).path, std::string("/ckpt/3"));
    QCOMPARE(store->logged_steps(run).value(), 3);
    QVERIFY(!store->history(run + 100).is_ok());
  }

  void compare_configs_lists_the_differences_or_with_include_equal_every_setting() {
    lattice::storage::RunInfo a, b;
    a.config_json = R"({"lr": 0.1, "seed": 1, "model": {"layers": 2, "heads": 4}})";
    b.config_json = R"({"lr": 0.2, "seed": 1, "model": {"layers": 2, "heads": 8}, "fp64": true})";
    // Each listed setting as "path" (differs) or "path (same)".
    auto listed = [](const lattice::storage::ConfigComparison& c) {
      QStringList out;
      for (const auto& d : c.differences) {
        out << QString::fromStdString(d.setting) + (d.differs ? "" : " (same)");
      }
      return out;
    };
    const auto differing = lattice::storage::compare_configs({a, b});
    QCOMPARE(differing.compared, std::size_t{5});
    QCOMPARE(listed(differing), (QStringList{"fp64", "lr", "model.heads"}));
    QVERIFY2(!differing.differences[0].values[0].has_value(), "a lacks fp64: nullopt");
    QCOMPARE(*differing.differences[0].values[1], std::string("true"));

    const auto all = lattice::storage::compare_configs({a, b}, {/*include_equal=*/true});
    QCOMPARE(all.compared, std::size_t{5});
    QCOMPARE(listed(all),
             (QStringList{"fp64", "lr", "model.heads", "model.layers (same)", "seed (same)"}));
    QCOMPARE(*all.differences[4].values[0], std::string("1"));
    QCOMPARE(*all.differences[4].values[1], std::string("1"));
  }
};

QTEST_GUILESS_MAIN(TestRunStoreEdits)
#include "test_run_store_edits.moc"
