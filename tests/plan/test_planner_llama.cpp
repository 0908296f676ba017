// The planner for the Llama family (issue 23) as someone sizing Llama 3 expects it: parameter
// counts equal to the sum of the Hugging Face checkpoints' tensors, per-rank counts of TP 2 x
// PP 2 layouts with an untied output layer computed by hand, activations per layer from the
// model's saved tensors (query groups, SwiGLU, RMSNorm) beside Megatron's formula generalised,
// FLOPs from ModelConfig's one formula, a layout search that keeps TP within the query groups,
// and `lattice plan`'s architecture line.
#include <QtTest/QtTest>

#include <algorithm>
#include <set>

#include "common/process.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"

namespace {

lattice::TrainOptions options(const QStringList& flags) {
  std::vector<std::string> args;
  for (const QString& s : flags) args.push_back(s.toStdString());
  lattice::Result<lattice::TrainOptions> o = lattice::parse_train_flags(args);
  if (!o) qFatal("bad test flags: %s", o.status().message().c_str());
  return *o;
}

lattice::ParallelLayout layout_of(const lattice::TrainOptions& o, int world) {
  lattice::Result<lattice::ParallelLayout> l = lattice::make_layout(o, world);
  if (!l) qFatal("bad test layout: %s", l.status().message().c_str());
  return *l;
}

// A Hugging Face LlamaForCausalLM / Qwen2ForCausalLM config.json, and the sum of its
// checkpoint's tensor shapes (model.embed_tokens, per layer self_attn.{q,k,v,o}_proj (+ the
// q/k/v biases of Qwen2), mlp.{gate,up,down}_proj, the two RMSNorms, model.norm, lm_head).
struct HfConfig {
  int64_t layers, hidden, heads, kv_heads, intermediate, vocab;
  bool qkv_bias = false;
};
int64_t hf_tensor_sum(const HfConfig& c) {
  const int64_t d = c.hidden / c.heads;  // head_dim
  const int64_t q = c.heads * d * c.hidden, kv = c.kv_heads * d * c.hidden;
  const int64_t bias = c.qkv_bias ? c.heads * d + 2 * c.kv_heads * d : 0;
  const int64_t o = c.hidden * c.heads * d, mlp = 3 * c.intermediate * c.hidden;
  const int64_t layer = q + 2 * kv + bias + o + mlp + 2 * c.hidden;
  return c.vocab * c.hidden + c.layers * layer + c.hidden + c.vocab * c.hidden;
}

// Megatron's flags for that config (NullTokenizer: --vocab-size is one less than the rows).
QStringList flags_of(const HfConfig& c, QStringList extra = {}) {
  QStringList f = {"--num-layers",
                   QString::number(c.layers),
                   "--hidden-size",
                   QString::number(c.hidden),
                   "--num-attention-heads",
                   QString::number(c.heads),
                   "--group-query-attention",
                   "--num-query-groups",
                   QString::number(c.kv_heads),
                   "--ffn-hidden-size",
                   QString::number(c.intermediate),
                   "--swiglu",
                   "--vocab-size",
                   QString::number(c.vocab - 1),
                   "--position-embedding-type",
                   "rope",
                   "--normalization",
                   "RMSNorm",
                   "--untie-embeddings-and-output-weights",
                   "--disable-bias-linear",
                   "--seq-length",
                   "8192"};
  if (c.qkv_bias) f << "--add-qkv-bias";
  return f + extra;
}

const HfConfig kLlama3_8B = {32, 4096, 32, 8, 14336, 128256};

// A small Llama-style model whose per-rank counts are worked out by hand below: C 64, 8 heads
// of 8, 2 query groups (W = (8 + 2 x 2) x 8 = 96 QKV rows), SwiGLU F 96, RMSNorm, RoPE, an
// untied head, no biases, vocabulary 255 + EOD = 256 (a multiple of 128 x TP 2).
QStringList small_llama(QStringList extra) {
  return QStringList{"--num-layers",
                     "4",
                     "--hidden-size",
                     "64",
                     "--num-attention-heads",
                     "8",
                     "--group-query-attention",
                     "--num-query-groups",
                     "2",
                     "--ffn-hidden-size",
                     "96",
                     "--swiglu",
                     "--normalization",
                     "RMSNorm",
                     "--position-embedding-type",
                     "rope",
                     "--untie-embeddings-and-output-weights",
                     "--disable-bias-linear",
                     "--vocab-size",
                     "255",
                     "--seq-length",
                     "64",
                     "--micro-batch-size",
                     "2",
                     "--global-batch-size",
                     "8",
                     "--tensor-model-parallel-size",
                     "2"} +
         extra;
}

// Stage parameters of a TP 2 layout of `flags` on `world` ranks: (total, replicated) per stage.
QList<QPair<int64_t, int64_t>> stage_counts(const QStringList& flags, int world) {
  const lattice::TrainOptions o = options(flags);
  QList<QPair<int64_t, int64_t>> out;
  for (const lattice::StageEstimate& s : lattice::estimate_memory(o, layout_of(o, world)).stages)
    out.append({s.parameters, s.replicated_parameters});
  return out;
}

// Megatron's activation bytes per layer (Korthikanti et al. 2022, section 4.1, 16-bit, with its
// dropout masks), generalised from sbh (34 + 5as/h) to query groups and SwiGLU. The paper's
// terms: attention 11 sbh + 5 as^2 b = QKV input 2 sbh, Q and K 4 sbh, softmax 2 as^2 b and its
// dropout mask as^2 b and output 2 as^2 b, V 2 sbh, proj input 2 sbh, dropout mask sbh; MLP 19
// sbh = FC1 input 2 sbh, GELU input 8 sbh, FC2 input 8 sbh, mask sbh; two LayerNorm inputs 4
// sbh. With G key/value heads K and V are 2 sb h_kv each (h_kv = h G / a); FC1's output is 2 sbF
// (4 sbF with SwiGLU's gate and up), FC2's input 2 sbF: sb (14 h + 4 h_kv + 2 (k + 1) F) +
// 5 a s^2 b, k = 2 with SwiGLU else 1 (GPT: 14 h + 4 h + 16 h = 34 h). With TP t (no SP) the
// QKV-input, MLP-input, LayerNorm-input and both masks (10 sbh) stay whole: sb (10 h + (4 h +
// 4 h_kv + 2 (k + 1) F) / t) + 5 a s^2 b / t; with SP all of it / t; selective drops 5as^2b.
double megatron_layer_bytes(double s, double b, double h, double a, double groups, double F,
                            bool swiglu, double t, bool sp, bool selective) {
  const double h_kv = h * groups / a, k = swiglu ? 2 : 1;
  const double whole = 10 * h, split = 4 * h + 4 * h_kv + 2 * (k + 1) * F;
  const double attention = selective ? 0 : 5 * a * s * s * b / t;
  return s * b * (sp ? (whole + split) / t : whole + split / t) + attention;
}

using lattice::testing::Run;

Run lattice_cli(const QStringList& args) {
  return lattice::testing::run_process(LATTICE_CLI_PATH, args, {}, 60000);
}

}  // namespace

class PlannerLlamaTest : public QObject {
  Q_OBJECT

 private slots:
  // The published sizes: 8.03 B, 70.6 B, 405.9 B, 7.62 B, 7.24 B (the checkpoints' totals).
  void parameters_are_the_sum_of_the_hugging_face_tensors_data() {
    QTest::addColumn<qint64>("layers");
    QTest::addColumn<qint64>("hidden");
    QTest::addColumn<qint64>("heads");
    QTest::addColumn<qint64>("kv_heads");
    QTest::addColumn<qint64>("intermediate");
    QTest::addColumn<qint64>("vocab");
    QTest::addColumn<bool>("qkv_bias");
    QTest::addColumn<qint64>("published");
    QTest::newRow("Llama 3 8B") << 32LL << 4096LL << 32LL << 8LL << 14336LL << 128256LL << false
                                << 8030261248LL;
    QTest::newRow("Llama 3 70B") << 80LL << 8192LL << 64LL << 8LL << 28672LL << 128256LL << false
                                 << 70553706496LL;
    QTest::newRow("Llama 3.1 405B")
        << 126LL << 16384LL << 128LL << 8LL << 53248LL << 128256LL << false << 405853388800LL;
    QTest::newRow("Qwen2.5 7B") << 28LL << 3584LL << 28LL << 4LL << 18944LL << 152064LL << true
                                << 7615616512LL;
    QTest::newRow("Mistral 7B") << 32LL << 4096LL << 32LL << 8LL << 14336LL << 32000LL << false
                                << 7241732096LL;
  }

  void parameters_are_the_sum_of_the_hugging_face_tensors() {
    QFETCH(qint64, layers);
    QFETCH(qint64, hidden);
    QFETCH(qint64, heads);
    QFETCH(qint64, kv_heads);
    QFETCH(qint64, intermediate);
    QFETCH(qint64, vocab);
    QFETCH(bool, qkv_bias);
    QFETCH(qint64, published);
    const HfConfig hf{layers, hidden, heads, kv_heads, intermediate, vocab, qkv_bias};
    QCOMPARE(hf_tensor_sum(hf), published);
    // --make-vocab-size-divisible-by 16: every vocabulary here is a multiple of 16 x TP (at
    // most 8), so no padding row is added and the engine's count is the checkpoint's.
    const lattice::TrainOptions o = options(flags_of(hf, {"--make-vocab-size-divisible-by", "16"}));
    QCOMPARE(o.model.num_parameters(), published);
    // One rank holds everything; over a TP x PP 2 grid (TP = the query groups: one key/value
    // head per rank), counting what TP replicates once, the untied head leaves no copy to add.
    QCOMPARE(lattice::estimate_memory(o, layout_of(o, 1)).stages[0].parameters, published);
    lattice::TrainOptions grid = o;
    const int tp = static_cast<int>(kv_heads);
    grid.model.tensor_model_parallel_size = tp;
    grid.parallel.pipeline_model_parallel_size = 2;
    int64_t sum = 0;
    for (const lattice::StageEstimate& s :
         lattice::estimate_memory(grid, layout_of(grid, 2 * tp)).stages)
      sum += tp * (s.parameters - s.replicated_parameters) + s.replicated_parameters;
    QCOMPARE(sum, published);
  }

  // Per layer and TP rank of small_llama: QKV 96 x 64 / 2 = 3072, proj 64 x 64 / 2 = 2048, FC1
  // 2 x 96 x 64 / 2 = 6144, FC2 64 x 96 / 2 = 3072 (14336 split), two RMSNorm weights 128
  // (whole): 14464. Embedding and output layer 256 x 64 / 2 = 8192 each, final norm 64.
  void tp2_pp2_with_an_untied_head_counts_by_hand() {
    // PP 2: two layers per stage (28928); the output layer is on the last stage only.
    QCOMPARE(stage_counts(small_llama({"--pipeline-model-parallel-size", "2"}), 4),
             (QList<QPair<int64_t, int64_t>>{{28928 + 8192, 256}, {28928 + 64 + 8192, 256 + 64}}));
    // Tied at PP 2: the last stage holds the word embedding's copy, the same size.
    QCOMPARE(stage_counts(small_llama({"--pipeline-model-parallel-size", "2",
                                       "--untie-embeddings-and-output-weights=false"}),
                          4),
             (QList<QPair<int64_t, int64_t>>{{37120, 256}, {37184, 320}}));
    // PP 1: untied, both vocabulary matrices; tied, one.
    QCOMPARE(stage_counts(small_llama({}), 2),
             (QList<QPair<int64_t, int64_t>>{{4 * 14464 + 8192 + 64 + 8192, 4 * 128 + 64}}));
    QCOMPARE(stage_counts(small_llama({"--untie-embeddings-and-output-weights=false"}), 2),
             (QList<QPair<int64_t, int64_t>>{{4 * 14464 + 8192 + 64, 4 * 128 + 64}}));
  }

  void biases_norms_and_positions_count_by_hand() {
    const QStringList pp2 = {"--pipeline-model-parallel-size", "2"};
    // Qwen2's QKV bias: 96 / 2 = 48 more per layer, split with the QKV rows.
    QCOMPARE(stage_counts(small_llama(pp2 + QStringList{"--add-qkv-bias"}), 4),
             (QList<QPair<int64_t, int64_t>>{{2 * (14464 + 48) + 8192, 256},
                                             {2 * (14464 + 48) + 64 + 8192, 320}}));
    // Every bias and LayerNorm: split + QKV 48 + FC1 (gate and up) 2 x 96 / 2 = 96; whole +
    // proj and FC2 biases 2 x 64 + the two norms' biases 2 x 64 (14336 + 144 + 128 + 256 =
    // 14864); the final LayerNorm 128.
    QCOMPARE(stage_counts(small_llama(pp2 + QStringList{"--disable-bias-linear=false",
                                                        "--normalization", "LayerNorm"}),
                          4),
             (QList<QPair<int64_t, int64_t>>{{2 * 14864 + 8192, 2 * 384},
                                             {2 * 14864 + 128 + 8192, 2 * 384 + 128}}));
    // A learned table (64 positions x 64, whole on every TP rank) on the first stage only;
    // "none" has none, like RoPE.
    QCOMPARE(
        stage_counts(
            small_llama(pp2 + QStringList{"--position-embedding-type", "learned_absolute"}), 4)[0],
        (QPair<int64_t, int64_t>{37120 + 4096, 256 + 4096}));
    QCOMPARE(stage_counts(small_llama(pp2 + QStringList{"--position-embedding-type", "none"}), 4),
             stage_counts(small_llama(pp2), 4));
  }

  void activations_follow_query_groups_swiglu_and_rmsnorm() {
    // Two more layers add two layers' saved tensors (fp32 A and G 4 bytes; the CPU keeps the
    // (b, a/t, s, s) probabilities): ln1, res_mid, ln2 and the layer's output in the residual
    // stream (4 R h); qkv (N, 96/t), attention output
    // (N, 64/t), FC1 (N, 192/t), SwiGLU's output (N, 96/t); one RMSNorm statistic per norm
    // (2 R); RoPE adds nothing. N = s b = 128; R = N, or N / t with sequence parallelism.
    auto added = [](const QStringList& extra, int world) {
      auto bytes = [&](const char* layers) {
        const lattice::TrainOptions o =
            options(small_llama(QStringList{"--num-layers", layers} + extra));
        return static_cast<double>(lattice::estimate_memory(o, layout_of(o, world))
                                       .stages[0]
                                       .activation_bytes_per_micro_batch);
      };
      return bytes("4") - bytes("2");
    };
    const double N = 128, h = 64, a = 8, s = 64, b = 2;
    auto layers = [&](double t, double R, double saved) {
      return 2 * (4 * (4 * R * h + N * (96 + 64 + 192 + 96) / t) + 4 * (2 * R + saved));
    };
    // The attention keeps its log-sum-exps (b, a / t, s) on every device.
    QCOMPARE(added({"--tensor-model-parallel-size", "1"}, 1), layers(1, N, b * a * s));
    QCOMPARE(added({"--sequence-parallel"}, 2), layers(2, N / 2, b * a / 2 * s));
    QCOMPARE(added({"--device", "cuda"}, 2), layers(2, N, b * a / 2 * s));
    // LayerNorm keeps a mean too: two more statistics per layer.
    QCOMPARE(added({"--normalization", "LayerNorm"}, 2) - added({}, 2), 2 * 4 * 2 * N);
  }

  void llama3_8b_activations_beside_megatrons_formula_generalised() {
    // The generalisation reduces to the paper's sbh (34 + 5as/h) for GPT.
    const double s = 8192, b = 1, h = 4096, a = 32;
    QCOMPARE(megatron_layer_bytes(s, b, h, a, a, 4 * h, false, 1, false, false),
             s * b * h * (34 + 5 * a * s / h));
    QCOMPARE(megatron_layer_bytes(s, b, h, a, a, 4 * h, false, 2, false, false),
             s * b * h * (10 + 24 / 2.0 + 5 * a * s / (h * 2)));
    // Llama 3 8B, TP 2, PP 2, SP and selective recomputation, bf16 on CUDA.
    const lattice::TrainOptions o = options(flags_of(
        kLlama3_8B, {"--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                     "--sequence-parallel", "--recompute-granularity", "selective", "--bf16",
                     "--device", "cuda", "--micro-batch-size", "1", "--global-batch-size", "8"}));
    const lattice::MemoryEstimate est = lattice::estimate_memory(o, layout_of(o, 8));
    const double megatron = megatron_layer_bytes(s, b, h, a, 8, 14336, true, 2, true, true);
    // The engine's per layer in bf16 (A 2, G 4), with SP (R = N / 2), t = 2: ln1, res_mid, ln2
    // 3 R h; qkv N 6144 / 2, attention output N 4096 / 2, FC1 N 28672 / 2, SwiGLU N 14336 / 2;
    // two rstd (2 R) and the log-sum-exps (b, 16, s) in G.
    const double N = s * b, R = N / 2;
    const double layer =
        2 * (3 * R * h + N * (6144 + 4096 + 28672 + 14336) / 2) + 4 * (2 * R + b * 16 * s);
    // tokens, targets, positions (packed sequences), residual
    const double chunk = 3 * N * 4 + 2 * 17 * R * h + 16 * layer;
    QCOMPARE(est.stages[0].activation_bytes_per_micro_batch, static_cast<size_t>(chunk));
    qInfo("Llama 3 8B per layer and rank: engine %.1f MiB, Megatron's formula generalised %.1f MiB",
          layer / (1 << 20), megatron / (1 << 20));
    QVERIFY2(layer < megatron, "the engine keeps no dropout masks, so it holds less");
  }

  void flops_come_from_the_model_config() {
    // Independently: forward FLOPs per token are 2 per matmul parameter of a layer (its
    // checkpoint tensors less the two norms), causal attention 2 s h per layer, the head 2 h V.
    const double s = 8192, h = 4096, V = 128256, L = 32;
    const double matmul = 4096.0 * 4096 * 2 + 2.0 * 1024 * 4096 + 3.0 * 14336 * 4096;
    const double per_token = L * (2 * matmul + 2 * s * h) + 2 * h * V;
    const lattice::TrainOptions o = options(flags_of(kLlama3_8B, {"--global-batch-size", "512"}));
    QCOMPARE(lattice::flops_per_iteration(o.model, 512), 3 * 512 * s * per_token);
    // The planner's MFU and step time use it: one stage, no recomputation.
    lattice::ClusterSpec c;
    c.nodes = 8;
    c.devices_per_node = 8;
    c.device = *lattice::find_device("h100", "bf16");
    lattice::TrainOptions bf16 = o;
    bf16.bf16 = true;
    const lattice::ParallelLayout l = layout_of(bf16, 64);
    const lattice::MemoryEstimate mem = lattice::estimate_memory(bf16, l);
    QCOMPARE(mem.flops_per_iteration, 3 * 512 * s * per_token);
    const lattice::StepEstimate step = lattice::estimate_step(bf16, l, c, mem);
    QCOMPARE(step.compute_s, mem.flops_per_rank / (c.device.peak_flops * c.compute_efficiency));
  }

  // With a tied head and PP > 1 the end stages sum the embedding's gradient; untied, nothing.
  void an_untied_head_has_no_embedding_all_reduce() {
    lattice::ClusterSpec c;
    c.devices_per_node = 2;
    c.device = *lattice::find_device("h100", "fp32");
    auto dp_traffic = [&](const QStringList& extra) {
      const lattice::TrainOptions o = options(small_llama(
          QStringList{"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "2"} +
          extra));
      return lattice::estimate_step(o, layout_of(o, 2), c).dp_comm_total_s;  // DP 1
    };
    QCOMPARE(dp_traffic({}), 0.0);
    QVERIFY(dp_traffic({"--untie-embeddings-and-output-weights=false"}) > 0);
  }

  void suggest_keeps_tp_within_the_query_groups() {
    const lattice::TrainOptions base = options(
        flags_of({80, 8192, 64, 8, 28672, 128256}, {"--global-batch-size", "512", "--bf16"}));
    lattice::ClusterSpec c;
    c.nodes = 8;
    c.devices_per_node = 8;
    c.device = *lattice::find_device("h100", "bf16");
    lattice::SuggestStats stats;
    const std::vector<lattice::LayoutCandidate> list =
        lattice::suggest_layouts(base, c, 400, &stats);
    qInfo("Llama 3 70B on 64 H100: %lld valid layouts, %lld fit; best %s", (long long)stats.valid,
          (long long)stats.fitting,
          list.empty() ? "none" : lattice::layout_flags(list.front().options).c_str());
    QVERIFY(!list.empty() && list.front().fits);
    std::set<int> tps;
    for (const lattice::LayoutCandidate& k : list) {
      QVERIFY2(8 % k.layout.tp == 0,
               qPrintable(QString("TP %1 does not divide 8 query groups").arg(k.layout.tp)));
      QVERIFY(lattice::layout_errors(k.options, 64).empty());
      tps.insert(k.layout.tp);
    }
    QVERIFY2(tps.count(8), "TP 8 (one key/value head per rank) is a valid layout");
    // 64 heads would allow TP 16; 8 groups do not, and the layout rule says so.
    lattice::TrainOptions tp16 = base;
    tp16.model.tensor_model_parallel_size = 16;
    const std::vector<std::string> errors = lattice::layout_errors(tp16, 64);
    QVERIFY(std::find(errors.begin(), errors.end(),
                      "--tensor-model-parallel-size 16 does not divide --num-query-groups 8 "
                      "(each rank holds whole key/value heads)") != errors.end());
  }

  void plan_prints_the_architecture() {
    const Run r = lattice_cli(QStringList{"plan", "--device", "h100", "--devices-per-node", "8",
                                          "--tensor-model-parallel-size", "2",
                                          "--pipeline-model-parallel-size", "2", "--rotary-base",
                                          "500000", "--bf16"} +
                              flags_of(kLlama3_8B));
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    for (const char* part :
         {"architecture: GQA 8 groups, SwiGLU, RMSNorm ε 1e-05, RoPE θ 500000, untied head, "
          "no biases",
          "8.03 B parameters", "+ word embedding\n", "+ final RMSNorm, output layer (untied)"})
      QVERIFY2(r.out.contains(QString::fromUtf8(part)),
               qPrintable(QString::fromUtf8(part) + " missing from:\n" + r.out));
    const Run bad = lattice_cli(QStringList{"plan", "--tensor-model-parallel-size", "16"} +
                                flags_of(kLlama3_8B));
    QCOMPARE(bad.exit_code, 2);
    QVERIFY2(bad.err.contains("--tensor-model-parallel-size 16 does not divide "
                              "--num-query-groups 8"),
             qPrintable(bad.err));
  }
};

QTEST_GUILESS_MAIN(PlannerLlamaTest)
#include "test_planner_llama.moc"
