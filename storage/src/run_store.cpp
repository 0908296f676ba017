// RunStore: opening, the run lifecycle and the writer side (one transaction per call).
#include "lattice/storage/run_store.h"

#include <chrono>
#include <utility>

#include "run_store_impl.h"
#include "schema.h"

namespace lattice::storage {

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

namespace {
constexpr const char* kStatusNames[] = {"created", "running", "finished",
                                        "failed",  "killed",  "crashed"};
}  // namespace

const char* run_status_name(RunStatus status) {
  return kStatusNames[static_cast<int>(status)];
}

std::optional<RunStatus> parse_run_status(std::string_view name) {
  for (int i = 0; i < static_cast<int>(std::size(kStatusNames)); ++i) {
    if (name == kStatusNames[i]) return static_cast<RunStatus>(i);
  }
  return std::nullopt;
}

Status RunStore::Impl::run_status_of(std::int64_t run_id, std::string* status) {
  if (Status s = statement(&run_status, "SELECT status FROM runs WHERE id = ?1"); !s) return s;
  StatementUse use(run_status);
  use.bind(1, run_id);
  const int rc = use.step();
  if (rc == SQLITE_DONE) {
    return Status::invalid_argument(db.path() + ": no run with id " + std::to_string(run_id));
  }
  if (rc != SQLITE_ROW) return db.error("cannot read the status of a run");
  *status = use.text(0);
  return Status::ok();
}

Status RunStore::Impl::key_id(std::string_view name, bool create, std::int64_t* id) {
  if (auto it = key_ids.find(std::string(name)); it != key_ids.end()) {
    *id = it->second;
    return Status::ok();
  }
  if (create) {
    if (Status s = statement(&insert_key, "INSERT OR IGNORE INTO metric_keys(name) VALUES (?1)");
        !s) {
      return s;
    }
    StatementUse use(insert_key);
    use.bind(1, name);
    if (use.step() != SQLITE_DONE) return db.error("cannot add a metric key");
  }
  if (Status s = statement(&select_key, "SELECT id FROM metric_keys WHERE name = ?1"); !s) {
    return s;
  }
  StatementUse use(select_key);
  use.bind(1, name);
  const int rc = use.step();
  if (rc == SQLITE_DONE) {
    *id = 0;  // unknown and not created: not cached, it may appear later
    return Status::ok();
  }
  if (rc != SQLITE_ROW) return db.error("cannot read a metric key");
  *id = use.int64(0);
  key_ids.emplace(std::string(name), *id);
  return Status::ok();
}

RunStore::RunStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunStore::~RunStore() {
  if (impl_) flush();  // errors have no one to go to here; finish() reports them
}

Result<std::unique_ptr<RunStore>> RunStore::open(const std::string& path,
                                                 const OpenOptions& options) {
  Result<Database> db = options.read_only ? open_run_database_read_only(path)
                                          : open_run_database(path, options.journal);
  if (!db) return db.status();
  auto impl = std::make_unique<Impl>();
  impl->db = std::move(db.value());
  return std::unique_ptr<RunStore>(new RunStore(std::move(impl)));
}

const std::string& RunStore::path() const {
  return impl_->db.path();
}

Result<std::int64_t> RunStore::create_run(const NewRun& run) {
  Database& db = impl_->db;
  if (run.name.empty()) return Status::invalid_argument(db.path() + ": a run needs a name");
  Transaction txn(db);
  if (!txn.begin_status()) return txn.begin_status();
  Statement insert;
  if (Status s = db.prepare(
          "INSERT INTO runs(name, status, created_at, host, command_line, config_json, tp, pp, "
          "dp, world_size, parameter_count, notes) "
          "VALUES (?1, 'created', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
          &insert);
      !s) {
    return s;
  }
  {
    StatementUse use(insert);
    use.bind(1, run.name);
    use.bind(2, unix_now());
    use.bind(3, run.host);
    use.bind(4, run.command_line);
    use.bind(5, run.config_json);
    use.bind(6, run.layout.tp);
    use.bind(7, run.layout.pp);
    use.bind(8, run.layout.dp);
    use.bind(9, run.world_size);
    use.bind(10, run.parameter_count);
    use.bind(11, run.notes);
    const int rc = use.step();
    if (rc == SQLITE_CONSTRAINT_UNIQUE) {
      return Status::invalid_argument(db.path() + ": a run named '" + run.name +
                                      "' already exists; choose another --run-name");
    }
    if (rc != SQLITE_DONE) return db.error("cannot create run '" + run.name + "'");
  }
  const std::int64_t id = sqlite3_last_insert_rowid(db.handle());
  Statement tag;
  if (Status s = db.prepare("INSERT OR IGNORE INTO run_tags(run_id, tag) VALUES (?1, ?2)", &tag);
      !s) {
    return s;
  }
  for (const std::string& t : run.tags) {
    StatementUse use(tag);
    use.bind(1, id);
    use.bind(2, t);
    if (use.step() != SQLITE_DONE) return db.error("cannot tag run '" + run.name + "'");
  }
  if (run.parent) {
    Statement parent;
    if (Status s = db.prepare(
            "INSERT INTO run_parents(run_id, parent_run_id, resume_step) VALUES (?1, ?2, ?3)",
            &parent);
        !s) {
      return s;
    }
    StatementUse use(parent);
    use.bind(1, id);
    use.bind(2, run.parent->run_id);
    use.bind(3, run.parent->step);
    if (use.step() != SQLITE_DONE)  // a parent id no run has fails the foreign key
      return db.error("cannot record that run '" + run.name + "' resumed from run " +
                      std::to_string(run.parent->run_id));
  }
  if (Status s = txn.commit(); !s) return s;
  return id;
}

Status RunStore::Impl::transition(std::int64_t run_id, const char* sql,
                                  std::initializer_list<std::string_view> allowed_from,
                                  std::string_view to, std::string_view error) {
  Transaction txn(db);
  if (!txn.begin_status()) return txn.begin_status();
  std::string from;
  if (Status s = run_status_of(run_id, &from); !s) return s;
  bool allowed = false;
  for (std::string_view a : allowed_from) allowed = allowed || from == a;
  if (!allowed) {
    return Status::invalid_argument(db.path() + ": run " + std::to_string(run_id) + " is " + from +
                                    "; it cannot become " + std::string(to));
  }
  Statement update;
  if (Status s = db.prepare(sql, &update); !s) return s;
  {
    StatementUse use(update);
    use.bind(1, run_id);
    use.bind(2, unix_now());
    use.bind(3, to);
    use.bind(4, error);
    if (use.step() != SQLITE_DONE) return db.error("cannot update run " + std::to_string(run_id));
  }
  return txn.commit();
}

Status RunStore::mark_running(std::int64_t run_id) {
  return impl_->transition(run_id,
                           "UPDATE runs SET status = ?3, started_at = ?2, heartbeat_at = ?2, "
                           "error = ?4 WHERE id = ?1",
                           {"created"}, "running", "");
}

Status RunStore::finish(std::int64_t run_id, RunStatus status, std::string_view error) {
  if (Status s = flush(); !s) return s;  // a run ends after its last step
  if (status != RunStatus::kFinished && status != RunStatus::kFailed &&
      status != RunStatus::kKilled) {
    return Status::invalid_argument(path() + ": a run ends finished, failed or killed, not " +
                                    run_status_name(status));
  }
  if (status == RunStatus::kFinished) {
    return impl_->transition(run_id,
                             "UPDATE runs SET status = ?3, ended_at = ?2, heartbeat_at = ?2, "
                             "error = ?4 WHERE id = ?1",
                             {"running"}, "finished", error);
  }
  return impl_->transition(run_id,
                           "UPDATE runs SET status = ?3, ended_at = ?2, error = ?4 WHERE id = ?1",
                           {"created", "running"}, run_status_name(status), error);
}

Status RunStore::heartbeat(std::int64_t run_id) {
  return impl_->write_heartbeat(run_id, unix_now());
}

Status RunStore::Impl::write_heartbeat(std::int64_t run_id, double now) {
  if (Status s = statement(&heartbeat,
                           "UPDATE runs SET heartbeat_at = ?2 WHERE id = ?1 AND "
                           "status = 'running'");
      !s) {
    return s;
  }
  StatementUse use(heartbeat);
  use.bind(1, run_id);
  use.bind(2, now);
  if (use.step() != SQLITE_DONE) return db.error("cannot record a heartbeat");
  if (sqlite3_changes(db.handle()) != 1) {
    return Status::invalid_argument(db.path() + ": run " + std::to_string(run_id) +
                                    " is not running; no heartbeat recorded");
  }
  heartbeat_written[run_id] = now;
  return Status::ok();
}

Status RunStore::Impl::check_running(std::int64_t run_id, double now) {
  auto written = heartbeat_written.find(run_id);
  if (written == heartbeat_written.end() || now - written->second >= 1.0) {
    return write_heartbeat(run_id, now);  // also the "is it running" check
  }
  std::string status;
  if (Status s = run_status_of(run_id, &status); !s) return s;
  if (status == "running") return Status::ok();
  return Status::invalid_argument(db.path() + ": run " + std::to_string(run_id) + " is " + status +
                                  ", not running; no step recorded");
}

Status RunStore::Impl::append_step(std::int64_t run_id, std::int64_t step,
                                   const std::map<std::string, double>& values,
                                   const std::vector<MemorySample>& memory, double now) {
  if (Status s = statement(&insert_metric,
                           "INSERT INTO metrics(run_id, key_id, step, value, wall_time) "
                           "VALUES (?1, ?2, ?3, ?4, ?5)");
      !s) {
    return s;
  }
  for (const auto& [key, value] : values) {
    std::int64_t id = 0;
    if (Status s = key_id(key, /*create=*/true, &id); !s) return s;
    {
      StatementUse use(insert_metric);
      use.bind(1, run_id);
      use.bind(2, id);
      use.bind(3, step);
      use.bind(4, value);
      use.bind(5, now);
      if (use.step() != SQLITE_DONE) return db.error("cannot log metric '" + key + "'");
    }
    if (Status s = blocks.after_insert(db, run_id, id, step); !s) return s;
    auto [latest, fresh] = latest_pending.try_emplace(id, StepValue{step, value});
    if (!fresh && step >= latest->second.step) latest->second = {step, value};
  }
  if (!memory.empty()) {
    if (Status s = statement(&insert_memory,
                             "INSERT INTO memory_samples(run_id, step, rank, weights, "
                             "grads, optimizer_state, activations, workspace, peak) "
                             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
        !s) {
      return s;
    }
    for (const MemorySample& m : memory) {
      StatementUse use(insert_memory);
      use.bind(1, run_id);
      use.bind(2, step);
      use.bind(3, m.rank);
      use.bind(4, m.weights);
      use.bind(5, m.grads);
      use.bind(6, m.optimizer_state);
      use.bind(7, m.activations);
      use.bind(8, m.workspace);
      use.bind(9, m.peak);
      if (use.step() != SQLITE_DONE) return db.error("cannot log a memory sample");
    }
  }
  return Status::ok();
}

Status RunStore::Impl::write_latest(std::int64_t run_id) {
  if (Status s = statement(
          &upsert_latest,
          "INSERT INTO latest_metrics(run_id, key_id, step, value) VALUES (?1, ?2, ?3, ?4) "
          "ON CONFLICT(run_id, key_id) DO UPDATE SET step = excluded.step, value = "
          "excluded.value WHERE excluded.step >= latest_metrics.step");
      !s) {
    return s;
  }
  for (const auto& [key_id, latest] : latest_pending) {
    StatementUse use(upsert_latest);
    use.bind(1, run_id);
    use.bind(2, key_id);
    use.bind(3, latest.step);
    use.bind(4, latest.value);
    if (use.step() != SQLITE_DONE) return db.error("cannot update the latest metric values");
  }
  latest_pending.clear();
  return Status::ok();
}

Status RunStore::log_step(std::int64_t run_id, std::int64_t step,
                          const std::map<std::string, double>& values,
                          const std::vector<MemorySample>& memory) {
  Impl& impl = *impl_;
  if (impl.commit_window.count() <= 0) return impl.commit_steps(run_id, {{step, values, memory}});
  const auto now = std::chrono::steady_clock::now();
  if (impl.held.empty()) impl.oldest_held = now;
  impl.held.push_back({run_id, {step, values, memory}});
  const bool recent_commit = impl.last_commit != std::chrono::steady_clock::time_point{} &&
                             now - impl.last_commit < impl.commit_window;
  if (recent_commit && now - impl.oldest_held < impl.commit_window) {
    return Status::ok();  // this step goes with the next ones
  }
  return flush();
}

Status RunStore::log_steps(std::int64_t run_id, const std::vector<StepRecord>& steps) {
  if (Status s = flush(); !s) return s;
  return impl_->commit_steps(run_id, steps);
}

void RunStore::set_commit_window(std::chrono::microseconds window) {
  impl_->commit_window = window;
}

Status RunStore::flush() {
  Impl& impl = *impl_;
  std::vector<Impl::HeldStep> held = std::move(impl.held);
  impl.held.clear();
  Status first_error;
  for (std::size_t i = 0; i < held.size();) {
    std::vector<StepRecord> steps;  // consecutive steps of one run: one transaction
    std::size_t end = i;
    for (; end < held.size() && held[end].run_id == held[i].run_id; ++end) {
      steps.push_back(std::move(held[end].record));
    }
    if (Status s = impl.commit_steps(held[i].run_id, steps); !s) {
      if (first_error.is_ok()) first_error = s;
      for (StepRecord& r : steps) impl.unwritten.push_back({held[i].run_id, std::move(r)});
    }
    i = end;
  }
  return first_error;
}

std::vector<StepRecord> RunStore::take_unwritten(std::int64_t run_id) {
  std::vector<StepRecord> taken;
  std::vector<Impl::HeldStep> others;
  for (Impl::HeldStep& h : impl_->unwritten) {
    if (h.run_id == run_id) {
      taken.push_back(std::move(h.record));
    } else {
      others.push_back(std::move(h));
    }
  }
  impl_->unwritten = std::move(others);
  return taken;
}

Status RunStore::Impl::commit_steps(std::int64_t run_id, const std::vector<StepRecord>& steps) {
  Transaction txn(db);
  // Keys created, blocks closed and heartbeats written by a transaction that rolls back are
  // gone: forget what this connection believes about them then.
  struct ForgetUnlessCommitted {
    Impl& impl;
    bool committed = false;
    ~ForgetUnlessCommitted() {
      if (committed) return;
      impl.key_ids.clear();
      impl.blocks.forget();
      impl.heartbeat_written.clear();
    }
  } forget{*this, false};
  if (!txn.begin_status()) return txn.begin_status();
  const double now = unix_now();
  if (Status s = check_running(run_id, now); !s) return s;
  if (Status s = blocks.begin_write(db, run_id); !s) return s;
  latest_pending.clear();
  for (const StepRecord& r : steps) {
    if (Status s = append_step(run_id, r.step, r.values, r.memory, now); !s) return s;
  }
  if (Status s = write_latest(run_id); !s) return s;
  if (Status s = txn.commit(); !s) return s;
  forget.committed = true;
  last_commit = std::chrono::steady_clock::now();
  return Status::ok();
}

Status RunStore::log_timeline(std::int64_t run_id, std::int64_t step,
                              const std::vector<TimelineEvent>& events) {
  if (Status s = flush(); !s) return s;  // in call order after held steps
  Database& db = impl_->db;
  Transaction txn(db);
  if (!txn.begin_status()) return txn.begin_status();
  Statement insert;
  if (Status s = db.prepare(
          "INSERT INTO timeline_events(run_id, step, rank, stage, microbatch, kind, start_s, "
          "end_s) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
          &insert);
      !s) {
    return s;
  }
  for (const TimelineEvent& e : events) {
    StatementUse use(insert);
    use.bind(1, run_id);
    use.bind(2, step);
    use.bind(3, e.rank);
    use.bind(4, e.stage);
    use.bind(5, e.microbatch);
    use.bind(6, e.kind);
    use.bind(7, e.start_s);
    use.bind(8, e.end_s);
    if (use.step() != SQLITE_DONE) return db.error("cannot log a timeline event");
  }
  return txn.commit();
}

Status RunStore::log_message(std::int64_t run_id, std::string_view level, int rank,
                             std::string_view message) {
  if (Status s = flush(); !s) return s;  // in call order after held steps
  Database& db = impl_->db;
  Statement insert;
  if (Status s = db.prepare(
          "INSERT INTO log_events(run_id, time, level, rank, message) VALUES (?1, ?2, ?3, ?4, "
          "?5)",
          &insert);
      !s) {
    return s;
  }
  StatementUse use(insert);
  use.bind(1, run_id);
  use.bind(2, unix_now());
  use.bind(3, level);
  use.bind(4, rank);
  use.bind(5, message);
  if (use.step() != SQLITE_DONE) return db.error("cannot log a message");
  return Status::ok();
}

Status RunStore::record_checkpoint(std::int64_t run_id, const CheckpointRecord& checkpoint) {
  if (Status s = flush(); !s) return s;  // in call order after held steps
  Database& db = impl_->db;
  Statement insert;
  if (Status s = db.prepare(
          "INSERT INTO checkpoints(run_id, step, path, bytes, created_at) VALUES (?1, ?2, ?3, "
          "?4, ?5)",
          &insert);
      !s) {
    return s;
  }
  StatementUse use(insert);
  use.bind(1, run_id);
  use.bind(2, checkpoint.step);
  use.bind(3, checkpoint.path);
  use.bind(4, checkpoint.bytes);
  use.bind(5, unix_now());
  if (use.step() != SQLITE_DONE) return db.error("cannot record a checkpoint");
  return Status::ok();
}

Status RunStore::check_integrity() {
  Database& db = impl_->db;
  Statement check;
  if (Status s = db.prepare("PRAGMA integrity_check", &check); !s) return s;
  StatementUse use(check);
  std::string report;
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) report += use.text(0) + "; ";
  if (rc != SQLITE_DONE) return db.error("integrity check failed to run");
  if (report != "ok; ") return Status::corrupt(db.path() + ": integrity check: " + report);
  return Status::ok();
}

}  // namespace lattice::storage
