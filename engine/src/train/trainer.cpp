// One process's training loop: micro-batches accumulate gradients, then one AdamW step.
// Deterministic: data, dropout and initialisation derive from --seed alone, and every
// kernel reduces in a fixed order for a fixed thread count.
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <sstream>

#include "checkpoint/hf_gpt2.h"
#include "data/mock_data.h"
#include "lattice/dropout_hash.h"
#include "lattice/kernels.h"
#include "lattice/train.h"
#include "model/gpt.h"
#include "optim/adamw.h"

namespace lattice {

namespace {

size_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) * 1024;
}

std::string describe(const TrainOptions& o, int threads) {
  const ModelConfig& m = o.model;
  std::ostringstream s;
  s << "GPT " << m.num_layers << " layers, hidden " << m.hidden_size << ", ffn " << m.ffn() << ", "
    << m.num_attention_heads << " heads, seq " << m.seq_length << ", vocab " << m.vocab_size
    << " (padded " << m.padded_vocab_size() << "); micro batch " << o.micro_batch_size << " x "
    << o.num_micro_batches() << " = global batch " << o.global_batch_size << "; " << threads
    << " threads";
  return s.str();
}

}  // namespace

double measure_sgemm_gflops(int threads) {
  kernels::set_num_threads(threads);
  const int n = 1536;
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  kernels::matmul_forward<float>(c.data(), a.data(), b.data(), nullptr, n, n, n);  // warm-up
  double best = 0;
  for (int rep = 0; rep < 4; rep++) {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::matmul_forward<float>(c.data(), a.data(), b.data(), nullptr, n, n, n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  return best;
}

Result<TrainSummary> train(const TrainOptions& o, MetricsSink& sink) {
  const ModelConfig& mc = o.model;
  const int threads = o.threads > 0 ? o.threads : 0;
  kernels::set_num_threads(threads);
  const int used_threads = kernels::num_threads();

  RunStart start;
  start.description = describe(o, used_threads);
  start.parameters = mc.num_parameters();
  start.threads = used_threads;
  start.peak_gflops = measure_sgemm_gflops(used_threads);
  start.blas_core = kernels::blas_core_name();
  sink.on_start(start);

  GptModel<float> model(mc, o.micro_batch_size);
  if (!o.load_hf.empty()) {
    if (Status s = import_hf_gpt2(o.load_hf, mc, model.layout(), model.params()); !s)
      return Status::invalid_argument("--load-hf: " + s.message());
    sink.on_message("loaded GPT-2 weights from " + o.load_hf);
  } else {
    model.init_weights(o.seed);
  }
  AdamW<float> optimizer(model.layout(), o.optim);
  GptActivations<float> acts(mc, o.micro_batch_size);
  MockGptData data(o.seed, mc.vocab_size, mc.seq_length);

  const int B = o.micro_batch_size, T = mc.seq_length, M = o.num_micro_batches();
  const int decay_iters = o.optim.lr_decay_iters > 0 ? o.optim.lr_decay_iters : o.train_iters;
  const double flops = flops_per_iteration(mc, o.global_batch_size);
  std::vector<int32_t> sample(T + 1), inputs(static_cast<size_t>(B) * T),
      targets(static_cast<size_t>(B) * T);
  const float grad_scale = 1.0f / (static_cast<float>(B) * T * M);

  TrainSummary summary;
  summary.peak_gflops = start.peak_gflops;
  int64_t consumed = 0;
  int nan_iterations = 0, skipped = 0;
  double timed_seconds = 0;
  int timed_iterations = 0;
  const auto run_start = std::chrono::steady_clock::now();
  for (int it = 1; it <= o.train_iters; it++) {
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grads();
    double loss = 0;
    for (int mb = 0; mb < M; mb++) {
      {
        ScopedOp op(&model.profiler(), Op::kData);
        for (int b = 0; b < B; b++) {
          data.sample(consumed + static_cast<int64_t>(mb) * B + b, sample.data());
          std::copy(sample.begin(), sample.begin() + T,
                    inputs.begin() + static_cast<size_t>(b) * T);
          std::copy(sample.begin() + 1, sample.end(), targets.begin() + static_cast<size_t>(b) * T);
        }
      }
      const uint64_t key = kernels::dropout_key(o.seed, it, mb, 0);
      loss += model.forward(acts, inputs.data(), targets.data(), key, grad_scale) / M;
      model.backward(acts);
    }
    const double lr = learning_rate(o.optim, it - 1, decay_iters);
    double norm;
    {
      ScopedOp op(&model.profiler(), Op::kOptimizer);
      norm = optimizer.step(model.params(), model.grads(), lr);
    }
    if (!std::isfinite(norm)) skipped++;  // the optimizer did not step
    if (!std::isfinite(loss)) nan_iterations++;
    consumed += o.global_batch_size;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (it > 1 || o.train_iters == 1) {
      timed_seconds += seconds;
      timed_iterations++;
    }
    IterationMetrics m;
    m.iteration = it;
    m.train_iters = o.train_iters;
    m.consumed_samples = consumed;
    m.global_batch_size = o.global_batch_size;
    m.lm_loss = loss;
    m.learning_rate = lr;
    m.grad_norm = norm;
    m.skipped_iterations = skipped;
    m.nan_iterations = nan_iterations;
    m.step_seconds = seconds;
    m.tokens_per_second = static_cast<double>(o.global_batch_size) * T / seconds;
    m.tflops_per_device = flops / seconds / 1e12;
    m.mfu = flops / seconds / 1e9 / start.peak_gflops;
    summary.losses.push_back(loss);
    summary.grad_norms.push_back(norm);
    sink.on_iteration(m);
  }
  summary.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (timed_iterations > 0) {
    summary.tokens_per_second =
        static_cast<double>(o.global_batch_size) * T * timed_iterations / timed_seconds;
    summary.gflops = flops * timed_iterations / timed_seconds / 1e9;
  }
  const MemoryBreakdown mem = model.memory();
  summary.memory.weights = mem.weights;
  summary.memory.grads = mem.grads;
  summary.memory.workspace = mem.workspace;
  summary.memory.optimizer = optimizer.bytes();
  summary.memory.activations = acts.bytes();
  summary.memory.peak_rss = peak_rss_bytes();
  for (int i = 0; i < static_cast<int>(Op::kCount); i++) {
    const Op op = static_cast<Op>(i);
    summary.op_times.push_back(
        {op_name(op), model.profiler().seconds(op), model.profiler().calls(op)});
  }
  if (!o.save_hf.empty()) {
    if (Status s = export_hf_gpt2(o.save_hf, mc, model.layout(), model.params()); !s)
      return Status::io_error("--save-hf: " + s.message());
    sink.on_message("saved GPT-2 weights to " + o.save_hf);
  }
  sink.on_end(summary);
  return summary;
}

}  // namespace lattice
