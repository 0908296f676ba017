// The CPU device's op lists (engine/src/device/ops.h, docs/one-engine.md step 4):
// - every op of Ops<float> and Ops<double> is kernels.h's op bit for bit (it forwards), the GELU
//   epilogue is the GEMM followed by gelu_forward, the multi-tensor optimizer ops are the
//   one-tensor kernels in order (AdamW's folded gradient scale is scale() first), and
//   unscale_and_check is optim/grad_scaling.cpp's function: every value unscaled, an inf or NaN
//   (present or made by the unscaling) sets the flag, which later clean calls leave set;
// - the fused residual LayerNorm (kernels.h residual_layernorm_forward) is the add followed by
//   layernorm_forward bit for bit, in place too, on rows that take the threaded path;
// - the ring attention's ops (context parallelism): the blocks are kernels.h's, pack / unpack /
//   row_dot / fill / accumulate equal their definitions written out bit for bit;
// - every op of Ops<bf16> and Ops<fp16> agrees with Ops<float> on the same (rounded) inputs
//   within 1e-2, normwise; their MoE ops are the float ops on the widened inputs, rounded once,
//   bit for bit; their ring ops pack 16-bit elements unchanged (the blocks: ring_attention_worker);
//   their embedding widens only the rows its tokens read, and their element-wise and row-wise
//   forward ops go by chunks on the threads: each bit for bit the float op's result rounded.
// The Llama family's ops (RMSNorm, RoPE, SwiGLU, attention over grouped keys and values) are in
// each of these checks.
// Every test runs once per copy of the kernels (generic, avx2, avx512: Note [CPU dispatch]); a
// copy this CPU cannot run is reported as skipped.
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/cpu_isa_rows.h"
#include "device/cpu_device.h"
#include "device/ops.h"
#include "lattice/cpu_bf16_gemm.h"
#include "lattice/kernels.h"
#include "optim/grad_scaling.h"

namespace k = lattice::kernels;
using lattice::AdamWSpan;
using lattice::bf16;
using lattice::fp16;
using lattice::Ops;

namespace {

// Shapes of every case: B batch, T sequence, C channels, NH heads, OC outputs, V vocabulary.
constexpr int B = 2, T = 5, C = 8, NH = 2, OC = 12, V = 11, N = B * T;
constexpr float kDropout = 0.25f;
constexpr uint64_t kKey = 1234;

template <typename S>
std::vector<S> random_vector(size_t n, unsigned seed, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<S> v(n);
  for (S& x : v) x = static_cast<S>(u(rng));
  return v;
}

std::vector<int32_t> random_tokens(size_t n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = static_cast<int32_t>(rng() % vocab);
  return v;
}

// "" when got and want hold the same bytes, else the first element that differs.
template <typename S>
QString bitwise_difference(const QString& what, const std::vector<S>& got,
                           const std::vector<S>& want, const char* got_name,
                           const char* want_name) {
  if (got.size() != want.size())
    return QString("%1: %2 elements, expected %3").arg(what).arg(got.size()).arg(want.size());
  for (size_t i = 0; i < got.size(); i++)
    if (std::memcmp(&got[i], &want[i], sizeof(S)) != 0)
      return QString("%1[%2]: %3 %4, %5 %6 (not bit for bit)")
          .arg(what)
          .arg(i)
          .arg(got_name)
          .arg(static_cast<double>(got[i]), 0, 'g', 17)
          .arg(want_name)
          .arg(static_cast<double>(want[i]), 0, 'g', 17);
  return {};
}

// Failures of one test, each naming its op, tensor and index; checked once at the end.
struct Failures {
  const char* got_name = "op list";
  const char* want_name = "kernels.h";
  QStringList list;
  template <typename S>
  void same(const QString& what, const std::vector<S>& got, const std::vector<S>& want) {
    const QString why = bitwise_difference(what, got, want, got_name, want_name);
    if (!why.isEmpty()) list << why;
  }
  void check() const { QVERIFY2(list.isEmpty(), qPrintable(list.join("\n"))); }
};

// Every op of the CPU device's Ops<S> against kernels.h, on identical inputs and identically
// initialised outputs (parameter gradients accumulate into non-zero values).
template <typename S>
void compare_every_op(Ops<S>& ops, Failures& f) {
  using Ep = lattice::Epilogue;
  const auto inp = random_vector<S>(N * C, 1), w = random_vector<S>(OC * C, 2),
             b = random_vector<S>(OC, 3), dout = random_vector<S>(N * OC, 4);

  {  // matmul_forward without epilogue, with and without bias
    for (const S* bias : {b.data(), static_cast<const S*>(nullptr)}) {
      std::vector<S> got(N * OC), want(N * OC);
      ops.matmul_forward(got.data(), nullptr, inp.data(), w.data(), bias, N, C, OC, Ep::kNone);
      k::matmul_forward(want.data(), inp.data(), w.data(), bias, N, C, OC);
      f.same(bias ? "matmul_forward out" : "matmul_forward (no bias) out", got, want);
    }
  }
  {  // the GELU epilogue: the GEMM, then gelu_forward; pre_gelu keeps the GEMM's result
    std::vector<S> gemm(N * OC), want(N * OC);
    k::matmul_forward(gemm.data(), inp.data(), w.data(), b.data(), N, C, OC);
    k::gelu_forward(want.data(), gemm.data(), gemm.size());
    std::vector<S> got(N * OC), pre(N * OC), got_no_pre(N * OC);
    ops.matmul_forward(got.data(), pre.data(), inp.data(), w.data(), b.data(), N, C, OC, Ep::kGelu);
    ops.matmul_forward(got_no_pre.data(), nullptr, inp.data(), w.data(), b.data(), N, C, OC,
                       Ep::kGelu);
    f.same("matmul_forward+gelu out", got, want);
    f.same("matmul_forward+gelu pre_gelu", pre, gemm);
    f.same("matmul_forward+gelu (no pre_gelu) out", got_no_pre, want);
  }
  {  // matmul_backward
    std::vector<S> gi(N * C), gw = random_vector<S>(OC * C, 5), gb = random_vector<S>(OC, 6);
    std::vector<S> wi = gi, ww = gw, wb = gb;
    ops.matmul_backward(gi.data(), gw.data(), gb.data(), dout.data(), inp.data(), w.data(), N, C,
                        OC);
    k::matmul_backward(wi.data(), ww.data(), wb.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
    f.same("matmul_backward dinp", gi, wi);
    f.same("matmul_backward dweight", gw, ww);
    f.same("matmul_backward dbias", gb, wb);
  }
  {  // add_bias
    std::vector<S> got = dout, want = dout;
    ops.add_bias(got.data(), b.data(), N, OC);
    k::add_bias(want.data(), b.data(), N, OC);
    f.same("add_bias out", got, want);
  }
  {  // embedding, a vocabulary slice [3, 9) and positions
    const auto tokens = random_tokens(N, V, 7);
    const auto wte = random_vector<S>(6 * C, 8), wpe = random_vector<S>(T * C, 9);
    std::vector<S> got(N * C), want(N * C);
    ops.embedding_forward(got.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, 3, 9,
                          nullptr);
    k::embedding_forward(want.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, 3, 9);
    f.same("embedding_forward out", got, want);
    const auto d = random_vector<S>(N * C, 10);
    std::vector<S> gte = random_vector<S>(6 * C, 11), gpe = random_vector<S>(T * C, 12);
    std::vector<S> wte_grad = gte, wpe_grad = gpe;
    ops.embedding_backward(gte.data(), gpe.data(), d.data(), tokens.data(), B, T, C, 3, 9, nullptr);
    k::embedding_backward(wte_grad.data(), wpe_grad.data(), d.data(), tokens.data(), B, T, C, 3, 9);
    f.same("embedding_backward dwte", gte, wte_grad);
    f.same("embedding_backward dwpe", gpe, wpe_grad);
  }
  {  // LayerNorm: plain, fused with the residual add, backward
    const auto lw = random_vector<S>(C, 13), lb = random_vector<S>(C, 14),
               res = random_vector<S>(N * C, 15);
    std::vector<S> got(N * C), gm(N), gr(N), want(N * C), wm(N), wr(N);
    ops.layernorm_forward(got.data(), gm.data(), gr.data(), inp.data(), lw.data(), lb.data(), N, C);
    k::layernorm_forward(want.data(), wm.data(), wr.data(), inp.data(), lw.data(), lb.data(), N, C);
    f.same("layernorm_forward out", got, want);
    f.same("layernorm_forward mean", gm, wm);
    f.same("layernorm_forward rstd", gr, wr);

    std::vector<S> gsum(N * C), wsum(N * C);
    ops.residual_layernorm_forward(gsum.data(), got.data(), gm.data(), gr.data(), res.data(),
                                   inp.data(), lw.data(), lb.data(), N, C);
    k::residual_layernorm_forward(wsum.data(), want.data(), wm.data(), wr.data(), res.data(),
                                  inp.data(), lw.data(), lb.data(), N, C);
    f.same("residual_layernorm_forward residual_out", gsum, wsum);
    f.same("residual_layernorm_forward out", got, want);
    f.same("residual_layernorm_forward mean", gm, wm);
    f.same("residual_layernorm_forward rstd", gr, wr);

    const auto d = random_vector<S>(N * C, 16);
    std::vector<S> gi = random_vector<S>(N * C, 17), gw(C, S(0.5)), gb(C, S(-0.5));
    std::vector<S> wi = gi, ww = gw, wb = gb;
    ops.layernorm_backward(gi.data(), gw.data(), gb.data(), d.data(), wsum.data(), lw.data(),
                           wm.data(), wr.data(), N, C);
    k::layernorm_backward(wi.data(), ww.data(), wb.data(), d.data(), wsum.data(), lw.data(),
                          wm.data(), wr.data(), N, C);
    f.same("layernorm_backward dinp", gi, wi);
    f.same("layernorm_backward dweight", gw, ww);
    f.same("layernorm_backward dbias", gb, wb);
  }
  {  // GELU, dropout
    std::vector<S> got(N * C), want(N * C);
    ops.gelu_forward(got.data(), inp.data(), got.size());
    k::gelu_forward(want.data(), inp.data(), want.size());
    f.same("gelu_forward out", got, want);
    const auto d = random_vector<S>(N * C, 18);
    ops.gelu_backward(got.data(), inp.data(), d.data(), got.size());
    k::gelu_backward(want.data(), inp.data(), d.data(), want.size());
    f.same("gelu_backward dinp", got, want);
    const auto res = random_vector<S>(N * C, 19);
    ops.residual_dropout_forward(got.data(), res.data(), inp.data(), got.size(), kDropout, kKey, 7);
    k::residual_dropout_forward(want.data(), res.data(), inp.data(), want.size(), kDropout, kKey,
                                7);
    f.same("residual_dropout_forward out", got, want);
    ops.dropout_backward(got.data(), d.data(), got.size(), kDropout, kKey, 7);
    k::dropout_backward(want.data(), d.data(), want.size(), kDropout, kKey, 7);
    f.same("dropout_backward dx", got, want);
  }
  {  // attention: heads 1..2 of 4, with dropout; the saved tensor is the log-sum-exps
    const int total_heads = 4, head_offset = 1;
    if (ops.attention_saved_elems(B, T, NH) != static_cast<size_t>(B) * NH * T)
      f.list << QString("attention_saved_elems: %1, expected B*NH*T = %2")
                    .arg(ops.attention_saved_elems(B, T, NH))
                    .arg(B * NH * T);
    const size_t ws = k::attention_workspace_elems(T, C / NH) * k::num_threads();
    if (ops.attention_workspace_elems(B, T, NH, C / NH) != ws)
      f.list << QString("attention_workspace_elems: %1, expected %2 (per thread)")
                    .arg(ops.attention_workspace_elems(B, T, NH, C / NH))
                    .arg(ws);
    const auto qkv = random_vector<S>(N * 3 * C, 20), d = random_vector<S>(N * C, 21);
    std::vector<S> got(N * C), want(N * C), gp(B * NH * T), wp(B * NH * T), gws(ws),
        wws(ws);
    ops.attention_forward(got.data(), gp.data(), qkv.data(), gws.data(), B, T, C, NH, kDropout,
                          kKey, head_offset, total_heads, NH, nullptr);
    k::attention_forward(want.data(), wp.data(), qkv.data(), B, T, C, NH, kDropout, kKey,
                         wws.data(), head_offset, total_heads);
    f.same("attention_forward out", got, want);
    f.same("attention_forward saved", gp, wp);
    std::vector<S> gq(N * 3 * C), wq(N * 3 * C);
    ops.attention_backward(gq.data(), d.data(), qkv.data(), got.data(), gp.data(), gws.data(), B, T,
                           C, NH, kDropout, kKey, head_offset, total_heads, NH, nullptr);
    k::attention_backward(wq.data(), d.data(), qkv.data(), wp.data(), B, T, C, NH, kDropout, kKey,
                          wws.data(), head_offset, total_heads);
    f.same("attention_backward dqkv", gq, wq);
  }
  {  // attention over one key/value head (MQA): the grouped layout (NH + 2) HS wide
    const int KV = 1, W = (NH + 2 * KV) * (C / NH);
    const size_t ws = k::attention_workspace_elems(T, C / NH) * k::num_threads();
    const auto qkv = random_vector<S>(N * W, 63), d = random_vector<S>(N * C, 64);
    std::vector<S> got(N * C), want(N * C), gp(B * NH * T * T), wp(B * NH * T * T), gws(ws),
        wws(ws), gq(N * W), wq(N * W);
    ops.attention_forward(got.data(), gp.data(), qkv.data(), gws.data(), B, T, C, NH, kDropout,
                          kKey, 0, NH, KV, nullptr);
    k::attention_forward(want.data(), wp.data(), qkv.data(), B, T, C, NH, kDropout, kKey,
                         wws.data(), 0, NH, KV);
    f.same("grouped attention_forward out", got, want);
    ops.attention_backward(gq.data(), d.data(), qkv.data(), got.data(), gp.data(), gws.data(), B, T,
                           C, NH, kDropout, kKey, 0, NH, KV, nullptr);
    k::attention_backward(wq.data(), d.data(), qkv.data(), wp.data(), B, T, C, NH, kDropout, kKey,
                          wws.data(), 0, NH, KV);
    f.same("grouped attention_backward dqkv", gq, wq);
  }
  {  // RMSNorm: plain, fused with the residual add, backward (accumulating)
    const auto lw = random_vector<S>(C, 65), res = random_vector<S>(N * C, 66),
               d = random_vector<S>(N * C, 67);
    std::vector<S> got(N * C), gr(N), want(N * C), wr(N);
    ops.rmsnorm_forward(got.data(), gr.data(), inp.data(), lw.data(), N, C, 1e-6f);
    k::rmsnorm_forward(want.data(), wr.data(), inp.data(), lw.data(), N, C, 1e-6f);
    f.same("rmsnorm_forward out", got, want);
    f.same("rmsnorm_forward rstd", gr, wr);
    std::vector<S> gsum(N * C), wsum(N * C);
    ops.residual_rmsnorm_forward(gsum.data(), got.data(), gr.data(), res.data(), inp.data(),
                                 lw.data(), N, C, 1e-6f);
    k::residual_rmsnorm_forward(wsum.data(), want.data(), wr.data(), res.data(), inp.data(),
                                lw.data(), N, C, 1e-6f);
    f.same("residual_rmsnorm_forward residual_out", gsum, wsum);
    f.same("residual_rmsnorm_forward out", got, want);
    std::vector<S> gi = res, wi = res, gw = lw, ww = lw;
    ops.rmsnorm_backward(gi.data(), gw.data(), d.data(), inp.data(), lw.data(), gr.data(), N, C);
    k::rmsnorm_backward(wi.data(), ww.data(), d.data(), inp.data(), lw.data(), wr.data(), N, C);
    f.same("rmsnorm_backward dinp", gi, wi);
    f.same("rmsnorm_backward dweight", gw, ww);
  }
  {  // RoPE on the grouped layout (NH 2, KV 1), at row positions and from a positions array
    const int KV = 1, HS = C / NH, W = (NH + 2 * KV) * HS, P = 16;
    std::vector<double> cos(P * HS / 2), sin(P * HS / 2);
    k::rope_tables(cos.data(), sin.data(), P, HS, 10000.0);
    const std::vector<S> c(cos.begin(), cos.end()), s(sin.begin(), sin.end());
    std::vector<int32_t> positions(N);
    for (int n = 0; n < N; n++) positions[n] = (n * 7) % P;
    for (const int32_t* pos :
         {static_cast<const int32_t*>(nullptr), std::as_const(positions).data()}) {
      std::vector<S> got = random_vector<S>(N * W, 68), want = got;
      ops.rope_forward(got.data(), c.data(), s.data(), pos, N, T, NH, KV, HS, HS);
      k::rope_forward(want.data(), c.data(), s.data(), pos, N, T, NH, KV, HS, HS);
      f.same("rope_forward qkv", got, want);
      ops.rope_backward(got.data(), c.data(), s.data(), pos, N, T, NH, KV, HS, 2);
      k::rope_backward(want.data(), c.data(), s.data(), pos, N, T, NH, KV, HS, 2);
      f.same("rope_backward dqkv", got, want);
    }
  }
  {  // SwiGLU
    const int F = 6;
    const auto gate_up = random_vector<S>(N * 2 * F, 69), d = random_vector<S>(N * F, 70);
    std::vector<S> got(N * F), want(N * F), gi(N * 2 * F), wi(N * 2 * F);
    ops.swiglu_forward(got.data(), gate_up.data(), N, F);
    k::swiglu_forward(want.data(), gate_up.data(), N, F);
    f.same("swiglu_forward out", got, want);
    ops.swiglu_backward(gi.data(), gate_up.data(), d.data(), N, F);
    k::swiglu_backward(wi.data(), gate_up.data(), d.data(), N, F);
    f.same("swiglu_backward dinp", gi, wi);
  }
  {  // cross-entropy, whole rows and vocabulary-parallel passes (columns [4, 4 + V))
    const auto logits = random_vector<S>(N * V, 22, -3, 3);
    const auto targets = random_tokens(N, V, 23);
    std::vector<S> gl(N), gd(N * V), wl(N), wd(N * V);
    ops.softmax_cross_entropy(gl.data(), gd.data(), logits.data(), targets.data(), N, V, 0.5f);
    k::softmax_cross_entropy(wl.data(), wd.data(), logits.data(), targets.data(), N, V, 0.5f);
    f.same("softmax_cross_entropy losses", gl, wl);
    f.same("softmax_cross_entropy dlogits", gd, wd);
    const auto shard_targets = random_tokens(N, V + 8, 24);  // some outside this shard
    std::vector<S> gmax(N), wmax(N), gt(N), wt(N);
    std::vector<double> gs(N), ws(N);
    ops.cross_entropy_shard_max(gmax.data(), logits.data(), N, V);
    k::cross_entropy_shard_max(wmax.data(), logits.data(), N, V);
    f.same("cross_entropy_shard_max row_max", gmax, wmax);
    ops.cross_entropy_shard_sums(gs.data(), gt.data(), logits.data(), wmax.data(),
                                 shard_targets.data(), 4, N, V);
    k::cross_entropy_shard_sums(ws.data(), wt.data(), logits.data(), wmax.data(),
                                shard_targets.data(), 4, N, V);
    f.same("cross_entropy_shard_sums sum_exp", gs, ws);
    f.same("cross_entropy_shard_sums target_logit", gt, wt);
    ops.cross_entropy_shard_finish(gl.data(), gd.data(), logits.data(), wmax.data(), ws.data(),
                                   wt.data(), shard_targets.data(), 4, N, V, 0.5f);
    k::cross_entropy_shard_finish(wl.data(), wd.data(), logits.data(), wmax.data(), ws.data(),
                                  wt.data(), shard_targets.data(), 4, N, V, 0.5f);
    f.same("cross_entropy_shard_finish losses", gl, wl);
    f.same("cross_entropy_shard_finish dlogits", gd, wd);
  }
  {  // conversions between A and G are copies when they are one type
    std::vector<S> got(N * C);
    ops.to_compute(got.data(), inp.data(), got.size());
    f.same("to_compute dst", got, inp);
    std::fill(got.begin(), got.end(), S(0));
    ops.to_accum(got.data(), inp.data(), got.size());
    f.same("to_accum dst", got, inp);
  }
  {  // the optimizer: two tensors, the second without weight decay
    k::AdamWParams p;
    p.lr = 1e-2f;
    p.weight_decay = 0.1f;
    p.step = 3;
    const size_t n0 = 37, n1 = 5;
    std::vector<S> p0 = random_vector<S>(n0, 25), p1 = random_vector<S>(n1, 26),
                   g0 = random_vector<S>(n0, 27), g1 = random_vector<S>(n1, 28),
                   m0 = random_vector<S>(n0, 29), m1 = random_vector<S>(n1, 30),
                   v0 = random_vector<S>(n0, 31, 0, 1), v1 = random_vector<S>(n1, 32, 0, 1);
    std::vector<S> wp0 = p0, wp1 = p1, wm0 = m0, wm1 = m1, wv0 = v0, wv1 = v1;
    AdamWSpan<S> spans[2];
    spans[0] = {p0.data(), g0.data(), m0.data(), v0.data(), nullptr, n0, true};
    spans[1] = {p1.data(), g1.data(), m1.data(), v1.data(), nullptr, n1, false};
    // Clipping folded in: each gradient scaled on its way in, as scale() and then the step.
    const S clip = S(0.75);
    ops.adamw_update(spans, 2, p, clip);
    std::vector<S> c0 = g0, c1 = g1;
    k::scale(c0.data(), n0, clip);
    k::scale(c1.data(), n1, clip);
    k::adamw_update(wp0.data(), c0.data(), wm0.data(), wv0.data(), n0, p);
    k::AdamWParams no_decay = p;
    no_decay.weight_decay = 0;
    k::adamw_update(wp1.data(), c1.data(), wm1.data(), wv1.data(), n1, no_decay);
    f.same("adamw_update param[0]", p0, wp0);
    f.same("adamw_update m[0]", m0, wm0);
    f.same("adamw_update v[0]", v0, wv0);
    f.same("adamw_update param[1] (no decay)", p1, wp1);
    f.same("adamw_update m[1]", m1, wm1);
    f.same("adamw_update v[1]", v1, wv1);

    const S* tensors[2] = {g0.data(), g1.data()};
    const size_t sizes[2] = {n0, n1};
    std::vector<double> got(1);
    ops.sum_squares(got.data(), tensors, sizes, 2);
    const std::vector<double> want{k::sum_squares(g0.data(), n0) + k::sum_squares(g1.data(), n1)};
    f.same("sum_squares result", got, want);

    std::vector<S> sg = g0, sw = g0;
    ops.scale(sg.data(), n0, S(0.375));
    k::scale(sw.data(), n0, S(0.375));
    f.same("scale x", sg, sw);
  }
  {  // loss scaling's overflow test
    const size_t n = 41;
    const std::vector<S> g = random_vector<S>(n, 33, -100, 100);
    std::vector<S> x = g, want(n), fn = g;
    for (size_t i = 0; i < n; i++) want[i] = g[i] * S(0.125);
    float found = 0;
    ops.unscale_and_check(x.data(), n, S(0.125), &found);
    f.same("unscale_and_check x (finite)", x, want);
    if (found != 0) f.list << "unscale_and_check: finite gradients set the flag";
    if (lattice::unscale_and_check(fn.data(), n, 0.125)) f.list << "grad_scaling.cpp: flagged";
    f.same("unscale_and_check x (grad_scaling.cpp's)", x, fn);
    // An inf in the middle: every other value is still unscaled, and the flag is set.
    x = g;
    x[17] = std::numeric_limits<S>::infinity();
    ops.unscale_and_check(x.data(), n, S(0.125), &found);
    want[17] = x[17];
    f.same("unscale_and_check x (an inf at 17)", x, want);
    if (found != 1) f.list << "unscale_and_check: an inf at 17 did not set the flag";
    x = g;  // a later clean call leaves the flag set
    ops.unscale_and_check(x.data(), n, S(0.125), &found);
    if (found != 1) f.list << "unscale_and_check: a clean call cleared the flag";
    found = 0;  // a NaN, and a value the unscaling makes inf
    x = g;
    x[3] = std::numeric_limits<S>::quiet_NaN();
    ops.unscale_and_check(x.data(), n, S(0.125), &found);
    if (found != 1) f.list << "unscale_and_check: a NaN at 3 did not set the flag";
    found = 0;
    x = g;
    x[40] = std::numeric_limits<S>::max();
    ops.unscale_and_check(x.data(), n, S(4), &found);
    if (found != 1) f.list << "unscale_and_check: max * 4 = inf did not set the flag";
  }
  // Ring attention's ops (context parallelism): the blocks forward to kernels.h, the data movement
  // against its definition written out here (grouped layout: group g's Q query heads, then its
  // key, then its value).
  if (!ops.has_ring_attention()) f.list << "has_ring_attention: false on the CPU's list";
  {
    const int KV = 1, Q = NH / KV, HS = C / NH, W = (NH + 2 * KV) * HS, Tk = 3;
    if (ops.attention_block_workspace_elems(B, NH, T, Tk, HS) !=
        k::attention_block_workspace_elems(T, Tk, HS) * static_cast<size_t>(k::num_threads()))
      f.list << "attention_block_workspace_elems: not kernels.h's per thread";
    const auto qkv = random_vector<S>(static_cast<size_t>(N) * W, 81);
    std::vector<S> kv(static_cast<size_t>(N) * 2 * KV * HS, S(7)), want_kv(kv.size());
    for (int row = 0; row < N; row++)
      for (int g = 0; g < KV; g++)
        for (int i = 0; i < 2 * HS; i++)
          want_kv[(static_cast<size_t>(row) * KV + g) * 2 * HS + i] =
              qkv[static_cast<size_t>(row) * W + (g * (Q + 2) + Q) * HS + i];
    ops.attention_kv_pack(kv.data(), qkv.data(), N, NH, KV, HS);
    f.same("attention_kv_pack kv", kv, want_kv);
    std::vector<S> back = random_vector<S>(qkv.size(), 82), want_back = back;
    for (int row = 0; row < N; row++)
      for (int g = 0; g < KV; g++)
        for (int i = 0; i < 2 * HS; i++)
          want_back[static_cast<size_t>(row) * W + (g * (Q + 2) + Q) * HS + i] =
              want_kv[(static_cast<size_t>(row) * KV + g) * 2 * HS + i];
    ops.attention_kv_unpack(back.data(), kv.data(), N, NH, KV, HS);
    f.same("attention_kv_unpack qkv", back, want_back);
    const auto out = random_vector<S>(static_cast<size_t>(N) * C, 83),
               d = random_vector<S>(out.size(), 84);
    std::vector<S> delta(static_cast<size_t>(B) * NH * T), want_delta(delta.size());
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
          S dot = 0;
          for (int i = 0; i < HS; i++) {
            const size_t at = (static_cast<size_t>(b) * T + t) * C + h * HS + i;
            dot += d[at] * out[at];
          }
          want_delta[(static_cast<size_t>(b) * NH + h) * T + t] = dot;
        }
    ops.attention_row_dot(delta.data(), d.data(), out.data(), B, T, NH, HS);
    f.same("attention_row_dot delta", delta, want_delta);
    std::vector<S> x = out;
    ops.fill(x.data(), x.size(), S(-2.5));
    f.same("fill x", x, std::vector<S>(x.size(), S(-2.5)));
    std::vector<S> acc = out, want_acc = out;
    for (size_t i = 0; i < acc.size(); i++) want_acc[i] += d[i];
    ops.accumulate(acc.data(), d.data(), acc.size());
    f.same("accumulate acc", acc, want_acc);
    // One block forward and backward: the op list's against kernels.h's.
    const std::vector<int32_t> q_pos = {3, 4, 5, 6, 7}, k_pos = {0, 1, 6};
    k::AttentionBlock block;
    block.B = B;
    block.NH = NH;
    block.KV = KV;
    block.HS = HS;
    block.Tq = T;
    block.q_begin = 1;
    block.q_end = T;
    block.Tk = Tk;
    block.k_begin = 0;
    block.k_end = Tk;
    block.q_pos = q_pos.data();
    block.k_pos = k_pos.data();
    const auto bkv = random_vector<S>(static_cast<size_t>(B) * Tk * 2 * KV * HS, 85);
    std::vector<S> ws(ops.attention_block_workspace_elems(B, NH, T, Tk, HS));
    std::vector<S> o(out.size(), S(0)), lse(delta.size(), -std::numeric_limits<S>::infinity());
    std::vector<S> wo = o, wlse = lse;
    ops.attention_block_forward(o.data(), lse.data(), qkv.data(), bkv.data(), block, ws.data());
    k::attention_block_forward(wo.data(), wlse.data(), qkv.data(), bkv.data(), block, ws.data());
    f.same("attention_block_forward out", o, wo);
    f.same("attention_block_forward lse", lse, wlse);
    std::vector<S> dq(qkv.size(), S(0)), dkv(bkv.size(), S(0)), wdq = dq, wdkv = dkv;
    ops.attention_block_backward(dq.data(), dkv.data(), d.data(), want_delta.data(), lse.data(),
                                 qkv.data(), bkv.data(), block, ws.data());
    k::attention_block_backward(wdq.data(), wdkv.data(), d.data(), want_delta.data(), wlse.data(),
                                qkv.data(), bkv.data(), block, ws.data());
    f.same("attention_block_backward dqkv", dq, wdq);
    f.same("attention_block_backward dkv", dkv, wdkv);
  }
}

// ---- 16-bit lists against the float list -----------------------------------------------------

float widen(bf16 x) {
  return lattice::from_bf16(x);
}
float widen(fp16 x) {
  return lattice::from_fp16(x);
}
template <typename H>
H narrow(float x) {
  if constexpr (std::is_same_v<H, bf16>)
    return lattice::to_bf16(x);
  else
    return lattice::to_fp16(x);
}
template <typename H>
std::vector<H> narrowed(const std::vector<float>& v) {
  std::vector<H> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = narrow<H>(v[i]);
  return out;
}
template <typename H>
std::vector<float> widened(const std::vector<H>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = widen(v[i]);
  return out;
}
// Inputs as the 16-bit list sees them: random floats rounded to H, and the same values as float.
template <typename H>
struct Input {
  std::vector<H> h;
  std::vector<float> f;
  Input(size_t n, unsigned seed, double lo = -1, double hi = 1)
      : h(narrowed<H>(random_vector<float>(n, seed, lo, hi))), f(widened(h)) {}
};

constexpr double k16BitTolerance = 1e-2;

// max |got - want| / max |want| over the tensor; "" when within k16BitTolerance.
QString normwise_difference(const QString& what, const std::vector<float>& got,
                            const std::vector<float>& want) {
  if (got.size() != want.size())
    return QString("%1: %2 elements, expected %3").arg(what).arg(got.size()).arg(want.size());
  double diff = 0, scale = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= diff)) {
      diff = std::isnan(d) ? INFINITY : d;
      worst = i;
    }
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  const double rel = scale > 0 ? diff / scale : diff;
  if (rel <= k16BitTolerance) return {};
  return QString("%1: normwise relative error %2 > %3 (worst at [%4]: %5 against float %6)")
      .arg(what)
      .arg(rel, 0, 'g', 3)
      .arg(k16BitTolerance)
      .arg(worst)
      .arg(got[worst], 0, 'g', 9)
      .arg(want[worst], 0, 'g', 9);
}

struct Near {
  QStringList list;
  void close(const QString& what, const std::vector<float>& got, const std::vector<float>& want) {
    const QString why = normwise_difference(what, got, want);
    if (!why.isEmpty()) list << why;
  }
  template <typename H>
  void close(const QString& what, const std::vector<H>& got, const std::vector<float>& want) {
    close(what, widened(got), want);
  }
};

template <typename H>
void compare_16_bit_list(Ops<H>& h, Ops<float>& f, Near& near) {
  using Ep = lattice::Epilogue;
  using FEp = lattice::Epilogue;
  const Input<H> inp(N * C, 41), w(OC * C, 42), b(OC, 43), dout(N * OC, 44);
  {  // matmul with the GELU epilogue, backward, add_bias
    std::vector<H> out(N * OC), pre(N * OC);
    std::vector<float> fout(N * OC), fpre(N * OC);
    h.matmul_forward(out.data(), pre.data(), inp.h.data(), w.h.data(), b.h.data(), N, C, OC,
                     Ep::kGelu);
    f.matmul_forward(fout.data(), fpre.data(), inp.f.data(), w.f.data(), b.f.data(), N, C, OC,
                     FEp::kGelu);
    near.close("matmul_forward+gelu out", out, fout);
    near.close("matmul_forward+gelu pre_gelu", pre, fpre);
    std::vector<H> di(N * C);
    std::vector<float> fdi(N * C), dw(OC * C, 0.f), fdw(OC * C, 0.f), db(OC, 0.f), fdb(OC, 0.f);
    h.matmul_backward(di.data(), dw.data(), db.data(), dout.h.data(), inp.h.data(), w.h.data(), N,
                      C, OC);
    f.matmul_backward(fdi.data(), fdw.data(), fdb.data(), dout.f.data(), inp.f.data(), w.f.data(),
                      N, C, OC);
    near.close("matmul_backward dinp", di, fdi);
    near.close("matmul_backward dweight", dw, fdw);
    near.close("matmul_backward dbias", db, fdb);
    std::vector<H> o = dout.h;
    std::vector<float> fo = dout.f;
    h.add_bias(o.data(), b.h.data(), N, OC);
    f.add_bias(fo.data(), b.f.data(), N, OC);
    near.close("add_bias out", o, fo);
  }
  {  // embedding
    const auto tokens = random_tokens(N, V, 45);
    const Input<H> wte(V * C, 46), wpe(T * C, 47), d(N * C, 48);
    std::vector<H> out(N * C);
    std::vector<float> fout(N * C);
    h.embedding_forward(out.data(), tokens.data(), wte.h.data(), wpe.h.data(), B, T, C, 0, V,
                        nullptr);
    f.embedding_forward(fout.data(), tokens.data(), wte.f.data(), wpe.f.data(), B, T, C, 0, V,
                        nullptr);
    near.close("embedding_forward out", out, fout);
    std::vector<float> dte(V * C, 0.f), fdte(V * C, 0.f), dpe(T * C, 0.f), fdpe(T * C, 0.f);
    h.embedding_backward(dte.data(), dpe.data(), d.h.data(), tokens.data(), B, T, C, 0, V, nullptr);
    f.embedding_backward(fdte.data(), fdpe.data(), d.f.data(), tokens.data(), B, T, C, 0, V,
                         nullptr);
    near.close("embedding_backward dwte", dte, fdte);
    near.close("embedding_backward dwpe", dpe, fdpe);
  }
  {  // LayerNorm
    const Input<H> lw(C, 49), lb(C, 50), res(N * C, 51), d(N * C, 52);
    std::vector<H> out(N * C), sum(N * C);
    std::vector<float> fout(N * C), fsum(N * C), m(N), r(N), fm(N), fr(N);
    h.layernorm_forward(out.data(), m.data(), r.data(), inp.h.data(), lw.h.data(), lb.h.data(), N,
                        C);
    f.layernorm_forward(fout.data(), fm.data(), fr.data(), inp.f.data(), lw.f.data(), lb.f.data(),
                        N, C);
    near.close("layernorm_forward out", out, fout);
    near.close("layernorm_forward mean", m, fm);
    near.close("layernorm_forward rstd", r, fr);
    h.residual_layernorm_forward(sum.data(), out.data(), m.data(), r.data(), res.h.data(),
                                 inp.h.data(), lw.h.data(), lb.h.data(), N, C);
    f.residual_layernorm_forward(fsum.data(), fout.data(), fm.data(), fr.data(), res.f.data(),
                                 inp.f.data(), lw.f.data(), lb.f.data(), N, C);
    near.close("residual_layernorm_forward residual_out", sum, fsum);
    near.close("residual_layernorm_forward out", out, fout);
    near.close("residual_layernorm_forward mean", m, fm);
    near.close("residual_layernorm_forward rstd", r, fr);
    std::vector<H> di(N * C, narrow<H>(0.f));
    std::vector<float> fdi(N * C, 0.f), dw(C, 0.f), fdw(C, 0.f), db(C, 0.f), fdb(C, 0.f);
    h.layernorm_backward(di.data(), dw.data(), db.data(), d.h.data(), sum.data(), lw.h.data(),
                         m.data(), r.data(), N, C);
    f.layernorm_backward(fdi.data(), fdw.data(), fdb.data(), d.f.data(), fsum.data(), lw.f.data(),
                         fm.data(), fr.data(), N, C);
    near.close("layernorm_backward dinp", di, fdi);
    near.close("layernorm_backward dweight", dw, fdw);
    near.close("layernorm_backward dbias", db, fdb);
  }
  {  // GELU, dropout
    const Input<H> d(N * C, 53), res(N * C, 54);
    std::vector<H> out(N * C);
    std::vector<float> fout(N * C);
    h.gelu_forward(out.data(), inp.h.data(), out.size());
    f.gelu_forward(fout.data(), inp.f.data(), fout.size());
    near.close("gelu_forward out", out, fout);
    h.gelu_backward(out.data(), inp.h.data(), d.h.data(), out.size());
    f.gelu_backward(fout.data(), inp.f.data(), d.f.data(), fout.size());
    near.close("gelu_backward dinp", out, fout);
    h.residual_dropout_forward(out.data(), res.h.data(), inp.h.data(), out.size(), kDropout, kKey,
                               3);
    f.residual_dropout_forward(fout.data(), res.f.data(), inp.f.data(), fout.size(), kDropout, kKey,
                               3);
    near.close("residual_dropout_forward out", out, fout);
    h.dropout_backward(out.data(), d.h.data(), out.size(), kDropout, kKey, 3);
    f.dropout_backward(fout.data(), d.f.data(), fout.size(), kDropout, kKey, 3);
    near.close("dropout_backward dx", out, fout);
  }
  {  // attention
    const Input<H> qkv(N * 3 * C, 55), d(N * C, 56);
    const size_t saved = h.attention_saved_elems(B, T, NH),
                 ws = h.attention_workspace_elems(B, T, NH, C / NH);
    std::vector<float> s(saved), fs(f.attention_saved_elems(B, T, NH)), w1(ws),
        w2(f.attention_workspace_elems(B, T, NH, C / NH));
    std::vector<H> out(N * C), dq(N * 3 * C);
    std::vector<float> fout(N * C), fdq(N * 3 * C);
    h.attention_forward(out.data(), s.data(), qkv.h.data(), w1.data(), B, T, C, NH, kDropout, kKey,
                        0, 0, NH, nullptr);
    f.attention_forward(fout.data(), fs.data(), qkv.f.data(), w2.data(), B, T, C, NH, kDropout,
                        kKey, 0, 0, NH, nullptr);
    near.close("attention_forward out", out, fout);
    near.close("attention_forward saved", s, fs);
    h.attention_backward(dq.data(), d.h.data(), qkv.h.data(), out.data(), s.data(), w1.data(), B, T,
                         C, NH, kDropout, kKey, 0, 0, NH, nullptr);
    f.attention_backward(fdq.data(), d.f.data(), qkv.f.data(), fout.data(), fs.data(), w2.data(), B,
                         T, C, NH, kDropout, kKey, 0, 0, NH, nullptr);
    near.close("attention_backward dqkv", dq, fdq);
  }
  {  // the Llama family's ops: attention over one key/value head, RMSNorm, RoPE, SwiGLU
    const int KV = 1, HS = C / NH, W = (NH + 2 * KV) * HS, F = 6;
    const Input<H> qkv(N * W, 71), d(N * C, 72), lw(C, 73), res(N * C, 74), gu(N * 2 * F, 75),
        dff(N * F, 76);
    const size_t saved = h.attention_saved_elems(B, T, NH),
                 ws = h.attention_workspace_elems(B, T, NH, C / NH);
    std::vector<float> s(saved), fs(saved), w1(ws), w2(ws);
    std::vector<H> out(N * C), dq(N * W);
    std::vector<float> fout(N * C), fdq(N * W);
    h.attention_forward(out.data(), s.data(), qkv.h.data(), w1.data(), B, T, C, NH, 0, kKey, 0, 0,
                        KV, nullptr);
    f.attention_forward(fout.data(), fs.data(), qkv.f.data(), w2.data(), B, T, C, NH, 0, kKey, 0, 0,
                        KV, nullptr);
    near.close("grouped attention_forward out", out, fout);
    h.attention_backward(dq.data(), d.h.data(), qkv.h.data(), out.data(), s.data(), w1.data(), B, T,
                         C, NH, 0, kKey, 0, 0, KV, nullptr);
    f.attention_backward(fdq.data(), d.f.data(), qkv.f.data(), fout.data(), fs.data(), w2.data(), B,
                         T, C, NH, 0, kKey, 0, 0, KV, nullptr);
    near.close("grouped attention_backward dqkv", dq, fdq);

    std::vector<H> nout(N * C), sum(N * C), di = res.h;
    std::vector<float> fnout(N * C), fsum(N * C), r(N), fr(N), fdi = res.f, dw(C, 0.f), fdw(C, 0.f);
    h.residual_rmsnorm_forward(sum.data(), nout.data(), r.data(), res.h.data(), inp.h.data(),
                               lw.h.data(), N, C, 1e-5f);
    f.residual_rmsnorm_forward(fsum.data(), fnout.data(), fr.data(), res.f.data(), inp.f.data(),
                               lw.f.data(), N, C, 1e-5f);
    near.close("residual_rmsnorm_forward out", nout, fnout);
    near.close("residual_rmsnorm_forward rstd", r, fr);
    h.rmsnorm_backward(di.data(), dw.data(), d.h.data(), inp.h.data(), lw.h.data(), r.data(), N, C);
    f.rmsnorm_backward(fdi.data(), fdw.data(), d.f.data(), inp.f.data(), lw.f.data(), fr.data(), N,
                       C);
    near.close("rmsnorm_backward dinp", di, fdi);
    near.close("rmsnorm_backward dweight", dw, fdw);

    std::vector<double> cos(T * HS / 2), sin(T * HS / 2);
    k::rope_tables(cos.data(), sin.data(), T, HS, 10000.0);
    const std::vector<float> c(cos.begin(), cos.end()), sn(sin.begin(), sin.end());
    std::vector<H> rq = qkv.h;
    std::vector<float> frq = qkv.f;
    h.rope_forward(rq.data(), c.data(), sn.data(), nullptr, N, T, NH, KV, HS, HS);
    f.rope_forward(frq.data(), c.data(), sn.data(), nullptr, N, T, NH, KV, HS, HS);
    near.close("rope_forward qkv", rq, frq);
    h.rope_backward(rq.data(), c.data(), sn.data(), nullptr, N, T, NH, KV, HS, HS);
    f.rope_backward(frq.data(), c.data(), sn.data(), nullptr, N, T, NH, KV, HS, HS);
    near.close("rope_backward dqkv", rq, frq);

    std::vector<H> act(N * F), dgu(N * 2 * F);
    std::vector<float> fact(N * F), fdgu(N * 2 * F);
    h.swiglu_forward(act.data(), gu.h.data(), N, F);
    f.swiglu_forward(fact.data(), gu.f.data(), N, F);
    near.close("swiglu_forward out", act, fact);
    h.swiglu_backward(dgu.data(), gu.h.data(), dff.h.data(), N, F);
    f.swiglu_backward(fdgu.data(), gu.f.data(), dff.f.data(), N, F);
    near.close("swiglu_backward dinp", dgu, fdgu);
  }
  {  // cross-entropy takes float logits: the float op's result
    const auto logits = random_vector<float>(N * V, 57, -3, 3);
    const auto targets = random_tokens(N, V, 58);
    std::vector<float> l(N), d(N * V), fl(N), fd(N * V);
    h.softmax_cross_entropy(l.data(), d.data(), logits.data(), targets.data(), N, V, 1.0f);
    f.softmax_cross_entropy(fl.data(), fd.data(), logits.data(), targets.data(), N, V, 1.0f);
    near.close("softmax_cross_entropy losses", l, fl);
    near.close("softmax_cross_entropy dlogits", d, fd);
  }
  {  // conversions round to H and widen back exactly
    const auto x = random_vector<float>(N * C, 59);
    std::vector<H> c(x.size());
    h.to_compute(c.data(), x.data(), x.size());
    std::vector<float> back(x.size());
    h.to_accum(back.data(), c.data(), c.size());
    near.close("to_compute then to_accum", back, x);
    if (back != widened(narrowed<H>(x))) near.list << "to_compute: not dtype.h's rounding";
  }
  {  // AdamW on float masters refreshes the 16-bit copy
    k::AdamWParams p;
    p.lr = 1e-2f;
    const size_t n = 29;
    std::vector<float> mp = random_vector<float>(n, 60), g = random_vector<float>(n, 61), m(n, 0.f),
                       v(n, 0.f);
    std::vector<float> fp = mp, fm = m, fv = v;
    std::vector<H> copy(n);
    AdamWSpan<H> span{mp.data(), g.data(), m.data(), v.data(), copy.data(), n, true};
    AdamWSpan<float> fspan{fp.data(), g.data(), fm.data(), fv.data(), nullptr, n, true};
    h.adamw_update(&span, 1, p, 1.0f);
    f.adamw_update(&fspan, 1, p, 1.0f);
    near.close("adamw_update param", mp, fp);
    near.close("adamw_update param_copy", copy, fp);
    if (widened(copy) != widened(narrowed<H>(mp)))
      near.list << "adamw_update param_copy: not the updated master rounded";
  }
}

}  // namespace

class OpLists : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { k::set_num_threads(2); }
  void initTestCase_data() { lattice::testing::add_cpu_isa_rows(); }
  void init() {
    const QString unavailable = lattice::testing::select_row_isa();
    if (!unavailable.isEmpty()) QSKIP(qPrintable(unavailable));
  }

  void the_cpu_device_has_every_op_list() {
    lattice::CpuDevice device;
    QVERIFY(device.ops<float>() == &lattice::cpu_ops<float>());
    QVERIFY(device.ops<double>() == &lattice::cpu_ops<double>());
    QVERIFY(device.ops<bf16>() == &lattice::cpu_ops<bf16>());
    QVERIFY(device.ops<fp16>() == &lattice::cpu_ops<fp16>());
  }

  void every_float_op_is_the_kernel_bit_for_bit() {
    lattice::CpuDevice device;
    Failures f;
    compare_every_op(*device.ops<float>(), f);
    f.check();
  }

  void every_double_op_is_the_kernel_bit_for_bit() {
    lattice::CpuDevice device;
    Failures f;
    compare_every_op(*device.ops<double>(), f);
    f.check();
  }

  // The fused op against the add followed by layernorm_forward, on rows short and odd (vector
  // tails) and on a tensor above the threading threshold (kernels/cpu/parallel.h), and in
  // place (residual_out == residual). Dropping the add, or normalising another row, fails.
  void residual_layernorm_is_the_add_then_the_layernorm_bit_for_bit() {
    Failures f{"fused", "add then layernorm_forward", {}};
    residual_layernorm_case<float>(4, 37, f);
    residual_layernorm_case<float>(64, 768, f);
    residual_layernorm_case<double>(4, 37, f);
    residual_layernorm_case<double>(64, 768, f);
    f.check();
  }

  // Both of the bf16 list's GEMM paths (Note [bf16 GEMMs], kernels/cpu/README.md), each forced.
  void the_bf16_list_agrees_with_float_within_1e_2_data() {
    QTest::addColumn<int>("path");
    QTest::newRow("widened GEMMs") << static_cast<int>(lattice::kernels::Bf16Gemm::widened);
    QTest::newRow("oneDNN GEMMs") << static_cast<int>(lattice::kernels::Bf16Gemm::onednn);
  }
  void the_bf16_list_agrees_with_float_within_1e_2() {
    QFETCH(int, path);
    const auto before = lattice::kernels::bf16_gemm();
    if (!lattice::kernels::set_bf16_gemm(static_cast<lattice::kernels::Bf16Gemm>(path)))
      QSKIP(qPrintable("oneDNN bf16 GEMMs: " +
                       QString::fromStdString(lattice::kernels::onednn_bf16_missing())));
    Near near;
    compare_16_bit_list(lattice::cpu_ops<bf16>(), lattice::cpu_ops<float>(), near);
    lattice::kernels::set_bf16_gemm(before);
    QVERIFY2(near.list.isEmpty(), qPrintable(near.list.join("\n")));
  }

  void the_fp16_list_agrees_with_float_within_1e_2() {
    Near near;
    compare_16_bit_list(lattice::cpu_ops<fp16>(), lattice::cpu_ops<float>(), near);
    QVERIFY2(near.list.isEmpty(), qPrintable(near.list.join("\n")));
  }

  // The 16-bit lists' MoE ops (cpu_ops_16bit.cpp) are the float ops on the widened logits and
  // rows, each 16-bit result rounded once, bit for bit; their float results (probabilities,
  // weights, the plan, dweight, the aux loss) are the float op's own. 12 tokens top-2 of 4
  // experts under a capacity of 5 (drops).
  void the_16_bit_lists_moe_ops_are_the_float_ops_on_widened_rows() {
    QStringList bf16_failures = moe_16_bit_failures<bf16>(),
                fp16_failures = moe_16_bit_failures<fp16>();
    QVERIFY2(bf16_failures.isEmpty(), qPrintable("bf16: " + bf16_failures.join("\n")));
    QVERIFY2(fp16_failures.isEmpty(), qPrintable("fp16: " + fp16_failures.join("\n")));
  }

  // The 16-bit lists' element-wise and row-wise forward ops go by chunks on the threads
  // (cpu_ops_16bit.cpp, by_chunks): each is the float op on the widened tensors, rounded once,
  // bit for bit, over sizes of several chunks with a short last one (the dropout masks of a chunk
  // continue the whole tensor's indices; the fused residual norms normalise the rounded sum).
  void the_16_bit_lists_chunked_ops_are_the_float_ops_rounded_bit_for_bit() {
    QStringList failures = chunked_16_bit_failures<bf16>() + chunked_16_bit_failures<fp16>();
    QVERIFY2(failures.isEmpty(), qPrintable(failures.join("\n")));
  }

  // The 16-bit lists' embedding widens the rows its tokens read, not the table (cpu_ops_16bit.cpp):
  // the float op on the widened table rounded, bit for bit, over a vocabulary slice (tokens
  // outside it read zeros) with and without positions; on a thread of its own, the widened
  // copies never held a tenth of the widened table (64 MiB: 2^18 rows of 64).
  void the_16_bit_embedding_widens_only_the_rows_it_reads() {
    QStringList failures = embedding_16_bit_failures<bf16>() + embedding_16_bit_failures<fp16>();
    QVERIFY2(failures.isEmpty(), qPrintable(failures.join("\n")));
  }

  // The 16-bit lists have the ring (Note [ring attention in 16 bits]; its blocks are checked
  // against the float ring by ring_attention_worker): packing moves 16-bit elements unchanged,
  // the key and value columns of each group in order.
  void the_16_bit_lists_pack_keys_and_values_bit_for_bit() {
    QVERIFY(lattice::cpu_ops<bf16>().has_ring_attention());
    QVERIFY(lattice::cpu_ops<fp16>().has_ring_attention());
    const int rows = 3, NH = 4, KV = 2, HS = 2, W = (NH + 2 * KV) * HS;
    std::vector<bf16> qkv(static_cast<size_t>(rows) * W),
        kv(static_cast<size_t>(rows) * 2 * KV * HS);
    for (size_t i = 0; i < qkv.size(); i++) qkv[i].bits = static_cast<uint16_t>(0x3f00 + i);
    lattice::cpu_ops<bf16>().attention_kv_pack(kv.data(), qkv.data(), rows, NH, KV, HS);
    // Group g: Q = 2 query heads, then its key, then its value, HS columns each.
    for (int r = 0; r < rows; r++)
      for (int g = 0; g < KV; g++)
        for (int c = 0; c < 2 * HS; c++)
          QCOMPARE(kv[(static_cast<size_t>(r) * KV + g) * 2 * HS + c].bits,
                   qkv[static_cast<size_t>(r) * W + (g * 4 + 2) * HS + c].bits);
  }

 private:
  template <typename H>
  QStringList chunked_16_bit_failures() {
    const QString type = std::is_same_v<H, bf16> ? "bf16" : "fp16";
    constexpr size_t n = 3 * 65536 + 123;
    constexpr int Nr = 301, Cr = 768;
    constexpr size_t kIndexOffset = 1000;
    Ops<H>& h = lattice::cpu_ops<H>();
    Ops<float>& f = lattice::cpu_ops<float>();
    QStringList failures;
    auto rounded = [&](const QString& what, const std::vector<H>& got,
                       const std::vector<float>& want) {
      if (widened(got) != widened(narrowed<H>(want)))
        failures << QString("%1 %2: not the float op's result rounded").arg(type, what);
    };
    const Input<H> a(n, 101, -4, 4), b(n, 102);
    std::vector<H> out(n);
    std::vector<float> want(n);
    h.gelu_forward(out.data(), a.h.data(), n);
    f.gelu_forward(want.data(), a.f.data(), n);
    rounded("gelu_forward", out, want);
    h.gelu_backward(out.data(), a.h.data(), b.h.data(), n);
    f.gelu_backward(want.data(), a.f.data(), b.f.data(), n);
    rounded("gelu_backward", out, want);
    for (auto act : {k::Activation::kQuickGelu, k::Activation::kGeluErf}) {
      h.activation_forward(out.data(), a.h.data(), n, act);
      f.activation_forward(want.data(), a.f.data(), n, act);
      rounded("activation_forward", out, want);
      h.activation_backward(out.data(), a.h.data(), b.h.data(), n, act);
      f.activation_backward(want.data(), a.f.data(), b.f.data(), n, act);
      rounded("activation_backward", out, want);
    }
    for (const bool with_residual : {true, false}) {
      const H* rh = with_residual ? b.h.data() : nullptr;
      const float* rf = with_residual ? b.f.data() : nullptr;
      h.residual_dropout_forward(out.data(), rh, a.h.data(), n, kDropout, kKey, kIndexOffset);
      f.residual_dropout_forward(want.data(), rf, a.f.data(), n, kDropout, kKey, kIndexOffset);
      rounded(with_residual ? "residual_dropout_forward" : "dropout_forward", out, want);
    }
    h.dropout_backward(out.data(), a.h.data(), n, kDropout, kKey, kIndexOffset);
    f.dropout_backward(want.data(), a.f.data(), n, kDropout, kKey, kIndexOffset);
    rounded("dropout_backward", out, want);

    const size_t rows = static_cast<size_t>(Nr) * Cr;
    const Input<H> x(rows, 103), r(rows, 104), w(Cr, 105, 0.5, 1.5), bias(Cr, 106);
    std::vector<float> mean(Nr), rstd(Nr), want_mean(Nr), want_rstd(Nr);
    std::vector<H> norm(rows), sum(rows);
    std::vector<float> want_norm(rows);
    auto same_stats = [&](const QString& what, bool with_mean) {
      if ((with_mean && mean != want_mean) || rstd != want_rstd)
        failures << QString("%1 %2: statistics differ from the float op's").arg(type, what);
    };
    h.layernorm_forward(norm.data(), mean.data(), rstd.data(), x.h.data(), w.h.data(),
                        bias.h.data(), Nr, Cr);
    f.layernorm_forward(want_norm.data(), want_mean.data(), want_rstd.data(), x.f.data(),
                        w.f.data(), bias.f.data(), Nr, Cr);
    rounded("layernorm_forward", norm, want_norm);
    same_stats("layernorm_forward", true);
    h.rmsnorm_forward(norm.data(), rstd.data(), x.h.data(), w.h.data(), Nr, Cr, 1e-5f);
    f.rmsnorm_forward(want_norm.data(), want_rstd.data(), x.f.data(), w.f.data(), Nr, Cr, 1e-5f);
    rounded("rmsnorm_forward", norm, want_norm);
    same_stats("rmsnorm_forward", false);
    // The fused ops: the sum rounded, then the norm of the rounded sum.
    std::vector<float> want_sum(rows);
    for (size_t i = 0; i < rows; i++) want_sum[i] = r.f[i] + x.f[i];
    const std::vector<float> stored = widened(narrowed<H>(want_sum));
    h.residual_layernorm_forward(sum.data(), norm.data(), mean.data(), rstd.data(), r.h.data(),
                                 x.h.data(), w.h.data(), bias.h.data(), Nr, Cr);
    f.layernorm_forward(want_norm.data(), want_mean.data(), want_rstd.data(), stored.data(),
                        w.f.data(), bias.f.data(), Nr, Cr);
    rounded("residual_layernorm_forward sum", sum, want_sum);
    rounded("residual_layernorm_forward", norm, want_norm);
    same_stats("residual_layernorm_forward", true);
    h.residual_rmsnorm_forward(sum.data(), norm.data(), rstd.data(), r.h.data(), x.h.data(),
                               w.h.data(), Nr, Cr, 1e-5f);
    f.rmsnorm_forward(want_norm.data(), want_rstd.data(), stored.data(), w.f.data(), Nr, Cr,
                      1e-5f);
    rounded("residual_rmsnorm_forward sum", sum, want_sum);
    rounded("residual_rmsnorm_forward", norm, want_norm);
    same_stats("residual_rmsnorm_forward", false);
    return failures;
  }

  template <typename H>
  QStringList embedding_16_bit_failures() {
    constexpr int Vt = 1 << 18, Ce = 64, Bt = 2, Tt = 8, begin = 1000, end = begin + Vt;
    const Input<H> wte(static_cast<size_t>(Vt) * Ce, 91), wpe(2 * Tt * Ce, 92);
    // Both ends of the slice, tokens on either side of it, and the rest inside.
    std::vector<int32_t> tokens = {begin, end - 1, begin - 1, end, 5};
    for (int32_t t : random_tokens(Bt * Tt - tokens.size(), Vt, 93)) tokens.push_back(begin + t);
    std::vector<int32_t> positions(Bt * Tt);
    for (size_t i = 0; i < positions.size(); i++) positions[i] = static_cast<int32_t>(i % 13);
    QStringList failures;
    const int32_t* with = positions.data();
    for (const int32_t* pos : {static_cast<const int32_t*>(nullptr), with}) {
      std::vector<H> out(static_cast<size_t>(Bt) * Tt * Ce);
      std::vector<float> want(out.size());
      size_t held = 0;
      std::thread([&] {
        lattice::widened_high_water();
        lattice::cpu_ops<H>().embedding_forward(out.data(), tokens.data(), wte.h.data(),
                                                wpe.h.data(), Bt, Tt, Ce, begin, end, pos);
        held = lattice::widened_high_water();
      }).join();
      lattice::cpu_ops<float>().embedding_forward(want.data(), tokens.data(), wte.f.data(),
                                                  wpe.f.data(), Bt, Tt, Ce, begin, end, pos);
      const QString how = pos ? "with positions" : "without positions";
      if (widened(out) != widened(narrowed<H>(want)))
        failures << "embedding_forward " + how + ": not the float op's result rounded";
      if (held > wte.f.size() * sizeof(float) / 10)
        failures
            << QString("embedding_forward %1: widened copies held %2 bytes").arg(how).arg(held);
    }
    return failures;
  }

  template <typename H>
  QStringList moe_16_bit_failures() {
    constexpr int Nt = 12, E = 4, K = 2, Cm = 8, kCapacity = 5;
    Ops<H>& h = lattice::cpu_ops<H>();
    Ops<float>& f = lattice::cpu_ops<float>();
    QStringList failures;
    auto same = [&](const char* what, const auto& got, const auto& want) {
      if (got != want) failures << QString("%1 differs").arg(what);
    };
    auto rounded = [&](const char* what, const std::vector<H>& got,
                       const std::vector<float>& want) {
      if (widened(got) != widened(narrowed<H>(want)))
        failures << QString("%1 is not the float op's result rounded").arg(what);
    };
    const Input<H> logits(Nt * E, 81, -2, 2), inp(Nt * Cm, 82), dinp(Nt * Cm, 83),
        dout(Nt * Cm, 84);
    std::vector<float> probs(Nt * E), weight(Nt * K), fprobs(Nt * E), fweight(Nt * K);
    std::vector<int32_t> route(Nt * K), froute(Nt * K);
    h.moe_route(probs.data(), route.data(), weight.data(), logits.h.data(), Nt, E, K);
    f.moe_route(fprobs.data(), froute.data(), fweight.data(), logits.f.data(), Nt, E, K);
    same("moe_route probs", probs, fprobs);
    same("moe_route route", route, froute);
    same("moe_route weight", weight, fweight);
    std::vector<int32_t> tokens(E), counts(E), slot(Nt * K), slot_row(Nt * K);
    h.moe_dispatch_plan(tokens.data(), counts.data(), slot.data(), slot_row.data(), route.data(),
                        weight.data(), Nt, E, K, kCapacity);
    int rows = 0;
    for (int c : counts) rows += c;
    if (rows == Nt * K) failures << "the capacity dropped no route: the case tests no drop";
    const Input<H> d_rows(rows * Cm, 85), expert_out(rows * Cm, 86);
    {
      std::vector<H> out(rows * Cm);
      h.moe_gather_rows(out.data(), inp.h.data(), slot_row.data(), rows, Cm);
      std::vector<float> fout(rows * Cm);
      f.moe_gather_rows(fout.data(), inp.f.data(), slot_row.data(), rows, Cm);
      rounded("moe_gather_rows out", out, fout);
    }
    {
      std::vector<H> di = dinp.h;
      std::vector<float> fdi = dinp.f;
      h.moe_scatter_add_rows(di.data(), d_rows.h.data(), slot.data(), Nt, Cm, K);
      f.moe_scatter_add_rows(fdi.data(), d_rows.f.data(), slot.data(), Nt, Cm, K);
      rounded("moe_scatter_add_rows dinp", di, fdi);
    }
    {
      std::vector<H> out(Nt * Cm);
      std::vector<float> fout(Nt * Cm);
      h.moe_combine(out.data(), expert_out.h.data(), weight.data(), slot.data(), Nt, Cm, K);
      f.moe_combine(fout.data(), expert_out.f.data(), weight.data(), slot.data(), Nt, Cm, K);
      rounded("moe_combine out", out, fout);
    }
    std::vector<float> dweight(Nt * K), fdweight(Nt * K);
    {
      std::vector<H> d(rows * Cm);
      std::vector<float> fd(rows * Cm);
      h.moe_combine_backward(d.data(), dweight.data(), dout.h.data(), expert_out.h.data(),
                             weight.data(), slot.data(), Nt, Cm, K);
      f.moe_combine_backward(fd.data(), fdweight.data(), dout.f.data(), expert_out.f.data(),
                             weight.data(), slot.data(), Nt, Cm, K);
      rounded("moe_combine_backward d_expert_out", d, fd);
      same("moe_combine_backward dweight", dweight, fdweight);
    }
    float aux = 0, faux = 0;
    h.moe_aux_loss(&aux, probs.data(), tokens.data(), Nt, E, K, 0.01);
    f.moe_aux_loss(&faux, probs.data(), tokens.data(), Nt, E, K, 0.01);
    if (aux != faux || !(aux > 0)) failures << "moe_aux_loss differs or is not positive";
    std::vector<H> dlogits(Nt * E);
    std::vector<float> fdlogits(Nt * E);
    h.moe_route_backward(dlogits.data(), dweight.data(), probs.data(), route.data(), weight.data(),
                         tokens.data(), Nt, E, K, 0.01);
    f.moe_route_backward(fdlogits.data(), dweight.data(), probs.data(), route.data(), weight.data(),
                         tokens.data(), Nt, E, K, 0.01);
    rounded("moe_route_backward dlogits", dlogits, fdlogits);
    return failures;
  }

  template <typename S>
  void residual_layernorm_case(int rows, int cols, Failures& f) {
    const size_t n = static_cast<size_t>(rows) * cols;
    const auto res = random_vector<S>(n, 71), x = random_vector<S>(n, 72),
               w = random_vector<S>(cols, 73), b = random_vector<S>(cols, 74);
    std::vector<S> sum(n), out(n), mean(rows), rstd(rows);
    for (size_t i = 0; i < n; i++) sum[i] = res[i] + x[i];
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), w.data(), b.data(), rows,
                         cols);

    const QString shape =
        QString("(%1, %2) %3").arg(rows).arg(cols).arg(sizeof(S) == 4 ? "float" : "double");
    std::vector<S> fsum(n), fout(n), fmean(rows), frstd(rows);
    k::residual_layernorm_forward(fsum.data(), fout.data(), fmean.data(), frstd.data(), res.data(),
                                  x.data(), w.data(), b.data(), rows, cols);
    f.same("residual_out " + shape, fsum, sum);
    f.same("out " + shape, fout, out);
    f.same("mean " + shape, fmean, mean);
    f.same("rstd " + shape, frstd, rstd);

    std::vector<S> inplace = res;
    k::residual_layernorm_forward(inplace.data(), fout.data(), fmean.data(), frstd.data(),
                                  inplace.data(), x.data(), w.data(), b.data(), rows, cols);
    f.same("residual_out in place " + shape, inplace, sum);
    f.same("out in place " + shape, fout, out);
  }
};

QTEST_GUILESS_MAIN(OpLists)
#include "test_ops.moc"
