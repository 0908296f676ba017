// lattice-bench-attention: the CPU attention kernels alone, forward and backward, on one
// sequence of random queries, keys and values (fp32): the causal kernel (kernels.h
// attention_forward / attention_backward) on one document and on packed documents of
// --doc-length tokens, and the block kernel of context parallelism's ring and the vision tower
// (attention_block_forward / _backward) on the same sequence as one causal block. Medians of
// --reps calls after one warm-up each. GFLOP/s counts the products of the visible scores only
// (causal: about half of T x T; packed: each document's own triangle), forward 4 HS and backward
// 8 HS flops a visible score, as Megatron's count of the attention's products.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "lattice/kernels.h"

namespace k = lattice::kernels;

namespace {

struct Options {
  int T = 2048, heads = 8, head_size = 64, doc = 256, threads = 2, reps = 7;
  float dropout = 0.1f;
};

int usage() {
  std::fprintf(stderr,
               "usage: lattice-bench-attention [--seq-length T] [--heads N] [--head-size D]\n"
               "       [--doc-length L] [--threads N] [--reps N] [--dropout P]\n");
  return 2;
}

template <typename F>
double median_ms(int reps, F&& call) {
  call();  // warm-up: workspaces and GEMM packing buffers
  std::vector<double> ms;
  for (int r = 0; r < reps; r++) {
    const auto start = std::chrono::steady_clock::now();
    call();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Visible (query, key) pairs of one head: each row sees its own document's keys up to itself.
double visible_scores(const std::vector<int32_t>& positions) {
  double n = 0;
  for (int32_t p : positions) n += p + 1;
  return n;
}

void row(const char* kernel, const char* documents, double fwd, double bwd, double flops_fwd) {
  std::printf("| %s | %s | %.2f | %.2f | %.1f |\n", kernel, documents, fwd, bwd,
              3 * flops_fwd / ((fwd + bwd) * 1e-3) / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  k::apply_process_settings(argv);  // kernels.h
  Options o;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--seq-length") o.T = std::atoi(v);
    else if (a == "--heads") o.heads = std::atoi(v);
    else if (a == "--head-size") o.head_size = std::atoi(v);
    else if (a == "--doc-length") o.doc = std::atoi(v);
    else if (a == "--threads") o.threads = std::atoi(v);
    else if (a == "--reps") o.reps = std::atoi(v);
    else if (a == "--dropout") o.dropout = static_cast<float>(std::atof(v));
    else return usage();
  }
  if (o.T < 1 || o.heads < 1 || o.head_size < 1 || o.doc < 1 || o.threads < 1 || o.reps < 1 ||
      o.dropout < 0 || o.dropout >= 1)
    return usage();
  k::set_num_threads(o.threads);
  const int T = o.T, NH = o.heads, HS = o.head_size, C = NH * HS;
  const size_t W = 3 * static_cast<size_t>(C);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> qkv(T * W), dout(static_cast<size_t>(T) * C);
  for (float& x : qkv) x = normal(rng);
  for (float& x : dout) x = normal(rng);
  std::vector<float> out(dout.size()), dqkv(qkv.size()), lse(static_cast<size_t>(NH) * T);
  std::vector<float> ws(k::attention_workspace_elems(T, HS) * k::num_threads());
  std::vector<int32_t> one(T), packed(T);
  for (int t = 0; t < T; t++) one[t] = t, packed[t] = t % o.doc;

  std::printf("%s\n", lattice::bench::machine_line().c_str());
  std::printf("fp32, T %d, %d heads of %d, %d threads, medians of %d calls\n\n", T, NH, HS,
              k::num_threads(), o.reps);
  std::printf("| kernel | documents | forward (ms) | backward (ms) | GFLOP/s |\n"
              "|---|---|---|---|---|\n");
  const double per_score = 4.0 * HS * NH;  // a visible score's forward flops, all heads
  char dropped[64];
  std::snprintf(dropped, sizeof dropped, "causal, dropout %.2g", o.dropout);
  for (const std::vector<int32_t>* pos : {&one, &packed}) {
    const int32_t* p = pos == &one ? nullptr : pos->data();
    const double fwd = median_ms(o.reps, [&] {
      k::attention_forward(out.data(), lse.data(), qkv.data(), 1, T, C, NH, o.dropout, 7,
                           ws.data(), 0, 0, 0, p);
    });
    const double bwd = median_ms(o.reps, [&] {
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), 1, T, C, NH,
                            o.dropout, 7, ws.data(), 0, 0, 0, p);
    });
    const std::string docs =
        pos == &one ? "one" : "packed, " + std::to_string(o.doc) + " tokens each";
    row(dropped, docs.c_str(), fwd, bwd, per_score * visible_scores(*pos));
  }
  // The block kernel on the whole sequence as one block (no dropout: it has none).
  std::vector<float> kv(static_cast<size_t>(T) * 2 * C), dkv(kv.size()), delta(lse.size());
  std::vector<float> bws(k::attention_block_workspace_elems(T, T, HS) * k::num_threads());
  k::attention_kv_pack(kv.data(), qkv.data(), T, NH, NH, HS);
  const k::AttentionBlock block{1, NH, NH, HS, T, 0, T, T, 0, T, one.data(), one.data(), nullptr};
  const double fwd = median_ms(o.reps, [&] {
    std::fill(out.begin(), out.end(), 0.0f);
    std::fill(lse.begin(), lse.end(), -std::numeric_limits<float>::infinity());
    k::attention_block_forward(out.data(), lse.data(), qkv.data(), kv.data(), block, bws.data());
  });
  k::attention_row_dot(delta.data(), dout.data(), out.data(), 1, T, NH, HS);
  const double bwd = median_ms(o.reps, [&] {
    std::fill(dqkv.begin(), dqkv.end(), 0.0f);
    std::fill(dkv.begin(), dkv.end(), 0.0f);
    k::attention_block_backward(dqkv.data(), dkv.data(), dout.data(), delta.data(), lse.data(),
                                qkv.data(), kv.data(), block, bws.data());
  });
  row("block (ring, tower), causal, no dropout", "one", fwd, bwd,
      per_score * visible_scores(one));
  std::printf("\nGFLOP/s: 3 x the forward's flops over forward + backward. The block rows' times "
              "include zeroing their outputs (the ring starts from zeros).\n");
  return 0;
}
