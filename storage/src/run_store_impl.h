// RunStore's private state, shared by the writer (run_store.cpp) and the readers
// (run_reader.cpp): the connection, statements prepared once, and the metric-key cache.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lattice/storage/run_store.h"
#include "metric_blocks.h"
#include "sqlite_db.h"

namespace lattice::storage {

struct RunStore::Impl {
  Database db;
  std::unordered_map<std::string, std::int64_t> key_ids;  // metric_keys, filled lazily
  MetricBlocks blocks;
  // run id -> the unix_now() of the heartbeat this connection last wrote for it.
  std::unordered_map<std::int64_t, double> heartbeat_written;
  // key id -> the newest (step, value) of the transaction: latest_metrics is written once per
  // key and transaction, not once per row.
  std::unordered_map<std::int64_t, StepValue> latest_pending;

  // Group commit (RunStore::set_commit_window): steps held for the next commit, in call order.
  struct HeldStep {
    std::int64_t run_id;
    StepRecord record;
  };
  std::vector<HeldStep> held;
  std::vector<HeldStep> unwritten;  // held steps whose commit failed (take_unwritten)
  std::chrono::steady_clock::duration commit_window{0};
  std::chrono::steady_clock::time_point last_commit, oldest_held;

  // Prepared on first use; sqlite3_prepare is the slow part of a small query.
  Statement insert_metric, upsert_latest, insert_memory, insert_key, select_key, heartbeat,
      run_status, tail_all, tail_run, series, memory_at;

  // Prepares *stmt from sql unless it already is.
  Status statement(Statement* stmt, const char* sql) {
    return *stmt ? Status::ok() : db.prepare(sql, stmt);
  }
  // One guarded UPDATE of a run's status (?1 id, ?2 now, ?3 to, ?4 error): refused unless
  // the current status is one of allowed_from.
  Status transition(std::int64_t run_id, const char* sql,
                    std::initializer_list<std::string_view> allowed_from, std::string_view to,
                    std::string_view error);
  // log_steps() without the flush: one transaction for `steps` of one run.
  Status commit_steps(std::int64_t run_id, const std::vector<StepRecord>& steps);
  // Inserts one step's rows inside the caller's transaction (latest values: write_latest).
  Status append_step(std::int64_t run_id, std::int64_t step,
                     const std::map<std::string, double>& values,
                     const std::vector<MemorySample>& memory, double now);
  // Upserts latest_pending into latest_metrics and clears it.
  Status write_latest(std::int64_t run_id);
  Status run_status_of(std::int64_t run_id, std::string* status);
  // Runs matching the filter (and id, when set) with their tags and latest values.
  Status load_runs(const RunFilter& filter, std::optional<std::int64_t> id,
                   std::vector<RunInfo>* runs);
  // UPDATE of heartbeat_at, refused unless the run is running.
  Status write_heartbeat(std::int64_t run_id, double now);
  // Inside a write transaction: refuses a run that is not running, and refreshes its
  // heartbeat when the last one this connection wrote is a second old (a heartbeat per step
  // would rewrite the runs table's page in every commit).
  Status check_running(std::int64_t run_id, double now);
  // The id of a metric key; creates it when create is set, else 0 when unknown.
  Status key_id(std::string_view name, bool create, std::int64_t* id);
};

double unix_now();

}  // namespace lattice::storage
