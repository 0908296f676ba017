// RunStore::import_runs: another run database's runs merged into this one (`lattice runs
// import`, a cluster job's store into the local history). The source is ATTACHed to this
// connection and copied table by table in SQL, metric keys mapped by name. Not a sync: rows
// never flow back to the source.
#include <cmath>
#include <filesystem>

#include "lattice/storage/run_store.h"
#include "run_store_impl.h"
#include "schema.h"

namespace lattice::storage {
namespace {

constexpr const char* kSource = "import_src";

// What changes while a run progresses: equal fingerprints mean nothing to update. {} is the
// schema (main or import_src), ?1 the run id.
constexpr const char* kFingerprintSql =
    "SELECT r.status || '|' || coalesce(r.heartbeat_at, '') || '|' || coalesce(r.ended_at, '') "
    "|| '|' || r.error || '|' || r.notes "
    "|| '|' || (SELECT count(*) FROM {}.metrics WHERE run_id = r.id) "
    "|| '|' || (SELECT coalesce(max(step), -1) FROM {}.metrics WHERE run_id = r.id) "
    "|| '|' || (SELECT count(*) FROM {}.memory_samples WHERE run_id = r.id) "
    "|| '|' || (SELECT count(*) FROM {}.timeline_events WHERE run_id = r.id) "
    "|| '|' || (SELECT count(*) FROM {}.log_events WHERE run_id = r.id) "
    "|| '|' || (SELECT count(*) FROM {}.checkpoints WHERE run_id = r.id) "
    "FROM {}.runs r WHERE r.id = ?1";

// Run rows of the source copied into the run ?1 (here) from the run ?2 (there).
constexpr const char* kCopyRows[] = {
    "INSERT OR IGNORE INTO main.metric_keys(name) SELECT name FROM import_src.metric_keys",
    "INSERT INTO main.metrics(run_id, key_id, step, value, wall_time) "
    "SELECT ?1, mk.id, m.step, m.value, m.wall_time FROM import_src.metrics m "
    "JOIN import_src.metric_keys sk ON sk.id = m.key_id JOIN main.metric_keys mk ON mk.name = "
    "sk.name WHERE m.run_id = ?2 ORDER BY m.id",
    "INSERT INTO main.latest_metrics(run_id, key_id, step, value) "
    "SELECT ?1, mk.id, l.step, l.value FROM import_src.latest_metrics l "
    "JOIN import_src.metric_keys sk ON sk.id = l.key_id JOIN main.metric_keys mk ON mk.name = "
    "sk.name WHERE l.run_id = ?2",
    // The summaries follow from the points by a fixed rule, so they copy as they are.
    "INSERT INTO main.metric_blocks(run_id, key_id, level, block, first_step, last_step, "
    "min_value, max_value, last_value, count) "
    "SELECT ?1, mk.id, b.level, b.block, b.first_step, b.last_step, b.min_value, b.max_value, "
    "b.last_value, b.count FROM import_src.metric_blocks b "
    "JOIN import_src.metric_keys sk ON sk.id = b.key_id JOIN main.metric_keys mk ON mk.name = "
    "sk.name WHERE b.run_id = ?2",
    "INSERT INTO main.memory_samples(run_id, step, rank, weights, grads, optimizer_state, "
    "activations, workspace, peak) SELECT ?1, step, rank, weights, grads, optimizer_state, "
    "activations, workspace, peak FROM import_src.memory_samples WHERE run_id = ?2 ORDER BY id",
    "INSERT INTO main.timeline_events(run_id, step, rank, stage, microbatch, kind, start_s, "
    "end_s) SELECT ?1, step, rank, stage, microbatch, kind, start_s, end_s "
    "FROM import_src.timeline_events WHERE run_id = ?2 ORDER BY id",
    "INSERT INTO main.log_events(run_id, time, level, rank, message) "
    "SELECT ?1, time, level, rank, message FROM import_src.log_events WHERE run_id = ?2 "
    "ORDER BY id",
    "INSERT INTO main.checkpoints(run_id, step, path, bytes, created_at) "
    "SELECT ?1, step, path, bytes, created_at FROM import_src.checkpoints WHERE run_id = ?2 "
    "ORDER BY id",
    "INSERT OR IGNORE INTO main.run_tags(run_id, tag) "
    "SELECT ?1, tag FROM import_src.run_tags WHERE run_id = ?2",
};

// A copy's rows, before it is copied again (its tags and name stay).
constexpr const char* kClearRows[] = {
    "DELETE FROM main.metrics WHERE run_id = ?1",
    "DELETE FROM main.metric_blocks WHERE run_id = ?1",
    "DELETE FROM main.latest_metrics WHERE run_id = ?1",
    "DELETE FROM main.memory_samples WHERE run_id = ?1",
    "DELETE FROM main.timeline_events WHERE run_id = ?1",
    "DELETE FROM main.log_events WHERE run_id = ?1",
    "DELETE FROM main.checkpoints WHERE run_id = ?1",
};

std::string with_schema(std::string sql, const std::string& schema) {
  for (size_t at; (at = sql.find("{}")) != std::string::npos;) sql.replace(at, 2, schema);
  return sql;
}

// Runs `sql` with ?1 = a, ?2 = b (when the statement has them) to completion.
Status run(Database& db, const std::string& sql, std::int64_t a, std::int64_t b = 0) {
  Statement stmt;
  if (Status s = db.prepare(sql.c_str(), &stmt); !s) return s;
  StatementUse use(stmt);
  const int params = sqlite3_bind_parameter_count(stmt.get());
  if (params >= 1) use.bind(1, a);
  if (params >= 2) use.bind(2, b);
  if (use.step() != SQLITE_DONE) return db.error("cannot import a run");
  return Status::ok();
}

Result<std::string> fingerprint(Database& db, const std::string& schema, std::int64_t run_id) {
  Statement stmt;
  const std::string sql = with_schema(kFingerprintSql, schema);
  if (Status s = db.prepare(sql.c_str(), &stmt); !s) return s;
  StatementUse use(stmt);
  use.bind(1, run_id);
  if (use.step() != SQLITE_ROW) return db.error("cannot read a run to import");
  return use.text(0);
}

struct SourceRun {
  std::int64_t id = 0;
  std::string name, host, command_line;
  double created_at = 0;
};

Result<std::vector<SourceRun>> source_runs(Database& db) {
  Statement stmt;
  if (Status s = db.prepare(
          "SELECT id, name, host, command_line, created_at FROM import_src.runs ORDER BY id",
          &stmt);
      !s) {
    return s;
  }
  StatementUse use(stmt);
  std::vector<SourceRun> runs;
  for (int rc; (rc = use.step()) == SQLITE_ROW;)
    runs.push_back({use.int64(0), use.text(1), use.text(2), use.text(3), use.real(4)});
  return runs;
}

// The local copy of a source run: same creation time (to the microsecond as stored), host
// and command line. 0 when there is none.
Result<std::int64_t> local_copy(Database& db, const SourceRun& r) {
  Statement stmt;
  if (Status s = db.prepare(
          "SELECT id FROM main.runs WHERE created_at = ?1 AND host = ?2 AND command_line = ?3",
          &stmt);
      !s) {
    return s;
  }
  StatementUse use(stmt);
  use.bind(1, r.created_at);
  use.bind(2, r.host);
  use.bind(3, r.command_line);
  return use.step() == SQLITE_ROW ? use.int64(0) : std::int64_t{0};
}

// `name`, or "name (2)", "name (3)", ... : the first no run here has.
Result<std::string> free_name(Database& db, const std::string& name) {
  Statement stmt;
  if (Status s = db.prepare("SELECT count(*) FROM main.runs WHERE name = ?1", &stmt); !s) return s;
  for (int n = 1;; ++n) {
    const std::string candidate = n == 1 ? name : name + " (" + std::to_string(n) + ")";
    StatementUse use(stmt);
    use.bind(1, candidate);
    if (use.step() != SQLITE_ROW) return db.error("cannot read run names");
    if (use.int64(0) == 0) return candidate;
  }
}

constexpr const char* kRunColumns =
    "status, created_at, started_at, ended_at, heartbeat_at, host, command_line, config_json, "
    "tp, pp, dp, world_size, parameter_count, notes, error";

Result<std::int64_t> insert_run(Database& db, const SourceRun& r, const std::string& name) {
  const std::string sql = std::string("INSERT INTO main.runs(name, ") + kRunColumns +
                          ") SELECT ?2, " + kRunColumns + " FROM import_src.runs WHERE id = ?1";
  Statement stmt;
  if (Status s = db.prepare(sql.c_str(), &stmt); !s) return s;
  StatementUse use(stmt);
  use.bind(1, r.id);
  use.bind(2, name);
  if (use.step() != SQLITE_DONE) return db.error("cannot import run '" + r.name + "'");
  return static_cast<std::int64_t>(sqlite3_last_insert_rowid(db.handle()));
}

Status update_run(Database& db, std::int64_t local, std::int64_t source) {
  std::string sets;
  for (const char* c : {"status", "started_at", "ended_at", "heartbeat_at", "config_json", "tp",
                        "pp", "dp", "world_size", "parameter_count", "notes", "error"})
    sets += std::string(sets.empty() ? "" : ", ") + c + " = s." + c;
  return run(db,
             "UPDATE main.runs SET " + sets +
                 " FROM (SELECT * FROM import_src.runs WHERE id = ?2) AS s WHERE main.runs.id = ?1",
             local, source);
}

// ATTACH for the lifetime of the object.
class Attached {
 public:
  explicit Attached(Database& db) : db_(db) {}
  ~Attached() {
    if (attached_) db_.exec("DETACH DATABASE import_src");
  }
  Status attach(const std::string& path) {
    Statement stmt;
    if (Status s = db_.prepare("ATTACH DATABASE ?1 AS import_src", &stmt); !s) return s;
    StatementUse use(stmt);
    use.bind(1, path);
    if (use.step() != SQLITE_DONE) return db_.error("cannot open " + path + " to import from");
    attached_ = true;
    return Status::ok();
  }

 private:
  Database& db_;
  bool attached_ = false;
};

}  // namespace

Result<ImportReport> RunStore::import_runs(const std::string& source) {
  if (Status s = flush(); !s) return s;
  Impl& impl = *impl_;
  Database& db = impl.db;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(source, ec))
    return Status::invalid_argument(source + ": no such run database to import");
  if (std::filesystem::equivalent(source, db.path(), ec))
    return Status::invalid_argument(source + " is this database itself; nothing to import");
  if (Status s = check_run_database_header(source); !s) return s;
  Attached attached(db);
  if (Status s = attached.attach(source); !s) return s;
  {
    Statement stmt;
    if (Status s = db.prepare("PRAGMA import_src.user_version", &stmt); !s) return s;
    StatementUse use(stmt);
    if (use.step() != SQLITE_ROW) return db.error("cannot read " + source);
    if (use.int64(0) != kSchemaVersion)
      return Status::invalid_argument(
          source + " has run-store schema " + std::to_string(use.int64(0)) + ", this build " +
          std::to_string(kSchemaVersion) + "; open it once with `lattice runs list --db " + source +
          "` (which upgrades it), then import");
  }
  ImportReport report;
  Result<std::vector<SourceRun>> runs = source_runs(db);
  if (!runs) return runs.status();
  for (const SourceRun& r : *runs) {
    Transaction txn(db);
    if (!txn.begin_status()) return txn.begin_status();
    Result<std::int64_t> local = local_copy(db, r);
    if (!local) return local.status();
    std::int64_t target = *local;
    if (target != 0) {
      Result<std::string> there = fingerprint(db, kSource, r.id);
      Result<std::string> here = fingerprint(db, "main", target);
      if (!there) return there.status();
      if (!here) return here.status();
      if (*there == *here) {
        ++report.unchanged;
        continue;  // the transaction rolls back: nothing was written
      }
      for (const char* sql : kClearRows)
        if (Status s = run(db, sql, target); !s) return s;
      if (Status s = update_run(db, target, r.id); !s) return s;
      ++report.updated;
    } else {
      Result<std::string> name = free_name(db, r.name);
      if (!name) return name.status();
      if (*name != r.name) report.renamed.push_back("'" + r.name + "' as '" + *name + "'");
      Result<std::int64_t> id = insert_run(db, r, *name);
      if (!id) return id.status();
      target = *id;
      ++report.added;
    }
    for (const char* sql : kCopyRows)
      if (Status s = run(db, sql, target, r.id); !s) return s;
    if (Status s = txn.commit(); !s) return s;
    impl.blocks.forget();
  }
  return report;
}

}  // namespace lattice::storage
