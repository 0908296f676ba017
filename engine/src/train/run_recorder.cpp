#include <unistd.h>

#include <map>

#include <chrono>
#include <ctime>
#include <random>

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
void TeeSink::on_message(const std::string& m) {
  for (MetricsSink* k : sinks_) k->on_message(m);
}
void TeeSink::on_rank_reports(int iteration, const std::vector<RankReport>& ranks) {
  for (MetricsSink* k : sinks_) k->on_rank_reports(iteration, ranks);
}
void TeeSink::on_checkpoint(int iteration, const std::string& path, int64_t bytes,
                            double seconds) {
  for (MetricsSink* k : sinks_) k->on_checkpoint(iteration, path, bytes, seconds);
}
void TeeSink::on_end(const TrainSummary& s) {
  for (MetricsSink* k : sinks_) k->on_end(s);
}

struct RunRecorder::Impl {
  std::unique_ptr<storage::RunStore> store;
  int64_t run_id = 0;
  int64_t memory_step = -1;  // step of the last memory samples written
  bool done = false;
};

RunRecorder::RunRecorder(std::unique_ptr<Impl> impl, std::string run_name)
    : impl_(std::move(impl)), run_name_(std::move(run_name)) {}

RunRecorder::~RunRecorder() = default;

Result<std::unique_ptr<RunRecorder>> RunRecorder::open(
    const std::string& db_path, const std::string& run_name, const std::vector<std::string>& tags,
    const std::string& command_line, const std::string& config_json, int64_t parameters,
    int world_size, int tp, int pp, int dp, const std::string& journal_mode) {
  const std::optional<storage::JournalMode> journal = storage::parse_journal_mode(journal_mode);
  if (!journal)
    return Status::invalid_argument("--db-journal-mode '" + journal_mode +
                                    "' must be auto, wal or delete");
  Result<std::unique_ptr<storage::RunStore>> store =
      storage::RunStore::open(db_path, storage::OpenOptions{*journal});
  if (!store) return Status::invalid_argument("--db " + db_path + ": " + store.status().message());
  auto impl = std::make_unique<Impl>();
  impl->store = std::move(*store);
  // Steps under 2 ms apart (tiny models) share a commit, each still whole to readers; slower
  // steps commit one by one. on_end, fail and killed commit what is held (finish() does).
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
  Result<int64_t> id = impl->store->create_run(run);
  if (!id) return Status::invalid_argument("--run-name " + run_name + ": " + id.status().message());
  impl->run_id = *id;
  if (Status s = impl->store->mark_running(impl->run_id); !s) return s;
  return std::unique_ptr<RunRecorder>(new RunRecorder(std::move(impl), run_name));
}

void RunRecorder::keep(const Status& s) {
  if (!s && status_) status_ = s;
}

void RunRecorder::on_iteration(const IterationMetrics& m) {
  keep(impl_->store->log_step(impl_->run_id, m.iteration,
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
                               {"MFU", m.mfu}}));
}

void RunRecorder::on_validation(const ValidationMetrics& v) {
  const std::string split = v.split == "test" ? "test" : "validation";
  keep(impl_->store->log_step(
      impl_->run_id, v.iteration,
      {{split + " lm loss", v.lm_loss}, {split + " lm loss PPL", v.perplexity}}));
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
    // GPU ranks (docs/gpu.md#memory): the caching allocator's reserved - in-use bytes.
    if (r.memory.fragmentation > 0)
      values[p + "memory fragmentation"] = static_cast<double>(r.memory.fragmentation);
  }
  keep(impl_->store->log_step(impl_->run_id, iteration, values, memory));
  impl_->memory_step = iteration;
  // The reported iteration's pipeline timeline, every rank's boxes (docs/design-notes.md
  // #pipeline-timeline).
  std::vector<storage::TimelineEvent> timeline;
  for (const RankReport& r : ranks)
    for (const TimelineBox& b : r.timeline)
      timeline.push_back(
          {r.rank, b.stage, b.micro_batch, timeline_kind_name(b.kind), b.start, b.end});
  if (!timeline.empty()) keep(impl_->store->log_timeline(impl_->run_id, iteration, timeline));
}

void RunRecorder::on_checkpoint(int iteration, const std::string& path, int64_t bytes, double) {
  storage::CheckpointRecord c;
  c.step = iteration;
  c.path = path;
  c.bytes = bytes;
  keep(impl_->store->record_checkpoint(impl_->run_id, c));
}

void RunRecorder::on_end(const TrainSummary& s) {
  std::vector<storage::MemorySample> memory;
  for (const RankReport& r : s.ranks) memory.push_back(memory_sample(r.rank, r.memory));
  if (s.ranks.empty()) memory.push_back(memory_sample(0, s.memory));
  // The last rank report may already hold this step's memory: one sample per rank and step.
  if (impl_->memory_step == static_cast<int64_t>(s.losses.size())) memory.clear();
  keep(impl_->store->log_step(impl_->run_id, static_cast<int64_t>(s.losses.size()),
                              {{"tokens per second (run)", s.tokens_per_second}}, memory));
  keep(impl_->store->finish(impl_->run_id, storage::RunStatus::kFinished));
  impl_->done = true;
}

void RunRecorder::fail(const std::string& error) {
  if (impl_->done) return;
  keep(impl_->store->finish(impl_->run_id, storage::RunStatus::kFailed, error));
  impl_->done = true;
}

void RunRecorder::killed() {
  if (impl_->done) return;
  keep(impl_->store->finish(impl_->run_id, storage::RunStatus::kKilled, "interrupted by a signal"));
  impl_->done = true;
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
