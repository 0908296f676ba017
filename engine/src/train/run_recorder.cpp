// TeeSink, and RunRecorder: the run store's writer during training, with its heartbeat timer
// and Note [recording through a full disk] (lattice/run_record.h).
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "lattice/data.h"
#include "lattice/run_record.h"
#include "lattice/storage/run_store.h"

namespace lattice {

void TeeSink::on_start(const RunStart& s) {
  for (MetricsSink* k : sinks_) k->on_start(s);
}
void TeeSink::on_iteration(const IterationMetrics& m) {
  for (MetricsSink* k : sinks_) k->on_iteration(m);
}
void TeeSink::on_validation(const ValidationMetrics& v) {
  for (MetricsSink* k : sinks_) k->on_validation(v);
}
void TeeSink::on_task_scores(const std::vector<TaskScoreMetrics>& scores) {
  for (MetricsSink* k : sinks_) k->on_task_scores(scores);
}
void TeeSink::on_message(const std::string& m) {
  for (MetricsSink* k : sinks_) k->on_message(m);
}
void TeeSink::on_rank_reports(int iteration, const std::vector<RankReport>& ranks) {
  for (MetricsSink* k : sinks_) k->on_rank_reports(iteration, ranks);
}
void TeeSink::on_checkpoint(int iteration, const std::string& path, int64_t bytes, double seconds) {
  for (MetricsSink* k : sinks_) k->on_checkpoint(iteration, path, bytes, seconds);
}
void TeeSink::on_instability(const InstabilityEvent& e) {
  for (MetricsSink* k : sinks_) k->on_instability(e);
}
void TeeSink::on_end(const TrainSummary& s) {
  for (MetricsSink* k : sinks_) k->on_end(s);
}

// The recorder's state, guarded by `mutex` (the trainer's calls and the timer thread).
struct RunRecorder::Impl {
  RecorderOptions options;
  std::unique_ptr<storage::RunStore> store;
  std::string db_path;
  int64_t run_id = 0;
  int64_t memory_step = -1;  // step of the last memory samples written
  bool done = false;
  std::atomic<bool> stopped_training{false};  // set by the timer too, read without the lock

  // Note [recording through a full disk] (run_record.h).
  Status outage;         // the failed write that began the current outage; ok while writing works
  Status first_failure;  // the run's first failed write, for the note
  std::vector<storage::StepRecord> unrecorded;  // in step order, written when it works again
  std::vector<storage::CheckpointRecord> unrecorded_checkpoints;
  int64_t lost_steps = 0, first_lost = 0, last_lost = 0;  // steps that will not be written
  int64_t previous_lost = 0;                              // the step of the last record lose() saw
  int64_t lost_timelines = 0, lost_checkpoints = 0;
  int64_t last_step = 0;          // the latest step handed to write_step
  int64_t outage_step = 0;        // the first step the current outage kept
  int64_t written_in_outage = 0;  // kept steps written so far

  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::thread timer;

  void report(const std::string& line) const {
    if (options.report) options.report(line);
  }
  void write_step(storage::StepRecord record);
  void keep(storage::StepRecord record);
  void lose(int64_t step);
  void begin_outage(const Status& failure);
  void retry();
  void tick();
  void run_timer();
  // The run's last write: what is still unrecorded is retried once, then counted in the note.
  Status finish(storage::RunStatus status, const std::string& error);
  std::string loss_note() const;
};

void RunRecorder::Impl::write_step(storage::StepRecord record) {
  last_step = std::max(last_step, record.step);
  if (!outage.is_ok()) return keep(std::move(record));
  if (Status s = store->log_step(run_id, record.step, record.values, record.memory); !s)
    begin_outage(s);  // the failed commit's steps, this one included, come back from the store
}

void RunRecorder::Impl::keep(storage::StepRecord record) {
  if (unrecorded.size() < options.max_unrecorded_steps)
    unrecorded.push_back(std::move(record));
  else
    lose(record.step);
}

// Counts the step once: its records (iteration, rank reports, validation, the end) come one
// after another.
void RunRecorder::Impl::lose(int64_t step) {
  if (lost_steps > 0 && step == previous_lost) return;
  first_lost = lost_steps > 0 ? std::min(first_lost, step) : step;
  last_lost = lost_steps > 0 ? std::max(last_lost, step) : step;
  previous_lost = step;
  lost_steps++;
}

void RunRecorder::Impl::begin_outage(const Status& failure) {
  outage = failure;
  if (first_failure.is_ok()) first_failure = failure;
  written_in_outage = 0;
  outage_step = last_step + 1;
  for (storage::StepRecord& r : store->take_unwritten(run_id)) {
    outage_step = std::min(outage_step, r.step);
    keep(std::move(r));
  }
  std::string line = "cannot record in the run database: " + failure.message();
  if (done) return report(line);
  if (options.required) {
    stopped_training = true;
    request_stop();
    return report(line + "; stopping at the next iteration (--db-required)");
  }
  char every[32];
  std::snprintf(every, sizeof every, "%g", options.heartbeat_seconds);
  report(line + "; training goes on, and up to " + std::to_string(options.max_unrecorded_steps) +
         " steps are kept in memory and written when the database works again (retried every " +
         every + " s; --db-required stops training instead)");
}

// Writes the kept steps oldest first, a chunk per transaction, so that a disk with a little
// room takes what fits; a failure leaves the rest kept and says nothing (already reported).
void RunRecorder::Impl::retry() {
  constexpr size_t kChunk = 256;
  while (!unrecorded.empty()) {
    const auto end =
        unrecorded.begin() + static_cast<std::ptrdiff_t>(std::min(kChunk, unrecorded.size()));
    if (!store->log_steps(run_id, std::vector<storage::StepRecord>(unrecorded.begin(), end)))
      return;
    written_in_outage += end - unrecorded.begin();
    unrecorded.erase(unrecorded.begin(), end);
  }
  while (!unrecorded_checkpoints.empty()) {
    if (!store->record_checkpoint(run_id, unrecorded_checkpoints.front())) return;
    unrecorded_checkpoints.erase(unrecorded_checkpoints.begin());
  }
  if (!store->heartbeat(run_id)) return;
  outage = Status::ok();
  std::string line = "the run database records again: " + db_path;
  if (written_in_outage > 0)
    line += ": wrote the " + std::to_string(written_in_outage) + " steps kept from step " +
            std::to_string(outage_step);
  if (lost_steps > 0) line += "; " + loss_note();
  report(line);
}

// Every heartbeat_seconds: the heartbeat (and the steps the commit window holds), or, while
// the store fails, another try.
void RunRecorder::Impl::tick() {
  if (done) return;
  if (!outage.is_ok()) return retry();
  Status s = store->flush();
  if (s) s = store->heartbeat(run_id);
  if (!s) begin_outage(s);
}

void RunRecorder::Impl::run_timer() {
  // Stop signals stay with the trainer's thread, as without this one.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options.heartbeat_seconds));
  std::unique_lock<std::mutex> lock(mutex);
  while (!wake.wait_for(lock, period, [this] { return stopping; })) tick();
}

std::string RunRecorder::Impl::loss_note() const {
  std::string note;
  if (lost_steps > 0)
    note = std::to_string(lost_steps) + (lost_steps == 1 ? " step" : " steps") + " (from " +
           std::to_string(first_lost) + " to " + std::to_string(last_lost) + ")";
  for (auto [count, what] : {std::pair{lost_timelines, "pipeline timeline"},
                             std::pair{lost_checkpoints, "checkpoint record"}}) {
    if (count == 0) continue;
    if (!note.empty()) note += " and ";
    note += std::to_string(count) + " " + what + (count == 1 ? "" : "s");
  }
  if (note.empty()) return note;
  return note + " were not recorded: " + first_failure.message();
}

Status RunRecorder::Impl::finish(storage::RunStatus status, const std::string& error) {
  done = true;  // a failure from here on is reported, but training is over
  if (outage.is_ok())
    if (Status s = store->flush(); !s) begin_outage(s);
  if (!outage.is_ok()) retry();
  if (!outage.is_ok()) {  // still failing at the end: what is kept will not be written
    // Kept steps precede those lost for want of memory; the boundary step may be in both.
    const std::optional<int64_t> counted =
        lost_steps > 0 ? std::optional<int64_t>(first_lost) : std::nullopt;
    for (const storage::StepRecord& r : unrecorded)
      if (r.step != counted) lose(r.step);
    unrecorded.clear();
    lost_checkpoints += static_cast<int64_t>(unrecorded_checkpoints.size());
    unrecorded_checkpoints.clear();
  }
  const std::string note = loss_note();
  const std::string text = error.empty() || note.empty() ? error + note : error + "; " + note;
  if (Status s = store->finish(run_id, status, text); !s)
    return Status::io_error("the run could not be marked " +
                            std::string(storage::run_status_name(status)) + ": " + s.message() +
                            "; its record says running and will show as crashed" +
                            (note.empty() ? "" : "; " + note));
  if (!note.empty()) return Status::io_error(note);  // the note names the file
  return Status::ok();
}

RunRecorder::RunRecorder(std::unique_ptr<Impl> impl, std::string run_name)
    : impl_(std::move(impl)), run_name_(std::move(run_name)) {}

RunRecorder::~RunRecorder() {
  stop_timer();
}

void RunRecorder::stop_timer() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->timer.joinable()) impl_->timer.join();
}

bool RunRecorder::stopped_training() const {
  return impl_->stopped_training;
}

namespace {

// The run of `store` that saved the checkpoint a run resumes from (RecorderOptions::
// resumed_from) into *parent, and the line that says what was found. A checkpoint from
// elsewhere (another database, a copied directory) is no error: the run starts a lineage.
std::string resumed_parent(storage::RunStore& store, const RecorderOptions& options,
                           std::optional<storage::RunParent>* parent) {
  Result<std::optional<storage::RunParent>> found =
      store.find_checkpoint_run(options.resumed_from, options.resumed_step);
  if (!found || !found->has_value())
    return "resumed from " + options.resumed_from + ", a checkpoint no run of this database " +
           "recorded";
  *parent = **found;
  Result<std::vector<storage::LineageLink>> lineage = store.run_lineage((*found)->run_id);
  const std::string name =
      lineage ? "'" + lineage->back().name + "'" : std::to_string((*found)->run_id);
  return "resumed from run " + name + " at step " + std::to_string(options.resumed_step);
}

}  // namespace

Result<std::unique_ptr<RunRecorder>> RunRecorder::open(
    const std::string& db_path, const std::string& run_name, const std::vector<std::string>& tags,
    const std::string& command_line, const std::string& config_json, int64_t parameters,
    int world_size, int tp, int pp, int dp, RecorderOptions options) {
  const std::optional<storage::JournalMode> journal =
      storage::parse_journal_mode(options.journal_mode);
  if (!journal)
    return Status::invalid_argument("--db-journal-mode '" + options.journal_mode +
                                    "' must be auto, wal or delete");
  if (!(options.heartbeat_seconds > 0))
    return Status::invalid_argument("--db-heartbeat-interval must be positive");
  Result<std::unique_ptr<storage::RunStore>> store =
      storage::RunStore::open(db_path, storage::OpenOptions{*journal});
  if (!store)
    return Status::invalid_argument("--db " + db_path + ": " + store.status().message() +
                                    "; add --no-db to train without recording, or record "
                                    "elsewhere with --db FILE");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->db_path = db_path;
  impl->store = std::move(*store);
  // Steps under 2 ms apart (tiny models) share a commit, each still whole to readers; slower
  // steps commit one by one. The timer, on_end, fail and killed commit what is held.
  impl->store->set_commit_window(std::chrono::milliseconds(2));
  storage::NewRun run;
  run.name = run_name;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  run.host = host;
  run.command_line = command_line;
  run.config_json = config_json;
  run.parameter_count = parameters;
  run.tags = tags;
  run.world_size = world_size;
  run.layout = {tp, pp, dp};
  std::string lineage_note;
  if (!impl->options.resumed_from.empty()) {
    lineage_note = resumed_parent(*impl->store, impl->options, &run.parent);
  }
  Result<int64_t> id = impl->store->create_run(run);
  if (!id) return Status::invalid_argument("--run-name " + run_name + ": " + id.status().message());
  impl->run_id = *id;
  if (Status s = impl->store->mark_running(impl->run_id); !s) return s;
  Impl* state = impl.get();
  impl->timer = std::thread([state] { state->run_timer(); });
  auto recorder = std::unique_ptr<RunRecorder>(new RunRecorder(std::move(impl), run_name));
  recorder->lineage_note_ = std::move(lineage_note);
  return recorder;
}

void RunRecorder::on_iteration(const IterationMetrics& m) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  storage::StepRecord step{m.iteration,
                           {{"lm loss", m.lm_loss},
                            {"learning rate", m.learning_rate},
                            {"grad norm", m.grad_norm},
                            {"loss scale", m.loss_scale},
                            {"skipped iterations", m.skipped_iterations},
                            {"nan iterations", m.nan_iterations},
                            {"consumed samples", static_cast<double>(m.consumed_samples)},
                            {"step time", m.step_seconds},
                            {"tokens per second", m.tokens_per_second},
                            {"TFLOP/s per device", m.tflops_per_device},
                            {"MFU", m.mfu}},
                           {}};
  if (!std::isnan(m.moe_aux_loss)) step.values["moe aux loss"] = m.moe_aux_loss;
  // "moe load/layer 2/expert 3": routes per expert (docs/studio.md "MoE"; moe_load_key).
  for (const auto& [layer, counts] : m.moe_expert_load)
    for (size_t e = 0; e < counts.size(); e++)
      step.values[moe_load_key(layer, static_cast<int>(e))] = static_cast<double>(counts[e]);
  impl_->write_step(std::move(step));
}

// At the event's iteration, beside its metrics (lattice/instability.h's keys).
void RunRecorder::on_instability(const InstabilityEvent& e) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->write_step({e.iteration, instability_values(e), {}});
}

void RunRecorder::on_validation(const ValidationMetrics& v) {
  const std::string split = v.split == "test" ? "test" : "validation";
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->write_step(
      {v.iteration, {{split + " lm loss", v.lm_loss}, {split + " lm loss PPL", v.perplexity}}, {}});
}

void RunRecorder::on_task_scores(const std::vector<TaskScoreMetrics>& scores) {
  if (scores.empty()) return;
  std::map<std::string, double> values;
  double acc = 0, acc_norm = 0;
  for (const TaskScoreMetrics& s : scores) {
    values["task " + s.task + " acc"] = s.acc;
    values["task " + s.task + " acc_norm"] = s.acc_norm;
    acc += s.acc;
    acc_norm += s.acc_norm;
  }
  values["task acc"] = acc / static_cast<double>(scores.size());
  values["task acc_norm"] = acc_norm / static_cast<double>(scores.size());
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->write_step({scores.front().iteration, values, {}});
}

namespace {
storage::MemorySample memory_sample(int rank, const MemoryReport& r) {
  storage::MemorySample m;
  m.rank = rank;
  m.weights = static_cast<int64_t>(r.weights);
  m.grads = static_cast<int64_t>(r.grads);
  m.optimizer_state = static_cast<int64_t>(r.optimizer);
  m.activations = static_cast<int64_t>(r.activations);
  m.workspace = static_cast<int64_t>(r.workspace + r.comm_buffers);
  m.peak = static_cast<int64_t>(r.peak_rss);
  return m;
}

// docs/studio.md "System metrics": CPU and resident memory of every rank, the GPU's where NVML
// answered.
void add_system_values(const std::string& prefix, const SystemMetrics& m,
                       std::map<std::string, double>& values) {
  if (m.cpu_percent >= 0) values[prefix + kCpuPercentKey] = m.cpu_percent;
  if (m.cpu_cores > 0) values[prefix + kCpuCoresKey] = m.cpu_cores;
  if (m.rss_bytes > 0) values[prefix + kRssKey] = m.rss_bytes;
  if (m.peak_rss_bytes > 0) values[prefix + kPeakRssKey] = m.peak_rss_bytes;
  if (!m.has_gpu) return;
  values[prefix + kGpuUtilizationKey] = m.gpu_utilization;
  values[prefix + kGpuMemoryKey] = m.gpu_memory_used;
  values[prefix + kGpuPowerKey] = m.gpu_power_watts;
  values[prefix + kGpuTemperatureKey] = m.gpu_temperature_c;
}
}  // namespace

void RunRecorder::on_rank_reports(int iteration, const std::vector<RankReport>& ranks) {
  std::map<std::string, double> values;
  std::vector<storage::MemorySample> memory;
  for (const RankReport& r : ranks) {
    memory.push_back(memory_sample(r.rank, r.memory));
    const std::string p = "rank " + std::to_string(r.rank) + " ";
    values[p + "forward time"] = r.times.forward;
    values[p + "backward time"] = r.times.backward;
    values[p + "pipeline wait time"] = r.times.pipeline_wait;
    values[p + "data-parallel comm time"] = r.times.dp_comm;
    // Ranks of the embedding group, where it is timed (the CPU trainer).
    if (r.times.embedding_comm > 0) values[p + "embedding comm time"] = r.times.embedding_comm;
    values[p + "optimizer time"] = r.times.optimizer;
    // Tensor-parallel collectives (part of forward and backward), where the engine times them
    // (--profile, or a device with cheap marks): what `lattice plan --calibrate` fits the TP link
    // to.
    if (r.times.tp_comm > 0) values[p + "tensor-parallel comm time"] = r.times.tp_comm;
    // GPU ranks (docs/gpu.md#memory): the caching allocator's reserved - in-use bytes.
    if (r.memory.fragmentation > 0)
      values[p + "memory fragmentation"] = static_cast<double>(r.memory.fragmentation);
    add_system_values(p, r.system, values);
  }
  // The reported iteration's pipeline timeline, every rank's boxes (docs/design-notes.md
  // #pipeline-timeline).
  std::vector<storage::TimelineEvent> timeline;
  for (const RankReport& r : ranks)
    for (const TimelineBox& b : r.timeline)
      timeline.push_back(
          {r.rank, b.stage, b.micro_batch, timeline_kind_name(b.kind), b.start, b.end});
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->write_step({iteration, std::move(values), std::move(memory)});
  impl_->memory_step = iteration;
  if (timeline.empty()) return;
  if (!impl_->outage.is_ok()) {
    impl_->lost_timelines++;  // kept only while the store works: a diagnostic, not a series
  } else if (Status s = impl_->store->log_timeline(impl_->run_id, iteration, timeline); !s) {
    impl_->lost_timelines++;
    impl_->begin_outage(s);
  }
}

void RunRecorder::on_checkpoint(int iteration, const std::string& path, int64_t bytes, double) {
  storage::CheckpointRecord c;
  c.step = iteration;
  c.path = path;
  c.bytes = bytes;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (!impl_->outage.is_ok()) {
    impl_->unrecorded_checkpoints.push_back(c);
  } else if (Status s = impl_->store->record_checkpoint(impl_->run_id, c); !s) {
    impl_->unrecorded_checkpoints.push_back(c);
    impl_->begin_outage(s);
  }
}

void RunRecorder::on_end(const TrainSummary& s) {
  std::vector<storage::MemorySample> memory;
  for (const RankReport& r : s.ranks) memory.push_back(memory_sample(r.rank, r.memory));
  if (s.ranks.empty()) memory.push_back(memory_sample(0, s.memory));
  stop_timer();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // The last rank report may already hold this step's memory: one sample per rank and step.
  if (impl_->memory_step == static_cast<int64_t>(s.losses.size())) memory.clear();
  impl_->done = true;
  impl_->write_step({static_cast<int64_t>(s.losses.size()),
                     {{"tokens per second (run)", s.tokens_per_second}},
                     std::move(memory)});
  status_ = impl_->finish(storage::RunStatus::kFinished, "");
}

void RunRecorder::fail(const std::string& error) {
  stop_timer();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->done) return;
  status_ = impl_->finish(storage::RunStatus::kFailed, error);
}

void RunRecorder::killed() {
  stop_timer();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->done) return;
  status_ = impl_->finish(storage::RunStatus::kKilled, "interrupted by a signal");
}

std::string moe_load_key(int layer, int expert) {
  return "moe load/layer " + std::to_string(layer) + "/expert " + std::to_string(expert);
}

bool parse_moe_load_key(std::string_view key, int* layer, int* expert) {
  int l = -1, e = -1, used = 0;
  const std::string text(key);
  if (std::sscanf(text.c_str(), "moe load/layer %d/expert %d%n", &l, &e, &used) != 2 ||
      used != static_cast<int>(text.size()) || l < 0 || e < 0 || text != moe_load_key(l, e))
    return false;
  *layer = l;
  *expert = e;
  return true;
}

std::string default_run_db() {
  return default_data_dir() + "/runs.sqlite";
}

std::string default_run_name() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  std::random_device rd;
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%04x", static_cast<unsigned>(rd() & 0xffff));
  return std::string("run-") + stamp + "-" + suffix;
}

}  // namespace lattice
