// lattice-bench-train-gpu: training throughput of the one training loop on the CUDA device on GPT-2
// 124M, 355M and 1.3B, through the same train() a `lattice train --device cuda --bf16` run
// uses (mock data, no dropout): tokens/s, TFLOP/s per device (Megatron's FLOP count) and MFU
// against the device's dense bf16 peak (989 TFLOP/s on H100 / H200). Prints a table and one
// RESULT line of JSON per model for tests/gpu/run.sh, which puts PyTorch's figures
// (train_torch_gpu.py, same models) beside them. A program, not a test. Exit 77 without a GPU.
// Its figures on one H200, beside PyTorch: docs/benchmarks.md (GPU training throughput).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "device/backends.h"
#include "lattice/cuda_kernels.h"
#include "lattice/train.h"

using namespace lattice;

namespace {

struct Model {
  const char* name;
  int layers, hidden, heads, seq, micro_batch;
};

// GPT-2 small and medium (seq 1024) and the 1.3B (24 layers, hidden 2048, 16 heads,
// seq 2048); micro-batches that fit an 80 GB device with bf16 activations kept for backward.
const Model kModels[] = {{"124m", 12, 768, 12, 1024, 16},
                         {"355m", 24, 1024, 16, 1024, 8},
                         {"1.3b", 24, 2048, 16, 2048, 4}};

class Recorder : public MetricsSink {
 public:
  void on_iteration(const IterationMetrics& m) override {
    rows.push_back(m);
    std::fprintf(stderr, "  step %d: %.1f ms, loss %.4f, %.1f TFLOP/s\n", m.iteration,
                 m.step_seconds * 1e3, m.lm_loss, m.tflops_per_device);
  }
  void on_message(const std::string& m) override { std::fprintf(stderr, "  %s\n", m.c_str()); }
  void on_end(const TrainSummary& s) override { peak_reserved = s.memory.peak_rss; }
  std::vector<IterationMetrics> rows;
  size_t peak_reserved = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 6;
  std::string only, precision = "bf16";
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--quick") {
      steps = 4;
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::max(3, std::atoi(argv[++i]));
    } else if (a == "--model" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--precision" && i + 1 < argc) {
      precision = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: lattice-bench-train-gpu [--quick] [--steps N] [--model 124m|355m|1.3b]"
                   " [--precision bf16|fp32]\n");
      return 2;
    }
  }
  if (kernels::cuda::device_count() == 0) {
    std::fprintf(stderr, "lattice-bench-train-gpu: no CUDA device\n");
    return 77;
  }
  register_cuda_backend();
  std::printf("%s\n", lattice::bench::machine_line().c_str());
  std::printf(
      "| model | micro batch x seq | step ms (median) | tokens/s | TFLOP/s | MFU | "
      "peak reserved GiB |\n|---|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const Model& md : kModels) {
    if (!only.empty() && only != md.name) continue;
    TrainOptions o;
    o.model.num_layers = md.layers;
    o.model.hidden_size = md.hidden;
    o.model.num_attention_heads = md.heads;
    o.model.seq_length = md.seq;
    o.model.attention_dropout = o.model.hidden_dropout = 0.0f;
    o.tokenizer.vocab_size = 50256;  // + EOD = GPT-2's 50257, padded to 50304
    o.model.vocab_size = 50257;
    o.micro_batch_size = o.global_batch_size = md.micro_batch;
    o.train_iters = steps;
    o.log_interval = steps;
    o.mock_data = true;
    o.eval_iters = 0;
    o.device = "cuda";
    o.bf16 = precision == "bf16";
    o.optim.lr = 1e-4f;
    std::fprintf(stderr, "%s: %d layers, hidden %d, %d heads, seq %d, micro batch %d, %s\n",
                 md.name, md.layers, md.hidden, md.heads, md.seq, md.micro_batch,
                 precision.c_str());
    Recorder rec;
    Result<TrainSummary> r = train(o, rec);
    if (!r) {
      std::fprintf(stderr, "%s: %s\n", md.name, r.status().message().c_str());
      std::printf("| %s | %d x %d | failed | | | | |\n", md.name, md.micro_batch, md.seq);
      failures++;
      continue;
    }
    // The first two steps warm up (cuBLASLt heuristics, the allocator's cache).
    std::vector<double> ms, tflops, mfu;
    for (size_t i = 2; i < rec.rows.size(); i++) {
      ms.push_back(rec.rows[i].step_seconds * 1e3);
      tflops.push_back(rec.rows[i].tflops_per_device);
      mfu.push_back(rec.rows[i].mfu);
    }
    const double step_ms = median(ms);
    const double tokens = static_cast<double>(md.micro_batch) * md.seq / (step_ms / 1e3);
    std::printf("| %s | %d x %d | %.1f | %.0f | %.1f | %.1f %% | %.1f |\n", md.name, md.micro_batch,
                md.seq, step_ms, tokens, median(tflops), 100 * median(mfu),
                rec.peak_reserved / 1073741824.0);
    std::printf(
        "RESULT {\"impl\":\"lattice\",\"model\":\"%s\",\"precision\":\"%s\","
        "\"micro_batch\":%d,\"seq\":%d,\"step_ms_median\":%.3f,\"tokens_per_s\":%.1f,"
        "\"tflops\":%.2f,\"mfu\":%.4f}\n",
        md.name, precision.c_str(), md.micro_batch, md.seq, step_ms, tokens, median(tflops),
        median(mfu));
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}
