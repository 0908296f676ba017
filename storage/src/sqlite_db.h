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
  // BEGIN IMMEDIATE, BEGIN (deferred), COMMIT and ROLLBACK through statements prepared once:
  // a writer logging thousands of steps a second would otherwise parse them every time.
  Status begin_immediate() { return run_cached(&begin_immediate_, "BEGIN IMMEDIATE"); }
  Status begin_read() { return run_cached(&begin_read_, "BEGIN"); }
  Status commit() { return run_cached(&commit_, "COMMIT"); }
  Status rollback() { return run_cached(&rollback_, "ROLLBACK"); }
  bool in_transaction() const { return db_ && sqlite3_get_autocommit(db_) == 0; }
  // "<path>: <what>: <sqlite message>"
  Status error(std::string_view what) const;

 private:
  Status run_cached(Statement* stmt, const char* sql);
  // Declared before db_ would finalize them after sqlite3_close_v2; close_v2 waits for that.
  Statement begin_immediate_, begin_read_, commit_, rollback_;
  sqlite3* db_ = nullptr;
  std::string path_;
};

// BEGIN IMMEDIATE on construction (the writer takes the lock up front, so it never has to
// upgrade a read lock and hit SQLITE_BUSY); ROLLBACK unless commit() succeeded.
class Transaction {
 public:
  explicit Transaction(Database& db) : db_(db) { status_ = db_.begin_immediate(); }
  ~Transaction() {
    if (status_.is_ok() && !committed_) db_.rollback();
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  const Status& begin_status() const { return status_; }
  Status commit() {
    Status s = db_.commit();
    committed_ = s.is_ok();
    return s;
  }

 private:
  Database& db_;
  Status status_;
  bool committed_ = false;
};

// A read transaction: every statement until it ends reads one snapshot, so a reader never
// mixes two of the writer's steps. Nests: inside another transaction it does nothing.
class ReadTransaction {
 public:
  explicit ReadTransaction(Database& db) : db_(db) {
    if (!db_.in_transaction()) {
      status_ = db_.begin_read();
      owns_ = status_.is_ok();
    }
  }
  ~ReadTransaction() {
    if (owns_) db_.commit();
  }
  ReadTransaction(const ReadTransaction&) = delete;
  ReadTransaction& operator=(const ReadTransaction&) = delete;
  const Status& begin_status() const { return status_; }

 private:
  Database& db_;
  Status status_;
  bool owns_ = false;
};

}  // namespace lattice::storage
