// RunStore's private state, shared by the writer (run_store.cpp) and the readers
// (run_reader.cpp): the connection, statements prepared once, and the metric-key cache.
#pragma once

#include <cstdint>
#include <string>
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
  Status run_status_of(std::int64_t run_id, std::string* status);
  // The id of a metric key; creates it when create is set, else 0 when unknown.
  Status key_id(std::string_view name, bool create, std::int64_t* id);
};

double unix_now();

}  // namespace lattice::storage
