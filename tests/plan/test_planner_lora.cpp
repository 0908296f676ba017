// The planner's model FLOPs under LoRA (Note [FLOPs with frozen weights] in
// engine/src/plan/memory_estimate.cpp): counted by hand for full training, LoRA on some linears
// and LoRA on all four, GPT-2 and the Llama shape, and below full training's; the trainer's
// figure (model_flops_per_iteration) and the step's compute follow. Measured: the GEMM FLOPs
// GptModel runs for a micro-batch's forward and backward, counted by an op list wrapped around
// the CPU's, are the planner's count less the attention products (not GEMMs), plus the A
// products each adapter's backward runs again (rematerialisation, which model FLOPs leave out).
#include <QtTest/QtTest>

#include <cmath>

#include "common/forwarding_device.h"
#include "common/train_flags.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"
#include "model/gpt.h"

using namespace lattice;

namespace {

using lattice::testing::layout_of;
using lattice::testing::options;

// 2 layers of width 64, 4 heads, sequences of 32, micro-batches of 2, global batch 4.
const QStringList kGpt2 = {"--num-layers",          "2",   "--hidden-size",      "64",
                           "--num-attention-heads", "4",   "--seq-length",       "32",
                           "--vocab-size",          "100", "--micro-batch-size", "2",
                           "--global-batch-size",   "4"};
// The same with Llama's shape: 2 query groups (QKV width (4 + 2 x 2) x 16 = 128), SwiGLU of
// width 96 (FC1 makes 192 rows), RMSNorm, RoPE, an untied head, no biases.
const QStringList kLlama = kGpt2 + QStringList{"--group-query-attention",
                                               "--num-query-groups",
                                               "2",
                                               "--swiglu",
                                               "--ffn-hidden-size",
                                               "96",
                                               "--normalization",
                                               "RMSNorm",
                                               "--position-embedding-type",
                                               "rope",
                                               "--untie-embeddings-and-output-weights",
                                               "--disable-bias-linear"};

QStringList lora(const char* targets) {
  return {"--lora-rank", "8", "--lora-target-modules", targets};
}
const char* const kAll = "linear_qkv,linear_proj,linear_fc1,linear_fc2";

// Forward FLOPs per token, by hand, of one layer's matrices (2 x their elements), its causal
// attention products (half of 4 s h) and the LM head, for the configs above.
struct Hand {
  double matrices, attention, head, tokens;
};
Hand by_hand(bool llama) {
  const double s = 32, h = 64, V = 128;  // --vocab-size 100 and its EOD padded to 128
  const double W = llama ? 128 : 3 * h, fc1 = llama ? 2 * 96 : 4 * h, F = llama ? 96 : 4 * h;
  return {2 * (h * W + h * h + h * fc1 + F * h), 2 * s * h, 2 * h * V, 4 * s};
}
// One layer's adapters of rank 8, forward FLOPs per token: 2 r (in + out) per target.
double adapters_by_hand(bool llama, bool attention_only) {
  const double r = 8, h = 64;
  const double W = llama ? 128 : 3 * h, fc1 = llama ? 2 * 96 : 4 * h, F = llama ? 96 : 4 * h;
  const double attention = 2 * r * (h + W) + 2 * r * (h + h);
  return attention_only ? attention : attention + 2 * r * (h + fc1) + 2 * r * (F + h);
}

// The op list of double that counts the GEMMs' FLOPs it forwards to the CPU's: 2 N C OC for a
// forward, and as much for each of a backward's input and weight gradients that is asked for.
class GemmCountingOps final : public Ops<double> {
 public:
  explicit GemmCountingOps(Ops<double>& inner) : in_(inner) {}
  double flops = 0;

  void matmul_forward(double* out, double* pre_gelu, const double* inp, const double* weight,
                      const double* bias, int N, int C, int OC, Epilogue epilogue) override {
    flops += 2.0 * N * C * OC;
    in_.matmul_forward(out, pre_gelu, inp, weight, bias, N, C, OC, epilogue);
  }
  void matmul_backward(double* dinp, G* dweight, G* dbias, const double* dout, const double* inp,
                       const double* weight, int N, int C, int OC) override {
    flops += 2.0 * N * C * OC * ((dinp ? 1 : 0) + (dweight ? 1 : 0));
    in_.matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  // The rest as the CPU's.
  void add_bias(double* out, const double* bias, int N, int OC) override {
    in_.add_bias(out, bias, N, OC);
  }
  void embedding_forward(double* out, const int32_t* tokens, const double* wte, const double* wpe,
                         int B, int T, int C, int vocab_begin, int vocab_end,
                         const int32_t* positions) override {
    in_.embedding_forward(out, tokens, wte, wpe, B, T, C, vocab_begin, vocab_end, positions);
  }
  void embedding_backward(G* dwte, G* dwpe, const double* dout, const int32_t* tokens, int B, int T,
                          int C, int vocab_begin, int vocab_end,
                          const int32_t* positions) override {
    in_.embedding_backward(dwte, dwpe, dout, tokens, B, T, C, vocab_begin, vocab_end, positions);
  }
  void layernorm_forward(double* out, G* mean, G* rstd, const double* inp, const double* weight,
                         const double* bias, int N, int C) override {
    in_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void residual_layernorm_forward(double* residual_out, double* out, G* mean, G* rstd,
                                  const double* residual, const double* x, const double* weight,
                                  const double* bias, int N, int C) override {
    in_.residual_layernorm_forward(residual_out, out, mean, rstd, residual, x, weight, bias, N, C);
  }
  void layernorm_backward(double* dinp, G* dweight, G* dbias, const double* dout, const double* inp,
                          const double* weight, const G* mean, const G* rstd, int N,
                          int C) override {
    in_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void rmsnorm_forward(double* out, G* rstd, const double* inp, const double* weight, int N, int C,
                       float eps) override {
    in_.rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void residual_rmsnorm_forward(double* residual_out, double* out, G* rstd, const double* residual,
                                const double* x, const double* weight, int N, int C,
                                float eps) override {
    in_.residual_rmsnorm_forward(residual_out, out, rstd, residual, x, weight, N, C, eps);
  }
  void rmsnorm_backward(double* dinp, G* dweight, const double* dout, const double* inp,
                        const double* weight, const G* rstd, int N, int C) override {
    in_.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void rope_forward(double* qkv, const G* cos, const G* sin, const int32_t* positions, int N, int T,
                    int NH, int KV, int HS, int rotary_dim) override {
    in_.rope_forward(qkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
  }
  void rope_backward(double* dqkv, const G* cos, const G* sin, const int32_t* positions, int N,
                     int T, int NH, int KV, int HS, int rotary_dim) override {
    in_.rope_backward(dqkv, cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
  }
  void swiglu_forward(double* out, const double* inp, int N, int F) override {
    in_.swiglu_forward(out, inp, N, F);
  }
  void swiglu_backward(double* dinp, const double* inp, const double* dout, int N, int F) override {
    in_.swiglu_backward(dinp, inp, dout, N, F);
  }
  void gelu_forward(double* out, const double* inp, size_t n) override {
    in_.gelu_forward(out, inp, n);
  }
  void gelu_backward(double* dinp, const double* inp, const double* dout, size_t n) override {
    in_.gelu_backward(dinp, inp, dout, n);
  }
  void residual_dropout_forward(double* out, const double* residual, const double* x, size_t n,
                                float p, uint64_t key, size_t index_offset) override {
    in_.residual_dropout_forward(out, residual, x, n, p, key, index_offset);
  }
  void dropout_backward(double* dx, const double* dout, size_t n, float p, uint64_t key,
                        size_t index_offset) override {
    in_.dropout_backward(dx, dout, n, p, key, index_offset);
  }
  size_t attention_saved_elems(int B, int T, int NH) const override {
    return in_.attention_saved_elems(B, T, NH);
  }
  size_t attention_workspace_elems(int B, int T, int NH, int HS) const override {
    return in_.attention_workspace_elems(B, T, NH, HS);
  }
  void attention_forward(double* out, G* saved, const double* qkv, G* workspace, int B, int T,
                         int C, int NH, float p, uint64_t key, int head_offset, int total_heads,
                         int KV, const int32_t* positions) override {
    in_.attention_forward(out, saved, qkv, workspace, B, T, C, NH, p, key, head_offset, total_heads,
                          KV, positions);
  }
  void attention_backward(double* dqkv, const double* dout, const double* qkv, const double* out,
                          const G* saved, G* workspace, int B, int T, int C, int NH, float p,
                          uint64_t key, int head_offset, int total_heads, int KV,
                          const int32_t* positions) override {
    in_.attention_backward(dqkv, dout, qkv, out, saved, workspace, B, T, C, NH, p, key, head_offset,
                           total_heads, KV, positions);
  }
  void softmax_cross_entropy(G* losses, G* dlogits, const G* logits, const int32_t* targets, int N,
                             int V, float grad_scale) override {
    in_.softmax_cross_entropy(losses, dlogits, logits, targets, N, V, grad_scale);
  }
  void cross_entropy_shard_max(G* row_max, const G* logits, int N, int V) override {
    in_.cross_entropy_shard_max(row_max, logits, N, V);
  }
  void cross_entropy_shard_sums(double* sum_exp, G* target_logit, const G* logits, const G* row_max,
                                const int32_t* targets, int vocab_begin, int N, int V) override {
    in_.cross_entropy_shard_sums(sum_exp, target_logit, logits, row_max, targets, vocab_begin, N,
                                 V);
  }
  void cross_entropy_shard_finish(G* losses, G* dlogits, const G* logits, const G* row_max,
                                  const double* sum_exp, const G* target_logit,
                                  const int32_t* targets, int vocab_begin, int N, int V,
                                  float grad_scale) override {
    in_.cross_entropy_shard_finish(losses, dlogits, logits, row_max, sum_exp, target_logit, targets,
                                   vocab_begin, N, V, grad_scale);
  }
  void to_compute(double* dst, const G* src, size_t n) override { in_.to_compute(dst, src, n); }
  void to_accum(G* dst, const double* src, size_t n) override { in_.to_accum(dst, src, n); }
  void adamw_update(const AdamWSpan<double>* tensors, int count, const kernels::AdamWParams& p,
                    G grad_scale) override {
    in_.adamw_update(tensors, count, p, grad_scale);
  }
  void unscale_and_check(G* x, size_t n, G inv_scale, float* found_inf) override {
    in_.unscale_and_check(x, n, inv_scale, found_inf);
  }
  void sum_squares(double* result, const G* const* tensors, const size_t* sizes,
                   int count) override {
    in_.sum_squares(result, tensors, sizes, count);
  }
  void scale(G* x, size_t n, G s) override { in_.scale(x, n, s); }

 private:
  Ops<double>& in_;
};

// The CPU device with the counting op list for double.
class GemmCountingDevice final : public testing::ForwardingDevice {
 public:
  GemmCountingDevice() : ops_(*inner().ops<double>()) {}
  double gemm_flops() const { return ops_.flops; }

 protected:
  OpLists op_lists() override {
    OpLists lists = ForwardingDevice::op_lists();
    lists.for_double = &ops_;
    return lists;
  }

 private:
  GemmCountingOps ops_;
};

// The GEMM FLOPs of one micro-batch's forward and backward of `o`'s model in fp64 on the CPU.
double measured_gemm_flops(const TrainOptions& o) {
  GemmCountingDevice device;
  auto model = GptModel<double>::create(o.model, o.micro_batch_size, device);
  if (!model) qFatal("%s", model.status().message().c_str());
  auto acts = (*model)->new_activations();
  if (!acts) qFatal("%s", acts.status().message().c_str());
  if (!(*model)->init_weights(1)) qFatal("init_weights failed");
  const int N = o.micro_batch_size * o.model.seq_length;
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; i++) tokens[i] = (7 * i + 1) % 100, targets[i] = (11 * i + 2) % 100;
  (*model)->zero_grads();
  (*model)->forward(**acts, tokens.data(), targets.data(), 1, 1.0f / N);
  (*model)->backward(**acts);
  if (!device.synchronize(device.compute())) qFatal("the device failed");
  return device.gemm_flops();
}

void check_close(double got, double want, const QString& what) {
  QVERIFY2(std::abs(got - want) <= 1e-12 * want, qPrintable(QString("%1: %2 FLOPs, expected %3")
                                                                .arg(what)
                                                                .arg(got, 0, 'g', 17)
                                                                .arg(want, 0, 'g', 17)));
}

}  // namespace

class PlannerLora : public QObject {
  Q_OBJECT

 private slots:
  // Full training: forward and a backward of twice it, every matrix and the attention products.
  // LoRA: every base matrix (the LM head too) makes its input gradient alone, once its forward;
  // the attention products keep their whole backward; each adapter's forward and its backward
  // of twice it add 3 x 2 r (in + out) a token.
  void lora_counts_input_gradients_of_the_base_and_the_adapters() {
    for (bool llama : {false, true}) {
      const QStringList base = llama ? kLlama : kGpt2;
      const Hand x = by_hand(llama);
      const double L = 2;
      const double full = 3 * x.tokens * (L * (x.matrices + x.attention) + x.head);
      const double frozen = x.tokens * (2 * (L * x.matrices + x.head) + 3 * L * x.attention);
      const struct {
        const char* targets;
        double expected;
      } rows[] = {
          {"linear_qkv,linear_proj", frozen + 3 * x.tokens * L * adapters_by_hand(llama, true)},
          {kAll, frozen + 3 * x.tokens * L * adapters_by_hand(llama, false)},
      };
      const TrainOptions whole = options(base);
      QCOMPARE(whole.model.padded_vocab_size(), 128);
      QCOMPARE(model_flops_per_iteration(whole, layout_of(whole, 1)), full);
      for (const auto& row : rows) {
        const TrainOptions o = options(base + lora(row.targets));
        const QString what = QString("%1, LoRA on %2").arg(llama ? "Llama" : "GPT-2", row.targets);
        check_close(model_flops_per_iteration(o, layout_of(o, 1)), row.expected, what);
        // The memory estimate's figure (the planner's MFU) and per rank over 2 ranks of DP.
        const MemoryEstimate est = estimate_memory(o, layout_of(o, 2));
        check_close(est.flops_per_iteration, row.expected, what + " (estimate_memory)");
        check_close(est.flops_per_rank, row.expected / 2, what + " (per rank)");
        QVERIFY2(row.expected < full, qPrintable(what + " is not below full training"));
      }
    }
  }

  // The step's compute on one H100 per rank, TP 2: LoRA drops the base matrices' weight
  // gradients (this rank's half of them and of the LM head) and adds the adapters as the rank
  // runs them: the column-parallel targets' A and the row-parallel ones' B whole, the other
  // halves split, forward 3 times (forward, input and weight gradients) and A once more (the
  // backward recomputes A x).
  void the_step_compute_follows_on_a_tensor_parallel_rank() {
    const TrainOptions whole = options(kGpt2 + QStringList{"--tensor-model-parallel-size", "2"});
    const TrainOptions adapted =
        options(kGpt2 + QStringList{"--tensor-model-parallel-size", "2"} + lora(kAll));
    const ParallelLayout l = layout_of(whole, 2);
    ClusterSpec cluster;
    cluster.device = *find_device("h100", "fp32");
    const double rate = cluster.device.peak_flops * cluster.compute_efficiency;
    const StepEstimate a = estimate_step(whole, l, cluster, estimate_memory(whole, l));
    const StepEstimate b = estimate_step(adapted, l, cluster, estimate_memory(adapted, l));
    QCOMPARE(whole.model.padded_vocab_size(), 256);  // a multiple of 128 x TP
    const Hand x = by_hand(false);
    const double t = 2, L = 2, r = 8, h = 64, W = 3 * h, F = 4 * h, head = 2 * h * 256;
    const double weight_gradients = x.tokens * (L * x.matrices + head) / t;
    const double A = 2 * r * (h + h / t + h + F / t), B = 2 * r * (W / t + h + F / t + h);
    const double adapters = x.tokens * L * (3 * (A + B) + A);
    const double expected = (adapters - weight_gradients) / rate;
    QVERIFY2(std::abs((b.compute_s - a.compute_s) - expected) <= 1e-9 * std::abs(expected),
             qPrintable(QString("compute changed by %1 s, expected %2 s")
                            .arg(b.compute_s - a.compute_s)
                            .arg(expected)));
  }

  // The step's tail on 2 ranks of DP, H100s: the reduction moves the buckets that hold an
  // adapter (split_buckets never mixes frozen and trained tensors, and GradReducer skips the
  // frozen ones), and AdamW steps the adapters alone. With one bucket per tensor
  // (--ddp-bucket-size 1) and with the default (40 M elements, more than the whole model) alike:
  // just the adapters, every tensor's size a multiple of the arena's 16-element alignment. Ring
  // all-reduces and the optimizer's traffic are linear in the elements, so the times go as the
  // counts do.
  void the_step_tail_reduces_and_steps_what_trains() {
    ClusterSpec cluster;
    cluster.device = *find_device("h100", "fp32");
    for (bool distributed : {false, true}) {
      const QStringList extra =
          distributed ? QStringList{"--use-distributed-optimizer"} : QStringList{};
      for (const char* bucket : {"1", "40000000"}) {
        const QStringList base = kGpt2 + extra + QStringList{"--ddp-bucket-size", bucket};
        const TrainOptions whole = options(base), adapted = options(base + lora(kAll));
        const ParallelLayout l = layout_of(whole, 2);
        const MemoryEstimate mw = estimate_memory(whole, l), ma = estimate_memory(adapted, l);
        const StageEstimate &w = mw.stages[0], &a = ma.stages[0];
        const StepEstimate sw = estimate_step(whole, l, cluster, mw);
        const StepEstimate sa = estimate_step(adapted, l, cluster, ma);
        const QString what =
            QString("bucket %1, %2").arg(bucket, distributed ? "distributed" : "DDP");
        QCOMPARE(w.reduced_dense_parameters, w.parameters);
        const int64_t reduced = a.trainable_parameters;
        QVERIFY2(
            a.reduced_dense_parameters == reduced,
            qPrintable(
                what +
                QString(": %1 reduced, expected %2").arg(a.reduced_dense_parameters).arg(reduced)));
        QCOMPARE(a.reduced_expert_parameters, int64_t{0});
        const double ratio = static_cast<double>(reduced) / static_cast<double>(w.parameters);
        QVERIFY2(std::abs(sa.dp_comm_total_s / sw.dp_comm_total_s - ratio) <= 1e-12,
                 qPrintable(what + QString(": DP time ratio %1, elements ratio %2")
                                       .arg(sa.dp_comm_total_s / sw.dp_comm_total_s)
                                       .arg(ratio)));
        // The optimizer: the most loaded rank's trained elements (its moments' bytes / 8).
        const double stepped = distributed ? static_cast<double>(a.optimizer_bytes) / 8
                                           : static_cast<double>(a.trainable_parameters);
        const double whole_stepped = distributed ? (w.parameters + 1) / 2 : w.parameters;
        QVERIFY2(std::abs(sa.optimizer_s / sw.optimizer_s - stepped / whole_stepped) <= 1e-12,
                 qPrintable(what + QString(": optimizer time ratio %1, elements ratio %2")
                                       .arg(sa.optimizer_s / sw.optimizer_s)
                                       .arg(stepped / whole_stepped)));
        QVERIFY2(sa.optimizer_s < sw.optimizer_s, qPrintable(what));
      }
    }
  }

  // Two pipeline stages of one rank each: the tied word embedding's gradient is summed between
  // the end stages in full training; frozen under LoRA, it is not (Trainer::finish_gradients),
  // and with no DP there is nothing else to reduce.
  void a_frozen_tied_embedding_is_not_summed_between_stages() {
    ClusterSpec cluster;
    cluster.device = *find_device("h100", "fp32");
    const QStringList base = kGpt2 + QStringList{"--pipeline-model-parallel-size", "2"};
    const TrainOptions whole = options(base), adapted = options(base + lora(kAll));
    const ParallelLayout l = layout_of(whole, 2);
    QVERIFY(estimate_step(whole, l, cluster, estimate_memory(whole, l)).dp_comm_total_s > 0);
    QCOMPARE(estimate_step(adapted, l, cluster, estimate_memory(adapted, l)).dp_comm_total_s, 0.0);
  }

  // What GptModel runs: one micro-batch (2 of the global batch's 4 sequences) forward and
  // backward, its GEMMs counted, against the planner's count of that half of the iteration less
  // the attention products' forward and backward (3 x 2 s h a token and layer, not GEMMs), plus
  // the adapters' A products that backward runs again (2 r in a token and target).
  void the_engines_gemms_are_the_planners_count() {
    for (bool llama : {false, true}) {
      const double h = 64, F = llama ? 96 : 4 * h, r = 8;
      // Each target's A input width: h for QKV, the projection (the heads' h) and FC1; F for FC2.
      const struct {
        const char* targets;
        double a_inputs;
      } rows[] = {{"", 0}, {"linear_qkv,linear_proj", 2 * h}, {"linear_fc1", h}, {kAll, 3 * h + F}};
      for (const auto& row : rows) {
        const QStringList base = llama ? kLlama : kGpt2;
        const TrainOptions o = options(*row.targets ? base + lora(row.targets) : base);
        const Hand x = by_hand(llama);
        const double tokens = x.tokens / 2, L = 2;
        const double planned = model_flops_per_iteration(o, layout_of(o, 1)) / 2;
        const double attention = 3 * tokens * L * x.attention;
        const double recomputed = tokens * L * 2 * r * row.a_inputs;
        check_close(measured_gemm_flops(o), planned - attention + recomputed,
                    QString("%1, LoRA on \"%2\": the GEMMs run")
                        .arg(llama ? "Llama" : "GPT-2", row.targets));
      }
    }
  }
};

QTEST_GUILESS_MAIN(PlannerLora)
#include "test_planner_lora.moc"
