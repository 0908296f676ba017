// lattice-bench-train: training throughput of the spine issue's configs A and B on this
// CPU, as a table, with memory, with --profile the share of the step each op takes, and a
// final RESULT line in JSON for train_vs_pytorch.sh. A program, not a test: figures go to
// docs/benchmarks.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "lattice/cpu_bf16_gemm.h"
#include "lattice/cpu_gemm.h"
#include "lattice/cpu_isa.h"
#include "lattice/data.h"
#include "lattice/kernels.h"
#include "lattice/train.h"

using namespace lattice;

namespace {

class StepTimes : public MetricsSink {
 public:
  void on_iteration(const IterationMetrics& m) override {
    seconds.push_back(m.step_seconds);
    std::fprintf(stderr, "  step %d: %.1f ms, loss %.4f\n", m.iteration, m.step_seconds * 1e3,
                 m.lm_loss);
  }
  std::vector<double> seconds;
};

bool preset(const std::string& name, TrainOptions& o) {
  ModelConfig& m = o.model;
  if (name == "A") {
    m.num_layers = 4, m.hidden_size = 256, m.num_attention_heads = 4, m.vocab_size = 8192;
    m.seq_length = 128, o.micro_batch_size = 8;
  } else if (name == "B") {
    m.num_layers = 12, m.hidden_size = 768, m.num_attention_heads = 12, m.vocab_size = 50304;
    m.seq_length = 256, o.micro_batch_size = 4;
  } else if (name == "L") {  // A's model on long sequences: the attention's share grows with T
    m.num_layers = 4, m.hidden_size = 256, m.num_attention_heads = 4, m.vocab_size = 8192;
    m.seq_length = 2048, o.micro_batch_size = 1;
  } else {
    return false;
  }
  o.global_batch_size = o.micro_batch_size;
  return true;
}

double mib(size_t bytes) {
  return bytes / 1048576.0;
}

// One table: each op's time per step and share of the step over the timed steps (those
// tokens/s counts: every step after the first, which pays for first touches of memory). The
// optimizer row is the trainer's phase (gradient norm, clipping, AdamW); "untimed" is the
// step's time outside every timed op (the executor, zeroing gradients, loss bookkeeping), so
// the shares add up to 100 %.
void print_profile(const TrainSummary& s) {
  const double steps = std::max(1, s.timed_iterations), step_total = s.timed_seconds;
  const std::vector<OpTime> rows = step_profile(s);
  std::printf("\nprofile: share of the step over steps 2-%d, %.1f ms per step\n",
              s.timed_iterations + 1, 1e3 * step_total / steps);
  std::printf("| op | ms per step | %% of step | calls per step |\n|---|---|---|---|\n");
  for (const OpTime& t : rows) {
    const std::string calls =
        t.calls > 0 ? std::to_string(t.calls / static_cast<int64_t>(steps)) : std::string("-");
    std::printf("| %s | %.2f | %.1f | %s |\n", t.name.c_str(), 1e3 * t.seconds / steps,
                100.0 * t.seconds / step_total, calls.c_str());
  }
}

// The shapes the automatic mode timed or read from the choices file, and the way each got (Note
// [fp32 GEMM choice], kernels/cpu/README.md); nothing when LATTICE_CPU_GEMM forces a way.
void print_gemm_choices() {
  const std::vector<kernels::GemmChoice> choices = kernels::cpu_gemm_choices();
  if (choices.empty()) return;
  const std::string file = kernels::cpu_gemm_choices_file();
  std::printf(
      "\nfp32 GEMMs timed on first use on this machine (GFLOP/s, fastest of up to 5; %s):\n",
      file.empty() ? "no choices file" : file.c_str());
  std::printf(
      "| op(A) x op(B) | M | N | K | beta | threads | OpenBLAS | oneDNN | OpenBLAS split | "
      "oneDNN split | chosen | when |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  auto rate = [](double gflops) { return gflops > 0 ? std::to_string(std::lround(gflops)) : "-"; };
  for (const kernels::GemmChoice& c : choices)
    std::printf("| %s x %s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s |\n",
                c.trans_a ? "A^T" : "A", c.trans_b ? "B^T" : "B", c.M, c.N, c.K,
                c.accumulate ? 1 : 0, c.threads, rate(c.openblas_gflops).c_str(),
                rate(c.onednn_gflops).c_str(), rate(c.openblas_split_gflops).c_str(),
                rate(c.onednn_split_gflops).c_str(), kernels::cpu_gemm_name(c.library),
                c.remembered ? "earlier run" : "this run");
}

}  // namespace

int main(int argc, char** argv) {
  lattice::kernels::apply_process_settings(argv);  // kernels.h
  // What `lattice train` runs: shapes timed once per machine (Note [GEMM choices file]).
  lattice::kernels::set_cpu_gemm_choices_dir(lattice::default_data_dir());
  std::string config = "A";
  int threads = 2, steps = 0;
  float dropout = 0.1f;
  bool profile = false, bf16 = false;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--config")
      config = next();
    else if (a == "--threads")
      threads = std::atoi(next());
    else if (a == "--steps")
      steps = std::atoi(next());
    else if (a == "--dropout")
      dropout = std::strtof(next(), nullptr);
    else if (a == "--profile")
      profile = true;
    else if (a == "--bf16")  // the CPU's bf16 path: LATTICE_CPU_BF16_GEMM picks its GEMMs
      bf16 = true;
    else {
      std::fprintf(stderr,
                   "usage: lattice-bench-train [--config A|B|L] [--threads N] [--steps N] "
                   "[--dropout P] [--profile] [--bf16]\n");
      return 2;
    }
  }
  TrainOptions o;
  if (!preset(config, o)) {
    std::fprintf(stderr, "lattice-bench-train: --config %s is not A, B or L\n", config.c_str());
    return 2;
  }
  o.model.attention_dropout = o.model.hidden_dropout = dropout;
  o.train_iters = steps > 0 ? steps : (config == "B" ? 4 : 10);
  o.threads = threads;
  o.bf16 = bf16;
  o.mock_data = true;
  // No validation or test passes: they are not steps, and their forward passes would land in
  // the profile's op totals (the default, 100 batches at the end, tripled config A's run time).
  o.eval_iters = 0;
  o.optim.lr = 1e-4f;
  o.log_interval = 1000000;
  o.seed = 1;
  if (auto errors = o.validate(); !errors.empty()) {
    std::fprintf(stderr, "lattice-bench-train: %s\n", errors.front().c_str());
    return 2;
  }

  StepTimes times;
  Result<TrainSummary> r = train(o, times);
  if (!r) {
    std::fprintf(stderr, "lattice-bench-train: %s\n", r.status().message().c_str());
    return 1;
  }
  const TrainSummary& s = *r;
  // Median over steps after the first (which pays for page faults and warm-up).
  std::vector<double> timed(times.seconds.begin() + (times.seconds.size() > 1 ? 1 : 0),
                            times.seconds.end());
  std::sort(timed.begin(), timed.end());
  const double median = timed[timed.size() / 2];
  const double tokens = static_cast<double>(o.global_batch_size) * o.model.seq_length;
  const double gflops = flops_per_iteration(o.model, o.global_batch_size) / median / 1e9;
  // The SGEMM reference: the best of the trainer's 4 GEMMs at the start and of those that fit in
  // 1 s after the steps. On a shared machine 4 GEMMs (about 0.1 s) can all fall in a slow
  // moment: one such reference read 240 GFLOP/s where the runs beside it read 365-405, and put
  // config B at 125 % of it (docs/benchmarks.md). A bf16 run's reference is the GEMM its
  // peak is (cpu_peak_gemm: oneDNN's bf16 matmul, or the SGEMM of the widened copies).
  constexpr double kReferenceSeconds = 1.0;
  const PeakGemm reference_gemm = cpu_peak_gemm(bf16 ? DType::kBFloat16 : DType::kFloat32);
  const std::string gemm = peak_gemm_name(reference_gemm);
  const double reference =
      s.peak_gflops > 0
          ? std::max(s.peak_gflops, measure_gemm_gflops(threads, reference_gemm, kReferenceSeconds))
          : 0.0;
  const MemoryReport& m = s.memory;
  const size_t needed = m.weights + m.grads + m.optimizer + m.activations;

  std::printf("%s\n", lattice::bench::machine_line().c_str());
  std::printf(
      "config %s: %d layers, hidden %d, %d heads, vocab %d, seq %d, micro batch %d, "
      "%s, dropout %.2f, %d threads\n",
      config.c_str(), o.model.num_layers, o.model.hidden_size, o.model.num_attention_heads,
      o.model.vocab_size, o.model.seq_length, o.micro_batch_size,
      bf16 ? (std::string("bf16 (GEMMs ") + kernels::bf16_gemm_name(kernels::bf16_gemm()) + ")")
                 .c_str()
           : "fp32",
      dropout, threads);
  std::printf("%-34s %12s\n", "metric", "value");
  std::printf("%-34s %12.1f\n", "median step (ms)", median * 1e3);
  std::printf("%-34s %12.1f\n", "tokens/s", tokens / median);
  std::printf("%-34s %12.1f\n", "achieved GFLOP/s", gflops);
  if (reference > 0) {
    std::printf("%-34s %12.1f\n", ("measured " + gemm + " GFLOP/s").c_str(), reference);
    std::printf("%-34s %11.1f%%\n", ("fraction of " + gemm).c_str(), 100.0 * gflops / reference);
  }
  std::printf("%-34s %12.1f\n", "weights (MiB)", mib(m.weights));
  std::printf("%-34s %12.1f\n", "grads (MiB)", mib(m.grads));
  std::printf("%-34s %12.1f\n", "Adam state (MiB)", mib(m.optimizer));
  std::printf("%-34s %12.1f\n", "stored activations (MiB)", mib(m.activations));
  std::printf("%-34s %12.1f\n", "workspace (MiB)", mib(m.workspace));
  std::printf("%-34s %12.1f\n", "peak RSS (MiB)", mib(m.peak_rss));
  std::printf("%-34s %12.2f\n", "peak RSS / needed", static_cast<double>(m.peak_rss) / needed);
  if (profile) print_profile(s);
  print_gemm_choices();
  std::printf(
      "RESULT {\"impl\":\"lattice\",\"config\":\"%s\",\"threads\":%d,\"tokens_per_s\":%.2f,"
      "\"step_ms_median\":%.2f,\"gflops\":%.2f,\"sgemm_gflops\":%.2f,\"sgemm_fraction\":%.4f,"
      "\"peak_rss_mib\":%.1f,\"needed_mib\":%.1f,\"blas_core\":\"%s\",\"cpu_isa\":\"%s\","
      "\"precision\":\"%s\",\"fp32_gemm\":\"%s\",\"reference_gemm\":\"%s\"}\n",
      config.c_str(), threads, tokens / median, median * 1e3, gflops, reference,
      reference > 0 ? gflops / reference : 0.0, mib(m.peak_rss), mib(needed),
      lattice::kernels::blas_core_name(), kernels::cpu_isa_name(kernels::cpu_isa()),
      bf16 ? (std::string("bf16-") + kernels::bf16_gemm_name(kernels::bf16_gemm())).c_str()
           : "fp32",
      kernels::cpu_gemm_name(kernels::cpu_gemm()), gemm.c_str());
  return 0;
}
