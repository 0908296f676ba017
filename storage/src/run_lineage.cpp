// Lineage: which run wrote the checkpoint a new run resumes from (find_checkpoint_run), and a
// run's chain of parents with the steps each keeps (run_lineage). Not a graph of every
// descendant: a reader asks for one run's ancestors, the curve the Dashboard draws.
#include <filesystem>
#include <set>
#include <string>
#include <system_error>

#include "lattice/storage/run_store.h"
#include "run_store_impl.h"

namespace lattice::storage {
namespace {

// Whether a recorded checkpoint path names the directory `path` names: the same string, or
// the same directory on disk (another spelling: relative and absolute, a symlink, "./").
bool same_directory(const std::string& recorded, const std::string& path) {
  if (recorded == path) return true;
  std::error_code ec;
  return std::filesystem::equivalent(recorded, path, ec) && !ec;
}

}  // namespace

Result<std::optional<RunParent>> RunStore::find_checkpoint_run(const std::string& path,
                                                               std::int64_t step) {
  Database& db = impl_->db;
  Statement select;
  if (Status s = db.prepare("SELECT run_id, path FROM checkpoints WHERE step = ?1 ORDER BY id DESC",
                            &select);
      !s) {
    return s;
  }
  StatementUse use(select);
  use.bind(1, step);
  int rc;
  while ((rc = use.step()) == SQLITE_ROW)
    if (same_directory(use.text(1), path))
      return std::optional<RunParent>(RunParent{use.int64(0), step});
  if (rc != SQLITE_DONE) return db.error("cannot read the checkpoints");
  return std::optional<RunParent>();
}

Result<std::vector<LineageLink>> RunStore::run_lineage(std::int64_t run_id) {
  Database& db = impl_->db;
  ReadTransaction read(db);
  if (!read.begin_status()) return read.begin_status();
  Statement select;
  if (Status s = db.prepare(
          "SELECT r.name, p.parent_run_id, p.resume_step, (SELECT max(step) FROM latest_metrics "
          "WHERE run_id = r.id) FROM runs r LEFT JOIN run_parents p ON p.run_id = r.id "
          "WHERE r.id = ?1",
          &select);
      !s) {
    return s;
  }
  std::vector<LineageLink> child_first;
  std::set<std::int64_t> seen;  // a parent is always older, but a hand-edited file may loop
  std::optional<std::int64_t> next = run_id;
  while (next && seen.insert(*next).second) {
    StatementUse use(select);
    use.bind(1, *next);
    if (use.step() != SQLITE_ROW) {
      if (child_first.empty())
        return Status::invalid_argument(db.path() + ": no run with id " + std::to_string(run_id));
      return db.error("cannot read the lineage of run " + std::to_string(run_id));
    }
    LineageLink link;
    link.run_id = *next;
    link.name = use.text(0);
    if (!use.is_null(2)) link.resumed_at = use.int64(2);
    if (!use.is_null(3)) link.last_step = use.int64(3);
    if (!child_first.empty()) link.kept_until = child_first.back().resumed_at;
    next = use.is_null(1) ? std::nullopt : std::optional<std::int64_t>(use.int64(1));
    child_first.push_back(std::move(link));
  }
  return std::vector<LineageLink>(child_first.rbegin(), child_first.rend());
}

}  // namespace lattice::storage
