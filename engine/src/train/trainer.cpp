// One process's training loop: micro-batches accumulate gradients, then one AdamW step.
// Deterministic: data, dropout and initialisation derive from --seed alone, and every
// kernel reduces in a fixed order for a fixed thread count.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <sstream>

#include "checkpoint/hf_gpt2.h"
#include "data/batch_sampler.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
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

// --mock-data as a SampleSource: an endless stream.
class MockSource : public SampleSource {
 public:
  MockSource(uint64_t seed, int vocab_size, int seq_length)
      : data_(seed, vocab_size, seq_length), seq_length_(seq_length) {}
  int64_t size() const override { return INT64_MAX / 4; }
  int seq_length() const override { return seq_length_; }
  void sample(int64_t index, int32_t* tokens) const override { data_.sample(index, tokens); }

 private:
  mutable MockGptData data_;  // grows its document table lazily
  int seq_length_;
};

struct DataSources {
  std::unique_ptr<SampleSource> train, valid, test;
};

Result<DataSources> open_data(const TrainOptions& o, const ModelConfig& mc) {
  DataSources d;
  if (o.mock_data) {
    d.train = std::make_unique<MockSource>(o.seed, mc.vocab_size, mc.seq_length);
    // Held-out mock samples: another seed's stream.
    d.valid = std::make_unique<MockSource>(o.seed + 1, mc.vocab_size, mc.seq_length);
    return d;
  }
  Result<std::vector<std::pair<double, std::string>>> blend = o.data_blend();
  if (!blend) return blend.status();
  const int64_t gb = o.global_batch_size;
  const int64_t valid = (o.train_iters / o.eval_interval + 1) * int64_t{o.eval_iters} * gb;
  GptDatasetOptions options;
  options.seq_length = mc.seq_length;
  options.seed = o.seed;
  options.cache_dir = o.data_cache_path;
  Result<DataSplits> splits = build_gpt_splits(*blend, o.split, int64_t{o.train_iters} * gb, valid,
                                               int64_t{o.eval_iters} * gb, options);
  if (!splits) return splits.status();
  if (!splits->train)
    return Status::invalid_argument("--split " + o.split + " leaves no documents for training");
  d.train = std::move(splits->train);
  d.valid = std::move(splits->valid);
  d.test = std::move(splits->test);
  return d;
}

// Fills inputs and targets (B, T) with micro-batch `micro_index` of the global batch that
// starts at `consumed`; checks every id against the vocabulary.
Status fill_micro_batch(const SampleSource& source, int64_t consumed, int micro_index, int B,
                        int vocab_size, std::vector<int32_t>& sample, std::vector<int32_t>& inputs,
                        std::vector<int32_t>& targets) {
  const int T = source.seq_length();
  for (int b = 0; b < B; b++) {
    const int64_t index = sample_index(consumed, B, 1, 0, micro_index, b);
    source.sample(index % source.size(), sample.data());
    for (int t = 0; t <= T; t++)
      if (sample[t] < 0 || sample[t] >= vocab_size)
        return Status::invalid_argument(
            "sample " + std::to_string(index) + " holds token id " + std::to_string(sample[t]) +
            ", outside the model's vocabulary of " + std::to_string(vocab_size) +
            " (was the dataset made with another tokenizer?)");
    std::copy(sample.begin(), sample.begin() + T, inputs.begin() + static_cast<size_t>(b) * T);
    std::copy(sample.begin() + 1, sample.end(), targets.begin() + static_cast<size_t>(b) * T);
  }
  return Status::ok();
}

}  // namespace

namespace {
std::atomic<bool> g_stop{false};
}  // namespace

void request_stop() { g_stop.store(true, std::memory_order_relaxed); }
bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

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
  ModelConfig mc = o.model;
  if (o.tokenizer.type != "NullTokenizer") {
    Result<std::unique_ptr<Tokenizer>> tokenizer = make_tokenizer(o.tokenizer);
    if (!tokenizer) return tokenizer.status();
    mc.vocab_size = (*tokenizer)->vocab_size();
  }
  const int threads = o.threads > 0 ? o.threads : 0;
  kernels::set_num_threads(threads);
  const int used_threads = kernels::num_threads();

  Result<DataSources> data = open_data(o, mc);
  if (!data) return data.status();

  RunStart start;
  TrainOptions described = o;
  described.model = mc;
  start.description = describe(described, used_threads);
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

  const int B = o.micro_batch_size, T = mc.seq_length, M = o.num_micro_batches();
  const int decay_iters = o.optim.lr_decay_iters > 0 ? o.optim.lr_decay_iters : o.train_iters;
  const double flops = flops_per_iteration(mc, o.global_batch_size);
  std::vector<int32_t> sample(T + 1), inputs(static_cast<size_t>(B) * T),
      targets(static_cast<size_t>(B) * T);
  const float grad_scale = 1.0f / (static_cast<float>(B) * T * M);

  TrainSummary summary;
  summary.peak_gflops = start.peak_gflops;
  int64_t consumed = 0, valid_consumed = 0;
  int nan_iterations = 0, skipped = 0;
  double timed_seconds = 0;
  int timed_iterations = 0;

  // Megatron's evaluate(): eval_iters global batches, forward only, continuing through the
  // split from where the previous validation stopped.
  auto validate = [&](const SampleSource& source, int64_t& position, const char* split,
                      int iteration, bool at_end) -> Status {
    double sum = 0;
    for (int it = 0; it < o.eval_iters; it++) {
      for (int mb = 0; mb < M; mb++) {
        if (Status s = fill_micro_batch(source, position, mb, B, mc.vocab_size, sample, inputs, targets); !s)
          return s;
        sum += model.forward(acts, inputs.data(), targets.data(), 0, 0.0f);
      }
      position += o.global_batch_size;
    }
    ValidationMetrics v;
    v.iteration = iteration;
    v.split = split;
    v.end_of_training = at_end;
    v.lm_loss = sum / (static_cast<double>(o.eval_iters) * M);
    v.perplexity = std::exp(std::min(20.0, v.lm_loss));
    summary.validations.push_back(v);
    sink.on_validation(v);
    return Status::ok();
  };

  const auto run_start = std::chrono::steady_clock::now();
  for (int it = 1; it <= o.train_iters; it++) {
    if (stop_requested())
      return Status::internal("stopped by a signal before iteration " + std::to_string(it));
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grads();
    double loss = 0;
    for (int mb = 0; mb < M; mb++) {
      {
        ScopedOp op(&model.profiler(), Op::kData);
        if (Status s = fill_micro_batch(*data->train, consumed, mb, B, mc.vocab_size, sample, inputs, targets); !s)
          return s;
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
    if (data->valid && o.eval_iters > 0 && it % o.eval_interval == 0)
      if (Status s = validate(*data->valid, valid_consumed, "valid", it, false); !s) return s;
  }
  summary.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (o.eval_iters > 0) {
    if (data->valid && o.train_iters % o.eval_interval != 0)
      if (Status s = validate(*data->valid, valid_consumed, "valid", o.train_iters, true); !s)
        return s;
    int64_t test_position = 0;
    if (data->test)
      if (Status s = validate(*data->test, test_position, "test", o.train_iters, true); !s)
        return s;
  }
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

namespace lattice {

Result<EvalResult> evaluate_sequential(const TrainOptions& o, int64_t num_samples) {
  ModelConfig mc = o.model;
  if (o.tokenizer.type != "NullTokenizer") {
    Result<std::unique_ptr<Tokenizer>> tokenizer = make_tokenizer(o.tokenizer);
    if (!tokenizer) return tokenizer.status();
    mc.vocab_size = (*tokenizer)->vocab_size();
  }
  if (o.data_path.size() != 1)
    return Status::invalid_argument("lattice eval takes exactly one --data-path PREFIX");
  Result<std::unique_ptr<IndexedDataset>> opened = IndexedDataset::open(o.data_path[0]);
  if (!opened) return opened.status();
  const IndexedDataset& data = **opened;
  const int T = mc.seq_length, B = o.micro_batch_size;
  // Sample i covers tokens [i*T, i*T + T] of the concatenation, so n samples need n*T + 1.
  const int64_t available = data.num_tokens() > 0 ? (static_cast<int64_t>(data.num_tokens()) - 1) / T : 0;
  if (num_samples > available)
    return Status::invalid_argument("--eval-iters " + std::to_string(num_samples) + " asks for " +
                                    std::to_string(num_samples) + " samples of " +
                                    std::to_string(T + 1) + " tokens but " + o.data_path[0] +
                                    " holds only " + std::to_string(available));
  kernels::set_num_threads(o.threads > 0 ? o.threads : 0);
  GptModel<float> model(mc, B);
  if (!o.load_hf.empty()) {
    if (Status s = import_hf_gpt2(o.load_hf, mc, model.layout(), model.params()); !s)
      return Status::invalid_argument("--load-hf: " + s.message());
  } else {
    model.init_weights(o.seed);
  }
  GptActivations<float> acts(mc, B);
  std::vector<int32_t> window(static_cast<size_t>(T) + 1), inputs(static_cast<size_t>(B) * T, 0),
      targets(static_cast<size_t>(B) * T, 0);
  // Walks the sequences in index order; `seq`/`offset` is the read position.
  size_t seq = 0, offset = 0;
  const auto lengths = data.sequence_lengths();
  auto read_tokens = [&](int32_t* out, size_t count) {
    while (count > 0) {
      while (offset == static_cast<size_t>(lengths[seq])) seq++, offset = 0;
      const size_t take = std::min(count, static_cast<size_t>(lengths[seq]) - offset);
      data.read(seq, offset, take, out);
      out += take, offset += take, count -= take;
    }
  };
  read_tokens(window.data(), 1);
  EvalResult r;
  double sum = 0;
  for (int64_t done = 0; done < num_samples;) {
    const int n = static_cast<int>(std::min<int64_t>(B, num_samples - done));
    for (int b = 0; b < n; b++) {
      read_tokens(window.data() + 1, T);  // window[0] is the previous sample's last token
      for (int t = 0; t <= T; t++)
        if (window[t] < 0 || window[t] >= mc.vocab_size)
          return Status::invalid_argument(o.data_path[0] + " holds token id " +
                                          std::to_string(window[t]) + ", outside the model's "
                                          "vocabulary of " + std::to_string(mc.vocab_size));
      std::copy(window.begin(), window.begin() + T, inputs.begin() + static_cast<size_t>(b) * T);
      std::copy(window.begin() + 1, window.end(), targets.begin() + static_cast<size_t>(b) * T);
      window[0] = window[T];
    }
    model.forward(acts, inputs.data(), targets.data(), 0, 0.0f);
    for (int i = 0; i < n * T; i++) sum += acts.losses[i];
    done += n;
    r.tokens += static_cast<int64_t>(n) * T;
  }
  r.samples = num_samples;
  r.lm_loss = r.tokens > 0 ? sum / r.tokens : 0.0;
  r.perplexity = std::exp(std::min(20.0, r.lm_loss));
  return r;
}

}  // namespace lattice
