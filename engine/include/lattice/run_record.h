// Recording a training run in the run store (storage/): a MetricsSink that writes one
// transaction per logged step, and a sink that fans out to several (console + store).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/status.h"
#include "lattice/train.h"

namespace lattice {

// Forwards every event to each sink in order.
class TeeSink : public MetricsSink {
 public:
  explicit TeeSink(std::vector<MetricsSink*> sinks) : sinks_(std::move(sinks)) {}
  void on_start(const RunStart& s) override;
  void on_iteration(const IterationMetrics& m) override;
  void on_validation(const ValidationMetrics& v) override;
  void on_task_scores(const std::vector<TaskScoreMetrics>& scores) override;
  void on_message(const std::string& m) override;
  void on_rank_reports(int iteration, const std::vector<RankReport>& ranks) override;
  void on_instability(const InstabilityEvent& e) override;
  void on_checkpoint(int iteration, const std::string& path, int64_t bytes,
                     double seconds) override;
  void on_end(const TrainSummary& s) override;

 private:
  std::vector<MetricsSink*> sinks_;
};

// The metric key of an MoE layer's routes per expert on a logged iteration (IterationMetrics::
// moe_expert_load), "moe load/layer 2/expert 3" (global layer and expert, from 0), and its
// inverse: false for any other key.
std::string moe_load_key(int layer, int expert);
bool parse_moe_load_key(std::string_view key, int* layer, int* expert);

// How a RunRecorder writes: `lattice train`'s --db-* flags.
struct RecorderOptions {
  std::string journal_mode = "auto";  // --db-journal-mode: auto | wal | delete
  // --db-heartbeat-interval: a timer writes the heartbeat this often while the run lives, and
  // retries a failing store as often. Readers show a running run crashed after 60 s without.
  double heartbeat_seconds = 10;
  bool required = false;  // --db-required: a failed write stops training (request_stop)
  // Steps kept in memory while the store fails, to be written when it works again; later
  // steps are counted as not recorded.
  std::size_t max_unrecorded_steps = 10000;
  // Receives one line for the console when recording fails and when it works again. Called
  // with the recorder's lock held, from the caller's thread or the recorder's timer thread.
  std::function<void(const std::string&)> report;
  // --load: the checkpoint (its iter_NNNNNNN directory) the run resumes from, and its step.
  // The run of this database that saved it becomes the new run's parent (RunStore::
  // run_lineage); a checkpoint no run here recorded leaves the run without one.
  std::string resumed_from;
  int64_t resumed_step = 0;
};

// Records one run: created and marked running by open(), every iteration and validation
// logged as a step, finished by on_end(); fail() marks it failed with the error, killed()
// marks it killed. A timer thread writes the heartbeat every heartbeat_seconds whatever the
// trainer is doing (a long save, a slow evaluation, a slow first iteration), and commits
// the steps the store's commit window holds, so a live run is never shown crashed.
//
// Note [recording through a full disk]: a write that fails (a full disk, an I/O error) is
// reported at once through RecorderOptions::report, naming the file and the error. Training
// goes on (with `required` it stops at the next iteration instead); the steps are kept in
// memory, up to max_unrecorded_steps, and the timer retries every heartbeat_seconds,
// writing them all when the store works again. The end writes the correct status; steps that
// were never written are counted in the run's error text ("N steps (from A to B) were not
// recorded: ..."), and status() says what the record lacks.
//
// The sink methods, fail() and killed() are called from one thread (the trainer's); the
// recorder serialises them with its timer.
class RunRecorder : public MetricsSink {
 public:
  // Opens (creating the file and its directory if needed) the database at `db_path` and
  // creates the run. Errors name the file (a foreign or newer database is refused untouched),
  // the directory that cannot be created or written, or the duplicate run name.
  static Result<std::unique_ptr<RunRecorder>> open(
      const std::string& db_path, const std::string& run_name, const std::vector<std::string>& tags,
      const std::string& command_line, const std::string& config_json, int64_t parameters,
      int world_size = 1, int tp = 1, int pp = 1, int dp = 1, RecorderOptions options = {});
  ~RunRecorder() override;
  void on_iteration(const IterationMetrics& m) override;
  void on_validation(const ValidationMetrics& v) override;
  // Metrics "task acc" and "task acc_norm" (the mean over the tasks, what the Studio plots)
  // and "task <file> acc" / "task <file> acc_norm" per task.
  void on_task_scores(const std::vector<TaskScoreMetrics>& scores) override;
  // Every rank's memory (memory samples) and phase times (metrics "rank R <phase> time").
  void on_rank_reports(int iteration, const std::vector<RankReport>& ranks) override;
  void on_instability(const InstabilityEvent& e) override;
  void on_checkpoint(int iteration, const std::string& path, int64_t bytes,
                     double seconds) override;
  void on_end(const TrainSummary& s) override;
  void fail(const std::string& error);
  void killed();
  // After the end: ok when the record is complete; otherwise what it lacks (steps not
  // recorded, a final status that could not be written), naming the file.
  const Status& status() const { return status_; }
  // With RecorderOptions::required: whether a failed write made this recorder stop training.
  bool stopped_training() const;
  const std::string& run_name() const { return run_name_; }
  // "resumed from run NAME at step N" when open() found the parent of RecorderOptions::
  // resumed_from, "resumed from a checkpoint no run of this database recorded" when it did
  // not; empty for a run that did not resume.
  const std::string& lineage_note() const { return lineage_note_; }

 private:
  struct Impl;
  explicit RunRecorder(std::unique_ptr<Impl> impl, std::string run_name);
  // Stops the timer thread (before the end's writes, which then need no lock).
  void stop_timer();
  std::unique_ptr<Impl> impl_;
  std::string run_name_;
  std::string lineage_note_;
  Status status_;
};

// $LATTICE_DATA_DIR/runs.sqlite (default_data_dir() in lattice/data.h).
std::string default_run_db();
// "run-YYYYmmdd-HHMMSS-xxxx": unique enough for one user's database.
std::string default_run_name();

}  // namespace lattice
