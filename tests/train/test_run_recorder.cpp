// RunRecorder, the engine's writer of the run store, under faults, in this process: its
// heartbeat comes from a timer, not from logged steps; a full disk (RLIMIT_FSIZE on this
// process, SIGXFSZ ignored, so that a write past the limit fails as on a full disk) is said
// once, the steps are kept and written when space returns, and the end marks the run
// honestly. `lattice train` under the same faults: tests/cli/test_train_store_faults.cpp.
#include <QtTest/QtTest>

#include <sys/resource.h>

#include <QTemporaryDir>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lattice/run_record.h"
#include "lattice/storage/run_store.h"

namespace {

using lattice::RecorderOptions;
using lattice::RunRecorder;
using lattice::storage::RunFilter;
using lattice::storage::RunInfo;
using lattice::storage::RunStatus;
using lattice::storage::RunStore;

// Every file this process writes past `bytes` fails (EFBIG) until lift() or destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &saved_);
    const rlimit limit{bytes, saved_.rlim_max};
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() { lift(); }
  void lift() { setrlimit(RLIMIT_FSIZE, &saved_); }

 private:
  rlimit saved_{};
};

// The size of the database's WAL: a limit there leaves no room for the next commit.
rlim_t wal_bytes(const std::string& db) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(db + "-wal", ec);
  if (ec || size == 0) qFatal("%s-wal: no WAL to fill", db.c_str());
  return static_cast<rlim_t>(size);
}

lattice::IterationMetrics iteration(int it) {
  lattice::IterationMetrics m;
  m.iteration = it;
  m.lm_loss = 10.0 - 0.01 * it;
  m.learning_rate = 1e-3;
  return m;
}

lattice::TrainSummary summary(int iterations) {
  lattice::TrainSummary s;
  s.losses.assign(static_cast<std::size_t>(iterations), 1.0);
  return s;
}

// The one run of the database at `db`, as a reader in another connection sees it, with
// running runs `stale_after_s` without a heartbeat read as crashed.
RunInfo read_run(const std::string& db, double stale_after_s = 60) {
  auto store = RunStore::open(db);
  if (!store) qFatal("%s", store.status().message().c_str());
  RunFilter filter;
  filter.stale_after_s = stale_after_s;
  std::vector<RunInfo> runs = (*store)->list_runs(filter).value();
  if (runs.size() != 1) qFatal("%zu runs in %s", runs.size(), db.c_str());
  return runs[0];
}

// The steps of the run's "lm loss" series.
std::vector<std::int64_t> loss_steps(const std::string& db) {
  auto store = RunStore::open(db);
  std::vector<std::int64_t> steps;
  const auto series = (*store)->series(read_run(db).id, "lm loss", 0, 1 << 30);
  for (const auto& p : series.value()) steps.push_back(p.step);
  return steps;
}

std::vector<std::int64_t> range(std::int64_t first, std::int64_t last) {
  std::vector<std::int64_t> r;
  for (std::int64_t s = first; s <= last; s++) r.push_back(s);
  return r;
}

// The lines a recorder reports, from this thread or its timer thread.
class Lines {
 public:
  void add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex_);
    lines_.push_back(line);
  }
  std::vector<std::string> get() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

struct Recording {
  std::unique_ptr<RunRecorder> recorder;
  std::shared_ptr<Lines> lines = std::make_shared<Lines>();
};

Recording open_recorder(const std::string& db, RecorderOptions options) {
  Recording r;
  options.journal_mode = "wal";  // the WAL is what the tests fill, wherever the temporary dir is
  options.report = [lines = r.lines](const std::string& line) { lines->add(line); };
  auto opened = RunRecorder::open(db, "faulty", {}, "lattice train", "{}", 1000, 1, 1, 1, 1,
                                  std::move(options));
  if (!opened) qFatal("%s", opened.status().message().c_str());
  r.recorder = std::move(*opened);
  return r;
}

int count_containing(const std::vector<std::string>& lines, const std::string& text) {
  int n = 0;
  for (const std::string& l : lines) n += l.find(text) != std::string::npos;
  return n;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

// Logs iterations from `*next` on until the recorder reports a failure (at most 10 s: steps
// logged faster than the 2 ms commit window are held, and only a commit fails).
void log_until_reported(Recording& r, int* next) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (r.lines->get().empty() && std::chrono::steady_clock::now() < give_up)
    r.recorder->on_iteration(iteration((*next)++));
}

// Waits up to 20 s for a report line containing `text` (the timer thread writes it).
bool wait_for_line(Recording& r, const std::string& text) {
  for (int i = 0; i < 200; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (count_containing(r.lines->get(), text) > 0) return true;
  }
  return false;
}

}  // namespace

class RunRecorderFaults : public QObject {
  Q_OBJECT
 private slots:
  void a_run_with_no_step_for_longer_than_the_stale_age_keeps_a_fresh_heartbeat() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RecorderOptions options;
    options.heartbeat_seconds = 0.2;
    Recording r = open_recorder(db, options);
    r.recorder->on_iteration(iteration(1));
    // A long save or evaluation: no step for three times the stale age the reader uses.
    for (int poll = 0; poll < 30; poll++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const RunInfo run = read_run(db, /*stale_after_s=*/1.0);
      QVERIFY2(run.status == RunStatus::kRunning,
               qPrintable(QString("shown %1 %2 s after the last step")
                              .arg(lattice::storage::run_status_name(run.status))
                              .arg(0.1 * (poll + 1))));
    }
    r.recorder->on_end(summary(1));
    QVERIFY2(r.recorder->status().is_ok(), r.recorder->status().message().c_str());
    QCOMPARE(read_run(db).status, RunStatus::kFinished);
  }

  void a_full_disk_is_reported_once_and_the_kept_steps_are_written_when_space_returns() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RecorderOptions options;
    options.heartbeat_seconds = 0.2;
    Recording r = open_recorder(db, options);
    int next = 1;
    for (; next <= 3; next++) r.recorder->on_iteration(iteration(next));
    FileSizeLimit full(wal_bytes(db));
    log_until_reported(r, &next);
    QVERIFY2(r.lines->get().size() == 1, joined(r.lines->get()).c_str());
    const std::string line = r.lines->get().front();
    QVERIFY2(line.find(db) != std::string::npos, line.c_str());  // names the file
    QVERIFY2(line.find("training goes on") != std::string::npos, line.c_str());
    const int failed_at = next - 1;
    // Training goes on while the disk stays full: not another word per step.
    for (int i = 0; i < 50; i++) r.recorder->on_iteration(iteration(next++));
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // the timer retries, quietly
    QVERIFY2(r.lines->get().size() == 1, joined(r.lines->get()).c_str());
    QVERIFY2(loss_steps(db).back() < failed_at, "a step after the failure reached the disk");

    full.lift();  // space returns
    QVERIFY2(wait_for_line(r, "records again"), joined(r.lines->get()).c_str());
    const std::string again = r.lines->get().back();
    QVERIFY2(again.find("wrote the") != std::string::npos, again.c_str());
    const int last = next;
    r.recorder->on_iteration(iteration(next));
    r.recorder->on_end(summary(last));
    QVERIFY2(r.recorder->status().is_ok(), r.recorder->status().message().c_str());
    const RunInfo run = read_run(db);
    QCOMPARE(run.status, RunStatus::kFinished);
    QVERIFY2(run.error.empty(), run.error.c_str());
    QVERIFY(loss_steps(db) == range(1, last));  // every step, once, in order
  }

  void steps_beyond_the_memory_bound_are_counted_in_the_run_record() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RecorderOptions options;
    options.heartbeat_seconds = 0.2;
    options.max_unrecorded_steps = 5;
    Recording r = open_recorder(db, options);
    r.recorder->on_iteration(iteration(1));
    FileSizeLimit full(wal_bytes(db));
    int next = 2;
    log_until_reported(r, &next);
    QVERIFY2(!r.lines->get().empty(), "no report of the failure");
    const std::vector<std::int64_t> before = loss_steps(db);
    const std::int64_t first_unwritten = before.back() + 1;
    for (int i = 0; i < 20; i++) r.recorder->on_iteration(iteration(next++));
    const std::int64_t last = next - 1;
    full.lift();
    QVERIFY2(wait_for_line(r, "records again"), joined(r.lines->get()).c_str());
    r.recorder->on_end(summary(static_cast<int>(last)));
    // Kept: the five steps from the failure on; the rest up to `last` did not fit.
    const std::int64_t first_lost = first_unwritten + 5, lost = last - first_lost + 1;
    const std::string note = std::to_string(lost) + " steps (from " + std::to_string(first_lost) +
                             " to " + std::to_string(last) + ") were not recorded";
    const RunInfo run = read_run(db);
    QCOMPARE(run.status, RunStatus::kFinished);
    QVERIFY2(run.error.find(note) != std::string::npos, (run.error + " lacks " + note).c_str());
    QVERIFY2(run.error.find(db) != std::string::npos, run.error.c_str());  // and the cause
    QVERIFY(!r.recorder->status().is_ok());
    QVERIFY2(r.recorder->status().message().find(note) != std::string::npos,
             r.recorder->status().message().c_str());
    std::vector<std::int64_t> expected = range(1, first_lost - 1);
    QVERIFY(loss_steps(db) == expected);
  }

  void space_that_returns_before_the_end_takes_every_kept_step() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RecorderOptions options;
    options.heartbeat_seconds = 30;  // no retry by the timer within this test
    Recording r = open_recorder(db, options);
    r.recorder->on_iteration(iteration(1));
    FileSizeLimit full(wal_bytes(db));
    int next = 2;
    log_until_reported(r, &next);
    for (int i = 0; i < 100; i++) r.recorder->on_iteration(iteration(next++));
    full.lift();
    const int last = next - 1;
    r.recorder->on_end(summary(last));
    QVERIFY2(r.recorder->status().is_ok(), r.recorder->status().message().c_str());
    const RunInfo run = read_run(db);
    QCOMPARE(run.status, RunStatus::kFinished);
    QVERIFY2(run.error.empty(), run.error.c_str());
    QVERIFY(loss_steps(db) == range(1, last));
  }

  void a_disk_full_to_the_end_is_said_with_what_the_record_lacks() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RecorderOptions options;
    options.heartbeat_seconds = 0.2;
    Recording r = open_recorder(db, options);
    r.recorder->on_iteration(iteration(1));
    int last = 0;
    {
      FileSizeLimit full(wal_bytes(db));  // not a byte more: not even the final status fits
      int next = 2;
      log_until_reported(r, &next);
      for (int i = 0; i < 100; i++) r.recorder->on_iteration(iteration(next++));
      last = next - 1;
      r.recorder->on_end(summary(last));
    }
    const lattice::Status& end = r.recorder->status();
    QVERIFY(!end.is_ok());
    const std::string lacks = std::to_string(last - 1) + " steps (from 2 to " +
                              std::to_string(last) + ") were not recorded: " + db;
    for (const std::string& part : {std::string("could not be marked finished: ") + db,
                                    std::string("show as crashed"), lacks})
      QVERIFY2(end.message().find(part) != std::string::npos,
               (end.message() + " lacks " + part).c_str());
    QVERIFY(loss_steps(db) == range(1, 1));
  }

  void with_required_a_failed_write_stops_training() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RecorderOptions options;
    options.required = true;
    Recording r = open_recorder(db, options);
    r.recorder->on_iteration(iteration(1));
    QVERIFY(!r.recorder->stopped_training());
    FileSizeLimit full(wal_bytes(db));
    int next = 2;
    log_until_reported(r, &next);
    QVERIFY2(r.recorder->stopped_training(), joined(r.lines->get()).c_str());
    QVERIFY(lattice::stop_requested());  // train() stops before its next iteration
    const std::string line = r.lines->get().front();
    QVERIFY2(line.find("--db-required") != std::string::npos, line.c_str());
    full.lift();
    r.recorder->fail("stopped because the run database could not be written (--db-required)");
    QVERIFY2(r.recorder->status().is_ok(), r.recorder->status().message().c_str());
    const RunInfo run = read_run(db);
    QCOMPARE(run.status, RunStatus::kFailed);
    QVERIFY2(run.error.find("--db-required") != std::string::npos, run.error.c_str());
    QCOMPARE(static_cast<int>(loss_steps(db).size()), next - 1);  // kept, then written at the end
  }
};

QTEST_GUILESS_MAIN(RunRecorderFaults)
#include "test_run_recorder.moc"
