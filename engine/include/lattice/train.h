// The training loop (one process, or one rank of a tensor x pipeline x data parallel job),
// and the MetricsSink interface through which rank 0 reports (console, run store).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "lattice/comm.h"
#include "lattice/instability.h"
#include "lattice/status.h"
#include "lattice/system_metrics.h"
#include "lattice/train_options.h"

namespace lattice {

struct IterationMetrics {
  int iteration = 0, train_iters = 0;
  int64_t consumed_samples = 0;
  int global_batch_size = 0;
  double lm_loss = 0;  // mean over the iteration's tokens
  double learning_rate = 0;
  double grad_norm = 0;        // before clipping
  double loss_scale = 1.0;     // fp32: always 1
  int skipped_iterations = 0;  // cumulative
  int nan_iterations = 0;      // cumulative
  double step_seconds = 0;     // wall time of this iteration
  double tokens_per_second = 0;
  double tflops_per_device = 0;  // achieved, Megatron's FLOP count
  double mfu = 0;                // achieved / peak (measured SGEMM rate on CPU)
  // MoE models (--num-experts): the load-balancing loss (coefficient included, summed over the
  // MoE layers, mean over the iteration's micro-batches) added to lm_loss for the gradient;
  // NaN for a dense model (not reported).
  double moe_aux_loss = std::numeric_limits<double>::quiet_NaN();
  // MoE models, on the iterations with rank reports (the first and every --log-interval): the
  // routes each expert was given (before token dropping) over the iteration's micro-batches and
  // every rank's tokens, by MoE layer (global index) -> (E). Empty otherwise. A layer's counts
  // sum to tokens x --moe-router-topk.
  std::map<int, std::vector<int64_t>> moe_expert_load;
};

// One validation run: the mean loss over eval_iters global batches of a held-out split.
struct ValidationMetrics {
  int iteration = 0;
  std::string split;  // "valid" or "test"
  bool end_of_training = false;
  double lm_loss = 0;
  double perplexity = 0;  // exp(min(20, loss)), as Megatron
};

// Multiple-choice accuracy of the training model on one --eval-tasks file
// (lattice/multiple_choice.h), at a validation point.
struct TaskScoreMetrics {
  int iteration = 0;
  std::string task;  // the file as given
  int64_t questions = 0;
  double acc = 0, acc_norm = 0;
};

struct MemoryReport {
  size_t weights = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  size_t comm_buffers = 0;  // pipeline send/receive and data-parallel shard buffers
  size_t peak_rss = 0;      // the process's high-water mark
  // GPU ranks: the caching allocator's reserved - in-use bytes (peak_rss then holds the peak
  // reserved device bytes); 0 on the CPU.
  size_t fragmentation = 0;
  size_t accounted() const {
    return weights + grads + optimizer + activations + workspace + comm_buffers;
  }
};

// Where one rank's time went since the previous report, in seconds, and what it sent.
struct PhaseTimes {
  double forward = 0, backward = 0;  // compute, including tensor-parallel collectives
  double pipeline_wait = 0;          // blocked on pipeline receives and sends
  double dp_comm = 0;                // waiting for data-parallel reductions and gathers
  double optimizer = 0;              // norm, clipping, AdamW
  double tp_comm = 0;                // tensor-parallel collectives (part of forward/backward)
  // summing the tied word-embedding gradient of the first and last pipeline stage (the
  // embedding group; Megatron's embedding-grads-all-reduce): pipeline, not data-parallel, traffic
  double embedding_comm = 0;
};

// One box of the pipeline timeline of a reported iteration (docs/design-notes.md
// #pipeline-timeline). stage is the virtual pipeline stage (chunk * PP + pp rank) of forward,
// backward and pipeline-wait boxes and the pp rank otherwise; micro_batch is -1 for boxes that
// are not per micro-batch. Seconds from the iteration's start on this machine's steady clock.
struct TimelineBox {
  enum Kind { kForward, kBackward, kPipelineWait, kDpComm, kOptimizer, kEmbeddingComm, kKinds };
  Kind kind = kForward;
  int stage = 0, micro_batch = -1;
  double start = 0, end = 0;
};
// "forward", "backward", "pipeline wait", "dp comm", "optimizer", "embedding comm": the run
// store's kinds.
const char* timeline_kind_name(TimelineBox::Kind kind);

// One rank's accounting (ARCHITECTURE.md "Metrics, memory, FLOPs"). `times` are seconds per
// iteration in MetricsSink::on_rank_reports, whole-run totals in TrainSummary::ranks.
struct RankReport {
  int rank = 0, tp = 0, dp = 0, pp = 0;
  MemoryReport memory;
  PhaseTimes times;
  // Bytes handed to each group's collectives and sends (CommStats, logical payload).
  double tp_bytes = 0, dp_bytes = 0, pp_bytes = 0, embedding_bytes = 0;
  // CPU use over the interval since the previous report, memory and GPU now (in the summary:
  // since the last report).
  SystemMetrics system;
  // The reported iteration's boxes, in the order the rank ran them (empty in the summary).
  std::vector<TimelineBox> timeline;
};

struct OpTime {
  std::string name;
  double seconds = 0;
  int64_t calls = 0;
};

struct RunStart {
  std::string description;  // model, batch, threads
  int64_t parameters = 0;
  int threads = 0;
  int ranks = 1;           // the job's
  double peak_gflops = 0;  // one rank's: measured GEMM rate (all ranks at once) used for MFU
  std::string blas_core;
  // On the CPU, the GEMM peak_gflops measured (peak_gemm_name): "SGEMM", or "bf16 GEMM" for a
  // bf16 run on oneDNN's bf16 matmul.
  std::string peak_gemm = "SGEMM";
};

struct TrainSummary {
  std::vector<double> losses;  // per iteration, in order
  std::vector<double> grad_norms;
  std::vector<ValidationMetrics> validations;
  double tokens_per_second = 0;  // the job's, over iterations after the first
  // One rank's achieved model GFLOP/s (Megatron's count of the job / world), same window: the
  // figure its peak bounds, as per-step MFU divides one rank's rate by one rank's peak.
  double gflops_per_rank = 0;
  double peak_gflops = 0;  // one rank's: the GEMM rate measured on its threads, or the GPU's
  std::string peak_gemm = "SGEMM";  // RunStart::peak_gemm
  MemoryReport memory;
  std::vector<OpTime> op_times;  // where the time went, whole run (rank 0's ops)
  // The same over the iterations tokens_per_second covers (after the first, which pays for
  // first touches of memory), with the optimizer phase (norm, clipping, AdamW) as a last entry,
  // and those iterations' count and wall time: the step's profile (lattice-bench-train --profile).
  std::vector<OpTime> timed_ops;
  int timed_iterations = 0;
  double timed_seconds = 0;
  double total_seconds = 0;
  std::vector<RankReport> ranks;  // every rank, whole run (on rank 0)
  // --on-spike rollback: the iteration of the event that ended the run there (0: it did not),
  // and the event in words; the caller goes back to a checkpoint (Note [rollback]).
  int rollback_at = 0;
  std::string rollback_reason;
};

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void on_start(const RunStart&) {}
  virtual void on_iteration(const IterationMetrics&) {}
  virtual void on_validation(const ValidationMetrics&) {}
  virtual void on_task_scores(const std::vector<TaskScoreMetrics>&) {}
  virtual void on_message(const std::string&) {}
  // Every rank's memory, its phase times per iteration (the mean over the iterations since the
  // previous report), and the timeline of the reported iteration itself: after iteration 1 and
  // at every log interval (in rank order).
  virtual void on_rank_reports(int /*iteration*/, const std::vector<RankReport>&) {}
  // A checkpoint of `iteration` was saved (bytes of all ranks, wall seconds) or loaded.
  virtual void on_checkpoint(int /*iteration*/, const std::string& /*path*/, int64_t /*bytes*/,
                             double /*seconds*/) {}
  // A non-finite loss or norm, or a spike, and what --on-spike did (lattice/instability.h).
  virtual void on_instability(const InstabilityEvent&) {}
  virtual void on_end(const TrainSummary&) {}
};

// The step's profile: summary.timed_ops with calls or time (the optimizer phase last), then
// "untimed", the timed iterations' wall time outside every timed op, so the rows add up to
// summary.timed_seconds. Empty when no iteration was timed.
std::vector<OpTime> step_profile(const TrainSummary& summary);

// Prints Megatron's progress line every log_interval iterations (loss averaged over the
// interval, as Megatron does) and a summary at the end.
class ConsoleSink : public MetricsSink {
 public:
  // log_memory: every rank's memory after iteration 1 (--log-memory); timing_log_level 1:
  // every rank's phase times per iteration at each log line (--timing-log-level).
  ConsoleSink(std::ostream& out, int log_interval, bool print_profile, bool log_memory = false,
              int timing_log_level = 0);
  void on_start(const RunStart& start) override;
  void on_iteration(const IterationMetrics& m) override;
  void on_validation(const ValidationMetrics& v) override;
  void on_task_scores(const std::vector<TaskScoreMetrics>& scores) override;
  void on_message(const std::string& message) override;
  void on_rank_reports(int iteration, const std::vector<RankReport>& ranks) override;
  void on_checkpoint(int iteration, const std::string& path, int64_t bytes,
                     double seconds) override;
  void on_instability(const InstabilityEvent& e) override;
  void on_end(const TrainSummary& summary) override;

 private:
  void print_profile(const TrainSummary& summary);
  std::ostream& out_;
  int log_interval_;
  bool print_profile_, log_memory_;
  bool device_run_ = false;  // on_start saw a GPU rank (no threads): peaks and memory say so
  int timing_log_level_;
  double loss_sum_ = 0, seconds_sum_ = 0;
  int count_ = 0;
};

// The GEMM whose measured rate is a CPU run's peak (MFU's denominator) in compute type
// `compute`: fp32 and fp64 runs the float GEMM (SGEMM); bf16 runs oneDNN's bf16 matmul where the
// bf16 op list multiplies with it (kernels::bf16_gemm() onednn), else the SGEMM its widened
// copies run; kNone for the rest.
enum class PeakGemm { kNone, kSgemm, kBf16 };
PeakGemm cpu_peak_gemm(DType compute);
// "SGEMM", "bf16 GEMM", "none".
const char* peak_gemm_name(PeakGemm gemm);
// The rate of `gemm` (GFLOP/s; 0 for kNone) as measure_sgemm_gflops times the float one.
double measure_gemm_gflops(int threads, PeakGemm gemm, double min_seconds = 0);

// Measures this machine's float GEMM rate (GFLOP/s) with the given threads: the CPU "peak"
// that fp32 MFU is reported against. The best of at least 4 timed 1536^3 GEMMs, and of as many more
// as fit in `min_seconds`: on a shared machine a longer window is likelier to hold a quiet
// moment (lattice-bench-train's reference takes 1 s). About 0.1-0.3 s with the default.
double measure_sgemm_gflops(int threads, double min_seconds = 0);

// The same rate measured by every rank of `ranks` at once, as they will share the machine while
// training: rounds of one 1536^3 GEMM on each rank between barriers, each round's rate its
// slowest rank's, and the best round of at least 4 and of as many as fit in `min_seconds`.
// Ranks that oversubscribe cores (4 ranks on 2 cores) each get their share of the machine,
// where one rank timed alone, or while the others were still setting up, got anything from
// its share to the whole machine. Collective over `ranks`; with one rank it is
// measure_gemm_gflops timed one GEMM a round. `gemm`: the GEMM timed (cpu_peak_gemm).
Result<double> measure_shared_gemm_gflops(int threads, Comm& ranks, PeakGemm gemm,
                                          double min_seconds = 0.2);

// Asks a running train() to stop before its next iteration (async-signal-safe: a
// SIGINT/SIGTERM handler may call it). train() then returns an error saying so.
void request_stop();
bool stop_requested();

// Why training stops before the next iteration, as one rank sees it: a signal (the run ends
// killed, after saving) or --exit-duration-in-mins minutes since the process started (a clean
// exit after saving, as --exit-interval). Trainers take the kMax of it over every rank, so
// that all of them stop at the same iteration.
enum class EarlyStop { kNone = 0, kExitDuration = 1, kSignal = 2 };
EarlyStop early_stop(const TrainOptions& options);

// Trains as `options` says on the ranks of `world` (every rank calls it; the layout comes from
// the options and world.size()). Only rank 0 reports to `sink`. Errors (a bad layout, weights
// file, dataset) come back as a Status on the rank that met them; the caller ends the job
// (Comm::abort) so that no other rank waits for it.
Result<TrainSummary> train(const TrainOptions& options, Comm& world, MetricsSink& sink);
// One process.
Result<TrainSummary> train(const TrainOptions& options, MetricsSink& sink);

// `lattice eval`: the mean loss of the model (from --load, --load-hf, else initialised from
// --seed) over the first `num_samples` samples of --data-path taken in order, without shuffling:
// text data, sample i is tokens [i*S, i*S + S] of the documents concatenated in index order;
// image-text data (a vision-language model), sample i is document i as training samples it, its
// images spliced in, and the loss is the mean over its loss targets (`tokens`). A vision-language
// model on text data, or a text model on image-text data, is refused.
struct EvalResult {
  double lm_loss = 0, perplexity = 0;
  int64_t samples = 0, tokens = 0;  // tokens: the loss targets averaged over
  std::string note;                 // a line for the user, or empty
};
Result<EvalResult> evaluate_sequential(const TrainOptions& options, int64_t num_samples);

}  // namespace lattice
