// What each backend refuses, checked without a device in every build (label unit): the rules
// every device shares (layout_errors, the recomputation rules) and then the backend's limits
// (capability_errors over cpu_capabilities() / cuda_capabilities(), docs/one-engine.md 3.9),
// one sentence each naming the flag (docs/gpu.md#scope). On CUDA, tensor parallelism is
// accepted when it splits heads and the MLP evenly (docs/gpu.md#tensor-parallelism), pipeline
// parallelism when it splits the layers evenly, interleaved or not
// (docs/gpu.md#pipeline-parallelism), the distributed optimizer with any data-parallel size
// (docs/gpu.md#distributed-optimizer), also with pipeline stages, and dropout. Sequence
// parallelism is accepted with TP > 1 and a sequence length TP divides, and a misfit is named
// in the layout's words (docs/gpu.md#sequence-parallelism). Recomputation, selective and full,
// is accepted with the CPU options' rules (docs/gpu.md#recomputation). How train() routes
// --device runs is tests/train/test_gpu_options.cpp's.
#include <QtTest/QtTest>

#include "common/tiny_model.h"
#include "device/backends.h"
#include "device/capabilities.h"
#include "lattice/layout.h"
#include "lattice/train_options.h"

using namespace lattice;

namespace {

TrainOptions supported() {
  return testing::cuda_ready_options();
}

// Why a run of `o` on `world` ranks of CUDA is refused, in the order train() checks
// (device/backends.h refusals): the shared rules first, then the backend's limits.
std::vector<std::string> on_cuda(const TrainOptions& o, int world) {
  return refusals(o, world, cuda_capabilities());
}

// The sentences one per line, for QCOMPARE (a failure prints them all).
QString sentences(const std::vector<std::string>& errors) {
  QString text;
  for (const std::string& e : errors) {
    if (!text.isEmpty()) text += '\n';
    text += QString::fromStdString(e);
  }
  return text;
}

bool names(const std::vector<std::string>& errors, const std::string& text) {
  for (const std::string& e : errors)
    if (e.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

class CapabilitiesTest : public QObject {
  Q_OBJECT
 private slots:
  void a_plain_data_parallel_run_is_supported() {
    QVERIFY(on_cuda(supported(), 1).empty());
    QVERIFY(on_cuda(supported(), 2).empty());  // 2 micro-batches over DP 2
    // Checkpoints are staged through the host (checkpoint/chunk_state.h).
    TrainOptions checkpoints = supported();
    checkpoints.save = "/tmp/x";
    checkpoints.load = "/tmp/y";
    checkpoints.save_hf = "/tmp/z.safetensors";
    QVERIFY(on_cuda(checkpoints, 1).empty());
  }

  void tensor_parallelism_that_splits_heads_and_mlp_evenly_is_supported() {
    TrainOptions o = supported();
    o.model.tensor_model_parallel_size = 2;  // 1 head and 256 MLP columns per rank
    QVERIFY(on_cuda(o, 2).empty());          // TP 2
    QVERIFY(on_cuda(o, 4).empty());          // TP 2 x DP 2: 2 micro-batches over DP 2
    o.save = "/tmp/x";                       // checkpoints of TP shards are the CPU engine's
    o.save_hf = "/tmp/z.safetensors";
    QVERIFY(on_cuda(o, 2).empty());
  }

  void the_distributed_optimizer_is_supported() {
    TrainOptions o = supported();
    o.parallel.use_distributed_optimizer = true;
    o.parallel.ddp_bucket_size = 1000;
    QVERIFY(on_cuda(o, 2).empty());  // DP 2
    QVERIFY(on_cuda(o, 1).empty());  // DP 1: nothing to shard, as on the CPU
    o.model.tensor_model_parallel_size = 2;
    o.save = "/tmp/x";
    QVERIFY(on_cuda(o, 4).empty());  // TP 2 x DP 2, checkpoints
    // Combined with what the GPU trainer lacks, that is named (and the optimizer is not).
    o.fp64 = true;
    const std::vector<std::string> e = on_cuda(o, 4);
    QVERIFY(names(e, "--fp64"));
    QVERIFY(!names(e, "--use-distributed-optimizer"));
  }

  void sequence_parallelism_with_tensor_parallelism_is_supported() {
    TrainOptions o = supported();
    o.model.tensor_model_parallel_size = 2;  // 32 of the 64 positions per rank
    o.parallel.sequence_parallel = true;
    QVERIFY(on_cuda(o, 2).empty());  // TP 2
    QVERIFY(on_cuda(o, 4).empty());  // TP 2 x DP 2
    o.parallel.use_distributed_optimizer = true;
    o.save = "/tmp/x";  // the checkpoint layout does not change with it
    QVERIFY(on_cuda(o, 4).empty());
    TrainOptions pp = supported();
    pp.model.tensor_model_parallel_size = 2;
    pp.parallel.pipeline_model_parallel_size = 2;
    pp.parallel.sequence_parallel = true;
    QVERIFY(on_cuda(pp, 4).empty());  // TP 2 x PP 2
  }

  void sequence_parallel_misfits_are_named() {
    TrainOptions o = supported();
    o.parallel.sequence_parallel = true;  // TP 1: nothing to split over, as the CPU refuses
    std::vector<std::string> e = on_cuda(o, 1);
    QVERIFY2(e.size() == 1 && names(e, "--sequence-parallel") &&
                 names(e, "--tensor-model-parallel-size > 1"),
             e.empty() ? "nothing named" : e[0].c_str());
    o.model.tensor_model_parallel_size = 2;
    o.model.seq_length = 63;
    e = on_cuda(o, 2);
    QVERIFY2(e.size() == 1 && names(e,
                                    "--tensor-model-parallel-size 2 does not divide "
                                    "--seq-length 63, which --sequence-parallel splits"),
             e.empty() ? "nothing named" : e[0].c_str());
  }

  void tensor_parallel_sizes_that_do_not_fit_are_named() {
    TrainOptions o = supported();
    o.model.tensor_model_parallel_size = 4;  // 2 heads
    QVERIFY(names(on_cuda(o, 4),
                  "--tensor-model-parallel-size 4 does not divide --num-attention-heads 2"));
    o.model.tensor_model_parallel_size = 2;
    o.model.ffn_hidden_size = 520;  // 260 columns per rank: the GELU epilogue needs % 8
    QVERIFY(names(on_cuda(o, 2), "--ffn-hidden-size / --tensor-model-parallel-size 2 % 8"));
    o.model.ffn_hidden_size = 515;
    QVERIFY(names(on_cuda(o, 2),
                  "--tensor-model-parallel-size 2 does not divide the MLP hidden size 515"));
    o.model.ffn_hidden_size = 0;
    QVERIFY(names(on_cuda(o, 3),
                  "world size 3 (--world-size, or the ranks started) is not a multiple of "
                  "--tensor-model-parallel-size 2 x --pipeline-model-parallel-size 1 = 2"));
    // World 8 at TP 2 is DP 4: the 2 micro-batches of the global batch do not split over it.
    QVERIFY(names(on_cuda(o, 8), "--global-batch-size"));
  }

  void dropout_is_supported() {
    TrainOptions o = supported();
    o.model.hidden_dropout = 0.1f;
    o.model.attention_dropout = 0.1f;
    const std::vector<std::string> e = on_cuda(o, 1);
    QVERIFY2(e.empty(), e.empty() ? "" : e.front().c_str());
  }

  void pipeline_parallelism_over_even_stages_is_supported() {
    TrainOptions o = supported();
    o.parallel.pipeline_model_parallel_size = 2;  // one layer per stage
    QVERIFY(on_cuda(o, 2).empty());               // PP 2
    QVERIFY(on_cuda(o, 4).empty());               // PP 2 x DP 2
    o.model.tensor_model_parallel_size = 2;
    QVERIFY(on_cuda(o, 4).empty());  // TP 2 x PP 2
    o.save = "/tmp/x";               // each stage's shard in the CPU engine's format
    o.load = "/tmp/y";
    o.save_hf = "/tmp/z.safetensors";
    QVERIFY(on_cuda(o, 4).empty());
    // Interleaved: 4 layers, two chunks of one layer per stage, 2 micro-batches at PP 2.
    o.model.num_layers = 4;
    o.parallel.num_layers_per_virtual_pipeline_stage = 1;
    QVERIFY(on_cuda(o, 4).empty());
    // Uneven: one layer on the first stage, three on the second.
    o.parallel.num_layers_per_virtual_pipeline_stage = 0;
    o.parallel.decoder_first_pipeline_num_layers = 1;
    QVERIFY(on_cuda(o, 4).empty());
  }

  void pipeline_layouts_that_do_not_fit_are_named() {
    TrainOptions o = supported();
    o.parallel.pipeline_model_parallel_size = 4;  // 2 layers
    QVERIFY(
        names(on_cuda(o, 4), "--pipeline-model-parallel-size 4 does not divide --num-layers 2"));
    o.parallel.pipeline_model_parallel_size = 2;
    QVERIFY(names(on_cuda(o, 3),
                  "world size 3 (--world-size, or the ranks started) is not a multiple of "
                  "--tensor-model-parallel-size 1 x --pipeline-model-parallel-size 2 = 2"));
    // World 8 at PP 2 is DP 4: the 2 micro-batches of the global batch do not split over it.
    QVERIFY(names(on_cuda(o, 8), "--global-batch-size"));
    o.model.num_layers = 4;
    o.parallel.num_layers_per_virtual_pipeline_stage = 3;  // 2 layers per stage
    QVERIFY(names(on_cuda(o, 2),
                  "--num-layers-per-virtual-pipeline-stage 3 does not divide the 2 layers"));
    o.parallel.num_layers_per_virtual_pipeline_stage = 1;
    o.global_batch_size = 6;  // 3 micro-batches: not a multiple of PP 2
    QVERIFY(names(on_cuda(o, 2),
                  "--num-layers-per-virtual-pipeline-stage (interleaved 1F1B) needs the 3 "
                  "micro-batches per data-parallel rank (--global-batch-size 6 / "
                  "(--micro-batch-size 2 x data-parallel size 1)) to be a multiple of "
                  "--pipeline-model-parallel-size 2"));
    o.global_batch_size = 4;
    o.parallel.pipeline_model_parallel_size = 1;
    QVERIFY(names(on_cuda(o, 1), "needs --pipeline-model-parallel-size > 1"));
    o.parallel.pipeline_model_parallel_size = 2;
    // Uneven splits follow the CPU layout's rules, in its words.
    o.parallel.decoder_first_pipeline_num_layers = 4;  // nothing left for the second stage
    QVERIFY(names(on_cuda(o, 2), "--decoder-first-pipeline-num-layers 4"));
    o.parallel.decoder_first_pipeline_num_layers = 1;  // and interleaving
    QVERIFY(
        names(on_cuda(o, 2), "cannot be combined with --num-layers-per-virtual-pipeline-stage"));
    o.parallel.num_layers_per_virtual_pipeline_stage = 0;
    o.parallel.decoder_first_pipeline_num_layers = 0;
    o.parallel.decoder_last_pipeline_num_layers = 5;  // more than --num-layers 4
    QVERIFY(names(on_cuda(o, 2), "--decoder-last-pipeline-num-layers 5"));
  }

  // Each chunk's optimizer holds its own shard of the CPU engine's buckets of that chunk.
  void the_distributed_optimizer_with_pipeline_stages_is_supported() {
    TrainOptions o = supported();
    o.parallel.use_distributed_optimizer = true;
    o.parallel.pipeline_model_parallel_size = 2;
    QVERIFY(on_cuda(o, 4).empty());  // PP 2 x DP 2
    o.model.num_layers = 4;
    o.parallel.num_layers_per_virtual_pipeline_stage = 1;
    o.global_batch_size = 8;  // two micro-batches per data-parallel rank
    o.model.hidden_dropout = 0.1f;
    o.model.attention_dropout = 0.1f;
    const std::vector<std::string> e = on_cuda(o, 4);  // interleaved, DP 2
    QVERIFY2(e.empty(), e.empty() ? "" : e.front().c_str());
  }

  void selective_and_full_recomputation_are_supported() {
    TrainOptions o = supported();
    o.parallel.recompute_granularity = "selective";
    QVERIFY(on_cuda(o, 1).empty());
    o.parallel.recompute_granularity = "full";
    o.parallel.recompute_num_layers = 1;
    for (const char* method : {"uniform", "block"}) {
      o.parallel.recompute_method = method;
      const std::vector<std::string> e = on_cuda(o, 1);
      QVERIFY2(e.empty(), e.empty() ? "" : e.front().c_str());
    }
    // With tensor and (interleaved) pipeline parallelism and dropout.
    o.model.tensor_model_parallel_size = 2;
    o.model.num_layers = 4;
    o.parallel.pipeline_model_parallel_size = 2;
    o.parallel.num_layers_per_virtual_pipeline_stage = 1;
    o.global_batch_size = 8;
    o.model.hidden_dropout = o.model.attention_dropout = 0.1f;
    const std::vector<std::string> e = on_cuda(o, 8);
    QVERIFY2(e.empty(), e.empty() ? "" : e.front().c_str());
  }

  // The CPU options' rules, in their words (train() on the GPU path checks them too).
  void bad_recompute_combinations_are_named() {
    TrainOptions o = supported();
    o.parallel.recompute_granularity = "everything";
    QVERIFY(names(on_cuda(o, 1), "--recompute-granularity 'everything'"));
    o.parallel.recompute_granularity = "full";
    o.parallel.recompute_num_layers = 1;
    QVERIFY(names(on_cuda(o, 1), "needs --recompute-method uniform or block"));
    o.parallel.recompute_method = "diagonal";
    QVERIFY(names(on_cuda(o, 1), "--recompute-method 'diagonal'"));
    o.parallel.recompute_method = "uniform";
    o.parallel.recompute_num_layers = 0;
    QVERIFY(names(on_cuda(o, 1), "a positive --recompute-num-layers"));
    o.parallel.recompute_granularity = "selective";
    QVERIFY(
        names(on_cuda(o, 1), "--recompute-method applies only with --recompute-granularity full"));
  }

  void each_unsupported_option_is_named() {
    TrainOptions o = supported();
    o.parallel.sequence_parallel = true;
    o.fp64 = true;
    o.model.num_attention_heads = 4;  // head size 32
    const std::vector<std::string> e = on_cuda(o, 1);
    QVERIFY(names(e, "--sequence-parallel"));
    QVERIFY(names(e, "--fp64"));
    QVERIFY(names(e, "head size"));
    QVERIFY(names(on_cuda(supported(), 3), "--global-batch-size"));
  }

  // The backend's limits alone, each in full: the sentences `lattice train` prints.
  void each_cuda_limit_is_one_sentence() {
    const Capabilities cuda = cuda_capabilities();
    TrainOptions o = supported();
    QCOMPARE(sentences(capability_errors(o, cuda)), QString());
    o.fp64 = true;
    QCOMPARE(sentences(capability_errors(o, cuda)),
             QString("--fp64 is not supported by the GPU trainer yet (docs/gpu.md#scope)"));
    o = supported();
    o.model.num_attention_heads = 4;  // head size 32
    QCOMPARE(sentences(capability_errors(o, cuda)),
             QString("head size --hidden-size / --num-attention-heads = 32: the GPU attention "
                     "kernel takes 64 or 128"));
    o = supported();
    o.model.tensor_model_parallel_size = 2;
    o.model.ffn_hidden_size = 520;  // 260 columns per rank
    QCOMPARE(sentences(capability_errors(o, cuda)),
             QString("the GPU MLP needs --ffn-hidden-size / --tensor-model-parallel-size 2 % 8 "
                     "== 0"));
    o.model.tensor_model_parallel_size = 1;
    o.model.ffn_hidden_size = 260;
    QCOMPARE(sentences(capability_errors(o, cuda)),
             QString("the GPU MLP needs --ffn-hidden-size % 8 == 0"));
    o = supported();  // 16-bit compute is what the GPU offers
    o.bf16 = true;
    QCOMPARE(sentences(capability_errors(o, cuda)), QString());
    o.bf16 = false;
    o.fp16 = true;
    QCOMPARE(sentences(capability_errors(o, cuda)), QString());
  }

  // capability_errors leaves the shared rules to layout_errors, so a misfit is named once.
  void a_layout_misfit_is_named_once() {
    TrainOptions o = supported();
    o.model.tensor_model_parallel_size = 4;  // 2 heads; 512 MLP columns split as 128
    const std::vector<std::string> e = on_cuda(o, 4);
    QCOMPARE(sentences(e), QString("--tensor-model-parallel-size 4 does not divide "
                                   "--num-attention-heads 2"));
    o.model.tensor_model_parallel_size = 2;
    o.model.ffn_hidden_size = 515;  // TP 2 does not divide it: no GPU MLP sentence on top
    QVERIFY(capability_errors(o, cuda_capabilities()).empty());
    QCOMPARE(sentences(on_cuda(o, 2)),
             QString("--tensor-model-parallel-size 2 does not divide the MLP hidden size 515 "
                     "(--ffn-hidden-size)"));
    // Without --ffn-hidden-size the MLP is 4 x --hidden-size, and the sentence says so (the
    // GPU trainer used to name --ffn-hidden-size here too).
    o.model.ffn_hidden_size = 0;
    o.model.tensor_model_parallel_size = 3;  // 512 columns, 2 heads
    QVERIFY(names(on_cuda(o, 3),
                  "--tensor-model-parallel-size 3 does not divide the MLP hidden size 512 "
                  "(4 x --hidden-size)"));
  }

  // A CPU without bf16 GEMMs (kernels::bf16_gemm() none; this machine's own answer is
  // cpu_capabilities()'s): the sentence says why and names both ways out.
  void bf16_on_the_cpu_names_the_gpu() {
    TrainOptions o = supported();
    o.device = "cpu";
    o.bf16 = true;
    Capabilities without = cpu_capabilities();
    without.bf16 = false;
    const QString s = sentences(capability_errors(o, without));
    QVERIFY2(s.startsWith("--bf16 on the CPU needs bf16 GEMMs, and "), qPrintable(s));
    QVERIFY2(s.contains(": add --device cuda (the lattice-gpu trainer, built with CUDA), or set "
                        "LATTICE_CPU_BF16_GEMM=widened for fp32 GEMMs on widened bf16 copies "
                        "(slower than fp32); --fp16 on the CPU runs fp32 arithmetic with the "
                        "loss scaler"),
             qPrintable(s));
    // Where the CPU has them, --bf16 is no refusal.
    Capabilities with = cpu_capabilities();
    with.bf16 = true;
    QCOMPARE(sentences(capability_errors(o, with)), QString());
    // --fp16 on the CPU: fp32 arithmetic with the loss scaler, not refused.
    o.bf16 = false;
    o.fp16 = true;
    QCOMPARE(sentences(capability_errors(o, without)), QString());
  }

  void an_fp64_run_is_fine_on_the_cpu_and_refused_on_cuda() {
    TrainOptions o = supported();
    o.fp64 = true;
    QCOMPARE(sentences(refusals(o, 1, cpu_capabilities())), QString());
    QCOMPARE(sentences(on_cuda(o, 1)),
             QString("--fp64 is not supported by the GPU trainer yet (docs/gpu.md#scope)"));
  }

  // MoE layers (docs/models.md "Mixture of experts"): the CPU and CUDA in every compute type;
  // a backend without them, or without them in 16 bits, refuses them.
  void moe_layers_run_on_the_cpu_and_cuda_in_every_compute_type() {
    TrainOptions o = supported();
    o.model.num_experts = 4;
    QCOMPARE(sentences(capability_errors(o, cpu_capabilities())), QString());
    QCOMPARE(sentences(capability_errors(o, cuda_capabilities())), QString());
    Capabilities without = cuda_capabilities();
    without.moe = false;
    QCOMPARE(sentences(capability_errors(o, without)),
             QString("MoE layers (--num-experts) are not yet implemented on CUDA: train them on "
                     "the CPU (--device cpu)"));
    o.fp16 = true;
    QCOMPARE(sentences(capability_errors(o, cpu_capabilities())), QString());
    QCOMPARE(sentences(capability_errors(o, cuda_capabilities())), QString());
    Capabilities fp32_moe_only = cuda_capabilities();
    fp32_moe_only.moe_16bit = false;
    QCOMPARE(sentences(capability_errors(o, fp32_moe_only)),
             QString("MoE layers (--num-experts) run in fp32 and fp64 on the cuda: drop --fp16 / "
                     "--bf16"));
    o.fp16 = false;
    o.bf16 = true;
    QCOMPARE(sentences(capability_errors(o, cuda_capabilities())), QString());
  }

  // The CPU takes any head size and any MLP slice.
  void the_cpu_has_no_shape_limits() {
    TrainOptions o = supported();
    o.model.num_attention_heads = 4;  // head size 32
    o.model.ffn_hidden_size = 260;
    QCOMPARE(sentences(capability_errors(o, cpu_capabilities())), QString());
  }
};

QTEST_APPLESS_MAIN(CapabilitiesTest)
#include "test_capabilities.moc"
