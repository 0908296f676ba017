// Thin RAII over the sqlite3 C API for the run store: a connection, cached prepared
// statements, and a transaction guard. Private to storage/src (the only sqlite3.h user).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "lattice/status.h"

namespace lattice::storage {

// A prepared statement; reset and unbound when a Use goes out of scope.
class Statement {
 public:
  Statement() = default;
  explicit Statement(sqlite3_stmt* stmt) : stmt_(stmt) {}
  Statement(Statement&& other) noexcept : stmt_(other.stmt_) { other.stmt_ = nullptr; }
  Statement& operator=(Statement&& other) noexcept;
  ~Statement() { sqlite3_finalize(stmt_); }
  sqlite3_stmt* get() const { return stmt_; }
  explicit operator bool() const { return stmt_ != nullptr; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

class StatementUse {
 public:
  explicit StatementUse(const Statement& s) : stmt_(s.get()) {}
  ~StatementUse() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  StatementUse(const StatementUse&) = delete;
  StatementUse& operator=(const StatementUse&) = delete;
  void bind(int i, std::int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void bind(int i, int v) { sqlite3_bind_int64(stmt_, i, v); }
  void bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void bind(int i, std::string_view v) {  // an empty view binds '', never NULL
    sqlite3_bind_text(stmt_, i, v.empty() ? "" : v.data(), static_cast<int>(v.size()),
                      SQLITE_TRANSIENT);
  }
  void bind_null(int i) { sqlite3_bind_null(stmt_, i); }
  int step() { return sqlite3_step(stmt_); }  // SQLITE_ROW, SQLITE_DONE or an error
  std::int64_t int64(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  bool is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string text(int col) const;
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
};

class Database {
 public:
  Database() = default;
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  ~Database();

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  Status exec(const char* sql);
  Status prepare(const char* sql, Statement* out);
  // "<path>: <what>: <sqlite message>"
  Status error(std::string_view what) const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// BEGIN IMMEDIATE on construction (the writer takes the lock up front, so it never has to
// upgrade a read lock and hit SQLITE_BUSY); ROLLBACK unless commit() succeeded.
class Transaction {
 public:
  explicit Transaction(Database& db) : db_(db) { status_ = db_.exec("BEGIN IMMEDIATE"); }
  ~Transaction() {
    if (status_.is_ok() && !committed_) db_.exec("ROLLBACK");
  }
  const Status& begin_status() const { return status_; }
  Status commit() {
    Status s = db_.exec("COMMIT");
    committed_ = s.is_ok();
    return s;
  }

 private:
  Database& db_;
  Status status_;
  bool committed_ = false;
};

}  // namespace lattice::storage
