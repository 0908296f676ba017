// The CUDA MoE kernels (kernels/cuda/moe_kernels.cuh) run on the CPU under host_emulation.h give
// the CPU ops' (kernels/cpu/moe.cpp) results bit for bit (Note [deterministic MoE kernels]): the
// routing, the dispatch plan (expert-major, token order within an expert, the capacity drop by
// largest weight with ties to the lower token, over several chunks of the plan's block), the
// row gather and scatter-add, the combine and its backward, the load-balancing loss and the
// router's backward. fp32 tensors against the CPU's float ops; bf16 and fp16 tensors against
// the float ops on the widened inputs, their results rounded once to the 16-bit type (the
// kernels compute in fp32 and round once: the same bits). Grids of few, small blocks, so that
// every grid-stride loop runs more than once.
#include <QtTest/QtTest>

#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/cuda/host_emulation.h"
// The emulation above must come first: it supplies what the kernels take from CUDA.
#include "lattice/kernels.h"
#include "moe_kernels.cuh"  // kernels/cuda/

namespace cu = lattice::kernels::cuda;
namespace emu = lattice::emulation;
namespace k = lattice::kernels;

namespace {

// Normal values; with `levels` > 0 rounded to a grid of that many values per unit, so that
// equal logits (ties among experts) and equal weights (ties among tokens) are common.
std::vector<float> random_floats(size_t n, uint64_t seed, int levels = 0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = levels > 0 ? std::round(normal(rng) * levels) / levels : normal(rng);
  return v;
}

// v as T; v itself rounded to T's values, so that the CPU's float ops see what the kernel reads.
template <typename T>
std::vector<T> stored_as(std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    out[i] = cu::from_float<T>(v[i]);
    v[i] = cu::to_float(out[i]);
  }
  return out;
}

template <typename T>
std::vector<T> rounded(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = cu::from_float<T>(v[i]);
  return out;
}

template <typename T>
T nan_of() {
  return cu::from_float<T>(std::nanf(""));
}

// "" when got and want hold the same bits, else the first difference.
template <typename T>
QString differ(const char* tensor, const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return QString("%1: %2 elements, want %3").arg(tensor).arg(got.size()).arg(want.size());
  for (size_t i = 0; i < want.size(); i++) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    double g, w;
    if constexpr (std::is_integral_v<T>)
      g = got[i], w = want[i];
    else
      g = cu::to_float(got[i]), w = cu::to_float(want[i]);
    return QString("%1[%2]: emulated GPU %3, CPU %4 (bit for bit)")
        .arg(tensor)
        .arg(i)
        .arg(g, 0, 'g', 10)
        .arg(w, 0, 'g', 10);
  }
  return {};
}

#define EXPECT_SAME(tensor, got, want)                 \
  do {                                                 \
    const QString e_ = differ(tensor, got, want);      \
    QVERIFY2(e_.isEmpty(), qPrintable(e_));            \
  } while (0)

// One routing problem: N tokens, E experts, top-k, logits on a grid of `levels` (0: none).
struct Routing {
  int N, E, k;
  std::vector<float> logits, probs, weight;
  std::vector<int32_t> route;
  Routing(int N_, int E_, int k_, int levels, uint64_t seed)
      : N(N_), E(E_), k(k_), logits(random_floats(size_t(N_) * E_, seed, levels)),
        probs(size_t(N_) * E_), weight(size_t(N_) * k_), route(size_t(N_) * k_) {}
  // The CPU's routing of (the rounded) logits.
  void route_on_cpu() {
    k::moe_route(probs.data(), route.data(), weight.data(), logits.data(), N, E, k);
  }
};

template <typename T>
void check_route(int N, int E, int k, int levels) {
  Routing r(N, E, k, levels, 11);
  const std::vector<T> t_logits = stored_as<T>(r.logits);
  r.route_on_cpu();
  std::vector<float> probs(r.probs.size(), std::nanf("")), weight(r.weight.size(), std::nanf(""));
  std::vector<int32_t> route(r.route.size(), -7);
  emu::launch(dim3(2), dim3(8), cu::moe_route_kernel<T>, probs.data(), route.data(),
              weight.data(), t_logits.data(), N, E, k);
  EXPECT_SAME("route", route, r.route);
  EXPECT_SAME("probs", probs, r.probs);
  EXPECT_SAME("weight", weight, r.weight);
}

// The plan of r's routes (routed on the CPU) at `capacity`, with blocks of `threads`.
void check_plan(Routing& r, int capacity, unsigned threads) {
  const int N = r.N, E = r.E, k = r.k, NK = N * k;
  std::vector<int32_t> tokens(E), counts(E), route_slot(NK), slot_row(NK, -5);
  k::moe_dispatch_plan(tokens.data(), counts.data(), route_slot.data(), slot_row.data(),
                       r.route.data(), r.weight.data(), N, E, k, capacity);
  std::vector<int32_t> g_tokens(E, -9), g_counts(E, -9), g_slot(NK, -9), g_row(NK, -5);
  std::vector<unsigned long long> threshold(E, 0);
  emu::launch(dim3(E), dim3(threads), cu::moe_plan_count_kernel, g_tokens.data(), g_counts.data(),
              threshold.data(), static_cast<const int32_t*>(r.route.data()),
              static_cast<const float*>(r.weight.data()), NK, capacity);
  emu::launch(dim3(E), dim3(threads), cu::moe_plan_assign_kernel, g_slot.data(), g_row.data(),
              static_cast<const int32_t*>(g_tokens.data()),
              static_cast<const int32_t*>(g_counts.data()),
              static_cast<const unsigned long long*>(threshold.data()),
              static_cast<const int32_t*>(r.route.data()),
              static_cast<const float*>(r.weight.data()), NK, k, capacity);
  EXPECT_SAME("tokens_per_expert", g_tokens, tokens);
  EXPECT_SAME("counts", g_counts, counts);
  EXPECT_SAME("route_slot", g_slot, route_slot);
  EXPECT_SAME("slot_row", g_row, slot_row);  // the rows past the kept ones untouched on both
}

// The row ops, the combine and its backward, the aux loss and the router's backward on one
// routing (r, planned at `capacity`) with rows of width C, in T against the CPU's float ops.
template <typename T>
void check_rows_and_backward(int N, int E, int k, int C, int capacity) {
  Routing r(N, E, k, 4, 21);
  r.route_on_cpu();
  const int NK = N * k;
  std::vector<int32_t> tokens(E), counts(E), route_slot(NK), slot_row(NK);
  k::moe_dispatch_plan(tokens.data(), counts.data(), route_slot.data(), slot_row.data(),
                       r.route.data(), r.weight.data(), N, E, k, capacity);
  int rows = 0;
  for (int c : counts) rows += c;
  const size_t NC = size_t(N) * C, SC = size_t(NK) * C;
  std::vector<float> inp = random_floats(NC, 31), expert_out = random_floats(SC, 32),
                     dout = random_floats(NC, 33), d_rows = random_floats(SC, 34),
                     dinp0 = random_floats(NC, 35);
  const std::vector<T> t_inp = stored_as<T>(inp), t_expert_out = stored_as<T>(expert_out),
                       t_dout = stored_as<T>(dout), t_d_rows = stored_as<T>(d_rows),
                       t_dinp0 = stored_as<T>(dinp0);
  const dim3 grid(2), block(32);

  // Gather: a copy, the same bits in any T.
  std::vector<float> gathered(SC, 0.0f);
  k::moe_gather_rows(gathered.data(), inp.data(), slot_row.data(), rows, C);
  std::vector<T> g_gathered(SC, cu::from_float<T>(0.0f));
  emu::launch(grid, block, cu::moe_gather_rows_kernel<T>, g_gathered.data(), t_inp.data(),
              static_cast<const int32_t*>(slot_row.data()), rows, C);
  EXPECT_SAME("gathered rows", g_gathered, rounded<T>(gathered));

  // Scatter-add onto dinp0.
  std::vector<float> dinp = dinp0;
  k::moe_scatter_add_rows(dinp.data(), d_rows.data(), route_slot.data(), N, C, k);
  std::vector<T> g_dinp = t_dinp0;
  emu::launch(grid, block, cu::moe_scatter_add_rows_kernel<T>, g_dinp.data(), t_d_rows.data(),
              static_cast<const int32_t*>(route_slot.data()), N, C, k);
  EXPECT_SAME("scatter-added dinp", g_dinp, rounded<T>(dinp));

  // Combine.
  std::vector<float> out(NC);
  k::moe_combine(out.data(), expert_out.data(), r.weight.data(), route_slot.data(), N, C, k);
  std::vector<T> g_out(NC, nan_of<T>());
  emu::launch(grid, block, cu::moe_combine_kernel<T>, g_out.data(), t_expert_out.data(),
              static_cast<const float*>(r.weight.data()),
              static_cast<const int32_t*>(route_slot.data()), N, C, k);
  EXPECT_SAME("combined out", g_out, rounded<T>(out));

  // Its backward: the rows of dropped routes and those past the kept ones stay as they were.
  std::vector<float> d_expert_out(SC, 0.0f), dweight(NK, std::nanf(""));
  k::moe_combine_backward(d_expert_out.data(), dweight.data(), dout.data(), expert_out.data(),
                          r.weight.data(), route_slot.data(), N, C, k);
  std::vector<T> g_d_expert_out(SC, cu::from_float<T>(0.0f));
  std::vector<float> g_dweight(NK, std::nanf(""));
  emu::launch(grid, block, cu::moe_combine_dweight_kernel<T>, g_dweight.data(), t_dout.data(),
              t_expert_out.data(), static_cast<const int32_t*>(route_slot.data()), N, C, k);
  emu::launch(grid, block, cu::moe_combine_d_rows_kernel<T>, g_d_expert_out.data(),
              t_dout.data(), static_cast<const float*>(r.weight.data()),
              static_cast<const int32_t*>(route_slot.data()), N, C, k);
  EXPECT_SAME("dweight", g_dweight, dweight);
  EXPECT_SAME("d expert_out", g_d_expert_out, rounded<T>(d_expert_out));

  // The load-balancing loss (the columns in a "scratch" of E doubles, as moe.cu's).
  float loss = 0.0f, g_loss = std::nanf("");
  k::moe_aux_loss(&loss, r.probs.data(), tokens.data(), N, E, k, 0.37);
  std::vector<double> column(E, std::nan(""));
  emu::launch(dim3(1), dim3(2), cu::moe_aux_columns_kernel, column.data(),
              static_cast<const float*>(r.probs.data()), N, E);
  emu::launch(dim3(1), dim3(1), cu::moe_aux_total_kernel, &g_loss,
              static_cast<const double*>(column.data()),
              static_cast<const int32_t*>(tokens.data()), N, E, k, 0.37);
  EXPECT_SAME("aux loss", std::vector<float>{g_loss}, std::vector<float>{loss});
  QVERIFY(loss > 0.0f);

  // The router's backward, with the aux loss's term and without it.
  for (const double aux_scale : {0.0, 0.37 * 1024 * N}) {
    std::vector<float> dlogits(size_t(N) * E, std::nanf(""));
    k::moe_route_backward(dlogits.data(), dweight.data(), r.probs.data(), r.route.data(),
                          r.weight.data(), tokens.data(), N, E, k, aux_scale);
    std::vector<T> g_dlogits(dlogits.size(), nan_of<T>());
    emu::launch(grid, block, cu::moe_route_backward_kernel<T>, g_dlogits.data(),
                static_cast<const float*>(dweight.data()),
                static_cast<const float*>(r.probs.data()),
                static_cast<const int32_t*>(r.route.data()),
                static_cast<const float*>(r.weight.data()),
                static_cast<const int32_t*>(tokens.data()), N, E, k, aux_scale);
    EXPECT_SAME(aux_scale == 0 ? "dlogits (no aux loss)" : "dlogits", g_dlogits,
                rounded<T>(dlogits));
  }
}

}  // namespace

class MoeKernelsEmulated : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { k::set_num_threads(2); }

  // Logits on a coarse grid: ties among a token's experts (to the lower expert) are common.
  void routing_matches_cpu_fp32() {
    check_route<float>(37, 6, 2, 2);
    check_route<float>(29, 8, 3, 0);
    check_route<float>(9, 5, 5, 1);  // k = E
  }
  void routing_matches_cpu_bf16_and_fp16() {
    check_route<cu::bf16>(37, 6, 2, 0);
    check_route<cu::fp16>(37, 6, 2, 0);
  }

  // 150 tokens top-2 over 4 experts (300 routes: five chunks of 64, two of 256); logits on a
  // grid of 1, so that many routes share a weight and the capacity drop breaks ties by token.
  void dispatch_plans_equal_the_cpu_plans() {
    Routing r(150, 4, 2, 1, 5);
    r.route_on_cpu();
    int expert_with_ties = -1;  // an expert that drops routes of the weight it keeps
    const int capacity = 40;    // ceil(300 / 4 x 0.53)
    std::vector<int32_t> tokens(4), counts(4), route_slot(300), slot_row(300);
    k::moe_dispatch_plan(tokens.data(), counts.data(), route_slot.data(), slot_row.data(),
                         r.route.data(), r.weight.data(), 150, 4, 2, capacity);
    for (int nj = 0; nj < 300 && expert_with_ties < 0; nj++)
      for (int mj = 0; mj < 300; mj++)
        if (route_slot[nj] >= 0 && route_slot[mj] < 0 && r.route[nj] == r.route[mj] &&
            r.weight[nj] == r.weight[mj])
          expert_with_ties = r.route[nj];
    QVERIFY2(expert_with_ties >= 0, "no capacity drop among equal weights: the case tests no tie");
    for (const int cap : {0, capacity, 1, 75, 300})
      for (const unsigned threads : {64u, 256u}) {
        check_plan(r, cap, threads);
        if (QTest::currentTestFailed()) qWarning("capacity %d, %u threads", cap, threads);
      }
    // Distinct weights (no grid) and an expert nobody routes to (E = 7 for 20 tokens top-1).
    Routing s(120, 5, 3, 0, 6);
    s.route_on_cpu();
    check_plan(s, 50, 64);
    Routing t(20, 7, 1, 0, 8);
    t.route_on_cpu();
    check_plan(t, 2, 64);
  }

  void rows_combine_and_backward_match_cpu_fp32() {
    check_rows_and_backward<float>(23, 4, 2, 40, 0);
    check_rows_and_backward<float>(23, 4, 2, 40, 9);  // drops, so some tokens lose routes
  }
  void rows_combine_and_backward_match_cpu_bf16() {
    check_rows_and_backward<cu::bf16>(23, 4, 2, 40, 9);
  }
  void rows_combine_and_backward_match_cpu_fp16() {
    check_rows_and_backward<cu::fp16>(23, 4, 2, 40, 9);
  }
};

QTEST_GUILESS_MAIN(MoeKernelsEmulated)
#include "test_moe_kernels_emulated.moc"
