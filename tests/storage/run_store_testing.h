// Helpers shared by the run-store tests (tests/storage) and the `lattice runs` tests
// (tests/cli): opening a store or failing the test, and counting a run's rows in every table
// straight from the file, so that "delete removes every row" covers tables added later too.
#pragma once

#include <sqlite3.h>

#include <QtGlobal>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "lattice/storage/run_store.h"

namespace lattice::storage::testing {

inline std::unique_ptr<RunStore> open_or_fail(const std::string& path) {
  auto store = RunStore::open(path);
  if (!store) qFatal("cannot open %s: %s", path.c_str(), store.status().message().c_str());
  return std::move(store.value());
}

// Table -> rows that belong to `run`: every table with a run_id column, and runs itself.
inline std::map<std::string, std::int64_t> rows_of_run(const std::string& path, std::int64_t run) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* tables = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT m.name, p.name FROM sqlite_schema m JOIN pragma_table_info(m.name) p "
                     "WHERE m.type = 'table' AND (p.name = 'run_id' OR (m.name = 'runs' AND "
                     "p.name = 'id'))",
                     -1, &tables, nullptr);
  std::map<std::string, std::int64_t> counts;
  while (sqlite3_step(tables) == SQLITE_ROW) {
    const std::string table = reinterpret_cast<const char*>(sqlite3_column_text(tables, 0));
    const std::string column = reinterpret_cast<const char*>(sqlite3_column_text(tables, 1));
    const std::string sql = "SELECT count(*) FROM " + table + " WHERE " + column + " = ?1";
    sqlite3_stmt* count = nullptr;
    sqlite3_prepare_v2(db, sql.c_str(), -1, &count, nullptr);
    sqlite3_bind_int64(count, 1, run);
    counts[table] = sqlite3_step(count) == SQLITE_ROW ? sqlite3_column_int64(count, 0) : -1;
    sqlite3_finalize(count);
  }
  sqlite3_finalize(tables);
  sqlite3_close(db);
  return counts;
}

}  // namespace lattice::storage::testing
