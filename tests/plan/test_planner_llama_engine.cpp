// The planner's Llama-family counts (issue 23) against the engine's own model, as
// tests/parallel/test_layout and tests/model/test_gpt_checks check GPT-2's: every stage's
// parameters and replicated parameters are its chunks' ParamLayout tensors, to the element,
// for every TP rank of TP 2 x PP 2 layouts (untied and tied heads, with and without biases);
// the activations are what GptModel takes for one micro-batch on the CPU device, to the byte.
// It passes once the model holds the Llama tensors and buffers (the planner follows the
// shapes issue 23 fixes; docs/design-notes.md#parallel-layout-and-the-planner).
#include <QtTest/QtTest>

#include "common/train_flags.h"
#include "device/cpu_device.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "model/recompute.h"
#include "parallel/model_chunks.h"

using namespace lattice;

namespace {

using lattice::testing::options;

// A small Llama: 8 heads of 8 in 2 query groups, SwiGLU, RMSNorm, RoPE, untied, no biases.
const QStringList kSmallLlama = {"--num-layers",
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
                                 "--norm-epsilon",
                                 "1e-6",
                                 "--position-embedding-type",
                                 "rope",
                                 "--untie-embeddings-and-output-weights",
                                 "--disable-bias-linear",
                                 "--vocab-size",
                                 "300",
                                 "--seq-length",
                                 "32",
                                 "--micro-batch-size",
                                 "2",
                                 "--global-batch-size",
                                 "2"};

// Each variant with the TP size its ParamLayout check runs at (whole key/value heads per rank:
// multi-query attention stays at TP 1).
void add_variants() {
  QTest::addColumn<QStringList>("flags");
  QTest::addColumn<int>("tp");
  QTest::newRow("llama untied") << kSmallLlama << 2;
  QTest::newRow("llama tied") << kSmallLlama +
                                     QStringList{"--untie-embeddings-and-output-weights=false"}
                              << 2;
  QTest::newRow("qwen2 qkv bias") << kSmallLlama + QStringList{"--add-qkv-bias"} << 2;
  QTest::newRow("mqa, biases, LayerNorm, learned positions")
      << kSmallLlama + QStringList{"--num-query-groups",
                                   "1",
                                   "--disable-bias-linear=false",
                                   "--normalization",
                                   "LayerNorm",
                                   "--norm-epsilon",
                                   "1e-5",
                                   "--position-embedding-type",
                                   "learned_absolute"}
      << 1;
}

}  // namespace

class PlannerLlamaEngineTest : public QObject {
  Q_OBJECT

 private slots:
  void stage_parameters_match_the_engines_param_layout_data() { add_variants(); }

  void stage_parameters_match_the_engines_param_layout() {
    QFETCH(QStringList, flags);
    QFETCH(int, tp);
    const TrainOptions o =
        options(flags + QStringList{"--tensor-model-parallel-size", QString::number(tp),
                                    "--pipeline-model-parallel-size", "2"});
    Result<ParallelLayout> l = make_layout(o, 2 * tp);
    QVERIFY2(l.is_ok(), l.status().message().c_str());
    const MemoryEstimate est = estimate_memory(o, *l);
    for (int p = 0; p < l->pp; p++)
      for (int t = 0; t < tp; t++) {
        const ModelShard shard = shard_of(*l, {t, 0, p}, 0, false);
        const ParamLayout chunk(o.model, shard);
        int64_t numel = 0, replicated = 0;
        for (const ParamTensor& tensor : chunk.tensors()) {
          numel += static_cast<int64_t>(tensor.numel);
          if (tensor.split_dim < 0) replicated += static_cast<int64_t>(tensor.numel);
        }
        QVERIFY2(est.stages[p].parameters == numel,
                 qPrintable(QString("pp %1 tp rank %2: ParamLayout holds %3 elements, the "
                                    "planner says %4")
                                .arg(p)
                                .arg(t)
                                .arg(numel)
                                .arg(est.stages[p].parameters)));
        // At TP 1 ParamLayout splits nothing, so what is replicated over TP ranks is not
        // visible in it; the multi-rank rows check that count.
        if (tp > 1)
          QVERIFY2(est.stages[p].replicated_parameters == replicated,
                   qPrintable(QString("pp %1 tp rank %2: %3 replicated elements, the planner "
                                      "says %4")
                                  .arg(p)
                                  .arg(t)
                                  .arg(replicated)
                                  .arg(est.stages[p].replicated_parameters)));
      }
  }

  // LoRA (Note [LoRA] in model/param_layout.h): the adapters in every stage's parameters and
  // replicated ones (to the element against ParamLayout, TP 2 x PP 2), the trained ones the
  // adapters alone, moments for them only; gradients still for the whole arena, as allocated.
  void lora_counts_match_the_engines_param_layout() {
    const QStringList lora = {"--lora-rank",
                              "4",
                              "--tensor-model-parallel-size",
                              "2",
                              "--pipeline-model-parallel-size",
                              "2"};
    const QStringList gpt2 = {"--num-layers",          "4",  "--hidden-size",      "64",
                              "--num-attention-heads", "8",  "--vocab-size",       "300",
                              "--seq-length",          "32", "--micro-batch-size", "2",
                              "--global-batch-size",   "2"};
    for (const QStringList& base : {kSmallLlama, gpt2})
      for (const QStringList& targets :
           {QStringList{}, QStringList{"--lora-target-modules", "linear_qkv,linear_fc2"}}) {
        const TrainOptions o = options(base + lora + targets);
        Result<ParallelLayout> l = make_layout(o, 4);
        QVERIFY2(l.is_ok(), l.status().message().c_str());
        const MemoryEstimate est = estimate_memory(o, *l);
        for (int p = 0; p < 2; p++)
          for (int t = 0; t < 2; t++) {
            const ParamLayout chunk(o.model, shard_of(*l, {t, 0, p}, 0, false));
            int64_t numel = 0, replicated = 0;
            for (const ParamTensor& tensor : chunk.tensors()) {
              numel += static_cast<int64_t>(tensor.numel);
              if (tensor.split_dim < 0) replicated += static_cast<int64_t>(tensor.numel);
            }
            const StageEstimate& st = est.stages[p];
            const QString where = QString("%1 targets '%2' pp %3 tp %4")
                                      .arg(base == gpt2 ? "gpt2" : "llama")
                                      .arg(targets.join(' '))
                                      .arg(p)
                                      .arg(t);
            QVERIFY2(st.parameters == numel,
                     qPrintable(where +
                                QString(": planner %1, layout %2").arg(st.parameters).arg(numel)));
            QVERIFY2(st.replicated_parameters == replicated, qPrintable(where + " replicated"));
            QVERIFY2(st.trainable_parameters == static_cast<int64_t>(chunk.trainable_numel()),
                     qPrintable(where + QString(": trainable %1, layout %2")
                                            .arg(st.trainable_parameters)
                                            .arg(chunk.trainable_numel())));
            QVERIFY(st.trainable_parameters > 0 && st.trainable_parameters < numel / 4);
            QCOMPARE(st.optimizer_bytes, static_cast<size_t>(st.trainable_parameters) * 8);
            // The gradient arena: the adapters alone (Note [LoRA] in model/param_layout.h).
            QCOMPARE(st.grad_bytes, chunk.grad_numel() * 4);
            QVERIFY(chunk.grad_numel() < static_cast<size_t>(numel) / 4);
          }
      }
  }

  void planner_counts_the_activations_the_model_takes_data() { add_variants(); }

  // One micro-batch in flight on each of two pipeline stages, fp32 and bf16, with and without
  // recomputation (TP 1: a model with TP > 1 needs its communicator).
  void planner_counts_the_activations_the_model_takes() {
    QFETCH(QStringList, flags);
    const QStringList recomputes[] = {{},
                                      {"--recompute-granularity", "selective"},
                                      {"--recompute-granularity", "full", "--recompute-method",
                                       "uniform", "--recompute-num-layers", "1"}};
    for (const char* precision : {"", "--bf16"})
      for (const QStringList& recompute : recomputes) {
        QStringList all = flags + QStringList{"--pipeline-model-parallel-size", "2"} + recompute;
        if (precision[0] != '\0') all << precision;
        const TrainOptions o = options(all);
        const ParallelLayout layout = *make_layout(o, 2);
        const MemoryEstimate est = estimate_memory(o, layout);
        for (int p = 0; p < 2; p++) {
          const ModelShard shard = shard_of(layout, {0, 0, p}, 0, false);
          const ParallelOptions& par = o.parallel;
          const RecomputePlan plan =
              RecomputePlan::make(par.recompute_granularity, par.recompute_method,
                                  par.recompute_num_layers, shard.num_layers(o.model));
          CpuDevice device;
          auto taken = [&]<typename A>() -> size_t {
            auto model = GptModel<A>::create(o.model, 2, device, shard, nullptr, plan);
            if (!model) return 0;
            auto acts = (*model)->new_activations();
            if (!acts) return 0;
            return device.usage(MemoryCategory::kActivations).current;
          };
          const size_t bytes = o.bf16 ? taken.operator()<bf16>() : taken.operator()<float>();
          QVERIFY2(bytes == est.stages[p].activation_bytes,
                   qPrintable(QString("%1, pp rank %2: the model takes %3 bytes, the planner "
                                      "says %4")
                                  .arg(all.join(' '))
                                  .arg(p)
                                  .arg(bytes)
                                  .arg(est.stages[p].activation_bytes)));
        }
      }
  }
};

QTEST_GUILESS_MAIN(PlannerLlamaEngineTest)
#include "test_planner_llama_engine.moc"
