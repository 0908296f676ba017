// RunStore: editing runs after the fact (lattice runs tag | rename | delete). Each call is one
// transaction, so a refused or failed call changes nothing.
#include "lattice/storage/run_store.h"
#include "run_store_impl.h"

namespace lattice::storage {
namespace {

// Every table with a run_id column; the runs row itself goes last.
constexpr const char* kDeleteRunRows[] = {
    "DELETE FROM metrics WHERE run_id = ?1",
    "DELETE FROM metric_blocks WHERE run_id = ?1",
    "DELETE FROM latest_metrics WHERE run_id = ?1",
    "DELETE FROM memory_samples WHERE run_id = ?1",
    "DELETE FROM timeline_events WHERE run_id = ?1",
    "DELETE FROM log_events WHERE run_id = ?1",
    "DELETE FROM checkpoints WHERE run_id = ?1",
    "DELETE FROM run_tags WHERE run_id = ?1",
    "DELETE FROM run_parents WHERE run_id = ?1",
    // Its children keep their resume step; their parent reads as deleted (run_lineage).
    "UPDATE run_parents SET parent_run_id = NULL WHERE parent_run_id = ?1",
    "DELETE FROM runs WHERE id = ?1",
};

// Runs `sql` (?1 the run id, ?2 the tag) once per tag.
Status for_each_tag(Database& db, std::int64_t run_id, const std::vector<std::string>& tags,
                    const char* sql) {
  for (const std::string& tag : tags) {
    if (tag.empty()) return Status::invalid_argument(db.path() + ": a tag cannot be empty");
  }
  Transaction txn(db);
  if (!txn.begin_status()) return txn.begin_status();
  Statement stmt;
  if (Status s = db.prepare("SELECT 1 FROM runs WHERE id = ?1", &stmt); !s) return s;
  {
    StatementUse exists(stmt);
    exists.bind(1, run_id);
    if (exists.step() != SQLITE_ROW) {
      return Status::invalid_argument(db.path() + ": no run with id " + std::to_string(run_id));
    }
  }
  if (Status s = db.prepare(sql, &stmt); !s) return s;
  for (const std::string& tag : tags) {
    StatementUse use(stmt);
    use.bind(1, run_id);
    use.bind(2, tag);
    if (use.step() != SQLITE_DONE) return db.error("cannot change the tags of a run");
  }
  return txn.commit();
}

}  // namespace

Status RunStore::add_tags(std::int64_t run_id, const std::vector<std::string>& tags) {
  return for_each_tag(impl_->db, run_id, tags,
                      "INSERT OR IGNORE INTO run_tags(run_id, tag) VALUES (?1, ?2)");
}

Status RunStore::remove_tags(std::int64_t run_id, const std::vector<std::string>& tags) {
  return for_each_tag(impl_->db, run_id, tags,
                      "DELETE FROM run_tags WHERE run_id = ?1 AND tag = ?2");
}

Status RunStore::rename_run(std::int64_t run_id, std::string_view new_name) {
  Database& db = impl_->db;
  if (new_name.empty()) return Status::invalid_argument(db.path() + ": a run needs a name");
  Transaction txn(db);
  if (!txn.begin_status()) return txn.begin_status();
  std::string status;
  if (Status s = impl_->run_status_of(run_id, &status); !s) return s;
  Statement stmt;
  if (Status s = db.prepare("SELECT id FROM runs WHERE name = ?1", &stmt); !s) return s;
  {
    StatementUse holder(stmt);
    holder.bind(1, new_name);
    if (holder.step() == SQLITE_ROW) {
      const std::int64_t other = holder.int64(0);
      if (other == run_id) return Status::ok();  // already so named
      return Status::invalid_argument(db.path() + ": run " + std::to_string(other) +
                                      " is already named '" + std::string(new_name) +
                                      "'; run names are unique, choose another name");
    }
  }
  if (Status s = db.prepare("UPDATE runs SET name = ?2 WHERE id = ?1", &stmt); !s) return s;
  {
    StatementUse use(stmt);
    use.bind(1, run_id);
    use.bind(2, new_name);
    if (use.step() != SQLITE_DONE) return db.error("cannot rename run " + std::to_string(run_id));
  }
  return txn.commit();
}

Status RunStore::set_notes(std::int64_t run_id, std::string_view notes) {
  Database& db = impl_->db;
  Transaction txn(db);
  if (!txn.begin_status()) return txn.begin_status();
  std::string status;
  if (Status s = impl_->run_status_of(run_id, &status); !s) return s;
  Statement stmt;
  if (Status s = db.prepare("UPDATE runs SET notes = ?2 WHERE id = ?1", &stmt); !s) return s;
  {
    StatementUse use(stmt);
    use.bind(1, run_id);
    use.bind(2, notes);
    if (use.step() != SQLITE_DONE) {
      return db.error("cannot change the notes of run " + std::to_string(run_id));
    }
  }
  return txn.commit();
}

Status RunStore::delete_run(std::int64_t run_id, double stale_after_s) {
  if (Status s = flush(); !s) return s;  // held steps of this run would fail after it
  Impl& impl = *impl_;
  Database& db = impl.db;
  Transaction txn(db);
  if (!txn.begin_status()) return txn.begin_status();
  Statement stmt;
  if (Status s = db.prepare(
          "SELECT name, status, coalesce(heartbeat_at, created_at) FROM runs WHERE id = ?1", &stmt);
      !s) {
    return s;
  }
  {
    StatementUse run(stmt);
    run.bind(1, run_id);
    if (run.step() != SQLITE_ROW) {
      return Status::invalid_argument(db.path() + ": no run with id " + std::to_string(run_id));
    }
    const double age = unix_now() - run.real(2);
    if (run.text(1) == "running" && age < stale_after_s) {
      return Status::invalid_argument(db.path() + ": run " + std::to_string(run_id) + " ('" +
                                      run.text(0) + "') is running (last heartbeat " +
                                      std::to_string(static_cast<long long>(age)) +
                                      " s ago); stop its training first. A run silent for " +
                                      std::to_string(static_cast<long long>(stale_after_s)) +
                                      " s reads as crashed and can be deleted");
    }
  }
  for (const char* sql : kDeleteRunRows) {
    if (Status s = db.prepare(sql, &stmt); !s) return s;
    StatementUse use(stmt);
    use.bind(1, run_id);
    if (use.step() != SQLITE_DONE) return db.error("cannot delete run " + std::to_string(run_id));
  }
  if (Status s = txn.commit(); !s) return s;
  impl.blocks.forget();
  impl.heartbeat_written.erase(run_id);
  return Status::ok();
}

}  // namespace lattice::storage
