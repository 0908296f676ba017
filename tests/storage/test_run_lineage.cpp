// Specification of lineage in the run store (schema 4): the run that saved a checkpoint found
// from its path, a resumed run's parent and resume step, run_lineage's chain with each run's
// kept steps and discarded tail, a deleted parent, and a schema-3 file upgraded on open.
#include <sqlite3.h>

#include <QTemporaryDir>
#include <QTest>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "lattice/storage/run_store.h"
#include "storage/run_store_testing.h"

using lattice::storage::LineageLink;
using lattice::storage::NewRun;
using lattice::storage::RunParent;
using lattice::storage::RunStatus;
using lattice::storage::RunStore;
using lattice::storage::testing::open_or_fail;
using lattice::storage::testing::rows_of_run;

namespace {

// A finished run that logged "lm loss" at steps first..last and, when parent is set, resumed
// from it.
std::int64_t add_run(RunStore& store, const std::string& name, int first, int last,
                     std::optional<RunParent> parent = std::nullopt) {
  NewRun spec;
  spec.name = name;
  spec.parent = parent;
  const std::int64_t id = store.create_run(spec).value();
  if (!store.mark_running(id)) qFatal("cannot start run %s", name.c_str());
  for (int s = first; s <= last; ++s)
    if (!store.log_step(id, s, {{"lm loss", 10.0 - 0.1 * s}})) qFatal("log_step");
  if (!store.finish(id, RunStatus::kFinished)) qFatal("finish");
  return id;
}

// "name resumed..kept_until/last" for a readable QCOMPARE of a whole lineage.
std::string text_of(const std::vector<LineageLink>& lineage) {
  auto number = [](const std::optional<std::int64_t>& v) {
    return v ? std::to_string(*v) : std::string("-");
  };
  std::string out;
  for (const LineageLink& l : lineage)
    out += (out.empty() ? "" : " ") + l.name + " " + number(l.resumed_at) + ".." +
           number(l.kept_until) + "/" + number(l.last_step);
  return out;
}

std::string query(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  std::string rows;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    const auto* text = sqlite3_column_text(stmt, 0);
    rows += std::string(text ? reinterpret_cast<const char*>(text) : "NULL") + "\n";
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return rows;
}

}  // namespace

class TestRunLineage : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  std::string db_path(const char* name) { return dir_.filePath(name).toStdString(); }

 private slots:
  void the_run_that_saved_a_checkpoint_is_found_by_its_path_and_step() {
    auto store = open_or_fail(db_path("find.db"));
    const std::int64_t a = add_run(*store, "a", 1, 10);
    const std::int64_t b = add_run(*store, "b", 6, 12);
    const std::string ckpt = dir_.filePath("ckpt").toStdString();
    std::filesystem::create_directories(ckpt + "/iter_0000005");
    std::filesystem::create_directories(ckpt + "/iter_0000010");
    QVERIFY(store->record_checkpoint(a, {5, ckpt + "/iter_0000005", 100}));
    QVERIFY(store->record_checkpoint(a, {10, ckpt + "/iter_0000010", 100}));

    auto found = store->find_checkpoint_run(ckpt + "/iter_0000005", 5).value();
    QVERIFY(found.has_value());
    QCOMPARE(found->run_id, a);
    QCOMPARE(found->step, std::int64_t{5});
    // The same directory spelled another way (as --load and --save may be).
    found = store->find_checkpoint_run(ckpt + "/../ckpt/./iter_0000010", 10).value();
    QVERIFY(found.has_value());
    QCOMPARE(found->run_id, a);
    // A step or a directory no run recorded: no parent.
    QVERIFY(!store->find_checkpoint_run(ckpt + "/iter_0000005", 6).value().has_value());
    QVERIFY(!store->find_checkpoint_run(ckpt + "/iter_0000007", 5).value().has_value());
    // Saved again by a later run (a rollback that saved the same step): the latest record
    // is the copy on disk.
    QVERIFY(store->record_checkpoint(b, {10, ckpt + "/iter_0000010", 100}));
    QCOMPARE(store->find_checkpoint_run(ckpt + "/iter_0000010", 10).value()->run_id, b);
  }

  void a_resumed_run_records_its_parent_and_resume_step() {
    auto store = open_or_fail(db_path("parent.db"));
    const std::int64_t a = add_run(*store, "a", 1, 10);
    const std::int64_t b = add_run(*store, "b", 6, 12, RunParent{a, 5});
    const auto runs = store->list_runs().value();
    QCOMPARE(runs.size(), std::size_t{2});
    QVERIFY(!runs[0].resume_step && !runs[0].parent_run_id);
    QCOMPARE(runs[1].parent_run_id, std::optional<std::int64_t>(a));
    QCOMPARE(runs[1].resume_step, std::optional<std::int64_t>(5));
    QCOMPARE(store->find_run("b").value().resume_step, std::optional<std::int64_t>(5));
    // A parent id no run has is refused, naming both.
    NewRun orphan;
    orphan.name = "orphan";
    orphan.parent = RunParent{99, 5};
    auto refused = store->create_run(orphan);
    QVERIFY(!refused);
    QVERIFY2(refused.status().message().find("resumed from run 99") != std::string::npos,
             refused.status().message().c_str());
    QCOMPARE(store->list_runs().value().size(), std::size_t{2});
    QVERIFY(b > a);
  }

  // a: steps 1..10, checkpoints at 5 and 10. b resumed from a's 5 (a rollback: a's 6..10 are
  // done again) and went to 12; c resumed from b's 8 and went to 15.
  void the_lineage_runs_root_first_with_each_runs_kept_steps_and_discarded_tail() {
    auto store = open_or_fail(db_path("lineage.db"));
    const std::int64_t a = add_run(*store, "a", 1, 10);
    const std::int64_t b = add_run(*store, "b", 6, 12, RunParent{a, 5});
    const std::int64_t c = add_run(*store, "c", 9, 15, RunParent{b, 8});
    const std::int64_t other = add_run(*store, "other", 1, 3);

    QCOMPARE(text_of(store->run_lineage(c).value()), std::string("a -..5/10 b 5..8/12 c 8..-/15"));
    const auto lineage = store->run_lineage(c).value();
    QCOMPARE(lineage.front().run_id, a);
    QCOMPARE(lineage.back().run_id, c);
    // A middle run's lineage stops at itself: its child is not its ancestor.
    QCOMPARE(text_of(store->run_lineage(b).value()), std::string("a -..5/10 b 5..-/12"));
    QCOMPARE(text_of(store->run_lineage(other).value()), std::string("other -..-/3"));
    QVERIFY(!store->run_lineage(1000));
  }

  void a_deleted_parent_leaves_the_resume_step_and_ends_the_lineage() {
    const std::string path = db_path("deleted.db");
    auto store = open_or_fail(path);
    const std::int64_t a = add_run(*store, "a", 1, 10);
    const std::int64_t b = add_run(*store, "b", 6, 12, RunParent{a, 5});
    QCOMPARE(rows_of_run(path, b).at("run_parents"), std::int64_t{1});
    QVERIFY(store->delete_run(a));
    const auto run = store->find_run("b").value();
    QVERIFY(!run.parent_run_id);
    QCOMPARE(run.resume_step, std::optional<std::int64_t>(5));
    QCOMPARE(text_of(store->run_lineage(b).value()), std::string("b 5..-/12"));
    QVERIFY(store->delete_run(b));
    QCOMPARE(rows_of_run(path, b).at("run_parents"), std::int64_t{0});
    QVERIFY(store->check_integrity());
  }

  // What a version-3 Lattice left: everything but the run_parents table. Opening it adds the
  // table; its runs have no parents, and new runs can have one.
  void a_schema_3_store_gains_lineage_on_open() {
    const std::string path = db_path("version3.db");
    {
      auto store = open_or_fail(path);
      add_run(*store, "old", 1, 4);
    }
    {
      sqlite3* db = nullptr;
      QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
      QCOMPARE(sqlite3_exec(db, "DROP TABLE run_parents; PRAGMA user_version = 3;", nullptr,
                            nullptr, nullptr),
               SQLITE_OK);
      sqlite3_close(db);
    }
    const char* kTable = "SELECT name FROM sqlite_schema WHERE name = 'run_parents'";
    QCOMPARE(query(path, kTable), std::string());
    QCOMPARE(query(path, "PRAGMA user_version"), std::string("3\n"));

    auto store = open_or_fail(path);
    QCOMPARE(lattice::storage::kSchemaVersion, 4);
    QCOMPARE(query(path, "PRAGMA user_version"), std::string("4\n"));
    QCOMPARE(query(path, kTable), std::string("run_parents\n"));
    const auto old = store->find_run("old").value();
    QVERIFY(!old.resume_step && !old.parent_run_id);
    const std::int64_t next = add_run(*store, "next", 3, 6, RunParent{old.id, 2});
    QCOMPARE(text_of(store->run_lineage(next).value()), std::string("old -..2/4 next 2..-/6"));
    QVERIFY(store->check_integrity());
  }
};

QTEST_GUILESS_MAIN(TestRunLineage)
#include "test_run_lineage.moc"
