// The run store: every run, its metrics, memory samples, timeline, logs and checkpoints in
// one SQLite database (WAL) that the Studio tails live and compares later. One writer per
// run (the engine's rank 0), any number of reader processes. Not a metrics server: no
// network, no retention policy, no aggregation beyond the plot down-sampling below.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lattice/status.h"

namespace lattice::storage {

// PRAGMA user_version this build writes; a database with a larger one is refused. Version 2
// added the metric_blocks summaries behind downsample(), version 3 the runs_listed index
// behind list_runs without configs, version 4 the run_parents table behind run_lineage.
inline constexpr int kSchemaVersion = 4;
// PRAGMA application_id of every Lattice run database ("LATT").
inline constexpr std::int32_t kApplicationId = 0x4C415454;

// Stored statuses are created, running, finished, failed and killed. kCrashed is never
// stored: readers report it for a running run whose heartbeat is older than the filter's
// stale_after_s.
enum class RunStatus { kCreated, kRunning, kFinished, kFailed, kKilled, kCrashed };
const char* run_status_name(RunStatus status);
std::optional<RunStatus> parse_run_status(std::string_view name);

// How the database keeps its journal. WAL (the default) lets readers and the writer work at
// once, but needs shared memory between them, so it is unsafe when they sit on different
// hosts of a network filesystem (a cluster job and the Studio following it): there the
// rollback journal (kDelete) is the safe choice. kAuto keeps the mode an existing database
// has, and gives a new one kDelete on a network filesystem (on_network_filesystem) and kWal
// elsewhere.
enum class JournalMode { kAuto, kWal, kDelete };
std::optional<JournalMode> parse_journal_mode(std::string_view name);  // auto, wal, delete
// Whether the directory holding `path` is on NFS, Lustre, GPFS, CIFS/SMB, CephFS, BeeGFS and
// the like (statfs magic numbers); false when it cannot tell.
bool on_network_filesystem(const std::string& path);

struct OpenOptions {
  JournalMode journal = JournalMode::kAuto;
  // For following a database another process writes (a cluster job's store on shared
  // storage): SQLite opens the file read-only and nothing is created, migrated or
  // re-journaled (journal is ignored). A missing or empty file, or one of an older schema,
  // is an error; every writer call fails.
  bool read_only = false;
};

// What import_runs did with each run of the other database.
struct ImportReport {
  int added = 0;      // runs this database did not have
  int updated = 0;    // runs it had, replaced because they progressed since the last import
  int unchanged = 0;  // runs it already had as they are
  std::vector<std::string> renamed;  // "'a' as 'a (2)'": name taken by another run here
};

struct Layout {
  int tp = 1;
  int pp = 1;
  int dp = 1;
};

// Where a run resumed from (`lattice train --load`): the run that wrote the checkpoint it
// loaded (find_checkpoint_run), and that checkpoint's step; the run's own steps follow it.
struct RunParent {
  std::int64_t run_id = 0;
  std::int64_t step = 0;
};

struct NewRun {
  std::string name;  // unique within the database
  std::string host;
  std::string command_line;
  std::string config_json = "{}";  // the full resolved configuration
  Layout layout;
  int world_size = 1;
  std::int64_t parameter_count = 0;
  std::vector<std::string> tags;
  std::string notes;
  std::optional<RunParent> parent;  // none: a fresh run, or a checkpoint this store never saw
};

// One rank's memory at a step, bytes by category (ARCHITECTURE.md "Metrics").
struct MemorySample {
  int rank = 0;
  std::int64_t weights = 0;
  std::int64_t grads = 0;
  std::int64_t optimizer_state = 0;
  std::int64_t activations = 0;
  std::int64_t workspace = 0;
  std::int64_t peak = 0;
};

// One box of the pipeline timeline; times in seconds from the step's start.
struct TimelineEvent {
  int rank = 0;
  int stage = 0;
  int microbatch = 0;
  std::string kind;  // "forward", "backward", "send", "recv", "optimizer", ...
  double start_s = 0;
  double end_s = 0;
};

// One step's metrics, for log_steps.
struct StepRecord {
  std::int64_t step = 0;
  std::map<std::string, double> values;
  std::vector<MemorySample> memory;
};

struct CheckpointRecord {
  std::int64_t step = 0;
  std::string path;
  std::int64_t bytes = 0;
};

struct RunInfo {
  std::int64_t id = 0;
  std::string name;
  RunStatus status = RunStatus::kCreated;  // kCrashed when running with a stale heartbeat
  double created_at = 0;                   // Unix seconds
  std::optional<double> started_at, ended_at, heartbeat_at;
  std::string host, command_line, config_json;
  Layout layout;
  int world_size = 1;
  std::int64_t parameter_count = 0;
  std::vector<std::string> tags;  // sorted
  std::string notes, error;
  std::map<std::string, double> latest;  // latest value of every metric key
  std::optional<std::int64_t> latest_step;
  // Set for a run resumed from a checkpoint this store recorded (NewRun::parent): the step it
  // resumed at, and the parent's id unless that run was deleted since.
  std::optional<std::int64_t> resume_step, parent_run_id;
};

struct RunFilter {
  std::string name_contains;        // empty: any name
  std::string tag;                  // empty: any tag
  std::optional<RunStatus> status;  // kCrashed selects stale running runs
  double stale_after_s = 60;        // heartbeat age that turns running into crashed
  std::optional<double> now;        // Unix seconds; the system clock when unset
  // false: every RunInfo::config_json is left empty. The configuration is most of a run's
  // record (~1.7 KB for `lattice train`), so a list of 10,000 runs reads several times faster
  // without it; run_configs reads it for the runs that need it.
  bool with_config = true;
};

struct MetricRow {
  std::int64_t id = 0;  // increasing in commit order: tail with rows_after(last id)
  std::int64_t run_id = 0;
  std::int64_t step = 0;
  std::string key;
  double value = 0;
  double wall_time = 0;  // Unix seconds of the log_step call
};

// A logged NaN reads back as NaN (SQLite stores it as NULL).
struct StepValue {
  std::int64_t step = 0;
  double value = 0;
};

// One plot bucket: the extremes and the last value of the points whose steps fall in it.
// min and max skip NaN points (NaN only when every point is NaN); count includes them; last
// is the value at last_step, the latest one logged when a step repeats.
struct Bucket {
  std::int64_t first_step = 0, last_step = 0;
  double min = 0, max = 0, last = 0;
  std::int64_t count = 0;
};

struct KeySeries {
  std::string key;
  std::vector<StepValue> points;  // in step order
};

struct StepMemory {
  std::int64_t step = 0;
  MemorySample sample;
};

// One run of a lineage (RunStore::run_lineage). Its steps up to kept_until are part of the
// lineage's one curve; those after it (the "discarded tail") were done again by the next run,
// which resumed from an earlier checkpoint (a rollback, or a requeue after a crash).
struct LineageLink {
  std::int64_t run_id = 0;
  std::string name;
  std::optional<std::int64_t> resumed_at;  // the checkpoint step it started from; none: root
  std::optional<std::int64_t> kept_until;  // the next run's resume_step; none: the last run
  std::optional<std::int64_t> last_step;   // the newest step it logged; none: nothing yet
};

struct CheckpointInfo {
  std::int64_t step = 0;
  std::string path;
  std::int64_t bytes = 0;
  double created_at = 0;  // Unix seconds
};

// Everything a run recorded that an export shows, read from one snapshot.
struct RunHistory {
  RunInfo run;
  std::vector<KeySeries> metrics;           // every key the run logged, sorted by name
  std::vector<StepMemory> memory;           // by step, then rank
  std::vector<CheckpointInfo> checkpoints;  // by step
};

// A connection to one run database. Opening creates the file when it is missing or empty,
// migrates an older schema, and refuses (leaving the file untouched) a file that is not a
// Lattice run database or was written by a newer Lattice. Each call is one transaction, so
// readers see a step's keys all together or not at all. Not thread-safe: use one RunStore
// per thread or process; SQLite's WAL lets them read while one of them writes.
class RunStore {
 public:
  static Result<std::unique_ptr<RunStore>> open(const std::string& path,
                                                const OpenOptions& options = {});
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  const std::string& path() const;

  // ---- writer (rank 0) ----------------------------------------------------------------
  // Lifecycle: created -> running -> finished | failed | killed; created -> failed | killed.
  Result<std::int64_t> create_run(const NewRun& run);
  Status mark_running(std::int64_t run_id);
  Status heartbeat(std::int64_t run_id);  // log_step writes one at most once a second
  // All values (and memory rows) of one step in one transaction; the run must be running.
  // With a commit window (below) the step may be held and committed with later ones.
  Status log_step(std::int64_t run_id, std::int64_t step,
                  const std::map<std::string, double>& values,
                  const std::vector<MemorySample>& memory = {});
  // Group commit: several steps in one transaction (each still seen whole by readers), for
  // a sink that buffers steps arriving faster than every few milliseconds.
  Status log_steps(std::int64_t run_id, const std::vector<StepRecord>& steps);
  // Group commit for tiny steps. With a window > 0, log_step() commits at once when the
  // previous commit is at least `window` old, and otherwise holds the step: held steps are
  // committed together (one transaction) by the log_step() that finds the oldest of them
  // `window` old, by any other writer call, by flush(), or on destruction. Readers still see
  // whole steps only, and steps slower than the window commit one by one as before; but a
  // held step is not in the database yet (a crash loses it) and its error, if any, is
  // returned by the call that commits it (the step is then set aside: take_unwritten).
  // Readers on this RunStore do not see held steps.
  // Zero (the default): every log_step() is its own transaction.
  void set_commit_window(std::chrono::microseconds window);
  // Commits the held steps now; ok when none are held.
  Status flush();
  // Held steps whose commit failed (a full disk, an I/O error, a run that is no longer
  // running): the failed commit returns its error and sets its steps aside instead of
  // dropping them, in call order, so that a caller that retries later (the engine's
  // RunRecorder, with log_steps) loses nothing. The store never retries them itself. Hands
  // back and forgets those of one run; a writer that does not retry should still take them,
  // or they stay in memory until the RunStore is destroyed.
  std::vector<StepRecord> take_unwritten(std::int64_t run_id);
  Status log_timeline(std::int64_t run_id, std::int64_t step,
                      const std::vector<TimelineEvent>& events);
  Status log_message(std::int64_t run_id, std::string_view level, int rank,
                     std::string_view message);
  Status record_checkpoint(std::int64_t run_id, const CheckpointRecord& checkpoint);
  // status is kFinished, kFailed or kKilled; error is kept for the two last.
  Status finish(std::int64_t run_id, RunStatus status, std::string_view error = {});

  // ---- editing runs afterwards (lattice runs tag | rename | delete) --------------------
  // Tags already present (or, for remove_tags, absent) are skipped; empty tags are refused.
  Status add_tags(std::int64_t run_id, const std::vector<std::string>& tags);
  Status remove_tags(std::int64_t run_id, const std::vector<std::string>& tags);
  // Refused, naming the other run, when another run already has new_name.
  Status rename_run(std::int64_t run_id, std::string_view new_name);
  // Replaces the run's free-text notes (empty clears them).
  Status set_notes(std::int64_t run_id, std::string_view notes);
  // Removes the run's rows from every table in one transaction (metric keys, shared by all
  // runs, stay). A running run whose heartbeat is younger than stale_after_s is refused: its
  // writer is probably alive and would fail on its next step.
  Status delete_run(std::int64_t run_id, double stale_after_s = 60);
  // Merges every run of the database at `source` (a cluster job's, say) into this one, with
  // everything it logged: metrics, memory, timeline, log events, checkpoints, tags, config.
  // Idempotent: a run is known by its creation time, host and command line, so importing
  // the same file twice keeps one copy, and a run that progressed since (more steps, a new
  // status) replaces the earlier copy, in one transaction per run. A run whose name another
  // run here has is imported as "name (2)". The source is only read.
  Result<ImportReport> import_runs(const std::string& source);

  // ---- readers ------------------------------------------------------------------------
  Result<std::vector<RunInfo>> list_runs(const RunFilter& filter = {});
  // The recorded configuration (RunInfo::config_json) of each run of `ids`, as (id, config) in
  // the order given; an id no run has is left out. One read transaction.
  Result<std::vector<std::pair<std::int64_t, std::string>>> run_configs(
      const std::vector<std::int64_t>& ids);
  // The run whose id or name is `run` (the way users name runs on the command line). An
  // unknown name, or digits that are one run's id and another run's name, is an error that
  // says what was looked for.
  Result<RunInfo> find_run(std::string_view run);
  // The run record, every metric series, memory samples and checkpoints, in one snapshot.
  Result<RunHistory> history(std::int64_t run_id);
  // How many steps the run logged: the point count of its most-logged key. Reads block
  // summaries, so it is fast for runs of millions of steps.
  Result<std::int64_t> logged_steps(std::int64_t run_id);
  // Metric rows with id > after_id in id order, of one run or all. max_rows > 0 caps the
  // answer but never splits a step (unless a single step is larger than the cap).
  Result<std::vector<MetricRow>> rows_after(std::int64_t after_id,
                                            std::optional<std::int64_t> run_id = {},
                                            std::size_t max_rows = 0);
  // Every point of a key with first_step <= step <= last_step, in step order.
  Result<std::vector<StepValue>> series(std::int64_t run_id, std::string_view key,
                                        std::int64_t first_step, std::int64_t last_step);
  // The same range cut into `buckets` equal step intervals; empty intervals are omitted.
  // Bucket b holds the steps s with (s - first_step) * buckets / (last_step - first_step + 1)
  // == b. Exact (equal to folding series() by that rule), but reads per-block summaries
  // where a block lies inside one bucket, so 2000 buckets over 10M points stay fast.
  Result<std::vector<Bucket>> downsample(std::int64_t run_id, std::string_view key,
                                         std::int64_t first_step, std::int64_t last_step,
                                         int buckets);
  Result<std::vector<MemorySample>> memory_at(std::int64_t run_id, std::int64_t step);
  // Per rank, the largest value of each category over every memory sample of the run (each
  // maximum may come from a different step), with the newest sampled step; by rank.
  Result<std::vector<StepMemory>> memory_peaks(std::int64_t run_id);
  // The steps of a run that logged timeline events, ascending.
  Result<std::vector<std::int64_t>> timeline_steps(std::int64_t run_id);
  // Every timeline event of one step, by rank, then start time.
  Result<std::vector<TimelineEvent>> timeline(std::int64_t run_id, std::int64_t step);
  // The run that recorded the checkpoint at `path` (the iter_NNNNNNN directory) of step
  // `step`: the path as recorded, or the same directory spelled otherwise (both resolved
  // from this process's working directory). When several runs saved it, the latest record
  // (the copy on disk now). None when no run of this store did.
  Result<std::optional<RunParent>> find_checkpoint_run(const std::string& path, std::int64_t step);
  // The lineage of a run, root first and the run itself last: each run's parent up to one
  // that resumed from nothing this store knows (or whose parent was deleted). A run that
  // never resumed is a lineage of one. One read transaction.
  Result<std::vector<LineageLink>> run_lineage(std::int64_t run_id);
  Status check_integrity();  // PRAGMA integrity_check

 private:
  struct Impl;
  explicit RunStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lattice::storage
