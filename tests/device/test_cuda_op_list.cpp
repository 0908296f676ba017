// The CUDA device's op lists (engine/src/device/cuda_ops.cpp, docs/one-engine.md step 4)
// against the CPU device's (cpu_ops.cpp, cpu_ops_16bit.cpp): every op of Ops<float>, Ops<bf16>
// and Ops<fp16> runs the same case on both, through the one interface, and the results agree
// within the CUDA parity tolerances (1e-5 fp32, 1e-2 bf16 and fp16, normwise; the device's output
// buffers poisoned with NaN first). Each backend keeps its own attention saved tensor (the CPU's
// probabilities, CUDA's log-sum-exp); the outputs and gradients are compared. The CUDA device has
// no Ops<double>. The MoE ops are compared in every type (the CPU's 16-bit lists widen the rows
// and logits, run the float op and round). The ring attention's ops are compared in every type (the 16-bit lists read 16-bit inputs and merge into
// fp32), and so are the vision encoder's (16-bit inputs and outputs; the CPU's 16-bit lists widen,
// run the float op and round). Without a CUDA device the whole case is SKIPPED (label cuda).
#include <QtTest/QtTest>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/cuda_test_support.h"
#include "device/cpu_device.h"
#include "device/device.h"
#include "device/ops.h"
#include "lattice/kernels.h"
#include "model/vision_encoder.h"

using namespace lattice::testing;
using lattice::AdamWSpan;
using lattice::Epilogue;
using lattice::Ops;
namespace k = lattice::kernels;

namespace {

// Shapes: head size C / NH = 64 (the CUDA attention's), OC % 8 == 0 (the GELU epilogue's).
constexpr int B = 2, T = 16, C = 128, NH = 2, OC = 256, V = 50, N = B * T;
constexpr float kDropout = 0.1f;
constexpr uint64_t kKey = 99;

// Host buffers: the CPU list's memory.
class HostMemory {
 public:
  template <typename T>
  T* in(const std::vector<T>& v) {
    auto kept = std::make_shared<std::vector<T>>(v);
    keep_.push_back(kept);
    return kept->data();
  }
  template <typename T>
  T* out(size_t n) {
    return in(std::vector<T>(n));
  }
  template <typename T>
  std::vector<T> get(const T* p, size_t n) {
    return std::vector<T>(p, p + n);
  }

 private:
  std::vector<std::shared_ptr<void>> keep_;
};

// Device buffers: the CUDA list's memory; outputs start as NaN. get() waits for the device.
class CudaMemory {
 public:
  template <typename T>
  T* in(const std::vector<T>& v) {
    auto kept = std::make_shared<DeviceBuffer<T>>(v);
    keep_.push_back(kept);
    return kept->get();
  }
  template <typename T>
  T* out(size_t n) {
    auto kept = std::make_shared<DeviceBuffer<T>>(n);
    keep_.push_back(kept);
    return kept->get();
  }
  template <typename T>
  std::vector<T> get(const T* p, size_t n) {
    std::vector<T> host(n);
    cu::copy_to_host(host.data(), p, n * sizeof(T));  // synchronises the device
    return host;
  }

 private:
  std::vector<std::shared_ptr<void>> keep_;
};

using Results = std::map<std::string, std::vector<float>>;

// The MoE ops' indices and counts, compared as floats (exact below 2^24).
// (An overload beside cuda_test_support.h's, which this scope's name would otherwise hide.)
using lattice::testing::to_float;
std::vector<float> to_float(const std::vector<int32_t>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// One run of every op of the list on `mem`'s buffers; the results widened to float by name.
template <typename A, typename Memory>
Results run_every_op(Ops<A>& ops, Memory& mem) {
  Results r;
  auto keep = [&](const std::string& name, const auto* p, size_t n) {
    r[name] = to_float(mem.get(p, n));
  };
  const auto inp = compute_values<A>(random_floats(N * C, 1)),
             w = compute_values<A>(random_floats(OC * C, 2, 0.05f)),
             b = compute_values<A>(random_floats(OC, 3)),
             dout = compute_values<A>(random_floats(N * OC, 4));
  A* d_inp = mem.in(inp);
  A* d_w = mem.in(w);
  A* d_b = mem.in(b);
  A* d_dout = mem.in(dout);

  // linear layers
  A* out = mem.template out<A>(N * OC);
  A* pre = mem.template out<A>(N * OC);
  ops.matmul_forward(out, nullptr, d_inp, d_w, d_b, N, C, OC, Epilogue::kNone);
  keep("matmul_forward out", out, N * OC);
  ops.matmul_forward(out, pre, d_inp, d_w, d_b, N, C, OC, Epilogue::kGelu);
  keep("matmul_forward+gelu out", out, N * OC);
  keep("matmul_forward+gelu pre_gelu", pre, N * OC);
  A* dinp = mem.template out<A>(N * C);
  float* dw = mem.in(std::vector<float>(OC * C, 0.0f));
  float* db = mem.in(std::vector<float>(OC, 0.0f));
  ops.matmul_backward(dinp, dw, db, d_dout, d_inp, d_w, N, C, OC);
  keep("matmul_backward dinp", dinp, N * C);
  keep("matmul_backward dweight", dw, OC * C);
  keep("matmul_backward dbias", db, OC);
  A* biased = mem.in(dout);
  ops.add_bias(biased, d_b, N, OC);
  keep("add_bias out", biased, N * OC);

  // embedding: vocabulary rows [10, 40) of V, positions
  const auto tokens = random_tokens(N, V, 5);
  const int32_t* d_tokens = mem.in(tokens);
  A* wte = mem.in(compute_values<A>(random_floats(30 * C, 6)));
  A* wpe = mem.in(compute_values<A>(random_floats(T * C, 7)));
  A* emb = mem.template out<A>(N * C);
  ops.embedding_forward(emb, d_tokens, wte, wpe, B, T, C, 10, 40, nullptr);
  keep("embedding_forward out", emb, N * C);
  float* dwte = mem.in(std::vector<float>(30 * C, 0.0f));
  float* dwpe = mem.in(std::vector<float>(T * C, 0.0f));
  A* demb = mem.in(compute_values<A>(random_floats(N * C, 8)));
  ops.embedding_backward(dwte, dwpe, demb, d_tokens, B, T, C, 10, 40, nullptr);
  keep("embedding_backward dwte", dwte, 30 * C);
  keep("embedding_backward dwpe", dwpe, T * C);

  // LayerNorm
  A* lw = mem.in(compute_values<A>(random_floats(C, 9)));
  A* lb = mem.in(compute_values<A>(random_floats(C, 10)));
  A* res = mem.in(compute_values<A>(random_floats(N * C, 11)));
  A* ln = mem.template out<A>(N * C);
  A* sum = mem.template out<A>(N * C);
  float* mean = mem.template out<float>(N);
  float* rstd = mem.template out<float>(N);
  ops.layernorm_forward(ln, mean, rstd, d_inp, lw, lb, N, C);
  keep("layernorm_forward out", ln, N * C);
  keep("layernorm_forward mean", mean, N);
  keep("layernorm_forward rstd", rstd, N);
  ops.residual_layernorm_forward(sum, ln, mean, rstd, res, d_inp, lw, lb, N, C);
  keep("residual_layernorm_forward residual_out", sum, N * C);
  keep("residual_layernorm_forward out", ln, N * C);
  keep("residual_layernorm_forward mean", mean, N);
  A* dln = mem.in(compute_values<A>(std::vector<float>(N * C, 0.0f)));
  float* dlw = mem.in(std::vector<float>(C, 0.0f));
  float* dlb = mem.in(std::vector<float>(C, 0.0f));
  ops.layernorm_backward(dln, dlw, dlb, demb, sum, lw, mean, rstd, N, C);
  keep("layernorm_backward dinp", dln, N * C);
  keep("layernorm_backward dweight", dlw, C);
  keep("layernorm_backward dbias", dlb, C);

  // GELU, dropout
  A* g = mem.template out<A>(N * C);
  ops.gelu_forward(g, d_inp, N * C);
  keep("gelu_forward out", g, N * C);
  ops.gelu_backward(g, d_inp, demb, N * C);
  keep("gelu_backward dinp", g, N * C);
  ops.residual_dropout_forward(g, res, d_inp, N * C, kDropout, kKey, 5);
  keep("residual_dropout_forward out", g, N * C);
  ops.dropout_backward(g, demb, N * C, kDropout, kKey, 5);
  keep("dropout_backward dx", g, N * C);

  // attention: heads 1..2 of 4, with dropout; each backend its own saved tensor
  A* qkv = mem.in(compute_values<A>(random_floats(N * 3 * C, 12)));
  A* att = mem.template out<A>(N * C);
  A* dqkv = mem.template out<A>(N * 3 * C);
  float* saved = mem.template out<float>(ops.attention_saved_elems(B, T, NH));
  float* ws = mem.template out<float>(ops.attention_workspace_elems(B, T, NH, C / NH));
  ops.attention_forward(att, saved, qkv, ws, B, T, C, NH, kDropout, kKey, 1, 4, NH, nullptr);
  keep("attention_forward out", att, N * C);
  ops.attention_backward(dqkv, demb, qkv, att, saved, ws, B, T, C, NH, kDropout, kKey, 1, 4, NH,
                         nullptr);
  keep("attention_backward dqkv", dqkv, N * 3 * C);

  // grouped-query attention: the NH query heads share KV 1 key and value (MQA)
  const int HS = C / NH;
  const size_t grouped_elems = static_cast<size_t>(N) * (NH + 2) * HS;
  A* gqkv = mem.in(compute_values<A>(random_floats(grouped_elems, 21)));
  A* gdqkv = mem.template out<A>(grouped_elems);
  ops.attention_forward(att, saved, gqkv, ws, B, T, C, NH, 0.0f, kKey, 0, 0, 1, nullptr);
  keep("grouped attention_forward out", att, N * C);
  ops.attention_backward(gdqkv, demb, gqkv, att, saved, ws, B, T, C, NH, 0.0f, kKey, 0, 0, 1,
                         nullptr);
  keep("grouped attention_backward dqkv", gdqkv, grouped_elems);

  // RoPE on that grouped qkv (half of each head rotated), rows at n % T and at given positions
  const int R = HS / 2;
  std::vector<double> cos64(static_cast<size_t>(T) * R / 2), sin64(cos64.size());
  k::rope_tables(cos64.data(), sin64.data(), T, R, 10000.0);
  const float* rope_cos = mem.in(std::vector<float>(cos64.begin(), cos64.end()));
  const float* rope_sin = mem.in(std::vector<float>(sin64.begin(), sin64.end()));
  const int32_t* positions = mem.in(random_tokens(N, T, 22));
  ops.rope_forward(gqkv, rope_cos, rope_sin, nullptr, N, T, NH, 1, HS, R);
  keep("rope_forward qkv", gqkv, grouped_elems);
  ops.rope_backward(gdqkv, rope_cos, rope_sin, positions, N, T, NH, 1, HS, R);
  keep("rope_backward dqkv", gdqkv, grouped_elems);

  // RMSNorm, SwiGLU (F = C)
  ops.rmsnorm_forward(ln, rstd, d_inp, lw, N, C, 1e-5f);
  keep("rmsnorm_forward out", ln, N * C);
  keep("rmsnorm_forward rstd", rstd, N);
  ops.residual_rmsnorm_forward(sum, ln, rstd, res, d_inp, lw, N, C, 1e-5f);
  keep("residual_rmsnorm_forward residual_out", sum, N * C);
  keep("residual_rmsnorm_forward out", ln, N * C);
  keep("residual_rmsnorm_forward rstd", rstd, N);
  A* drms = mem.in(compute_values<A>(std::vector<float>(N * C, 0.0f)));
  float* drw = mem.in(std::vector<float>(C, 0.0f));
  ops.rmsnorm_backward(drms, drw, demb, sum, lw, rstd, N, C);
  keep("rmsnorm_backward dinp", drms, N * C);
  keep("rmsnorm_backward dweight", drw, C);
  A* gate_up = mem.in(compute_values<A>(random_floats(N * 2 * C, 23, 2.0f)));
  A* swiglu_out = mem.template out<A>(N * C);
  A* swiglu_dinp = mem.template out<A>(N * 2 * C);
  ops.swiglu_forward(swiglu_out, gate_up, N, C);
  keep("swiglu_forward out", swiglu_out, N * C);
  ops.swiglu_backward(swiglu_dinp, gate_up, demb, N, C);
  keep("swiglu_backward dinp", swiglu_dinp, N * 2 * C);

  // mixture of experts (every list has them): 8 experts top-2 over the N tokens with a capacity
  // of 6 routes (drops), every op of Note [MoE layer] in order.
  if (ops.has_moe()) {
    constexpr int E = 8, K = 2, kCapacity = 6;
    using G = lattice::accum_t<A>;
    const A* router_logits = mem.in(compute_values<A>(random_floats(N * E, 31, 2.0f)));
    G* probs = mem.template out<G>(N * E);
    G* weight = mem.template out<G>(N * K);
    int32_t* route = mem.template out<int32_t>(N * K);
    ops.moe_route(probs, route, weight, router_logits, N, E, K);
    keep("moe_route probs", probs, N * E);
    keep("moe_route route", route, N * K);
    keep("moe_route weight", weight, N * K);
    int32_t* tokens = mem.template out<int32_t>(E);
    int32_t* counts = mem.template out<int32_t>(E);
    int32_t* route_slot = mem.template out<int32_t>(N * K);
    int32_t* slot_row = mem.template out<int32_t>(N * K);
    ops.moe_dispatch_plan(tokens, counts, route_slot, slot_row, route, weight, N, E, K, kCapacity);
    keep("moe_dispatch_plan tokens_per_expert", tokens, E);
    keep("moe_dispatch_plan counts", counts, E);
    keep("moe_dispatch_plan route_slot", route_slot, N * K);
    int rows = 0;
    for (int32_t c : mem.get(counts, E)) rows += c;
    keep("moe_dispatch_plan slot_row", slot_row, rows);
    A* gathered = mem.template out<A>(N * K * C);
    ops.moe_gather_rows(gathered, d_inp, slot_row, rows, C);
    keep("moe_gather_rows out", gathered, size_t(rows) * C);
    const A* expert_out = mem.in(compute_values<A>(random_floats(N * K * C, 32)));
    A* combined = mem.template out<A>(N * C);
    ops.moe_combine(combined, expert_out, weight, route_slot, N, C, K);
    keep("moe_combine out", combined, N * C);
    const A* d_combined = mem.in(compute_values<A>(random_floats(N * C, 33)));
    A* d_rows = mem.in(compute_values<A>(std::vector<float>(N * K * C, 0.0f)));
    G* dweight = mem.template out<G>(N * K);
    ops.moe_combine_backward(d_rows, dweight, d_combined, expert_out, weight, route_slot, N, C, K);
    keep("moe_combine_backward d_expert_out", d_rows, size_t(rows) * C);
    keep("moe_combine_backward dweight", dweight, N * K);
    G* aux = mem.template out<G>(1);
    ops.moe_aux_loss(aux, probs, tokens, N, E, K, 0.01);
    keep("moe_aux_loss loss", aux, 1);
    A* d_logits_moe = mem.template out<A>(N * E);
    ops.moe_route_backward(d_logits_moe, dweight, probs, route, weight, tokens, N, E, K, 0.5);
    keep("moe_route_backward dlogits", d_logits_moe, N * E);
    A* d_tokens = mem.in(compute_values<A>(random_floats(N * C, 34)));
    ops.moe_scatter_add_rows(d_tokens, d_rows, route_slot, N, C, K);
    keep("moe_scatter_add_rows dinp", d_tokens, N * C);
  }

  // the context-parallel ring's ops (Note [ring attention]; every list has them, the 16-bit ones
  // reading A and merging into float: Note [ring attention in 16 bits]): CP 2 of a 64-row sequence,
  // this rank holding chunks 0 and 3 (positions [0, 16) and [48, 64)), blocks against its own rows
  // (the causal diagonal) and against the other rank's chunks 1 and 2 (the second query chunk
  // only), with packed documents on the second, then the backward of both into dqkv and dkv, and
  // the data movement around them.
  {
    if (ops.has_ring_attention()) {
      constexpr int Tl = 32, RNH = 4, KV = 2, HS = 64, Q = (RNH + 2 * KV) * HS;
      constexpr size_t rows = size_t(B) * Tl;
      std::vector<int32_t> mine(Tl), theirs(Tl), doc(rows);
      for (int i = 0; i < Tl; i++) {
        mine[i] = i < 16 ? i : 32 + i;
        theirs[i] = 16 + i;
      }
      for (size_t i = 0; i < rows; i++) doc[i] = mine[i % Tl] % 24;  // documents of 24 tokens
      const int32_t* q_pos = mem.in(mine);
      const int32_t* k_pos = mem.in(theirs);
      const int32_t* d_doc = mem.in(doc);
      const A* qkv = mem.in(compute_values<A>(random_floats(rows * Q, 41, 0.5f)));
      const A* other_kv = mem.in(compute_values<A>(random_floats(rows * 2 * KV * HS, 42, 0.5f)));
      A* kv = mem.template out<A>(rows * 2 * KV * HS);
      ops.attention_kv_pack(kv, qkv, rows, RNH, KV, HS);
      keep("attention_kv_pack kv", kv, rows * 2 * KV * HS);
      float* out = mem.template out<float>(rows * RNH * HS);
      float* lse = mem.template out<float>(size_t(B) * RNH * Tl);
      ops.fill(out, rows * RNH * HS, 0.0f);
      ops.fill(lse, size_t(B) * RNH * Tl, -std::numeric_limits<float>::infinity());
      k::AttentionBlock own{B, RNH, KV, HS, Tl, 0, Tl, Tl, 0, Tl, q_pos, q_pos, nullptr};
      k::AttentionBlock other{B, RNH, KV, HS, Tl, 16, Tl, Tl, 0, Tl, q_pos, k_pos, d_doc};
      float* ws = mem.template out<float>(
          std::max<size_t>(1, ops.attention_block_workspace_elems(B, RNH, Tl, Tl, HS)));
      ops.attention_block_forward(out, lse, qkv, kv, own, ws);
      ops.attention_block_forward(out, lse, qkv, other_kv, other, ws);
      keep("attention_block_forward out", out, rows * RNH * HS);
      keep("attention_block_forward lse", lse, size_t(B) * RNH * Tl);
      const A* ring_dout = mem.in(compute_values<A>(random_floats(rows * RNH * HS, 43)));
      A* out_a = mem.template out<A>(rows * RNH * HS);  // the ring's rounded output
      ops.to_compute(out_a, out, rows * RNH * HS);
      float* delta = mem.template out<float>(size_t(B) * RNH * Tl);
      ops.attention_row_dot(delta, ring_dout, out_a, B, Tl, RNH, HS);
      keep("attention_row_dot delta", delta, size_t(B) * RNH * Tl);
      float* dqkv = mem.in(std::vector<float>(rows * Q, 0.0f));
      float* dkv = mem.in(std::vector<float>(rows * 2 * KV * HS, 0.0f));
      float* other_dkv = mem.in(std::vector<float>(rows * 2 * KV * HS, 0.0f));
      ops.attention_block_backward(dqkv, dkv, ring_dout, delta, lse, qkv, kv, own, ws);
      ops.attention_block_backward(dqkv, other_dkv, ring_dout, delta, lse, qkv, other_kv, other,
                                   ws);
      keep("attention_block_backward dkv (own)", dkv, rows * 2 * KV * HS);
      keep("attention_block_backward dkv (other)", other_dkv, rows * 2 * KV * HS);
      ops.accumulate(dkv, other_dkv, rows * 2 * KV * HS);
      keep("accumulate acc", dkv, rows * 2 * KV * HS);
      ops.attention_kv_unpack(dqkv, dkv, rows, RNH, KV, HS);
      keep("attention_block_backward then attention_kv_unpack dqkv", dqkv, rows * Q);
    }
  }

  // the vision encoder's ops (every CUDA list has them; the 16-bit ones copy patches and compute
  // the activations in fp32, rounding once): 2 images of 3 x 12 x 8 pixels in 4 x 4 patches (3 x 2
  // of them), then both activations forward and backward (the backward of quick_gelu in place on
  // dout, as kernels.h allows).
  if (ops.has_vision()) {
    constexpr int Cin = 3, H = 12, W = 8, P = 4;
    constexpr size_t pixels = size_t(B) * Cin * H * W;  // = B (H / P) (W / P) Cin P P
    const A* img = mem.in(compute_values<A>(random_floats(pixels, 51)));
    A* cols = mem.template out<A>(pixels);
    ops.patchify_forward(cols, img, B, Cin, H, W, P);
    keep("patchify_forward cols", cols, pixels);
    const A* dcols = mem.in(compute_values<A>(random_floats(pixels, 52)));
    A* dimg = mem.template out<A>(pixels);
    ops.patchify_backward(dimg, dcols, B, Cin, H, W, P);
    keep("patchify_backward dimg", dimg, pixels);
    const A* act_in = mem.in(compute_values<A>(random_floats(N * C, 53, 4.0f)));
    const auto act_dout = compute_values<A>(random_floats(N * C, 54));
    A* act_out = mem.template out<A>(N * C);
    A* act_grad = mem.template out<A>(N * C);
    ops.activation_forward(act_out, act_in, N * C, k::Activation::kQuickGelu);
    keep("activation_forward (quick_gelu) out", act_out, N * C);
    ops.activation_forward(act_out, act_in, N * C, k::Activation::kGeluErf);
    keep("activation_forward (exact GELU) out", act_out, N * C);
    ops.activation_backward(act_grad, act_in, mem.in(act_dout), N * C, k::Activation::kGeluErf);
    keep("activation_backward (exact GELU) dinp", act_grad, N * C);
    A* in_place = mem.in(act_dout);
    ops.activation_backward(in_place, act_in, in_place, N * C, k::Activation::kQuickGelu);
    keep("activation_backward (quick_gelu, in place) dinp", in_place, N * C);
  }

  // cross-entropy (float logits), whole rows and a vocabulary shard [7, 7 + V)
  const auto logits = random_floats(N * V, 13, 2.0f);
  const float* d_logits = mem.in(logits);
  const int32_t* targets = mem.in(random_tokens(N, V, 14));
  const int32_t* shard_targets = mem.in(random_tokens(N, V + 20, 15));
  float* losses = mem.template out<float>(N);
  float* dlogits = mem.template out<float>(N * V);
  ops.softmax_cross_entropy(losses, dlogits, d_logits, targets, N, V, 0.5f);
  keep("softmax_cross_entropy losses", losses, N);
  keep("softmax_cross_entropy dlogits", dlogits, N * V);
  float* row_max = mem.template out<float>(N);
  double* sum_exp = mem.template out<double>(N);
  float* target_logit = mem.template out<float>(N);
  ops.cross_entropy_shard_max(row_max, d_logits, N, V);
  keep("cross_entropy_shard_max row_max", row_max, N);
  ops.cross_entropy_shard_sums(sum_exp, target_logit, d_logits, row_max, shard_targets, 7, N, V);
  keep("cross_entropy_shard_sums sum_exp", sum_exp, N);
  keep("cross_entropy_shard_sums target_logit", target_logit, N);
  ops.cross_entropy_shard_finish(losses, dlogits, d_logits, row_max, sum_exp, target_logit,
                                 shard_targets, 7, N, V, 0.5f);
  keep("cross_entropy_shard_finish losses", losses, N);
  keep("cross_entropy_shard_finish dlogits", dlogits, N * V);

  // conversions
  A* rounded = mem.template out<A>(N * V);
  float* widened = mem.template out<float>(N * V);
  ops.to_compute(rounded, d_logits, N * V);
  ops.to_accum(widened, rounded, N * V);
  keep("to_compute then to_accum", widened, N * V);

  // optimizer: two tensors (the second without decay), the compute copy for 16-bit types
  const size_t n0 = 1000, n1 = 37;
  float* p0 = mem.in(random_floats(n0, 16));
  float* p1 = mem.in(random_floats(n1, 17));
  float* g0 = mem.in(random_floats(n0, 18));
  float* g1 = mem.in(random_floats(n1, 19));
  float* m0 = mem.in(std::vector<float>(n0, 0.0f));
  float* m1 = mem.in(std::vector<float>(n1, 0.0f));
  float* v0 = mem.in(std::vector<float>(n0, 0.0f));
  float* v1 = mem.in(std::vector<float>(n1, 0.0f));
  A* copy0 = std::is_same_v<A, float> ? nullptr : mem.template out<A>(n0);
  const AdamWSpan<A> spans[2] = {{p0, g0, m0, v0, copy0, n0, true},
                                 {p1, g1, m1, v1, nullptr, n1, false}};
  k::AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  ops.adamw_update(spans, 2, hp, 0.75f);  // clipping folded in
  keep("adamw_update param[0]", p0, n0);
  keep("adamw_update m[0]", m0, n0);
  keep("adamw_update v[0]", v0, n0);
  keep("adamw_update param[1] (no decay)", p1, n1);
  if (copy0) keep("adamw_update param_copy[0]", copy0, n0);
  const float* tensors[2] = {g0, g1};
  const size_t sizes[2] = {n0, n1};
  double* norm = mem.template out<double>(1);
  ops.sum_squares(norm, tensors, sizes, 2);
  keep("sum_squares result", norm, 1);
  ops.scale(g0, n0, 0.375f);
  keep("scale x", g0, n0);
  // the loss scaler's overflow test: finite values (flag stays 0), then an inf in g1
  float* found = mem.in(std::vector<float>(1, 0.0f));
  ops.unscale_and_check(g0, n0, 0.125f, found);
  keep("unscale_and_check x", g0, n0);
  keep("unscale_and_check found_inf (finite)", found, 1);
  std::vector<float> with_inf = random_floats(n1, 20);
  with_inf[5] = std::numeric_limits<float>::infinity();
  float* g2 = mem.in(with_inf);
  float* found_inf = mem.in(std::vector<float>(1, 0.0f));
  ops.unscale_and_check(g2, n1, 0.125f, found_inf);
  keep("unscale_and_check found_inf (an inf)", found_inf, 1);
  return r;
}

}  // namespace

class CudaOpList : public QObject {
  Q_OBJECT
  std::unique_ptr<lattice::Device> device_;

  template <typename A>
  void compare_lists(double tolerance) {
    Ops<A>* cuda = device_->ops<A>();
    QVERIFY2(cuda, "the CUDA device has no op list for this type");
    HostMemory host;
    CudaMemory dev;
    const Results want = run_every_op(lattice::cpu_ops<A>(), host);
    const Results got = run_every_op(*cuda, dev);
    const lattice::Status error = device_->synchronize(device_->compute());
    QVERIFY2(error.is_ok(), error.message().c_str());
    QStringList failures;
    for (const auto& [name, cpu] : want) {
      const std::string why = compare(name, got.at(name), cpu, tolerance);
      if (!why.empty()) failures << QString::fromStdString(why);
    }
    // Nothing goes uncompared: every op CUDA's list runs, the CPU's runs too.
    for (const auto& [name, gpu] : got)
      if (!want.count(name))
        failures << QString("%1: run by the CUDA list alone (the CPU's lacks it), uncompared")
                        .arg(QString::fromStdString(name));
    QVERIFY2(failures.isEmpty(), qPrintable(failures.join("\n")));
  }

 private slots:
  void initTestCase() {
    LATTICE_REQUIRE_CUDA_DEVICE();
    k::set_num_threads(2);
    auto device = lattice::make_cuda_device();
    QVERIFY2(device, device ? "" : device.status().message().c_str());
    device_ = std::move(*device);
    qInfo("device: %s", device_->describe().c_str());
  }

  void the_cuda_device_has_no_double_list() { QVERIFY(device_->ops<double>() == nullptr); }
  void every_list_has_the_ring_ops() {
    QVERIFY(device_->ops<float>()->has_ring_attention() &&
            device_->ops<cu::bf16>()->has_ring_attention() &&
            device_->ops<cu::fp16>()->has_ring_attention());
  }
  void every_list_has_the_vision_ops() {
    QVERIFY(device_->ops<float>()->has_vision() && device_->ops<cu::bf16>()->has_vision() &&
            device_->ops<cu::fp16>()->has_vision());
  }
  void every_cuda_list_has_the_moe_ops() {
    QVERIFY(device_->ops<float>()->has_moe() && device_->ops<cu::bf16>()->has_moe() &&
            device_->ops<cu::fp16>()->has_moe());
  }
  // The vision tower (model/vision_encoder.h) on both devices in fp32 from the same weights and
  // images: the projected tokens, every parameter tensor's gradient (the layer past
  // --vision-select-layer -2 gets zeros) and the images' gradient. Head size 64 (CUDA's).
  void the_vision_encoder_matches_the_cpu_in_fp32() {
    lattice::VisionConfig c;  // 16 x 24 images in 8 x 8 patches (6 of them + the class token)
    c.img_h = 16;
    c.img_w = 24;
    c.hidden_size = 128;
    c.num_attention_heads = 2;
    c.num_layers = 2;
    c.lm_hidden_size = 64;
    constexpr int kImages = 2;
    auto on_cpu = lattice::VisionEncoder<float>::create(c, kImages, lattice::host_device());
    auto on_gpu = lattice::VisionEncoder<float>::create(c, kImages, *device_);
    QVERIFY2(on_cpu, on_cpu ? "" : on_cpu.status().message().c_str());
    QVERIFY2(on_gpu, on_gpu ? "" : on_gpu.status().message().c_str());
    lattice::VisionEncoder<float>& cpu = **on_cpu;
    lattice::VisionEncoder<float>& gpu = **on_gpu;
    QVERIFY(cpu.init_weights(7).is_ok() && gpu.init_weights(7).is_ok());
    const size_t pixels = size_t(kImages) * c.num_channels * c.img_h * c.img_w;
    const size_t outs = size_t(cpu.tokens()) * c.lm_hidden_size;
    const std::vector<float> images = random_floats(pixels, 61), R = random_floats(outs, 62);

    const float* cpu_out = cpu.forward(images.data());
    const std::vector<float> want_out(cpu_out, cpu_out + outs);
    std::vector<float> want_dimg(pixels);
    cpu.zero_grads();
    cpu.backward(R.data(), want_dimg.data());

    DeviceBuffer<float> d_images(images), d_r(R), d_dimg(pixels);
    std::vector<float> got_out(outs), got_grads(gpu.num_params());
    cu::copy_to_host(got_out.data(), gpu.forward(d_images.get()), outs * sizeof(float));
    gpu.zero_grads();
    gpu.backward(d_r.get(), d_dimg.get());
    cu::copy_to_host(got_grads.data(), gpu.grads(), got_grads.size() * sizeof(float));
    const lattice::Status error = device_->synchronize(device_->compute());
    QVERIFY2(error.is_ok(), error.message().c_str());

    LATTICE_COMPARE("vision out", got_out, want_out, kFp32Tolerance);
    LATTICE_COMPARE("vision d_images", d_dimg.download(), want_dimg, kFp32Tolerance);
    for (const lattice::ParamTensor& t : cpu.tensors()) {
      const auto at = [&](const float* p) {
        return std::vector<float>(p + t.offset, p + t.offset + t.numel);
      };
      LATTICE_COMPARE("grad " + t.name, at(got_grads.data()), at(cpu.grads()), kFp32Tolerance);
    }

    // A head size CUDA's attention does not run is refused at create, naming the flags.
    c.num_attention_heads = 8;  // 128 / 8 = 16
    auto refused = lattice::VisionEncoder<float>::create(c, kImages, *device_);
    QVERIFY(!refused.is_ok());
    QVERIFY2(
        refused.status().message().find("--vision-num-attention-heads = 16") != std::string::npos,
        refused.status().message().c_str());
  }
  void every_float_op_matches_the_cpu_list() { compare_lists<float>(kFp32Tolerance); }
  void every_bf16_op_matches_the_cpu_list() { compare_lists<cu::bf16>(kBf16Tolerance); }
  void every_fp16_op_matches_the_cpu_list() { compare_lists<cu::fp16>(kFp16Tolerance); }
};

QTEST_GUILESS_MAIN(CudaOpList)
#include "test_cuda_op_list.moc"
