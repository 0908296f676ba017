// lattice-bench-kernels: the CPU's element-wise kernels alone (fp32), each on every copy this
// CPU runs (Note [CPU dispatch], kernels/cpu/README.md: generic, avx2, avx512), at the sizes of
// one micro-batch of config A or B (lattice-bench-train): GELU over the MLP's activations,
// residual + dropout and LayerNorm over the hidden states, softmax cross-entropy over the
// logits, and the optimizer's gradient norm and AdamW over all parameters. The copies take
// turns call by call (a burst of load from elsewhere falls on all of them); each cell is the
// median of --reps calls after one warm-up, in milliseconds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "lattice/cpu_isa.h"
#include "lattice/kernels.h"

namespace k = lattice::kernels;

namespace {

struct Sizes {
  int tokens, hidden, ffn, vocab;
  size_t params;
};
// lattice-bench-train's configs: a micro-batch is 1024 tokens in both (8 x 128, 4 x 256);
// GPT-2's parameter count, embeddings tied, positions learned.
Sizes sizes_of(char config) {
  const int layers = config == 'A' ? 4 : 12, C = config == 'A' ? 256 : 768;
  const int V = config == 'A' ? 8192 : 50304, T = config == 'A' ? 128 : 256;
  const size_t per_layer = 12 * static_cast<size_t>(C) * C + 13 * static_cast<size_t>(C);
  const size_t params = layers * per_layer + static_cast<size_t>(V + T) * C + 2 * C;
  return {1024, C, 4 * C, V, params};
}

int usage() {
  std::fprintf(stderr, "usage: lattice-bench-kernels [--config A|B] [--threads N] [--reps N]\n");
  return 2;
}

std::vector<float> random_floats(size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// One row: `call` on every ISA in `isas`, taking turns; the median per ISA.
template <typename F>
void row(const char* kernel, const std::string& shape, const std::vector<k::CpuIsa>& isas,
         int reps, F&& call) {
  std::vector<std::vector<double>> ms(isas.size());
  for (int r = -1; r < reps; r++)  // r = -1: the warm-up
    for (size_t i = 0; i < isas.size(); i++) {
      k::set_cpu_isa(isas[i]);
      const auto start = std::chrono::steady_clock::now();
      call();
      if (r >= 0) ms[i].push_back(elapsed_ms(start));
    }
  std::printf("| %s | %s |", kernel, shape.c_str());
  for (k::CpuIsa isa : k::kAllCpuIsas) {
    const auto at = std::find(isas.begin(), isas.end(), isa);
    if (at == isas.end()) {
      std::printf(" - |");
      continue;
    }
    std::vector<double>& v = ms[at - isas.begin()];
    std::sort(v.begin(), v.end());
    std::printf(" %.3f |", v[v.size() / 2]);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  k::apply_process_settings(argv);  // kernels.h
  char config = 'A';
  int threads = 2, reps = 21;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--config" && (v == "A" || v == "B")) config = v[0];
    else if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--reps") reps = std::atoi(v.c_str());
    else return usage();
  }
  if (threads < 1 || reps < 1) return usage();
  k::set_num_threads(threads);
  std::vector<k::CpuIsa> isas;
  for (k::CpuIsa isa : k::kAllCpuIsas)
    if (k::set_cpu_isa(isa)) isas.push_back(isa);

  const Sizes s = sizes_of(config);
  const size_t hidden = static_cast<size_t>(s.tokens) * s.hidden;
  const size_t ffn = static_cast<size_t>(s.tokens) * s.ffn;
  const size_t logits = static_cast<size_t>(s.tokens) * s.vocab;
  std::vector<float> a = random_floats(std::max(ffn, hidden), 1, 1.0f);
  std::vector<float> b = random_floats(a.size(), 2, 1.0f), out(a.size());
  std::vector<float> weight = random_floats(s.hidden, 3, 1.0f), bias(s.hidden, 0.0f);
  std::vector<float> dweight(s.hidden), dbias(s.hidden), mean(s.tokens), rstd(s.tokens);
  std::vector<float> z = random_floats(logits, 4, 2.0f), dlogits(logits), losses(s.tokens);
  std::vector<int32_t> targets(s.tokens);
  for (int n = 0; n < s.tokens; n++) targets[n] = (n * 7919) % s.vocab;
  std::vector<float> param = random_floats(s.params, 5, 0.02f);
  std::vector<float> grad = random_floats(s.params, 6, 1e-3f), m(s.params), v(s.params);
  k::AdamWParams adam;
  adam.lr = 1e-4f, adam.step = 10;

  std::printf("%s\n", lattice::bench::machine_line().c_str());
  std::printf("fp32, config %c's sizes, %d threads, medians of %d calls, ms\n\n", config,
              k::num_threads(), reps);
  std::printf("| kernel | elements |");
  for (k::CpuIsa isa : k::kAllCpuIsas) std::printf(" %s |", k::cpu_isa_name(isa));
  std::printf("\n|---|---|---|---|---|\n");
  const auto shape = [](int rows, int cols) {
    return std::to_string(rows) + " x " + std::to_string(cols);
  };
  row("gelu forward", shape(s.tokens, s.ffn), isas, reps,
      [&] { k::gelu_forward(out.data(), a.data(), ffn); });
  row("gelu backward", shape(s.tokens, s.ffn), isas, reps,
      [&] { k::gelu_backward(out.data(), a.data(), b.data(), ffn); });
  row("residual + dropout 0.1", shape(s.tokens, s.hidden), isas, reps,
      [&] { k::residual_dropout_forward(out.data(), b.data(), a.data(), hidden, 0.1f, 7); });
  row("dropout 0.1 backward", shape(s.tokens, s.hidden), isas, reps,
      [&] { k::dropout_backward(out.data(), a.data(), hidden, 0.1f, 7); });
  row("layernorm forward", shape(s.tokens, s.hidden), isas, reps, [&] {
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), a.data(), weight.data(),
                         bias.data(), s.tokens, s.hidden);
  });
  row("layernorm backward", shape(s.tokens, s.hidden), isas, reps, [&] {
    k::layernorm_backward(out.data(), dweight.data(), dbias.data(), b.data(), a.data(),
                          weight.data(), mean.data(), rstd.data(), s.tokens, s.hidden);
  });
  row("softmax cross-entropy", shape(s.tokens, s.vocab), isas, reps, [&] {
    k::softmax_cross_entropy(losses.data(), dlogits.data(), z.data(), targets.data(), s.tokens,
                             s.vocab, 1.0f);
  });
  row("gradient norm", std::to_string(s.params), isas, reps,
      [&] { (void)k::sum_squares(grad.data(), s.params); });
  row("adamw", std::to_string(s.params), isas, reps,
      [&] { k::adamw_update(param.data(), grad.data(), m.data(), v.data(), s.params, adam); });
  return 0;
}
