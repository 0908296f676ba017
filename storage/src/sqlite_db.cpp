// The RAII helpers of sqlite_db.h.
#include "sqlite_db.h"

#include <utility>

namespace lattice::storage {

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
  }
  return *this;
}

std::string StatementUse::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)))
           : std::string();
}

Database::Database(Database&& other) noexcept
    : begin_immediate_(std::move(other.begin_immediate_)),
      begin_read_(std::move(other.begin_read_)),
      commit_(std::move(other.commit_)),
      rollback_(std::move(other.rollback_)),
      db_(std::exchange(other.db_, nullptr)),
      path_(std::move(other.path_)) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    begin_immediate_ = Statement();
    begin_read_ = Statement();
    commit_ = Statement();
    rollback_ = Statement();
    sqlite3_close_v2(db_);
    begin_immediate_ = std::move(other.begin_immediate_);
    begin_read_ = std::move(other.begin_read_);
    commit_ = std::move(other.commit_);
    rollback_ = std::move(other.rollback_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

Database::~Database() {
  sqlite3_close_v2(db_);
}

Status Database::exec(const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) == SQLITE_OK) return Status::ok();
  std::string text = msg ? msg : sqlite3_errmsg(db_);
  sqlite3_free(msg);
  return Status::io_error(path_ + ": " + text);
}

Status Database::prepare(const char* sql, Statement* out) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) != SQLITE_OK) {
    return error("cannot prepare a statement");
  }
  *out = Statement(stmt);
  return Status::ok();
}

Status Database::run_cached(Statement* stmt, const char* sql) {
  if (!*stmt) {
    if (Status s = prepare(sql, stmt); !s) return s;
  }
  StatementUse use(*stmt);
  if (use.step() == SQLITE_DONE) return Status::ok();
  return error(std::string("cannot ") + sql);
}

Status Database::error(std::string_view what) const {
  return Status::io_error(path_ + ": " + std::string(what) + ": " + sqlite3_errmsg(db_));
}

}  // namespace lattice::storage
