// Recording a training run in the run store (storage/): a MetricsSink that writes one
// transaction per logged step, and a sink that fans out to several (console + store).
#pragma once

#include <memory>
#include <string>
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
  void on_message(const std::string& m) override;
  void on_rank_reports(int iteration, const std::vector<RankReport>& ranks) override;
  void on_checkpoint(int iteration, const std::string& path, int64_t bytes,
                     double seconds) override;
  void on_end(const TrainSummary& s) override;

 private:
  std::vector<MetricsSink*> sinks_;
};

// Records one run: created and marked running by open(), every iteration and validation
// logged as a step, finished by on_end(); fail() marks it failed with the error, killed()
// marks it killed. Store errors during training do not stop training: the first one is kept
// and reported by status().
class RunRecorder : public MetricsSink {
 public:
  // Opens (creating if needed) the database at `db_path` and creates the run. Errors name the
  // file (a foreign or newer database is refused untouched) or the duplicate run name.
  static Result<std::unique_ptr<RunRecorder>> open(
      const std::string& db_path, const std::string& run_name, const std::vector<std::string>& tags,
      const std::string& command_line, const std::string& config_json, int64_t parameters,
      int world_size = 1, int tp = 1, int pp = 1, int dp = 1,
      const std::string& journal_mode = "auto");  // --db-journal-mode: auto | wal | delete
  ~RunRecorder() override;
  void on_iteration(const IterationMetrics& m) override;
  void on_validation(const ValidationMetrics& v) override;
  // Every rank's memory (memory samples) and phase times (metrics "rank R <phase> time").
  void on_rank_reports(int iteration, const std::vector<RankReport>& ranks) override;
  void on_checkpoint(int iteration, const std::string& path, int64_t bytes,
                     double seconds) override;
  void on_end(const TrainSummary& s) override;
  void fail(const std::string& error);
  void killed();
  const Status& status() const { return status_; }
  const std::string& run_name() const { return run_name_; }

 private:
  struct Impl;
  explicit RunRecorder(std::unique_ptr<Impl> impl, std::string run_name);
  void keep(const Status& s);
  std::unique_ptr<Impl> impl_;
  std::string run_name_;
  Status status_;
};

// $LATTICE_DATA_DIR/runs.sqlite (default_data_dir() in lattice/data.h).
std::string default_run_db();
// "run-YYYYmmdd-HHMMSS-xxxx": unique enough for one user's database.
std::string default_run_name();

}  // namespace lattice
