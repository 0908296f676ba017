// Specification of looking runs up and editing them afterwards: finding a run by id or name,
// tags, renaming under unique names, deleting every row of a run (and nothing else) in one
// transaction, reading a run's whole history for export, and comparing run configs.
#include <sqlite3.h>

#include <QStringList>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/storage/run_export.h"
#include "lattice/storage/run_store.h"
#include "lattice/storage/run_sweep.h"
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

// The specification of run_settings: every leaf of the JSON tree at its dotted path, as the
// tree's dump() writes it; a config that does not parse is one setting "(config)".
lattice::storage::RunSettings settings_of_tree(const std::string& config) {
  lattice::storage::RunSettings out;
  const nlohmann::json j = nlohmann::json::parse(config, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return {{"(config)", config}};
  std::function<void(const nlohmann::json&, const std::string&)> walk =
      [&](const nlohmann::json& v, const std::string& path) {
        if (v.is_object() && !v.empty()) {
          for (const auto& [key, value] : v.items())
            walk(value, path.empty() ? key : path + "." + key);
          return;
        }
        out[path.empty() ? "(config)" : path] = v.dump();
      };
  if (!(j.is_object() && j.empty())) walk(j, "");
  return out;
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

  // The History lists runs without their configs and reads those of the runs it needs after.
  void a_list_without_configs_is_the_list_less_the_configs_that_run_configs_reads() {
    auto store = open_or_fail(db_path("configs.db"));
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 3; ++i) {
      NewRun spec;
      spec.name = "run" + std::to_string(i);
      spec.config_json = R"({"lr": 0.)" + std::to_string(i + 1) + "}";
      spec.tags = {"t" + std::to_string(i)};
      ids.push_back(store->create_run(spec).value());
      QVERIFY(store->mark_running(ids.back()).is_ok());
      QVERIFY(store->log_step(ids.back(), 5, {{"loss", 1.0 + i}}).is_ok());
    }
    lattice::storage::RunFilter without;
    without.with_config = false;
    const std::vector<lattice::storage::RunInfo> full = store->list_runs().value();
    const std::vector<lattice::storage::RunInfo> lean = store->list_runs(without).value();
    QCOMPARE(lean.size(), full.size());
    for (std::size_t i = 0; i < full.size(); ++i) {
      QCOMPARE(lean[i].config_json, std::string());
      QCOMPARE(full[i].config_json, R"({"lr": 0.)" + std::to_string(i + 1) + "}");
      QCOMPARE(lean[i].id, full[i].id);
      QCOMPARE(lean[i].name, full[i].name);
      QCOMPARE(lean[i].tags, full[i].tags);
      QCOMPARE(lean[i].latest, full[i].latest);
      QCOMPARE(lean[i].latest_step, full[i].latest_step);
      QCOMPARE(lean[i].heartbeat_at, full[i].heartbeat_at);
    }
    // In the order asked; an id of no run is left out.
    const auto configs = store->run_configs({ids[2], 999, ids[0]}).value();
    QCOMPARE(configs.size(), std::size_t{2});
    QCOMPARE(configs[0].first, ids[2]);
    QCOMPARE(configs[0].second, full[2].config_json);
    QCOMPARE(configs[1].first, ids[0]);
    QCOMPARE(configs[1].second, full[0].config_json);
    QVERIFY(store->run_configs({})->empty());
  }

  // Version 3 added the runs_listed index (Note "runs_listed" in storage/src/schema.cpp): a
  // version-2 store gains it on open, and it covers every column the list reads but the config.
  void a_version_2_store_gains_the_index_that_lists_runs_without_their_configs() {
    const std::string path = db_path("version2.db");
    {
      auto store = open_or_fail(path);
      create(*store, "old");
    }
    auto query = [&](const char* sql) {
      sqlite3* db = nullptr;
      sqlite3_open(path.c_str(), &db);
      sqlite3_stmt* stmt = nullptr;
      sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
      std::string rows;
      while (sqlite3_step(stmt) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
          const auto* text = sqlite3_column_text(stmt, c);
          rows += text ? reinterpret_cast<const char*>(text) : "NULL";
          rows += c + 1 < sqlite3_column_count(stmt) ? "|" : "\n";
        }
      }
      sqlite3_finalize(stmt);
      sqlite3_close(db);
      return rows;
    };
    const char* kIndex = "SELECT name FROM sqlite_schema WHERE name = 'runs_listed'";
    QCOMPARE(query(kIndex), std::string("runs_listed\n"));
    {
      sqlite3* db = nullptr;
      QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
      // Nor the run_parents table of version 4.
      QCOMPARE(sqlite3_exec(db,
                            "DROP INDEX runs_listed; DROP TABLE run_parents; PRAGMA "
                            "user_version = 2;",
                            nullptr, nullptr, nullptr),
               SQLITE_OK);
      sqlite3_close(db);
    }
    QCOMPARE(query(kIndex), std::string());
    QCOMPARE(query("PRAGMA user_version"), std::string("2\n"));

    auto store = open_or_fail(path);
    QCOMPARE(query("PRAGMA user_version"), std::to_string(lattice::storage::kSchemaVersion) + "\n");
    QCOMPARE(query(kIndex), std::string("runs_listed\n"));
    const std::string plan = query(
        "EXPLAIN QUERY PLAN SELECT id, name, status, created_at, started_at, ended_at, "
        "heartbeat_at, host, command_line, tp, pp, dp, world_size, parameter_count, notes, error "
        "FROM runs ORDER BY id");
    QVERIFY2(contains(plan, "COVERING INDEX runs_listed"), plan.c_str());
    lattice::storage::RunFilter without;
    without.with_config = false;
    const auto runs = store->list_runs(without).value();
    QCOMPARE(runs.size(), std::size_t{1});
    QCOMPARE(runs[0].name, std::string("old"));
    QVERIFY(store->check_integrity().is_ok());
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
    QVERIFY(store
                ->log_timeline(run, 10,
                               {{1, 1, 0, "forward", 0.2, 0.3},
                                {0, 0, 1, "forward", 0.1, 0.2},
                                {0, 0, 0, "forward", 0.0, 0.1}})
                .is_ok());
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

  // Note "flat settings" in storage/src/run_sweep.cpp: the parser's events give what the tree
  // gives, and whatever the fast path declines goes through the tree.
  void run_settings_are_the_json_trees_leaves_at_their_dotted_paths() {
    const std::vector<std::string>
        configs =
            {// Numbers as the tree dumps them, strings escaped, empty arrays, null.
             "{\"adam-eps\":1e-08,\"initial-loss-scale\":4294967296.0,\"lr\":0.0003,\"lr2\":3e-4,"
             "\"clip-grad\":1.0,\"seed\":-7,\"big\":18446744073709551615,\"bf16\":false,\"fp16\":"
             "true,"
             "\"load\":null,\"split\":\"969,30,1\",\"name\":\"tab\\t \\\"q\\\" \\u00e9 "
             "é\",\"data-path\":[],"
             "\"tag\":[]}",
             "{\"model\":{\"layers\":2,\"heads\":{\"q\":4,\"kv\":1}},\"empty\":{},\"z\":{\"a\":[]}"
             "}",                                    // nested objects, an empty one
             "{\"tags\":[\"a\",\"b\"],\"lr\":0.1}",  // a non-empty array
             "{\"a\":[[]],\"b\":1}",                 // an array in an array
             "{\"a\":[{\"x\":1}]}",                  // an object in an array
             "{\"a\":1,\"a\":2}",                    // a key twice: the later
             "{\"a\":{\"x\":1},\"a\":2}",            // ... once for an object
             "{\"a\":1,\"a\":{\"x\":2}}",
             "{\"a\":{\"x\":1},\"a\":{\"y\":2}}",
             "{\"a\":{},\"a\":{\"y\":2}}",
             "[1,2]",
             "3",
             "\"text\"",
             "{}",
             "{\"unclosed\":",
             "not json",
             ""};
    for (const std::string& config : configs) {
      const lattice::storage::RunSettings got = lattice::storage::run_settings(config);
      const lattice::storage::RunSettings want = settings_of_tree(config);
      QVERIFY2(got == want, qPrintable(QString::fromStdString(
                                "config " + config + ": got " + nlohmann::json(got).dump() +
                                ", the tree gives " + nlohmann::json(want).dump())));
    }
    const auto first = lattice::storage::run_settings(configs[0]);
    QCOMPARE(first.at("adam-eps"), std::string("1e-08"));
    QCOMPARE(first.at("lr2"), std::string("0.0003"));
    QCOMPARE(first.at("name"), std::string("\"tab\\t \\\"q\\\" \u00e9 \u00e9\""));
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
