// Specification of RunStore::import_runs (`lattice runs import`, a cluster job's store merged
// into the local history) and of the journal modes a store opens with (rollback journal for
// a store on shared storage).
#include <QTemporaryDir>
#include <QTest>
#include <fstream>
#include <map>
#include <string>

#include "lattice/storage/run_store.h"
#include "storage/run_store_testing.h"

using lattice::storage::CheckpointRecord;
using lattice::storage::ImportReport;
using lattice::storage::JournalMode;
using lattice::storage::MemorySample;
using lattice::storage::NewRun;
using lattice::storage::OpenOptions;
using lattice::storage::RunInfo;
using lattice::storage::RunStatus;
using lattice::storage::RunStore;
using lattice::storage::TimelineEvent;
using lattice::storage::testing::open_or_fail;
using lattice::storage::testing::rows_of_run;

namespace {

// A run with rows in every table: steps [first, last] of two keys, memory on two ranks,
// a timeline, a log line and a checkpoint.
void log_steps(RunStore& store, std::int64_t run, int first, int last) {
  for (int step = first; step <= last; ++step) {
    const std::vector<MemorySample> memory = {{0, 100, 200, 300, 400, 500, 1500},
                                              {1, 101, 201, 301, 401, 501, 1505}};
    QVERIFY(store.log_step(run, step, {{"lm loss", 10.0 / step}, {"learning rate", 1e-3}}, memory)
                .is_ok());
  }
  QVERIFY(store.log_timeline(run, last, {{0, 0, 0, "forward", 0.0, 0.5}}).is_ok());
  QVERIFY(store.log_message(run, "info", 0, "step " + std::to_string(last)).is_ok());
  QVERIFY(store
              .record_checkpoint(run,
                                 CheckpointRecord{last, "/ckpt/iter_" + std::to_string(last), 1234})
              .is_ok());
}

std::int64_t new_run(RunStore& store, const std::string& name) {
  NewRun r;
  r.name = name;
  r.host = "node1";
  r.command_line = "lattice train --num-layers 2";
  r.config_json = R"({"num-layers": 2})";
  r.tags = {"slurm-job-7"};
  lattice::Result<std::int64_t> id = store.create_run(r);
  if (!id) qFatal("%s", id.status().message().c_str());
  if (!store.mark_running(*id)) qFatal("cannot mark running");
  return *id;
}

ImportReport import_or_fail(RunStore& store, const std::string& source) {
  lattice::Result<ImportReport> r = store.import_runs(source);
  if (!r) qFatal("import %s: %s", source.c_str(), r.status().message().c_str());
  return *r;
}

// Every table's rows of the run, without the runs row (which holds the run id itself).
std::map<std::string, std::int64_t> data_rows(const std::string& path, std::int64_t run) {
  std::map<std::string, std::int64_t> rows = rows_of_run(path, run);
  rows.erase("runs");
  return rows;
}

int journal_byte(const std::string& path) {  // header byte 18: 1 rollback, 2 WAL
  std::ifstream in(path, std::ios::binary);
  char header[20] = {};
  in.read(header, sizeof header);
  return header[18];
}

}  // namespace

class RunImportTest : public QObject {
  Q_OBJECT

 private slots:
  void importing_twice_keeps_one_copy_with_every_row() {
    QTemporaryDir dir;
    const std::string job = dir.filePath("job.sqlite").toStdString();
    const std::string home = dir.filePath("home.sqlite").toStdString();
    std::int64_t source_id = 0;
    {
      auto store = open_or_fail(job);
      source_id = new_run(*store, "gpt-7");
      log_steps(*store, source_id, 1, 40);
      QVERIFY(store->finish(source_id, RunStatus::kFinished).is_ok());
    }
    auto local = open_or_fail(home);
    const ImportReport first = import_or_fail(*local, job);
    QCOMPARE(first.added, 1);
    QCOMPARE(first.updated + first.unchanged, 0);
    const ImportReport second = import_or_fail(*local, job);
    QCOMPARE(second.added, 0);
    QCOMPARE(second.unchanged, 1);
    auto runs = local->list_runs();
    QVERIFY(runs.is_ok());
    QCOMPARE(runs->size(), size_t{1});
    const RunInfo& copy = (*runs)[0];
    QCOMPARE(copy.name, std::string("gpt-7"));
    QCOMPARE(copy.status, RunStatus::kFinished);
    QCOMPARE(copy.tags, std::vector<std::string>{"slurm-job-7"});
    QCOMPARE(copy.config_json, std::string(R"({"num-layers": 2})"));
    // Every table holds as many rows of the copy as of the original.
    const auto there = data_rows(job, source_id), here = data_rows(home, copy.id);
    QCOMPARE(here, there);
    QVERIFY(here.at("metrics") == 80 && here.at("memory_samples") == 80);
    // Plots read the copy as the original: points, summaries and latest values.
    auto source = open_or_fail(job);
    auto a = source->downsample(source_id, "lm loss", 1, 40, 7);
    auto b = local->downsample(copy.id, "lm loss", 1, 40, 7);
    QVERIFY(a.is_ok() && b.is_ok());
    QCOMPARE(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      QCOMPARE((*b)[i].min, (*a)[i].min);
      QCOMPARE((*b)[i].last, (*a)[i].last);
    }
    QCOMPARE(copy.latest.at("lm loss"), 10.0 / 40);
    QVERIFY(local->check_integrity().is_ok());
  }

  void a_run_that_progressed_since_replaces_its_copy() {
    QTemporaryDir dir;
    const std::string job = dir.filePath("job.sqlite").toStdString();
    const std::string home = dir.filePath("home.sqlite").toStdString();
    auto store = open_or_fail(job);
    const std::int64_t id = new_run(*store, "gpt-8");
    log_steps(*store, id, 1, 10);
    auto local = open_or_fail(home);
    QCOMPARE(import_or_fail(*local, job).added, 1);  // while it runs
    log_steps(*store, id, 11, 25);
    QVERIFY(store->finish(id, RunStatus::kKilled).is_ok());
    const ImportReport later = import_or_fail(*local, job);
    QCOMPARE(later.updated, 1);
    QCOMPARE(later.added, 0);
    auto runs = local->list_runs();
    QCOMPARE(runs->size(), size_t{1});
    QCOMPARE((*runs)[0].status, RunStatus::kKilled);
    QCOMPARE((*runs)[0].latest_step.value_or(-1), std::int64_t{25});
    QCOMPARE(data_rows(home, (*runs)[0].id), data_rows(job, id));
    QCOMPARE(import_or_fail(*local, job).unchanged, 1);
  }

  void a_taken_name_is_imported_under_another() {
    QTemporaryDir dir;
    const std::string job = dir.filePath("job.sqlite").toStdString();
    const std::string home = dir.filePath("home.sqlite").toStdString();
    {
      auto store = open_or_fail(job);
      const std::int64_t id = new_run(*store, "demo");
      log_steps(*store, id, 1, 3);
    }
    auto local = open_or_fail(home);
    new_run(*local, "demo");  // another run, same name
    const ImportReport r = import_or_fail(*local, job);
    QCOMPARE(r.added, 1);
    QCOMPARE(r.renamed, std::vector<std::string>{"'demo' as 'demo (2)'"});
    QCOMPARE(import_or_fail(*local, job).unchanged, 1);  // found again despite the new name
    QVERIFY(local->find_run("demo (2)").is_ok());
  }

  void refuses_itself_and_foreign_files() {
    QTemporaryDir dir;
    const std::string home = dir.filePath("home.sqlite").toStdString();
    const std::string text = dir.filePath("notes.txt").toStdString();
    std::ofstream(text) << "not a database, long enough to hold an SQLite header of 100 bytes "
                           "...............................................\n";
    auto local = open_or_fail(home);
    auto self = local->import_runs(home);
    QVERIFY(!self.is_ok());
    QVERIFY2(self.status().message().find("itself") != std::string::npos,
             self.status().message().c_str());
    auto foreign = local->import_runs(text);
    QVERIFY(!foreign.is_ok());
    QVERIFY2(foreign.status().message().find("not a Lattice run database") != std::string::npos,
             foreign.status().message().c_str());
    QVERIFY(!local->import_runs(dir.filePath("missing.sqlite").toStdString()).is_ok());
  }

  void journal_modes() {
    QTemporaryDir dir;
    const std::string shared = dir.filePath("shared.sqlite").toStdString();
    const std::string local = dir.filePath("local.sqlite").toStdString();
    {
      auto s = RunStore::open(shared, OpenOptions{JournalMode::kDelete});
      QVERIFY(s.is_ok());
      new_run(**s, "r");
      QVERIFY(!std::ifstream(shared + "-wal").good());
    }
    QCOMPARE(journal_byte(shared), 1);
    {  // auto keeps the mode an existing store has: a reader does not turn it into WAL
      auto reader = open_or_fail(shared);
      QVERIFY(reader->list_runs().is_ok());
    }
    QCOMPARE(journal_byte(shared), 1);
    {  // a new store on a local filesystem gets WAL
      auto s = open_or_fail(local);
      new_run(*s, "r");
    }
    if (!lattice::storage::on_network_filesystem(local)) QCOMPARE(journal_byte(local), 2);
    QVERIFY(lattice::storage::parse_journal_mode("delete") == JournalMode::kDelete);
    QVERIFY(!lattice::storage::parse_journal_mode("truncate"));
  }
};

QTEST_GUILESS_MAIN(RunImportTest)
#include "test_run_import.moc"
