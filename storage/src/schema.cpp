// Schema and migrations of the run store. Note "refuse before touching": a file is judged
// from its raw 100-byte SQLite header before a connection opens it, because even a read
// through a connection may replay a foreign WAL into it; only a file that is absent, empty or
// already carries our application_id (and a user_version we know) is opened. The header is
// read through SQLite's VFS, never with a descriptor of our own (Note "header through the
// VFS" in file_header.h). The PRAGMAs are checked again once open, since a newer header may
// still sit in the WAL.
#include "schema.h"

#include <sqlite3.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "file_header.h"
#include "lattice/storage/run_store.h"
#include "metric_blocks.h"

namespace lattice::storage {
namespace {

// Note "runs_listed": `lattice train` records its whole resolved configuration in
// runs.config_json (~1.7 KB), ten times the rest of a run's row, so a list of 10,000 runs
// that skips the column still read every page of the table (17 MB), and each new connection
// (the Studio opens one per read) paid for it again: ~200 ms on a 2-core machine. The covering
// index holds the other columns in ~1 MB; SQLite picks it for a query that names only them.
// It costs the writer one more index entry per run update (status, heartbeat, notes).
//
// kMigrations[i] brings user_version i to i + 1: its SQL, then (when set) a function that
// fills what the SQL created, in the same transaction. Append only; never edit a shipped entry.
struct Migration {
  const char* sql;
  Status (*fill)(Database& db);
};
constexpr Migration kMigrations[] = {
    // 0 -> 1: the first schema.
    {R"sql(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  status TEXT NOT NULL DEFAULT 'created'
    CHECK (status IN ('created', 'running', 'finished', 'failed', 'killed')),
  created_at REAL NOT NULL,
  started_at REAL,
  ended_at REAL,
  heartbeat_at REAL,
  host TEXT NOT NULL DEFAULT '',
  command_line TEXT NOT NULL DEFAULT '',
  config_json TEXT NOT NULL DEFAULT '{}',
  tp INTEGER NOT NULL DEFAULT 1,
  pp INTEGER NOT NULL DEFAULT 1,
  dp INTEGER NOT NULL DEFAULT 1,
  world_size INTEGER NOT NULL DEFAULT 1,
  parameter_count INTEGER NOT NULL DEFAULT 0,
  notes TEXT NOT NULL DEFAULT '',
  error TEXT NOT NULL DEFAULT ''
);
CREATE TABLE run_tags (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  tag TEXT NOT NULL,
  PRIMARY KEY (run_id, tag)
) WITHOUT ROWID;
CREATE INDEX run_tags_tag ON run_tags(tag);
CREATE TABLE metric_keys (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
-- Narrow and append-only: id is the tailing cursor (id > last seen).
CREATE TABLE metrics (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key_id INTEGER NOT NULL REFERENCES metric_keys(id),
  step INTEGER NOT NULL,
  value REAL,
  wall_time REAL NOT NULL
);
-- value is in the index so that series and down-sampling never visit the table.
CREATE INDEX metrics_run_key_step ON metrics(run_id, key_id, step, value);
CREATE TABLE latest_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key_id INTEGER NOT NULL REFERENCES metric_keys(id),
  step INTEGER NOT NULL,
  value REAL,
  PRIMARY KEY (run_id, key_id)
) WITHOUT ROWID;
CREATE TABLE memory_samples (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  weights INTEGER NOT NULL, grads INTEGER NOT NULL, optimizer_state INTEGER NOT NULL,
  activations INTEGER NOT NULL, workspace INTEGER NOT NULL, peak INTEGER NOT NULL
);
CREATE INDEX memory_samples_run_step ON memory_samples(run_id, step, rank);
CREATE TABLE timeline_events (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  stage INTEGER NOT NULL,
  microbatch INTEGER NOT NULL,
  kind TEXT NOT NULL,
  start_s REAL NOT NULL,
  end_s REAL NOT NULL
);
CREATE INDEX timeline_events_run_step ON timeline_events(run_id, step);
CREATE TABLE log_events (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  time REAL NOT NULL,
  level TEXT NOT NULL,
  rank INTEGER NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX log_events_run ON log_events(run_id, id);
CREATE TABLE checkpoints (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  path TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  created_at REAL NOT NULL
);
CREATE INDEX checkpoints_run_step ON checkpoints(run_id, step);
)sql",
     nullptr},
    // 1 -> 2: per-block summaries of every series, for downsample() (note "block summaries"
    // in metric_blocks.h); filled from the points already stored.
    {R"sql(
CREATE TABLE metric_blocks (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key_id INTEGER NOT NULL REFERENCES metric_keys(id),
  level INTEGER NOT NULL,
  block INTEGER NOT NULL,  -- step >> (4 * (level + 1))
  first_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  min_value REAL,  -- NULL when every point is NaN
  max_value REAL,
  last_value REAL,
  count INTEGER NOT NULL,
  PRIMARY KEY (run_id, key_id, level, block)
) WITHOUT ROWID;
)sql",
     &MetricBlocks::rebuild_all},
    // 2 -> 3: Note "runs_listed": every column of a run but its configuration, so that the
    // runs list (RunFilter::with_config false, the Studio's History) reads this index and not
    // the runs table, whose pages are mostly configuration text.
    {R"sql(
CREATE INDEX runs_listed ON runs(id, name, status, created_at, started_at, ended_at,
  heartbeat_at, host, command_line, tp, pp, dp, world_size, parameter_count, notes, error);
)sql",
     nullptr},
    // 3 -> 4: lineage (RunStore::run_lineage): the run that wrote the checkpoint a run resumed
    // from, and that checkpoint's step. A table of its own rather than columns of runs, so
    // that the runs_listed index stays as it is. A deleted parent leaves its children's
    // resume step and forgets only its id.
    {R"sql(
CREATE TABLE run_parents (
  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  parent_run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  resume_step INTEGER NOT NULL
);
CREATE INDEX run_parents_parent ON run_parents(parent_run_id);
)sql",
     nullptr},
};
constexpr int kMigrationCount = static_cast<int>(std::size(kMigrations));
static_assert(kMigrationCount == kSchemaVersion, "one migration per schema version");

std::string not_ours(const std::string& path, const std::string& why) {
  return path + " is not a Lattice run database (" + why +
         "); it was left unchanged. Choose another --db file.";
}

std::string too_new(const std::string& path, std::int64_t version) {
  return path + " was written by a newer Lattice (run-store schema " + std::to_string(version) +
         ", this build reads up to " + std::to_string(kSchemaVersion) +
         "); it was left unchanged. Upgrade Lattice to open it.";
}

// The file-header verdict: ok for absent, empty, or ours with a known version.
Status check_file_header(const std::string& path, const std::optional<FileHeader>& header) {
  if (!header) return Status::ok();  // absent (SQLite creates it) or empty (ours to initialise)
  if (!header->is_sqlite()) return Status::invalid_argument(not_ours(path, "not an SQLite file"));
  if (header->application_id() != kApplicationId) {
    return Status::invalid_argument(not_ours(path, "another application's SQLite database"));
  }
  if (header->user_version() > kSchemaVersion)
    return Status::invalid_argument(too_new(path, header->user_version()));
  return Status::ok();
}

Status query_int(Database& db, const char* sql, std::int64_t* out) {
  Statement stmt;
  if (Status s = db.prepare(sql, &stmt); !s) return s;
  StatementUse use(stmt);
  if (use.step() != SQLITE_ROW) return db.error(std::string("cannot run ") + sql);
  *out = use.int64(0);
  return Status::ok();
}

struct DatabaseState {
  std::int64_t version = 0, application_id = 0, tables = 0;
};

Status read_state(Database& db, DatabaseState* state) {
  if (Status s = query_int(db, "PRAGMA user_version", &state->version); !s) return s;
  if (Status s = query_int(db, "PRAGMA application_id", &state->application_id); !s) return s;
  return query_int(db, "SELECT count(*) FROM sqlite_schema", &state->tables);
}

// Ok when the database is ours at this version; false in *needs_migration when it is ours
// but older or still empty; an error for foreign and newer ones.
Status judge(const Database& db, const DatabaseState& state, bool* needs_migration) {
  const bool empty = state.application_id == 0 && state.version == 0 && state.tables == 0;
  if (state.application_id != kApplicationId && !empty) {
    return Status::invalid_argument(not_ours(db.path(), "another application's SQLite database"));
  }
  if (state.version > kSchemaVersion) {
    return Status::invalid_argument(too_new(db.path(), state.version));
  }
  *needs_migration = state.version < kSchemaVersion;
  return Status::ok();
}

// A reader of an up-to-date database takes no write lock. Otherwise the version is read
// again under an IMMEDIATE transaction, so two processes opening a new file at once do not
// both create it.
Status migrate(Database& db) {
  DatabaseState state;
  bool needs_migration = false;
  if (Status s = read_state(db, &state); !s) return s;
  if (Status s = judge(db, state, &needs_migration); !s || !needs_migration) return s;
  Transaction txn(db);
  if (!txn.begin_status()) return txn.begin_status();
  if (Status s = read_state(db, &state); !s) return s;
  if (Status s = judge(db, state, &needs_migration); !s || !needs_migration) return s;
  for (int v = static_cast<int>(state.version); v < kMigrationCount; ++v) {
    if (Status s = db.exec(kMigrations[v].sql); !s) return s;
    if (kMigrations[v].fill) {
      if (Status filled = kMigrations[v].fill(db); !filled) return filled;
    }
  }
  const std::string stamp = "PRAGMA application_id = " + std::to_string(kApplicationId) +
                            "; PRAGMA user_version = " + std::to_string(kSchemaVersion) + ";";
  if (Status s = db.exec(stamp.c_str()); !s) return s;
  return txn.commit();
}

// The directory that holds `path` ("." for a bare file name).
std::filesystem::path directory_of(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

// A new database's directory is created on first use, as `lattice train` with a fresh
// $LATTICE_DATA_DIR or --db in a new directory expects.
Status make_directory_of(const std::string& path) {
  const std::filesystem::path dir = directory_of(path);
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return Status::ok();
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::io_error("cannot create the directory " + dir.string() +
                            " for the run database " + path + ": " + ec.message());
  return Status::ok();
}

// SQLite says "unable to open database file" when the directory is what refuses: a new
// database, its -wal, -shm and -journal are all created beside it. Says so, naming the
// directory, when it is not writable; otherwise the error as it is.
Status explain_open_failure(const std::string& path, Status error) {
  const std::filesystem::path dir = directory_of(path);
  if (access(dir.c_str(), W_OK | X_OK) == 0) return error;
  return Status::io_error(path + ": cannot write the run database there: the directory " +
                          dir.string() + " is not writable (" + std::strerror(errno) + ")");
}

}  // namespace

std::optional<JournalMode> parse_journal_mode(std::string_view name) {
  if (name == "auto") return JournalMode::kAuto;
  if (name == "wal") return JournalMode::kWal;
  if (name == "delete") return JournalMode::kDelete;
  return std::nullopt;
}

bool on_network_filesystem(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  struct statfs fs {};
  if (statfs(dir.c_str(), &fs) != 0) return false;
  // linux/magic.h and the filesystems' own sources.
  constexpr std::uint32_t kNetworkMagic[] = {
      0x6969,      // NFS
      0x0BD00BD0,  // Lustre
      0x47504653,  // GPFS (IBM Spectrum Scale)
      0xFF534D42,  // CIFS
      0xFE534D42,  // SMB2
      0x517B,      // SMB
      0x00C36400,  // CephFS
      0x19830326,  // BeeGFS
      0x01021997,  // 9P
      0x5346414F,  // AFS
      0x7461636F,  // OCFS2
      0x01161970,  // GFS2
  };
  const auto magic = static_cast<std::uint32_t>(fs.f_type);
  return std::find(std::begin(kNetworkMagic), std::end(kNetworkMagic), magic) !=
         std::end(kNetworkMagic);
}

Status check_run_database_header(const std::string& path) {
  return check_file_header(path, read_file_header(path));
}

namespace {

// open_run_database once its directory exists and the file's header is judged ours.
Result<Database> open_writable(const std::string& path, const std::optional<FileHeader>& header,
                               JournalMode journal) {
  // The journal the file uses now; none for an absent or empty file.
  std::optional<JournalMode> before;
  if (header) before = header->wal() ? JournalMode::kWal : JournalMode::kDelete;
  if (journal == JournalMode::kAuto)
    journal = before                        ? *before
              : on_network_filesystem(path) ? JournalMode::kDelete
                                            : JournalMode::kWal;
  sqlite3* handle = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &handle,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  Database db(handle, path);
  if (rc != SQLITE_OK) return db.error("cannot open the run database");
  // Readers and the writer wait for each other's short locks instead of failing.
  sqlite3_busy_timeout(handle, 10000);
  sqlite3_extended_result_codes(handle, 1);
  if (Status s = migrate(db); !s) return s;
  // WAL after the schema exists: the first commit above went through the rollback journal,
  // so the main file's header already names us for the next process's header check.
  // Leaving WAL needs every other connection closed; SQLite answers "database is locked"
  // at once (no busy wait), which says nothing a user can act on.
  if (journal == JournalMode::kDelete && before == JournalMode::kWal)
    if (Status s = db.exec("PRAGMA journal_mode = DELETE;"); !s)
      return Status::io_error(path +
                              " is in WAL mode and another process has it open, so it cannot "
                              "switch to the rollback journal that was asked for (delete): close "
                              "that process, or open the file with journal mode auto to keep WAL");
  // In rollback mode synchronous=FULL: NORMAL is only durable with WAL.
  const char* settings = journal == JournalMode::kWal
                             ? "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; "
                               "PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 10000; "
                               "PRAGMA cache_size = -65536;"
                             : "PRAGMA journal_mode = DELETE; PRAGMA synchronous = FULL; "
                               "PRAGMA foreign_keys = ON; PRAGMA cache_size = -65536;";
  if (Status s = db.exec(settings); !s) return s;
  return db;
}

}  // namespace

Result<Database> open_run_database(const std::string& path, JournalMode journal) {
  if (Status s = make_directory_of(path); !s) return s;
  const std::optional<FileHeader> header = read_file_header(path);
  if (Status s = check_file_header(path, header); !s) return s;
  Result<Database> db = open_writable(path, header, journal);
  if (!db) return explain_open_failure(path, db.status());
  return db;
}

Result<Database> open_run_database_read_only(const std::string& path) {
  if (Status s = check_run_database_header(path); !s) return s;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Status::io_error(path + ": no such run database to read");
  if (size == 0) return Status::invalid_argument(path + " is empty: its run has not started yet");
  sqlite3* handle = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  Database db(handle, path);
  if (rc != SQLITE_OK) return db.error("cannot open the run database read-only");
  sqlite3_busy_timeout(handle, 10000);
  sqlite3_extended_result_codes(handle, 1);
  DatabaseState state;
  bool needs_migration = false;
  if (Status s = read_state(db, &state); !s) return s;
  if (Status s = judge(db, state, &needs_migration); !s) return s;
  if (needs_migration)
    return Status::invalid_argument(
        path + " has run-store schema " + std::to_string(state.version) + ", this build " +
        std::to_string(kSchemaVersion) + "; it is opened read-only, so open it once with " +
        "`lattice runs list --db " + path + "` (which upgrades it)");
  // query_only as well: a statement that would write fails at once, whatever the file's mode.
  if (Status s = db.exec("PRAGMA query_only = ON; PRAGMA cache_size = -65536;"); !s) return s;
  return db;
}

}  // namespace lattice::storage
