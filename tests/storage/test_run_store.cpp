// Specification of the SQLite run store on real database files: schema and migrations,
// refusal of foreign and newer files, the run lifecycle, plot down-sampling, tailing while
// another process writes (read-write and read-only), a reader that outlives writer processes
// (run_writer), and crash safety under SIGKILL.
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QProcess>
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lattice/storage/run_store.h"
#include "storage/run_store_testing.h"

using lattice::storage::Bucket;
using lattice::storage::MemorySample;
using lattice::storage::NewRun;
using lattice::storage::RunFilter;
using lattice::storage::RunInfo;
using lattice::storage::RunStatus;
using lattice::storage::RunStore;
using lattice::storage::testing::open_or_fail;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A file's bytes and mtime, to prove that a refused file was not touched.
struct Snapshot {
  std::string bytes;
  std::filesystem::file_time_type mtime;
  bool operator==(const Snapshot&) const = default;
};
Snapshot snapshot(const std::string& path) {
  return {read_bytes(path), std::filesystem::last_write_time(path)};
}

// The files under `prefix` that this process still has open although they were deleted
// (/proc/self/fd shows them as "<path> (deleted)").
std::vector<std::string> deleted_but_open(const std::string& prefix) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.starts_with(prefix) && target.ends_with(" (deleted)"))
      found.push_back(target);
  }
  return found;
}

// Designated initialisers would trip GCC's -Wmissing-field-initializers; these do not.
NewRun named(std::string name, std::vector<std::string> tags = {}) {
  NewRun run;
  run.name = std::move(name);
  run.tags = std::move(tags);
  return run;
}

RunFilter filter_at(double now, double stale_after_s) {
  RunFilter f;
  f.now = now;
  f.stale_after_s = stale_after_s;
  return f;
}

std::map<std::string, double> step_values(std::int64_t step, int keys) {
  std::map<std::string, double> values;
  for (int k = 0; k < keys; ++k) values["key" + std::to_string(k)] = step * 100.0 + k;
  return values;
}

// Child-process side: create a running run and log steps until done (or killed). Each
// committed step number is written to report_fd when it is >= 0; pause between steps (a
// training step's time). Returns an exit code.
int write_run(const std::string& path, const char* name, std::int64_t steps, int keys, int ready_fd,
              int report_fd, std::chrono::microseconds pause = {}) {
  auto store = RunStore::open(path);
  if (!store) return 2;
  auto run = (*store)->create_run(named(name));
  if (!run || !(*store)->mark_running(*run)) return 3;
  const char ready = 'r';
  if (ready_fd >= 0 && write(ready_fd, &ready, 1) != 1) return 4;
  for (std::int64_t step = 0; steps < 0 || step < steps; ++step) {
    if (!(*store)->log_step(*run, step, step_values(step, keys))) return 5;
    if (report_fd >= 0 && write(report_fd, &step, sizeof step) != sizeof step) return 6;
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  return (*store)->finish(*run, RunStatus::kFinished) ? 0 : 7;
}

// Forks a process running write_run without reporting steps; returns its pid once its run is
// running, or -1.
pid_t start_writer(const std::string& path, const char* name, std::int64_t steps, int keys,
                   std::chrono::microseconds pause = {}) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    _exit(write_run(path, name, steps, keys, ready[1], -1, pause));
  }
  close(ready[1]);
  char c = 0;
  const bool started = child > 0 && read(ready[0], &c, 1) == 1;
  close(ready[0]);
  return started ? child : -1;
}

}  // namespace

class TestRunStore : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string db_path(const char* name) const { return dir_.filePath(name).toStdString(); }

  // Reads `store` while the writer process `child` (start_writer) runs and until its last row:
  // every step must arrive whole (all `keys`, values as write_run writes them) and in order,
  // and the writer must exit 0. Counts the steps read and the reads.
  void tail_writer(RunStore& store, pid_t child, int keys, std::int64_t* steps_read, int* polls) {
    std::int64_t last_id = 0, next_step = 0;
    int child_status = -1;
    bool child_done = false;
    for (*polls = 0;; ++*polls) {
      auto rows = store.rows_after(last_id);
      QVERIFY2(rows.is_ok(), rows.status().message().c_str());  // never SQLITE_BUSY
      for (std::size_t i = 0; i < rows->size(); i += keys) {
        QVERIFY2(i + keys <= rows->size(), "a step arrived without all of its keys");
        for (int k = 0; k < keys; ++k) {
          const auto& row = (*rows)[i + k];
          QCOMPARE(row.step, next_step);
          QCOMPARE(row.value, next_step * 100.0 + std::stoi(row.key.substr(3)));
        }
        ++next_step;
      }
      *steps_read = next_step;
      if (!rows->empty()) last_id = rows->back().id;
      if (child_done && rows->empty()) break;
      if (!child_done && waitpid(child, &child_status, WNOHANG) == child) child_done = true;
    }
    QVERIFY2(WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0, "writer process failed");
  }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void new_file_gets_the_current_schema_and_reopens_unchanged() {
    const std::string path = db_path("schema.db");
    {
      auto store = open_or_fail(path);
      QVERIFY(store->list_runs()->empty());
    }
    const std::string header = read_bytes(path).substr(0, 100);
    QCOMPARE(header.substr(0, 16), std::string("SQLite format 3\0", 16));
    QCOMPARE(header.substr(68, 4), std::string("LATT"));  // application_id, big-endian
    QCOMPARE(static_cast<int>(header[63]), lattice::storage::kSchemaVersion);  // user_version
    const Snapshot before = snapshot(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    { auto again = open_or_fail(path); }
    QVERIFY2(snapshot(path) == before, "opening an up-to-date database must write nothing");
  }

  void empty_file_is_initialised() {
    const std::string path = db_path("empty.db");
    std::ofstream(path).close();
    auto store = open_or_fail(path);
    QVERIFY(store->create_run(named("first")).is_ok());
  }

  void foreign_sqlite_database_is_refused_untouched() {
    const std::string path = db_path("foreign.db");
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db,
                          "CREATE TABLE photos(id INTEGER PRIMARY KEY, file TEXT);"
                          "INSERT INTO photos(file) VALUES ('a.jpg');",
                          nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(db);
    const Snapshot before = snapshot(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto store = RunStore::open(path);
    QVERIFY(!store.is_ok());
    const std::string& msg = store.status().message();
    QVERIFY2(msg.find("is not a Lattice run database") != std::string::npos, msg.c_str());
    QVERIFY2(msg.find(path) != std::string::npos, msg.c_str());
    QVERIFY(snapshot(path) == before);
    QVERIFY(!std::filesystem::exists(path + "-wal"));
  }

  void empty_foreign_sqlite_database_with_an_application_id_is_refused() {
    const std::string path = db_path("foreign_id.db");
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "PRAGMA application_id = 1234; PRAGMA user_version = 1;", nullptr,
                          nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(db);
    const Snapshot before = snapshot(path);
    QVERIFY(!RunStore::open(path).is_ok());
    QVERIFY(snapshot(path) == before);
  }

  // A writer that asks for the rollback journal on a WAL file that a reader has open cannot
  // switch: it fails with a reason and leaves the file and the reader as they were.
  void rollback_journal_asked_for_while_a_reader_holds_a_wal_file_is_a_clear_error() {
    const std::string path = db_path("wal-held.db");
    {
      lattice::storage::OpenOptions wal;
      wal.journal = lattice::storage::JournalMode::kWal;
      auto created = RunStore::open(path, wal);
      QVERIFY(created.is_ok());
      QVERIFY((*created)->create_run(named("first")).is_ok());
    }
    QCOMPARE(static_cast<int>(read_bytes(path)[18]), 2);
    lattice::storage::OpenOptions read_only;
    read_only.read_only = true;
    auto reader = RunStore::open(path, read_only);
    QVERIFY2(reader.is_ok(), reader.status().message().c_str());
    QCOMPARE((*reader)->list_runs()->size(), size_t{1});

    lattice::storage::OpenOptions rollback;
    rollback.journal = lattice::storage::JournalMode::kDelete;
    auto writer = RunStore::open(path, rollback);
    QVERIFY(!writer.is_ok());
    const std::string message = writer.status().message();
    QVERIFY2(message.find("is in WAL mode and another process has it open") != std::string::npos,
             message.c_str());
    QVERIFY2(message.find(path) != std::string::npos, message.c_str());
    QCOMPARE(static_cast<int>(read_bytes(path)[18]), 2);
    QCOMPARE((*reader)->list_runs()->size(), size_t{1});

    // With the reader gone the switch happens.
    reader = lattice::Status::internal("closed");
    auto alone = RunStore::open(path, rollback);
    QVERIFY2(alone.is_ok(), alone.status().message().c_str());
    QCOMPARE(static_cast<int>(read_bytes(path)[18]), 1);
  }

  void text_file_is_refused_untouched() {
    const std::string path = db_path("notes.txt");
    std::ofstream(path) << "these are my notes, not a database\n";
    const Snapshot before = snapshot(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto store = RunStore::open(path);
    QVERIFY(!store.is_ok());
    const std::string& msg = store.status().message();
    QVERIFY2(msg.find("not an SQLite file") != std::string::npos, msg.c_str());
    QVERIFY(snapshot(path) == before);
  }

  void database_from_a_newer_lattice_is_refused_untouched() {
    const std::string path = db_path("newer.db");
    {
      auto store = open_or_fail(path);
      QVERIFY(store->create_run(named("from the future")).is_ok());
    }
    {  // user_version lives at header offset 60, big-endian; the file is checkpointed.
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(60);
      const char version[4] = {0, 0, 0, 99};
      f.write(version, 4);
    }
    const Snapshot before = snapshot(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto store = RunStore::open(path);
    QVERIFY(!store.is_ok());
    const std::string& msg = store.status().message();
    QVERIFY2(msg.find("newer Lattice (run-store schema 99") != std::string::npos, msg.c_str());
    QVERIFY(snapshot(path) == before);
  }

  void lifecycle_moves_forward_only() {
    auto store = open_or_fail(db_path("lifecycle.db"));
    NewRun spec = named("gpt-small", {"baseline", "cpu"});
    spec.host = "node0";
    spec.command_line = "lattice train";
    spec.config_json = R"({"layers":2})";
    spec.layout = {2, 2, 1};
    spec.world_size = 4;
    spec.parameter_count = 1234;
    const std::int64_t id = store->create_run(spec).value();
    QVERIFY2(!store->create_run(named("gpt-small")).is_ok(), "names are unique");
    QVERIFY2(!store->log_step(id, 0, {{"loss", 1.0}}), "a created run takes no steps");
    QVERIFY2(!store->heartbeat(id), "a created run has no heartbeat");
    QVERIFY(store->mark_running(id).is_ok());
    QVERIFY(!store->mark_running(id).is_ok());
    QVERIFY(store->heartbeat(id).is_ok());
    MemorySample m;
    m.rank = 1;
    m.weights = 10;
    m.peak = 99;
    QVERIFY(store->log_step(id, 1, {{"loss", 3.0}, {"lr", 0.1}}, {m}).is_ok());
    QVERIFY(store->log_step(id, 2, {{"loss", 2.5}}).is_ok());
    QCOMPARE(store->memory_at(id, 1)->at(0).peak, 99);

    auto runs = store->list_runs().value();
    QCOMPARE(runs.size(), std::size_t{1});
    const RunInfo& r = runs[0];
    QCOMPARE(r.status, RunStatus::kRunning);
    QCOMPARE(r.layout.pp, 2);
    QCOMPARE(r.parameter_count, 1234);
    QCOMPARE(r.tags, (std::vector<std::string>{"baseline", "cpu"}));
    QCOMPARE(r.latest.at("loss"), 2.5);
    QCOMPARE(r.latest.at("lr"), 0.1);
    QCOMPARE(*r.latest_step, 2);

    // A running run whose heartbeat is older than stale_after_s reads as crashed.
    RunFilter later = filter_at(*r.heartbeat_at + 61, 60);
    QCOMPARE(store->list_runs(later)->at(0).status, RunStatus::kCrashed);
    later.status = RunStatus::kCrashed;
    QCOMPARE(store->list_runs(later)->size(), std::size_t{1});
    later.status = RunStatus::kRunning;
    QVERIFY(store->list_runs(later)->empty());

    QVERIFY(store->finish(id, RunStatus::kFinished).is_ok());
    QVERIFY2(!store->finish(id, RunStatus::kFailed, "late").is_ok(), "finished is final");
    QVERIFY(!store->log_step(id, 3, {{"loss", 1.0}}).is_ok());
    QCOMPARE(store->list_runs(later)->size(), std::size_t{0});

    const std::int64_t failed = store->create_run(named("bad-config", {"cpu"})).value();
    QVERIFY2(!store->finish(failed, RunStatus::kCrashed).is_ok(), "crashed is never stored");
    QVERIFY(store->finish(failed, RunStatus::kFailed, "out of memory on rank 3").is_ok());
    QVERIFY(store->record_checkpoint(id, {2, "/ckpt/2", 5}).is_ok());
    QVERIFY(store->log_message(id, "info", 0, "done").is_ok());

    RunFilter f;
    f.name_contains = "config";
    QCOMPARE(store->list_runs(f)->at(0).error, std::string("out of memory on rank 3"));
    f = {};
    f.tag = "cpu";
    QCOMPARE(store->list_runs(f)->size(), std::size_t{2});
    f.tag = "baseline";
    QCOMPARE(store->list_runs(f)->size(), std::size_t{1});
    f = {};
    f.status = RunStatus::kFailed;
    QCOMPARE(store->list_runs(f)->at(0).name, std::string("bad-config"));
    QVERIFY(store->check_integrity().is_ok());
  }

  void downsample_keeps_extremes_and_the_last_value() {
    auto store = open_or_fail(db_path("downsample.db"));
    const std::int64_t id = store->create_run(named("series")).value();
    QVERIFY(store->mark_running(id).is_ok());
    const std::int64_t steps = 10007;  // not a multiple of the bucket count
    for (std::int64_t s = 1; s <= steps; ++s) {
      double v = std::sin(s * 0.01) + (s % 97 == 0 ? 50.0 : 0.0) - (s % 1013 == 0 ? 80.0 : 0.0);
      QVERIFY(store->log_step(id, s, {{"loss", v}}).is_ok());
    }
    const std::int64_t first = 5, last = 9000;
    const int n = 333;
    const auto points = store->series(id, "loss", first, last).value();
    QCOMPARE(points.size(), std::size_t(last - first + 1));
    const auto buckets = store->downsample(id, "loss", first, last, n).value();
    // Reference: the same bucket rule applied to the plain series in C++.
    std::map<std::int64_t, Bucket> expected;
    for (const auto& p : points) {
      const std::int64_t b = (p.step - first) * n / (last - first + 1);
      auto [it, fresh] =
          expected.try_emplace(b, Bucket{p.step, p.step, p.value, p.value, p.value, 0});
      Bucket& e = it->second;
      e.last_step = p.step;
      e.min = std::min(e.min, p.value);
      e.max = std::max(e.max, p.value);
      e.last = p.value;
      e.count++;
    }
    QCOMPARE(buckets.size(), expected.size());
    QCOMPARE(buckets.size(), std::size_t(n));
    std::size_t i = 0;
    for (const auto& [b, e] : expected) {
      const Bucket& got = buckets[i++];
      const QByteArray where = QByteArray("bucket ") + QByteArray::number(qlonglong(b));
      QVERIFY2(got.first_step == e.first_step && got.last_step == e.last_step, where);
      QVERIFY2(got.min == e.min && got.max == e.max, where + " min/max");
      QVERIFY2(got.last == e.last, where + " last");
      QVERIFY2(got.count == e.count, where + " count");
    }
    auto by_value = [](const auto& a, const auto& b) { return a.value < b.value; };
    const double global_max = std::max_element(points.begin(), points.end(), by_value)->value;
    const double global_min = std::min_element(points.begin(), points.end(), by_value)->value;
    QCOMPARE(std::max_element(buckets.begin(), buckets.end(),
                              [](auto& a, auto& b) { return a.max < b.max; })
                 ->max,
             global_max);
    QCOMPARE(std::min_element(buckets.begin(), buckets.end(),
                              [](auto& a, auto& b) { return a.min < b.min; })
                 ->min,
             global_min);
    QCOMPARE(buckets.back().last, points.back().value);
    QVERIFY(store->downsample(id, "no such key", first, last, n)->empty());
    QVERIFY(!store->downsample(id, "loss", last, first, n).is_ok());
  }

  void capped_tail_never_splits_a_step() {
    auto store = open_or_fail(db_path("cap.db"));
    const std::int64_t id = store->create_run(named("cap")).value();
    QVERIFY(store->mark_running(id).is_ok());
    for (int s = 0; s < 10; ++s) QVERIFY(store->log_step(id, s, step_values(s, 7)).is_ok());
    std::int64_t last = 0;
    std::size_t total = 0;
    for (;;) {
      const auto rows = store->rows_after(last, id, 10).value();
      if (rows.empty()) break;
      QCOMPARE(rows.size(), std::size_t{7});  // one whole step fits under a cap of 10
      total += rows.size();
      last = rows.back().id;
    }
    QCOMPARE(total, std::size_t{70});
  }

  void log_steps_commits_several_steps_at_once() {
    auto store = open_or_fail(db_path("grouped.db"));
    const std::int64_t id = store->create_run(named("grouped")).value();
    QVERIFY(!store->log_steps(id, {{0, {{"loss", 1.0}}, {}}}).is_ok());  // not running yet
    QVERIFY(store->mark_running(id).is_ok());
    std::vector<lattice::storage::StepRecord> batch;
    for (int s = 0; s < 5; ++s) batch.push_back({s, step_values(s, 3), {}});
    QVERIFY(store->log_steps(id, batch).is_ok());
    QCOMPARE(store->rows_after(0, id)->size(), std::size_t{15});
    QCOMPARE(*store->list_runs()->at(0).latest_step, 4);
  }

  void a_commit_window_groups_tiny_steps_and_readers_still_see_whole_steps() {
    const std::string path = db_path("window.db");
    auto writer = open_or_fail(path);
    auto reader = open_or_fail(path);
    const std::int64_t id = writer->create_run(named("windowed")).value();
    QVERIFY(writer->mark_running(id).is_ok());
    // A window far longer than this test: only the first step commits by itself.
    writer->set_commit_window(std::chrono::seconds(3600));
    for (int s = 0; s < 6; ++s) QVERIFY(writer->log_step(id, s, step_values(s, 4)).is_ok());
    QCOMPARE(reader->rows_after(0, id)->size(), std::size_t{4});  // step 0 only
    QVERIFY(writer->flush().is_ok());
    QCOMPARE(reader->rows_after(0, id)->size(), std::size_t{24});  // steps 0..5, whole
    QVERIFY(writer->log_step(id, 6, step_values(6, 4)).is_ok());   // held: committed just now
    QCOMPARE(reader->rows_after(0, id)->size(), std::size_t{24});
    QVERIFY2(writer->finish(id, RunStatus::kFinished).is_ok(), "finish commits held steps first");
    QCOMPARE(reader->rows_after(0, id)->size(), std::size_t{28});
    QCOMPARE(*reader->list_runs()->at(0).latest_step, 6);
    QCOMPARE(reader->list_runs()->at(0).status, RunStatus::kFinished);

    const std::int64_t second = writer->create_run(named("closed")).value();
    QVERIFY(writer->mark_running(second).is_ok());
    QVERIFY(writer->log_step(second, 0, step_values(0, 2)).is_ok());
    QVERIFY(writer->log_step(second, 1, step_values(1, 2)).is_ok());  // held
    writer.reset();  // destruction commits what is held
    QCOMPARE(reader->rows_after(0, second)->size(), std::size_t{4});
  }

  void reader_tails_another_process_writing_and_sees_whole_steps() {
    const std::string path = db_path("tail.db");
    const std::int64_t steps = 3000;
    const pid_t child = start_writer(path, "tailed", steps, 20);
    QVERIFY(child > 0);
    auto store = open_or_fail(path);
    std::int64_t read_steps = 0;
    int polls = 0;
    tail_writer(*store, child, 20, &read_steps, &polls);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(read_steps, steps);
    QVERIFY2(polls > 10, "the reader should have polled while the writer was writing");
    QCOMPARE(store->list_runs()->at(0).status, RunStatus::kFinished);
  }

  // Note "header through the VFS" (storage/src/file_header.h), as the Studio lives it: the
  // Dashboard holds a store open while the Launch view opens and closes one per poll, and
  // `lattice train` processes come and go. A writer process that ends must find the reader's
  // lock, so it neither checkpoints nor deletes -wal and -shm under the reader, and the
  // reader must see every run. (A header read that closes its own descriptor drops the lock.)
  void a_reader_holding_the_store_sees_every_writer_process_and_keeps_its_wal() {
    const std::string path = db_path("held.db");
    { auto created = open_or_fail(path); }
    lattice::storage::OpenOptions read_only;
    read_only.read_only = true;
    auto held = RunStore::open(path, read_only);
    QVERIFY2(held.is_ok(), held.status().message().c_str());
    QVERIFY((*held)->list_runs()->empty());
    // One poll of the Launch view: a connection of its own, opened and closed.
    auto poll = [&](const char* name) {
      auto store = RunStore::open(path, read_only);
      if (!store) {
        qWarning("poll: %s", store.status().message().c_str());
        return false;
      }
      static_cast<void>((*store)->find_run(name));  // absent until the writer creates it
      return true;
    };
    for (const char* name : {"first", "second"}) {
      QVERIFY(poll(name));
      QProcess writer;
      writer.start(LATTICE_RUN_WRITER, {QString::fromStdString(path), name, "40", "2"});
      QVERIFY2(writer.waitForStarted(), qPrintable(writer.errorString()));
      while (!writer.waitForFinished(20)) QVERIFY(poll(name));
      QVERIFY2(writer.exitStatus() == QProcess::NormalExit && writer.exitCode() == 0,
               writer.readAllStandardError().constData());
      QVERIFY2(
          std::filesystem::exists(path + "-wal") && std::filesystem::exists(path + "-shm"),
          qPrintable(QString("writer '%1' deleted -wal/-shm under the open reader").arg(name)));
      const std::vector<std::string> deleted = deleted_but_open(path);
      QVERIFY2(deleted.empty(), deleted.empty() ? "" : ("still mapped: " + deleted[0]).c_str());
      auto run = (*held)->find_run(name);
      QVERIFY2(run.is_ok(), qPrintable(QString("the reader does not see run '%1': %2")
                                           .arg(name, run.status().message().c_str())));
      QCOMPARE(run->status, RunStatus::kFinished);
      QCOMPARE(run->latest_step.value_or(-1), std::int64_t{39});
      QCOMPARE((*held)->series(run->id, "lm loss", 0, 39)->size(), std::size_t{40});
    }
    QCOMPARE((*held)->list_runs()->size(), std::size_t{2});
    QVERIFY2((*held)->check_integrity().is_ok(), (*held)->check_integrity().message().c_str());
  }

  // The Studio following a cluster job's store: read-only, in the rollback journal the job
  // uses on shared storage, while the job writes.
  void read_only_follower_tails_a_rollback_journal_writer_and_never_writes() {
    lattice::storage::OpenOptions read_only;
    read_only.read_only = true;
    const std::string missing = db_path("ro-missing.db");
    QVERIFY(!RunStore::open(missing, read_only).is_ok());
    QVERIFY2(!std::filesystem::exists(missing), "a read-only open created the file");
    const std::string empty = db_path("ro-empty.db");
    std::ofstream(empty).close();
    auto not_yet = RunStore::open(empty, read_only);
    QVERIFY(!not_yet.is_ok());
    QVERIFY2(not_yet.status().message().find("has not started") != std::string::npos,
             not_yet.status().message().c_str());
    QCOMPARE(std::filesystem::file_size(empty), std::uintmax_t{0});

    const std::string path = db_path("ro-follow.db");
    {
      lattice::storage::OpenOptions rollback;
      rollback.journal = lattice::storage::JournalMode::kDelete;
      auto created = RunStore::open(path, rollback);
      QVERIFY(created.is_ok());
    }
    // A rollback-journal writer committing back to back (no pause) can starve a reader past
    // its 10 s busy timeout on a loaded machine: every commit blocks new readers. A training
    // step takes milliseconds at least, so the writer pauses 2 ms between steps.
    const std::int64_t steps = 600;
    const pid_t child = start_writer(path, "followed", steps, 5, std::chrono::milliseconds(2));
    QVERIFY(child > 0);
    auto follower = RunStore::open(path, read_only);
    QVERIFY2(follower.is_ok(), follower.status().message().c_str());
    RunStore& store = **follower;
    auto write = store.create_run(named("from the follower"));
    QVERIFY2(!write.is_ok(), "a read-only store accepted a new run");
    std::int64_t read_steps = 0;
    int polls = 0;
    tail_writer(store, child, 5, &read_steps, &polls);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(read_steps, steps);
    QCOMPARE(store.list_runs()->at(0).status, RunStatus::kFinished);
    QCOMPARE(static_cast<int>(read_bytes(path)[18]), 1);  // still the rollback journal

    // A database of an older schema is not upgraded by a read-only open: refused, untouched.
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(60);
      const char version[4] = {0, 0, 0, 1};
      f.write(version, 4);
    }
    const Snapshot before = snapshot(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto older = RunStore::open(path, read_only);
    QVERIFY(!older.is_ok());
    QVERIFY2(older.status().message().find("run-store schema 1") != std::string::npos,
             older.status().message().c_str());
    QVERIFY(snapshot(path) == before);
  }

  void writer_killed_mid_run_leaves_every_committed_step() {
    const std::string path = db_path("crash.db");
    const int keys = 20;
    int report[2];
    QCOMPARE(pipe(report), 0);
    const pid_t child = fork();
    QVERIFY(child >= 0);
    if (child == 0) {
      close(report[0]);
      _exit(write_run(path, "doomed", -1, keys, -1, report[1]));
    }
    close(report[1]);
    std::int64_t committed = -1, step = 0;
    while (committed < 500 && read(report[0], &step, sizeof step) == sizeof step) {
      committed = step;
    }
    QCOMPARE(kill(child, SIGKILL), 0);
    int status = 0;
    QCOMPARE(waitpid(child, &status, 0), child);
    QVERIFY(WIFSIGNALED(status));
    while (read(report[0], &step, sizeof step) == sizeof step) committed = step;
    close(report[0]);
    QVERIFY(committed >= 500);

    auto store = open_or_fail(path);
    QVERIFY2(store->check_integrity().is_ok(), store->check_integrity().message().c_str());
    const RunInfo run = store->list_runs(filter_at(4e9, 0.0))->at(0);
    QCOMPARE(run.status, RunStatus::kCrashed);
    QVERIFY(*run.latest_step >= committed);
    for (int k = 0; k < keys; ++k) {
      const auto points = store->series(run.id, "key" + std::to_string(k), 0, committed).value();
      QCOMPARE(points.size(), std::size_t(committed + 1));
      QCOMPARE(points.back().step, committed);
    }
    const auto rows = store->rows_after(0, run.id).value();
    QCOMPARE(rows.size() % keys, std::size_t{0});  // no partial step survived either
  }
};

QTEST_GUILESS_MAIN(TestRunStore)
#include "test_run_store.moc"
