// Megatron's console format, so that log parsers written for Megatron read Lattice's logs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <ostream>

#include "lattice/train.h"

namespace lattice {

namespace {
std::string timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  return buf;
}
std::string format(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}
double mib(size_t bytes) {
  return bytes / 1048576.0;
}
}  // namespace

ConsoleSink::ConsoleSink(std::ostream& out, int log_interval, bool print_profile, bool log_memory,
                         int timing_log_level)
    : out_(out),
      log_interval_(log_interval),
      print_profile_(print_profile),
      log_memory_(log_memory),
      timing_log_level_(timing_log_level) {}

void ConsoleSink::on_rank_reports(int iteration, const std::vector<RankReport>& ranks) {
  if (log_memory_ && iteration == 1) {
    // Megatron's report_memory after the first iteration, by category, one line per rank.
    for (const RankReport& r : ranks) {
      const MemoryReport& m = r.memory;
      out_ << format("[Rank %d] (tp %d, pp %d, dp %d) (after %d iterations) memory (MiB)", r.rank,
                     r.tp, r.pp, r.dp, iteration)
           << " | weights: " << format("%.2f", mib(m.weights))
           << " | grads: " << format("%.2f", mib(m.grads))
           << " | optimizer state: " << format("%.2f", mib(m.optimizer))
           << " | activations: " << format("%.2f", mib(m.activations))
           << " | comm buffers: " << format("%.2f", mib(m.comm_buffers))
           << " | workspace: " << format("%.2f", mib(m.workspace))
           << " | accounted: " << format("%.2f", mib(m.accounted()))
           << " | peak RSS: " << format("%.2f", mib(m.peak_rss)) << " |\n";
    }
  }
  if (timing_log_level_ >= 1 && (iteration % log_interval_ == 0)) {
    // Per rank, milliseconds per iteration in each phase, the mean over the iterations since
    // the previous report (Megatron's timers, normalised by the log interval).
    for (const RankReport& r : ranks) {
      const PhaseTimes& t = r.times;
      out_ << format("[Rank %d] (tp %d, pp %d, dp %d) times (ms)", r.rank, r.tp, r.pp, r.dp)
           << " | forward: " << format("%.1f", t.forward * 1e3)
           << " | backward: " << format("%.1f", t.backward * 1e3)
           << " | of which tp-comm: " << format("%.1f", t.tp_comm * 1e3)
           << " | pipeline-wait: " << format("%.1f", t.pipeline_wait * 1e3)
           << " | embedding-comm: " << format("%.1f", t.embedding_comm * 1e3)
           << " | dp-comm: " << format("%.1f", t.dp_comm * 1e3)
           << " | optimizer: " << format("%.1f", t.optimizer * 1e3) << " |\n";
    }
  }
  out_ << std::flush;
}

void ConsoleSink::on_start(const RunStart& s) {
  device_run_ = s.threads == 0;  // a GPU rank: the board's table peak, not a measured rate
  out_ << "> " << s.description << "\n"
       << "> parameters: " << s.parameters << " (" << format("%.2f", s.parameters / 1e6) << " M)\n";
  // Without a peak (a compute type that has none) the trainer's next line
  // says MFU is reported as 0.
  if (s.peak_gflops > 0 && device_run_) {
    out_ << "> peak: " << format("%.1f", s.peak_gflops / 1e3)
         << " TFLOP/s dense bf16 (the board's table entry; " << s.blas_core
         << " GEMMs); MFU is against it\n";
  } else if (s.peak_gflops > 0) {
    out_ << "> measured " << s.peak_gemm << " peak: " << format("%.1f", s.peak_gflops)
         << " GFLOP/s on "
         << s.threads << (s.threads == 1 ? " thread" : " threads")
         << (s.ranks > 1 ? " per rank, the " + std::to_string(s.ranks) + " ranks measuring at once"
                         : std::string())
         << (s.peak_gemm == "SGEMM" ? " (OpenBLAS kernel " + s.blas_core + ")"
                                     : std::string(" (oneDNN's bf16 matmul)"))
         << "; MFU is against it\n";
  }
  out_ << std::flush;
}

void ConsoleSink::on_iteration(const IterationMetrics& m) {
  loss_sum_ += m.lm_loss;
  seconds_sum_ += m.step_seconds;
  count_++;
  if (m.iteration % log_interval_ != 0 && m.iteration != m.train_iters) return;
  const double seconds = seconds_sum_ / count_;
  out_ << " [" << timestamp() << "] iteration " << format("%8d/%8d", m.iteration, m.train_iters)
       << " | consumed samples: " << format("%12lld", static_cast<long long>(m.consumed_samples))
       << " | elapsed time per iteration (ms): " << format("%.1f", seconds * 1e3)
       << " | throughput per GPU (TFLOP/s/GPU): " << format("%.3f", m.tflops_per_device)
       << " | tokens per second: " << format("%.1f", m.tokens_per_second)
       << " | MFU: " << format("%.1f%%", 100.0 * m.mfu)
       << " | learning rate: " << format("%E", m.learning_rate)
       << " | global batch size: " << format("%5d", m.global_batch_size)
       << " | lm loss: " << format("%E", loss_sum_ / count_);
  if (!std::isnan(m.moe_aux_loss))  // MoE: the load-balancing loss (Megatron logs it likewise)
    out_ << " | moe aux loss: " << format("%E", m.moe_aux_loss);
  out_ << " | loss scale: " << format("%.1f", m.loss_scale)
       << " | grad norm: " << format("%.3f", m.grad_norm)
       << " | number of skipped iterations: " << format("%3d", m.skipped_iterations)
       << " | number of nan iterations: " << format("%3d", m.nan_iterations) << " |\n"
       << std::flush;
  loss_sum_ = seconds_sum_ = 0;
  count_ = 0;
}

void ConsoleSink::on_validation(const ValidationMetrics& v) {
  // Megatron's evaluate_and_print_results, framed by dashes.
  const std::string where = v.end_of_training ? std::string("the end of training for ") +
                                                    (v.split == "test" ? "test" : "val") + " data"
                                              : "iteration " + std::to_string(v.iteration);
  const std::string line = " validation loss at " + where +
                           " | lm loss value: " + format("%E", v.lm_loss) +
                           " | lm loss PPL: " + format("%E", v.perplexity) + " | ";
  const std::string rule(line.size() + 1, '-');
  out_ << rule << "\n" << line << "\n" << rule << "\n" << std::flush;
}

void ConsoleSink::on_task_scores(const std::vector<TaskScoreMetrics>& scores) {
  for (const TaskScoreMetrics& s : scores)
    out_ << " task " << s.task << " at iteration " << s.iteration << " | " << s.questions
         << " questions | acc " << format("%.4f", s.acc) << " | acc_norm "
         << format("%.4f", s.acc_norm) << " |\n";
  out_ << std::flush;
}

void ConsoleSink::on_checkpoint(int iteration, const std::string& path, int64_t bytes,
                                double seconds) {
  out_ << "> saved checkpoint of iteration " << iteration << " to " << path << " ("
       << format("%.1f", bytes / 1e6) << " MB in " << format("%.2f", seconds) << " s, "
       << format("%.0f", seconds > 0 ? bytes / 1e6 / seconds : 0.0) << " MB/s)\n"
       << std::flush;
}

void ConsoleSink::on_message(const std::string& message) {
  out_ << "> " << message << "\n";
}

// Printed whatever the log interval: an event is rare and the user should see it at once.
void ConsoleSink::on_instability(const InstabilityEvent& e) {
  out_ << "> warning: " << describe(e) << " (--on-spike " << spike_action_name(e.action) << ")\n";
}

void ConsoleSink::on_end(const TrainSummary& s) {
  const MemoryReport& m = s.memory;
  out_ << "> done: " << s.losses.size() << " iterations in " << format("%.1f", s.total_seconds)
       << " s; " << format("%.1f", s.tokens_per_second) << " tokens/s, "
       << format("%.1f", s.gflops_per_rank) << " GFLOP/s per rank";
  // No peak for the compute type (a CPU --bf16 run: no bf16 reference GEMM is measured).
  if (s.peak_gflops > 0)
    out_ << " = " << format("%.1f%%", 100.0 * s.gflops_per_rank / s.peak_gflops)
         << (device_run_ ? " of the peak" : " of the measured " + s.peak_gemm + " peak");
  out_ << "\n"
       << "> memory (MiB): weights " << format("%.1f", mib(m.weights)) << " | grads "
       << format("%.1f", mib(m.grads)) << " | optimizer state " << format("%.1f", mib(m.optimizer))
       << " | activations " << format("%.1f", mib(m.activations)) << " | comm buffers "
       << format("%.1f", mib(m.comm_buffers)) << " | workspace " << format("%.1f", mib(m.workspace))
       << " | accounted " << format("%.1f", mib(m.accounted()))
       << (device_run_ ? " | peak reserved " : " | peak RSS ") << format("%.1f", mib(m.peak_rss))
       << "\n";
  if (print_profile_) print_profile(s);
  out_ << std::flush;
}

// The iterations tokens/s counts (the first, which pays for first touches of memory, and the
// validation passes left out), per step; with one iteration, that one.
void ConsoleSink::print_profile(const TrainSummary& s) {
  const std::vector<OpTime> rows = step_profile(s);
  if (rows.empty()) return;
  const int steps = s.timed_iterations;
  out_ << "> time per op, per step over the " << steps << " timed iterations ("
       << format("%.1f", 1e3 * s.timed_seconds / steps)
       << " ms per step; the first iteration of a longer run and validation left out):\n";
  for (const OpTime& t : rows) {
    const std::string calls =
        t.calls > 0 ? std::to_string(t.calls / steps) + " calls" : std::string();
    out_ << format("    %-30s %9.2f ms  %5.1f%%  ", t.name.c_str(), 1e3 * t.seconds / steps,
                   100.0 * t.seconds / s.timed_seconds)
         << calls << "\n";
  }
}

std::vector<OpTime> step_profile(const TrainSummary& s) {
  std::vector<OpTime> rows;
  if (s.timed_iterations == 0 || !(s.timed_seconds > 0)) return rows;
  double timed = 0;
  for (const OpTime& t : s.timed_ops)
    if (t.calls > 0 || t.seconds > 0) {
      rows.push_back(t);
      timed += t.seconds;
    }
  rows.push_back({"untimed", std::max(0.0, s.timed_seconds - timed), 0});
  return rows;
}

}  // namespace lattice
