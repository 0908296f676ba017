// RunStore's reader side: the runs list, tailing, series and plot down-sampling. Each call
// is one statement (or one read transaction), so it sees whole steps only.
#include <algorithm>

#include "lattice/storage/run_store.h"
#include "run_store_impl.h"

namespace lattice::storage {
namespace {

std::optional<double> optional_real(const StatementUse& use, int col) {
  if (use.is_null(col)) return std::nullopt;
  return use.real(col);
}

RunInfo read_run(const StatementUse& use, double now, double stale_after_s) {
  RunInfo r;
  r.id = use.int64(0);
  r.name = use.text(1);
  r.status = parse_run_status(use.text(2)).value_or(RunStatus::kFailed);
  r.created_at = use.real(3);
  r.started_at = optional_real(use, 4);
  r.ended_at = optional_real(use, 5);
  r.heartbeat_at = optional_real(use, 6);
  r.host = use.text(7);
  r.command_line = use.text(8);
  r.config_json = use.text(9);
  r.layout = {static_cast<int>(use.int64(10)), static_cast<int>(use.int64(11)),
              static_cast<int>(use.int64(12))};
  r.world_size = static_cast<int>(use.int64(13));
  r.parameter_count = use.int64(14);
  r.notes = use.text(15);
  r.error = use.text(16);
  if (r.status == RunStatus::kRunning &&
      r.heartbeat_at.value_or(r.created_at) < now - stale_after_s) {
    r.status = RunStatus::kCrashed;
  }
  return r;
}

}  // namespace

Result<std::vector<RunInfo>> RunStore::list_runs(const RunFilter& filter) {
  Database& db = impl_->db;
  // One read transaction: the runs, their tags and latest values from the same snapshot.
  if (Status s = db.exec("BEGIN"); !s) return s;
  struct EndRead {
    Database& db;
    ~EndRead() { db.exec("COMMIT"); }
  } end_read{db};
  const double now = filter.now.value_or(unix_now());
  std::vector<RunInfo> runs;
  {
    Statement select;
    if (Status s = db.prepare(
            "SELECT id, name, status, created_at, started_at, ended_at, heartbeat_at, host, "
            "command_line, config_json, tp, pp, dp, world_size, parameter_count, notes, error "
            "FROM runs WHERE instr(name, ?1) > 0 AND (?2 = '' OR EXISTS (SELECT 1 FROM "
            "run_tags t WHERE t.run_id = runs.id AND t.tag = ?2)) ORDER BY id",
            &select);
        !s) {
      return s;
    }
    StatementUse use(select);
    use.bind(1, filter.name_contains);
    use.bind(2, filter.tag);
    int rc;
    while ((rc = use.step()) == SQLITE_ROW) {
      RunInfo r = read_run(use, now, filter.stale_after_s);
      if (!filter.status || *filter.status == r.status) runs.push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) return db.error("cannot list runs");
  }
  Statement tags, latest;
  if (Status s = db.prepare("SELECT tag FROM run_tags WHERE run_id = ?1 ORDER BY tag", &tags); !s) {
    return s;
  }
  if (Status s = db.prepare(
          "SELECT k.name, l.value, l.step FROM latest_metrics l JOIN metric_keys k ON k.id = "
          "l.key_id WHERE l.run_id = ?1",
          &latest);
      !s) {
    return s;
  }
  for (RunInfo& r : runs) {
    {
      StatementUse use(tags);
      use.bind(1, r.id);
      while (use.step() == SQLITE_ROW) r.tags.push_back(use.text(0));
    }
    StatementUse use(latest);
    use.bind(1, r.id);
    while (use.step() == SQLITE_ROW) {
      r.latest[use.text(0)] = use.real(1);
      r.latest_step = std::max(r.latest_step.value_or(use.int64(2)), use.int64(2));
    }
  }
  return runs;
}

Result<std::vector<MetricRow>> RunStore::rows_after(std::int64_t after_id,
                                                    std::optional<std::int64_t> run_id,
                                                    std::size_t max_rows) {
  Impl& impl = *impl_;
  // LIMIT -1 is no limit; one row past the cap tells whether the last step was cut. The
  // unary + keeps the planner on the primary key: the (run, key, step) index would make it
  // sort the whole run to answer a tail of a few rows.
  constexpr const char* kColumns =
      "SELECT m.id, m.run_id, m.step, k.name, m.value, m.wall_time FROM metrics m JOIN "
      "metric_keys k ON k.id = m.key_id ";
  Statement* stmt = run_id ? &impl.tail_run : &impl.tail_all;
  const std::string sql = std::string(kColumns) +
                          (run_id ? "WHERE m.id > ?1 AND +m.run_id = ?3 " : "WHERE m.id > ?1 ") +
                          "ORDER BY m.id LIMIT ?2";
  if (Status s = impl.statement(stmt, sql.c_str()); !s) return s;
  StatementUse use(*stmt);
  use.bind(1, after_id);
  use.bind(2, max_rows > 0 ? static_cast<std::int64_t>(max_rows) + 1 : std::int64_t{-1});
  if (run_id) use.bind(3, *run_id);
  std::vector<MetricRow> rows;
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) {
    rows.push_back(
        {use.int64(0), use.int64(1), use.int64(2), use.text(3), use.real(4), use.real(5)});
  }
  if (rc != SQLITE_DONE) return impl.db.error("cannot read metric rows");
  if (max_rows > 0 && rows.size() > max_rows) {
    // Drop the cut step: the caller asks again from the last whole step's id.
    const MetricRow cut = rows[max_rows];
    rows.resize(max_rows);
    auto same_step = [&](const MetricRow& r) {
      return r.run_id == cut.run_id && r.step == cut.step;
    };
    auto keep = rows.end();
    while (keep != rows.begin() && same_step(*(keep - 1))) --keep;
    if (keep != rows.begin()) rows.erase(keep, rows.end());
  }
  return rows;
}

Result<std::vector<StepValue>> RunStore::series(std::int64_t run_id, std::string_view key,
                                                std::int64_t first_step, std::int64_t last_step) {
  Impl& impl = *impl_;
  std::int64_t key_id = 0;
  if (Status s = impl.key_id(key, /*create=*/false, &key_id); !s) return s;
  std::vector<StepValue> points;
  if (key_id == 0) return points;
  if (Status s = impl.statement(&impl.series,
                                "SELECT step, value FROM metrics WHERE run_id = ?1 AND key_id = "
                                "?2 AND step BETWEEN ?3 AND ?4 ORDER BY step, id");
      !s) {
    return s;
  }
  StatementUse use(impl.series);
  use.bind(1, run_id);
  use.bind(2, key_id);
  use.bind(3, first_step);
  use.bind(4, last_step);
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) points.push_back({use.int64(0), use.real(1)});
  if (rc != SQLITE_DONE) return impl.db.error("cannot read a metric series");
  return points;
}

Result<std::vector<Bucket>> RunStore::downsample(std::int64_t run_id, std::string_view key,
                                                 std::int64_t first_step, std::int64_t last_step,
                                                 int buckets) {
  Impl& impl = *impl_;
  if (buckets <= 0 || last_step < first_step) {
    return Status::invalid_argument(path() + ": down-sampling needs buckets > 0 and first step " +
                                    "<= last step, got " + std::to_string(buckets) +
                                    " buckets over [" + std::to_string(first_step) + ", " +
                                    std::to_string(last_step) + "]");
  }
  std::int64_t key_id = 0;
  if (Status s = impl.key_id(key, /*create=*/false, &key_id); !s) return s;
  std::vector<Bucket> out;
  if (key_id == 0) return out;
  // Bucket b holds steps in [first + b*width, first + (b+1)*width) with width = span / n,
  // computed exactly in integers. The scan walks the covering index in step order; the
  // last value is the one at the bucket's largest step (latest row when a step repeats).
  if (Status s = impl.statement(
          &impl.downsample,
          "WITH points AS (SELECT step, value, ((step - ?3) * ?5) / (?4 - ?3 + 1) AS bucket "
          "FROM metrics WHERE run_id = ?1 AND key_id = ?2 AND step BETWEEN ?3 AND ?4), "
          "groups AS (SELECT bucket, min(step) AS first_step, max(step) AS last_step, "
          "min(value) AS lo, max(value) AS hi, count(*) AS n FROM points GROUP BY bucket) "
          "SELECT first_step, last_step, lo, hi, (SELECT value FROM metrics m WHERE m.run_id = "
          "?1 AND m.key_id = ?2 AND m.step = groups.last_step ORDER BY m.id DESC LIMIT 1), n "
          "FROM groups ORDER BY bucket");
      !s) {
    return s;
  }
  StatementUse use(impl.downsample);
  use.bind(1, run_id);
  use.bind(2, key_id);
  use.bind(3, first_step);
  use.bind(4, last_step);
  use.bind(5, static_cast<std::int64_t>(buckets));
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) {
    out.push_back(
        {use.int64(0), use.int64(1), use.real(2), use.real(3), use.real(4), use.int64(5)});
  }
  if (rc != SQLITE_DONE) return impl.db.error("cannot down-sample a metric series");
  return out;
}

Result<std::vector<MemorySample>> RunStore::memory_at(std::int64_t run_id, std::int64_t step) {
  Impl& impl = *impl_;
  if (Status s = impl.statement(&impl.memory_at,
                                "SELECT rank, weights, grads, optimizer_state, activations, "
                                "workspace, peak FROM memory_samples WHERE run_id = ?1 AND step "
                                "= ?2 ORDER BY rank");
      !s) {
    return s;
  }
  StatementUse use(impl.memory_at);
  use.bind(1, run_id);
  use.bind(2, step);
  std::vector<MemorySample> out;
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) {
    out.push_back({static_cast<int>(use.int64(0)), use.int64(1), use.int64(2), use.int64(3),
                   use.int64(4), use.int64(5), use.int64(6)});
  }
  if (rc != SQLITE_DONE) return impl.db.error("cannot read memory samples");
  return out;
}

}  // namespace lattice::storage
