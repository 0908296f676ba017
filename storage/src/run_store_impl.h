// RunStore's private state, shared by the writer (run_store.cpp) and the readers
// (run_reader.cpp): the connection, statements prepared once, and the metric-key cache.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>

#include "lattice/storage/run_store.h"
#include "sqlite_db.h"

namespace lattice::storage {

struct RunStore::Impl {
  Database db;
  std::unordered_map<std::string, std::int64_t> key_ids;  // metric_keys, filled lazily

  // Prepared on first use; sqlite3_prepare is the slow part of a small query.
  Statement insert_metric, upsert_latest, insert_memory, insert_key, select_key, heartbeat,
      run_status, tail_all, tail_run, series, downsample, memory_at;

  // Prepares *stmt from sql unless it already is.
  Status statement(Statement* stmt, const char* sql) {
    return *stmt ? Status::ok() : db.prepare(sql, stmt);
  }
  // One guarded UPDATE of a run's status (?1 id, ?2 now, ?3 to, ?4 error): refused unless
  // the current status is one of allowed_from.
  Status transition(std::int64_t run_id, const char* sql,
                    std::initializer_list<std::string_view> allowed_from, std::string_view to,
                    std::string_view error);
  // Inserts one step's rows inside the caller's transaction.
  Status append_step(std::int64_t run_id, std::int64_t step,
                     const std::map<std::string, double>& values,
                     const std::vector<MemorySample>& memory, double now);
  Status run_status_of(std::int64_t run_id, std::string* status);
  // The id of a metric key; creates it when create is set, else 0 when unknown.
  Status key_id(std::string_view name, bool create, std::int64_t* id);
};

double unix_now();

}  // namespace lattice::storage
