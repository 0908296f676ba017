// RunStore's reader side: the runs list, finding a run, tailing, series, plot down-sampling
// and a run's whole history. Each call is one statement or one read transaction, so it sees
// whole steps only.
#include <algorithm>
#include <cctype>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>

#include "lattice/storage/run_store.h"
#include "run_store_impl.h"

namespace lattice::storage {
namespace {

std::optional<double> optional_real(const StatementUse& use, int col) {
  if (use.is_null(col)) return std::nullopt;
  return use.real(col);
}

// SQLite stores a NaN as NULL; it reads back as NaN.
double real_or_nan(const StatementUse& use, int col) {
  return use.is_null(col) ? std::numeric_limits<double>::quiet_NaN() : use.real(col);
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

Status RunStore::Impl::load_runs(const RunFilter& filter, std::optional<std::int64_t> id,
                                 std::vector<RunInfo>* runs) {
  // One read transaction: the runs, their tags and latest values from the same snapshot.
  ReadTransaction read(db);
  if (!read.begin_status()) return read.begin_status();
  const double now = filter.now.value_or(unix_now());
  if (!id) {  // one allocation: growing a vector of 10,000 runs moves them a dozen times
    Statement count;
    if (Status s = db.prepare("SELECT count(*) FROM runs", &count); !s) return s;
    StatementUse use(count);
    if (use.step() == SQLITE_ROW) runs->reserve(static_cast<std::size_t>(use.int64(0)));
  }
  {
    // Without the config the statement reads only the runs_listed index (schema.cpp), a
    // tenth of the runs table's pages (Note "runs_listed").
    const std::string sql =
        std::string(
            "SELECT id, name, status, created_at, started_at, ended_at, heartbeat_at, "
            "host, command_line, ") +
        (filter.with_config ? "config_json" : "''") +
        ", tp, pp, dp, world_size, parameter_count, notes, error FROM runs WHERE instr(name, ?1) "
        "> 0 AND (?2 = '' OR EXISTS (SELECT 1 FROM run_tags t WHERE t.run_id = runs.id AND t.tag "
        "= ?2)) AND (?3 IS NULL OR id = ?3) ORDER BY id";
    Statement select;
    if (Status s = db.prepare(sql.c_str(), &select); !s) return s;
    StatementUse use(select);
    use.bind(1, filter.name_contains);
    use.bind(2, filter.tag);
    if (id) use.bind(3, *id);
    int rc;
    while ((rc = use.step()) == SQLITE_ROW) {
      RunInfo r = read_run(use, now, filter.stale_after_s);
      if (!filter.status || *filter.status == r.status) runs->push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) return db.error("cannot list runs");
  }
  Statement tags, latest;
  if (Status s = db.prepare("SELECT tag FROM run_tags WHERE run_id = ?1 ORDER BY tag", &tags); !s) {
    return s;
  }
  // Lineage: one read of run_parents (a row per resumed run only), not a lookup per run.
  std::unordered_map<std::int64_t, std::pair<std::optional<std::int64_t>, std::int64_t>> parents;
  {
    Statement parent;
    if (Status s =
            db.prepare("SELECT run_id, parent_run_id, resume_step FROM run_parents", &parent);
        !s) {
      return s;
    }
    StatementUse use(parent);
    while (use.step() == SQLITE_ROW)
      parents[use.int64(0)] = {
          use.is_null(1) ? std::nullopt : std::optional<std::int64_t>(use.int64(1)), use.int64(2)};
  }
  if (Status s = db.prepare(
          "SELECT k.name, l.value, l.step FROM latest_metrics l JOIN metric_keys k ON k.id = "
          "l.key_id WHERE l.run_id = ?1",
          &latest);
      !s) {
    return s;
  }
  for (RunInfo& r : *runs) {
    {
      StatementUse use(tags);
      use.bind(1, r.id);
      while (use.step() == SQLITE_ROW) r.tags.push_back(use.text(0));
    }
    if (auto p = parents.find(r.id); p != parents.end()) {
      r.parent_run_id = p->second.first;
      r.resume_step = p->second.second;
    }
    StatementUse use(latest);
    use.bind(1, r.id);
    while (use.step() == SQLITE_ROW) {
      r.latest[use.text(0)] = real_or_nan(use, 1);
      r.latest_step = std::max(r.latest_step.value_or(use.int64(2)), use.int64(2));
    }
  }
  return Status::ok();
}

Result<std::vector<RunInfo>> RunStore::list_runs(const RunFilter& filter) {
  std::vector<RunInfo> runs;
  if (Status s = impl_->load_runs(filter, std::nullopt, &runs); !s) return s;
  return runs;
}

Result<std::vector<std::pair<std::int64_t, std::string>>> RunStore::run_configs(
    const std::vector<std::int64_t>& ids) {
  Impl& impl = *impl_;
  ReadTransaction read(impl.db);
  if (!read.begin_status()) return read.begin_status();
  Statement select;
  if (Status s = impl.db.prepare("SELECT config_json FROM runs WHERE id = ?1", &select); !s) {
    return s;
  }
  std::vector<std::pair<std::int64_t, std::string>> configs;
  configs.reserve(ids.size());
  for (std::int64_t id : ids) {
    StatementUse use(select);
    use.bind(1, id);
    const int rc = use.step();
    if (rc == SQLITE_ROW) configs.emplace_back(id, use.text(0));
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return impl.db.error("cannot read run configs");
  }
  return configs;
}

Result<RunInfo> RunStore::find_run(std::string_view run) {
  Result<std::vector<RunInfo>> runs = list_runs();
  if (!runs) return runs.status();
  const bool digits = !run.empty() && std::all_of(run.begin(), run.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  const RunInfo *by_id = nullptr, *by_name = nullptr;
  for (const RunInfo& r : *runs) {
    if (digits && std::to_string(r.id) == run) by_id = &r;
    if (r.name == run) by_name = &r;
  }
  if (by_id && by_name && by_id != by_name) {
    return Status::invalid_argument(
        path() + ": '" + std::string(run) + "' is both the id of run '" + by_id->name +
        "' and the name of run " + std::to_string(by_name->id) + "; say '" + by_id->name + "' or " +
        std::to_string(by_name->id) + " instead");
  }
  if (by_id || by_name) return by_id ? *by_id : *by_name;
  return Status::invalid_argument(path() + ": no run has the id or name '" + std::string(run) +
                                  "'");
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
        {use.int64(0), use.int64(1), use.int64(2), use.text(3), real_or_nan(use, 4), use.real(5)});
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
  while ((rc = use.step()) == SQLITE_ROW) points.push_back({use.int64(0), real_or_nan(use, 1)});
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
  ReadTransaction read(impl.db);  // the summaries and the points from one snapshot
  if (!read.begin_status()) return read.begin_status();
  if (Status s =
          impl.blocks.downsample(impl.db, run_id, key_id, first_step, last_step, buckets, &out);
      !s) {
    return s;
  }
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

Result<std::vector<StepMemory>> RunStore::memory_peaks(std::int64_t run_id) {
  Impl& impl = *impl_;
  Statement select;
  if (Status s = impl.db.prepare(
          "SELECT rank, MAX(step), MAX(weights), MAX(grads), MAX(optimizer_state), "
          "MAX(activations), MAX(workspace), MAX(peak) FROM memory_samples WHERE run_id = ?1 "
          "GROUP BY rank ORDER BY rank",
          &select);
      !s) {
    return s;
  }
  StatementUse use(select);
  use.bind(1, run_id);
  std::vector<StepMemory> out;
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) {
    out.push_back({use.int64(1),
                   {static_cast<int>(use.int64(0)), use.int64(2), use.int64(3), use.int64(4),
                    use.int64(5), use.int64(6), use.int64(7)}});
  }
  if (rc != SQLITE_DONE) return impl.db.error("cannot read memory samples");
  return out;
}

Result<std::vector<std::int64_t>> RunStore::timeline_steps(std::int64_t run_id) {
  Impl& impl = *impl_;
  Statement select;
  if (Status s = impl.db.prepare(
          "SELECT DISTINCT step FROM timeline_events WHERE run_id = ?1 ORDER BY step", &select);
      !s) {
    return s;
  }
  StatementUse use(select);
  use.bind(1, run_id);
  std::vector<std::int64_t> out;
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) out.push_back(use.int64(0));
  if (rc != SQLITE_DONE) return impl.db.error("cannot list the timeline steps of a run");
  return out;
}

Result<std::vector<TimelineEvent>> RunStore::timeline(std::int64_t run_id, std::int64_t step) {
  Impl& impl = *impl_;
  Statement select;
  if (Status s = impl.db.prepare("SELECT rank, stage, microbatch, kind, start_s, end_s FROM "
                                 "timeline_events WHERE run_id = ?1 AND step = ?2 ORDER BY "
                                 "rank, start_s, id",
                                 &select);
      !s) {
    return s;
  }
  StatementUse use(select);
  use.bind(1, run_id);
  use.bind(2, step);
  std::vector<TimelineEvent> out;
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) {
    TimelineEvent e;
    e.rank = static_cast<int>(use.int64(0));
    e.stage = static_cast<int>(use.int64(1));
    e.microbatch = static_cast<int>(use.int64(2));
    e.kind = use.text(3);
    e.start_s = use.real(4);
    e.end_s = use.real(5);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return impl.db.error("cannot read the timeline of a run");
  return out;
}

Result<std::int64_t> RunStore::logged_steps(std::int64_t run_id) {
  Impl& impl = *impl_;
  ReadTransaction read(impl.db);
  if (!read.begin_status()) return read.begin_status();
  std::vector<std::int64_t> keys;
  {
    Statement select;
    if (Status s = impl.db.prepare("SELECT key_id FROM latest_metrics WHERE run_id = ?1", &select);
        !s) {
      return s;
    }
    StatementUse use(select);
    use.bind(1, run_id);
    int rc;
    while ((rc = use.step()) == SQLITE_ROW) keys.push_back(use.int64(0));
    if (rc != SQLITE_DONE) return impl.db.error("cannot list the metric keys of a run");
  }
  std::int64_t most = 0;
  for (std::int64_t key_id : keys) {
    std::int64_t points = 0;
    if (Status s = impl.blocks.count(impl.db, run_id, key_id, &points); !s) return s;
    most = std::max(most, points);
  }
  return most;
}

Result<RunHistory> RunStore::history(std::int64_t run_id) {
  Impl& impl = *impl_;
  Database& db = impl.db;
  ReadTransaction read(db);
  if (!read.begin_status()) return read.begin_status();
  std::vector<RunInfo> runs;
  if (Status s = impl.load_runs({}, run_id, &runs); !s) return s;
  if (runs.empty()) {
    return Status::invalid_argument(path() + ": no run with id " + std::to_string(run_id));
  }
  RunHistory h;
  h.run = std::move(runs[0]);
  Statement keys, points, memory, checkpoints;
  if (Status s = db.prepare(
          "SELECT k.id, k.name FROM latest_metrics l JOIN metric_keys k ON k.id = l.key_id "
          "WHERE l.run_id = ?1 ORDER BY k.name",
          &keys);
      !s) {
    return s;
  }
  if (Status s = db.prepare("SELECT step, value FROM metrics WHERE run_id = ?1 AND key_id = ?2 "
                            "ORDER BY step, id",
                            &points);
      !s) {
    return s;
  }
  {
    StatementUse each(keys);
    each.bind(1, run_id);
    while (each.step() == SQLITE_ROW) {
      KeySeries series{each.text(1), {}};
      StatementUse use(points);
      use.bind(1, run_id);
      use.bind(2, each.int64(0));
      int rc;
      while ((rc = use.step()) == SQLITE_ROW) {
        series.points.push_back({use.int64(0), real_or_nan(use, 1)});
      }
      if (rc != SQLITE_DONE) return db.error("cannot read the series '" + series.key + "'");
      h.metrics.push_back(std::move(series));
    }
  }
  if (Status s = db.prepare("SELECT step, rank, weights, grads, optimizer_state, activations, "
                            "workspace, peak FROM memory_samples WHERE run_id = ?1 ORDER BY "
                            "step, rank, id",
                            &memory);
      !s) {
    return s;
  }
  {
    StatementUse use(memory);
    use.bind(1, run_id);
    int rc;
    while ((rc = use.step()) == SQLITE_ROW) {
      h.memory.push_back({use.int64(0),
                          {static_cast<int>(use.int64(1)), use.int64(2), use.int64(3), use.int64(4),
                           use.int64(5), use.int64(6), use.int64(7)}});
    }
    if (rc != SQLITE_DONE) return db.error("cannot read memory samples");
  }
  if (Status s = db.prepare("SELECT step, path, bytes, created_at FROM checkpoints WHERE "
                            "run_id = ?1 ORDER BY step, id",
                            &checkpoints);
      !s) {
    return s;
  }
  StatementUse use(checkpoints);
  use.bind(1, run_id);
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) {
    h.checkpoints.push_back({use.int64(0), use.text(1), use.int64(2), use.real(3)});
  }
  if (rc != SQLITE_DONE) return db.error("cannot read checkpoints");
  return h;
}

}  // namespace lattice::storage
