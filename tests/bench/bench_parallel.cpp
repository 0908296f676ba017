// lattice-bench-parallel: one parallel layout of the spine issue's config A trained for a few
// steps under mpirun (or alone), printed as one table row per rank: tokens/s, time per phase,
// and bytes handed to each group's collectives per step next to the analytical count.
// parallel_vs_single.sh runs it for 1 rank x 2 threads and TP 2, PP 2, DP 2 on 2 ranks and
// prints the ratios. A program, not a test: figures go to docs/benchmarks.md.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "lattice/comm.h"
#include "lattice/train.h"

using namespace lattice;

namespace {

class Capture : public MetricsSink {
 public:
  void on_end(const TrainSummary& s) override { summary = s; }
  TrainSummary summary;
};

// Logical bytes one rank hands to its groups per step (what CommStats counts), per ARCHITECTURE.md.
struct Expected {
  double tp = 0, dp = 0, pp = 0, embedding = 0;
};

Expected expected_bytes(const TrainOptions& o, int tp, int pp, int dp, int pp_rank) {
  const ModelConfig& m = o.model;
  const double N = double(o.micro_batch_size) * m.seq_length, C = m.hidden_size;
  const double M = double(o.global_batch_size) / o.micro_batch_size / dp;
  const double L = double(m.num_layers) / pp, V = m.padded_vocab_size();
  Expected e;
  if (tp > 1) {
    // Per micro-batch and layer: 2 all-reduces of (N, C) forward, 2 backward; the first stage
    // adds the embedding's forward all-reduce, the last the head's backward one and the
    // cross-entropy's three (N) reductions (max and target in float, sum in double).
    double per_mb = 4 * L * N * C * 4;
    if (pp_rank == 0) per_mb += N * C * 4;
    if (pp_rank == pp - 1) per_mb += N * C * 4 + N * (4 + 8 + 4);
    e.tp = M * per_mb;
  }
  if (pp > 1) e.pp = M * N * C * 4;  // one (N, C) activation or gradient per micro-batch
  // Parameters this rank holds (floats): its layers' share plus the embeddings it holds.
  const double F = m.ffn();
  double params = L * ((3 * C * C + 3 * C + F * C + F + C * C + F * C) / tp + 6 * C);
  if (pp_rank == 0) params += V * C / tp + m.max_positions() * C;
  if (pp_rank == pp - 1) params += 2 * C + (pp > 1 ? V * C / tp : 0);
  if (dp > 1) e.dp = params * 4;  // one all-reduce of every gradient
  if (pp > 1 && (pp_rank == 0 || pp_rank == pp - 1)) e.embedding = V * C / tp * 4;
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  TrainOptions o;
  ModelConfig& m = o.model;
  // Config A (docs/benchmarks.md), 8 micro-batches per step so a 2-stage pipeline's bubble is
  // 1/9 of the step.
  m.num_layers = 4, m.hidden_size = 256, m.num_attention_heads = 4, m.vocab_size = 8192;
  m.seq_length = 128;
  o.micro_batch_size = 8;
  o.global_batch_size = 64;
  o.train_iters = 6;
  o.mock_data = true;
  o.eval_iters = 0;
  o.log_interval = 1000;
  o.tokenizer.vocab_size = 8191;
  std::string label = "1 rank";
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--tp")
      m.tensor_model_parallel_size = next();
    else if (a == "--pp")
      o.parallel.pipeline_model_parallel_size = next();
    else if (a == "--first-stage-layers")
      o.parallel.decoder_first_pipeline_num_layers = next();
    else if (a == "--threads")
      o.threads = next();
    else if (a == "--steps")
      o.train_iters = next();
    else if (a == "--label")
      label = i + 1 < argc ? argv[++i] : label;
    else {
      std::fprintf(
          stderr,
          "usage: lattice-bench-parallel [--tp N] [--pp N] [--first-stage-layers N] [--threads N] "
          "[--steps N] [--label TEXT]  (under mpirun for several ranks)\n");
      return 2;
    }
  }
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "%s\n", world.status().message().c_str());
    return 1;
  }
  Capture capture;
  Result<TrainSummary> r = train(o, **world, capture);
  if (!r) (*world)->abort(r.status().message(), 1);
  if ((*world)->rank() == 0) {
    const TrainSummary& s = capture.summary;
    const int n = static_cast<int>((*world)->size());
    const int tp = m.tensor_model_parallel_size, pp = o.parallel.pipeline_model_parallel_size;
    const int dp = n / (tp * pp);
    const double steps = o.train_iters;
    // Times are per step over the whole run (first step included).
    std::printf("%s\n", lattice::bench::machine_line().c_str());
    std::printf("RESULT %s | tokens/s %.0f |", label.c_str(), s.tokens_per_second);
    for (const RankReport& rep : s.ranks) {
      const Expected e = expected_bytes(o, tp, pp, dp, rep.pp);
      std::printf(
          " rank %d: fwd %.0f bwd %.0f (tp-comm %.0f) pp-wait %.0f dp-comm %.0f opt %.0f ms/step;"
          " MB/step tp %.2f/%.2f pp %.2f/%.2f dp %.2f/%.2f emb %.2f/%.2f (measured/expected) |",
          rep.rank, rep.times.forward / steps * 1e3, rep.times.backward / steps * 1e3,
          rep.times.tp_comm / steps * 1e3, rep.times.pipeline_wait / steps * 1e3,
          rep.times.dp_comm / steps * 1e3, rep.times.optimizer / steps * 1e3,
          rep.tp_bytes / steps / 1e6, e.tp / 1e6, rep.pp_bytes / steps / 1e6, e.pp / 1e6,
          rep.dp_bytes / steps / 1e6, e.dp / 1e6, rep.embedding_bytes / steps / 1e6,
          e.embedding / 1e6);
    }
    std::printf("\n");
  }
  finalize_comm();
  return 0;
}
