// MoE layers (Note [MoE layer] in model/gpt_moe.cpp) beyond the PyTorch parity of
// tests/train/test_moe_parity: every parameter's fp64 gradient (router, experts, the dense rest)
// by finite differences of the trained loss (cross-entropy + load-balancing loss), with top-2
// routing, token dropping and full recomputation; the layout's Megatron-core names and counts
// against ModelConfig::num_parameters and the planner's per-stage parameters (PP 2, MoE on every
// other layer); the flags' sentences; the counts and aux losses copied to the host on a device
// whose memory is not host memory; and the loss of the CPU's bf16 and fp16 lists against fp32.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/grad_check.h"
#include "common/tiny_model.h"
#include "common/train_flags.h"
#include "device/cpu_device.h"
#include "lattice/layout.h"
#include "lattice/plan.h"
#include "lattice/train_options.h"
#include "model/gpt.h"
#include "parallel/model_chunks.h"

using namespace lattice;

namespace {

ModelConfig moe_config(bool swiglu) {
  ModelConfig c = testing::tiny_config(2, 8, 2, 5, 13);
  c.ffn_hidden_size = 12;
  c.moe_ffn_hidden_size = 6;
  c.make_vocab_size_divisible_by = 8;
  c.init_method_std = 0.3f;
  c.num_experts = 4;
  c.moe_router_topk = 2;
  c.moe_aux_loss_coeff = 0.3f;  // large, so its gradient is a visible part of the router's
  if (swiglu) {
    c.swiglu = true;
    c.normalization = "RMSNorm";
    c.position_embedding_type = "rope";
    c.disable_bias_linear = true;
  }
  return c;
}

// Central differences of the mean token loss + the load-balancing loss (what backward's
// gradient is of, with grad_scale 1/N) against backward, for every element.
std::string gradient_error(const ModelConfig& c, const RecomputePlan& recompute, int* dropped) {
  const int B = 2, N = B * c.seq_length;
  CpuDevice device;
  auto made = GptModel<double>::create(c, B, device, ModelShard{}, nullptr, recompute);
  if (!made) return made.status().message();
  GptModel<double>& model = **made;
  auto acts = model.new_activations();
  if (!acts) return acts.status().message();
  if (!model.init_weights(7)) return "init_weights failed";
  const std::vector<double> noise = testing::random_vector(model.arena_size(), 8, 0.1);
  std::vector<double> params(model.params(), model.params() + model.arena_size());
  for (size_t i = 0; i < params.size(); i++) params[i] += noise[i];
  const std::vector<int32_t> tokens = {1, 5, 12, 3, 3, 0, 7, 7, 2, 11};
  const std::vector<int32_t> targets = {5, 12, 3, 3, 0, 7, 7, 2, 11, 12};
  model.upload(params.data());
  model.zero_grads();
  model.forward(**acts, tokens.data(), targets.data(), 0, 1.0f / N);
  if (model.moe_aux_loss() <= 0) return "no load-balancing loss";
  *dropped = 0;
  for (int l = 0; l < c.num_layers; l++)
    if (!recompute.recomputed(l))
      for (int i = 0; i < N * c.moe_router_topk; i++)
        *dropped += (*acts)->layers[l].route_slot[i] < 0;
  model.backward(**acts);
  const std::vector<double> analytic(model.grads(), model.grads() + model.arena_size());
  auto loss = [&] {
    model.upload(params.data());
    const double ce = model.forward(**acts, tokens.data(), targets.data(), 0, 0.0f);
    return ce + model.moe_aux_loss();
  };
  int checked = 0;
  for (const ParamTensor& t : model.layout().tensors()) {
    std::vector<size_t> indices;
    for (size_t i = 0; i < t.numel; i++) indices.push_back(t.offset + i);
    const std::string err =
        testing::check_gradient(t.name, params, analytic, loss, 1e-5, 1e-8, indices, 1e-5);
    if (!err.empty()) return err;
    checked += static_cast<int>(t.numel);
  }
  return checked > 500 ? "" : "too few elements checked";
}

// One forward and backward of GptModel<A> on the CPU device from init_weights(7) of the fp32
// model: the token loss, the load-balancing loss and the gradients (unscaled), in float.
struct Step {
  std::string type, error;
  double loss = 0, aux = 0;
  std::vector<float> grads;
  std::vector<int32_t> routes;  // every MoE layer's (N, k) experts, in layer order
};
template <typename A>
Step one_step(const ModelConfig& c, float loss_scale) {
  Step s;
  s.type = std::is_same_v<A, float> ? "fp32" : std::is_same_v<A, bf16> ? "bf16" : "fp16";
  const int B = 2, N = B * c.seq_length;
  GptModel<float> init(c, B);
  if (!init.init_weights(7)) return s.error = "init_weights failed", s;
  CpuDevice device;
  auto made = GptModel<A>::create(c, B, device);
  if (!made) return s.error = made.status().message(), s;
  GptModel<A>& model = **made;
  auto acts = model.new_activations();
  if (!acts) return s.error = acts.status().message(), s;
  model.upload(init.params());
  model.zero_grads();
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; i++) {
    tokens[i] = (7 * i + 3) % c.vocab_size;
    targets[i] = (5 * i + 1) % c.vocab_size;
  }
  s.loss = model.forward(**acts, tokens.data(), targets.data(), 0, loss_scale / N);
  s.aux = model.moe_aux_loss();
  for (int l = 0; l < c.num_layers; l++)
    if (c.is_moe_layer(l))
      s.routes.insert(s.routes.end(), (*acts)->layers[l].route,
                      (*acts)->layers[l].route + N * c.moe_router_topk);
  model.backward(**acts);
  if (Status st = device.synchronize(device.compute()); !st) return s.error = st.message(), s;
  s.grads.assign(model.grads(), model.grads() + model.arena_size());
  for (float& g : s.grads) g /= loss_scale;  // a power of two: exact
  return s;
}

using lattice::testing::options;

bool has_error(const ModelConfig& c, const std::string& text) {
  for (const std::string& e : c.validate())
    if (e.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

class MoeTest : public QObject {
  Q_OBJECT

 private slots:
  void every_fp64_gradient_matches_finite_differences_gelu_experts_with_biases() {
    int dropped = 0;
    const std::string err = gradient_error(moe_config(false), {}, &dropped);
    QVERIFY2(err.empty(), err.c_str());
  }

  void every_fp64_gradient_matches_finite_differences_swiglu_experts() {
    int dropped = 0;
    const std::string err = gradient_error(moe_config(true), {}, &dropped);
    QVERIFY2(err.empty(), err.c_str());
  }

  // Capacity ceil(10 x 2 / 4 x 0.5) = 3 routes an expert of the 20: some are dropped.
  void every_fp64_gradient_matches_finite_differences_with_token_dropping() {
    ModelConfig c = moe_config(true);
    c.moe_expert_capacity_factor = 0.5f;
    int dropped = 0;
    const std::string err = gradient_error(c, {}, &dropped);
    QVERIFY2(err.empty(), err.c_str());
    QVERIFY2(dropped > 0, "capacity 3 of 20 routes dropped none");
  }

  // Full recomputation re-runs the routing and the experts in backward.
  void every_fp64_gradient_matches_finite_differences_under_full_recompute() {
    ModelConfig c = moe_config(false);
    c.moe_layer_freq = 2;  // layer 0 MoE, layer 1 dense: both share the recompute scratch
    int dropped = 0;
    const std::string err =
        gradient_error(c, RecomputePlan::make("full", "uniform", 2, 2), &dropped);
    QVERIFY2(err.empty(), err.c_str());
  }

  void layout_has_megatron_names_and_counts() {
    ModelConfig c = moe_config(false);
    c.num_layers = 3;
    c.moe_layer_freq = 2;  // layers 0 and 2
    const ParamLayout layout(c);
    QVERIFY(layout.is_moe(0) && !layout.is_moe(1) && layout.is_moe(2));
    QVERIFY(layout.find("decoder.layers.0.mlp.router.weight"));
    QCOMPARE(layout.find("decoder.layers.0.mlp.router.weight")->global_shape,
             (std::vector<int64_t>{4, 8}));
    const ParamTensor* fc1 =
        layout.find("decoder.layers.2.mlp.experts.local_experts.3.linear_fc1.weight");
    QVERIFY(fc1);
    QCOMPARE(fc1->global_shape, (std::vector<int64_t>{6, 8}));
    QVERIFY(layout.find("decoder.layers.2.mlp.experts.local_experts.3.linear_fc2.bias"));
    QVERIFY(layout.find("decoder.layers.1.mlp.linear_fc1.weight"));
    QVERIFY(!layout.find("decoder.layers.0.mlp.linear_fc1.weight"));
    int64_t numel = 0;
    for (const ParamTensor& t : layout.tensors()) numel += static_cast<int64_t>(t.numel);
    QCOMPARE(numel, c.num_parameters());
    // Expert e's pointers are its tensors.
    std::vector<float> arena(layout.total_numel());
    const ExpertParams<float> x = layout.expert(arena.data(), 2, 3);
    QCOMPARE(x.fc1_w - arena.data(), static_cast<ptrdiff_t>(fc1->offset));
    QCOMPARE(
        x.fc2_b - arena.data(),
        static_cast<ptrdiff_t>(
            layout.find("decoder.layers.2.mlp.experts.local_experts.3.linear_fc2.bias")->offset));
  }

  // Tensor parallelism (Note [MoE layout]): each expert split as the dense MLP (SwiGLU's gate
  // and up each over TP), the router and fc2's bias replicated with whole gradients.
  void layout_splits_experts_over_tp_as_the_dense_mlp() {
    for (const bool swiglu : {false, true}) {
      ModelConfig c = moe_config(swiglu);
      c.disable_bias_linear = false;
      ModelShard shard;
      shard.tp_size = 2;
      shard.tp_rank = 1;
      shard.sequence_parallel = true;
      const ParamLayout layout(c, shard);
      const std::string x = "decoder.layers.1.mlp.experts.local_experts.2.";
      const ParamTensor* fc1 = layout.find(x + "linear_fc1.weight");
      const ParamTensor* fc1_b = layout.find(x + "linear_fc1.bias");
      const ParamTensor* fc2 = layout.find(x + "linear_fc2.weight");
      const ParamTensor* fc2_b = layout.find(x + "linear_fc2.bias");
      const ParamTensor* router = layout.find("decoder.layers.1.mlp.router.weight");
      QVERIFY(fc1 && fc1_b && fc2 && fc2_b && router);
      QCOMPARE(fc1->shape, swiglu ? (std::vector<int64_t>{2, 3, 8}) : (std::vector<int64_t>{3, 8}));
      QCOMPARE(fc1->split_dim, swiglu ? 1 : 0);
      QCOMPARE(fc1->split_begin, int64_t{3});
      QCOMPARE(fc1_b->shape, swiglu ? (std::vector<int64_t>{2, 3}) : (std::vector<int64_t>{3}));
      QCOMPARE(fc2->shape, (std::vector<int64_t>{8, 3}));
      QCOMPARE(fc2->split_dim, 1);
      for (const ParamTensor* t : {router, fc2_b}) {
        QCOMPARE(t->split_dim, -1);
        QVERIFY(!t->counts_in_norm && !t->sequence_parallel_grad);
      }
    }
  }

  // The planner's weights, gradients and optimizer state follow from its per-stage parameter
  // counts: those must be the stage's ParamLayout elements (the arena the model allocates).
  void planner_stage_parameters_are_the_moe_layout() {
    const QStringList flags = {"--num-layers",
                               "4",
                               "--hidden-size",
                               "32",
                               "--num-attention-heads",
                               "4",
                               "--ffn-hidden-size",
                               "64",
                               "--seq-length",
                               "16",
                               "--vocab-size",
                               "300",
                               "--micro-batch-size",
                               "2",
                               "--global-batch-size",
                               "2",
                               "--num-experts",
                               "4",
                               "--moe-ffn-hidden-size",
                               "48",
                               "--moe-layer-freq",
                               "2",
                               "--pipeline-model-parallel-size",
                               "2"};
    for (const QStringList& extra :
         {QStringList{}, QStringList{"--swiglu", "--disable-bias-linear"}}) {
      const TrainOptions o = options(flags + extra);
      Result<ParallelLayout> l = make_layout(o, 2);
      QVERIFY2(l.is_ok(), l.status().message().c_str());
      const MemoryEstimate est = estimate_memory(o, *l);
      for (int p = 0; p < 2; p++) {
        const ParamLayout chunk(o.model, shard_of(*l, {0, 0, p}, 0, false));
        int64_t numel = 0;
        for (const ParamTensor& t : chunk.tensors()) numel += static_cast<int64_t>(t.numel);
        QVERIFY2(est.stages[p].parameters == numel,
                 qPrintable(QString("%1 pp %2: ParamLayout %3 elements, planner %4")
                                .arg(extra.join(' '))
                                .arg(p)
                                .arg(numel)
                                .arg(est.stages[p].parameters)));
        QCOMPARE(est.stages[p].weight_bytes, static_cast<size_t>(numel) * 4);
        QCOMPARE(est.stages[p].grad_bytes, static_cast<size_t>(numel) * 4);
        QCOMPARE(est.stages[p].optimizer_bytes, static_cast<size_t>(numel) * 8);
      }
    }
  }

  void flags_are_validated_with_sentences_naming_them() {
    ModelConfig c = moe_config(false);
    QVERIFY(c.validate().empty());
    c.moe_router_topk = 5;
    QVERIFY(has_error(c, "--moe-router-topk 5 must lie in [1, 4] (--num-experts)"));
    c = moe_config(false);
    c.moe_router_load_balancing_type = "sinkhorn";
    QVERIFY(has_error(c, "--moe-router-load-balancing-type must be aux_loss or none"));
    c = moe_config(false);
    c.moe_token_dropping = true;
    QVERIFY(has_error(c, "--moe-token-dropping needs --moe-expert-capacity-factor"));
    c = moe_config(false);
    c.moe_layer_freq = 0;
    QVERIFY(has_error(c, "--moe-layer-freq must be positive"));
    {  // TP with MoE trains at an expert TP dividing TP (TP, 1, 2 of 4); others are refused
      c = moe_config(false);
      c.tensor_model_parallel_size = 2;
      QVERIFY(!has_error(c, "--num-experts"));
      TrainOptions o;
      o.model = c;
      QVERIFY(trainer_layout_refusals(o).empty());
      o.parallel.expert_tensor_parallel_size = 1;
      QVERIFY(trainer_layout_refusals(o).empty());
      o.model.tensor_model_parallel_size = 4;
      o.parallel.expert_tensor_parallel_size = 2;
      QVERIFY(trainer_layout_refusals(o).empty());
      for (const auto& [tp, etp] : {std::pair{4, 8}, std::pair{6, 4}}) {
        o.model.tensor_model_parallel_size = tp;
        o.parallel.expert_tensor_parallel_size = etp;
        const std::vector<std::string> refused = trainer_layout_refusals(o);
        const std::string want = "--expert-tensor-parallel-size " + std::to_string(etp) +
                                 " that does not divide --tensor-model-parallel-size " +
                                 std::to_string(tp) + " is not yet supported";
        QVERIFY2(refused.size() == 1 && refused[0].find(want) != std::string::npos,
                 refused.empty() ? "nothing refused" : refused[0].c_str());
      }
      o.model.tensor_model_parallel_size = 2;
      o.parallel.expert_tensor_parallel_size = 0;
      o.parallel.expert_model_parallel_size = 3;
      const std::vector<std::string> rules = expert_rules(o);
      QVERIFY(rules.size() == 1 &&
              rules[0].find("--expert-model-parallel-size 3 does not divide --num-experts 4") !=
                  std::string::npos);
      o.model.num_experts = 0;
      QVERIFY(expert_rules(o).size() == 1 &&
              expert_rules(o)[0].find("which needs --num-experts") != std::string::npos);
    }
    c = testing::tiny_config(2, 8, 2, 5, 13);
    c.moe_aux_loss_coeff = 0.1f;
    QVERIFY(has_error(c, "give --num-experts"));
    c = moe_config(false);
    c.moe_router_load_balancing_type = "none";
    QCOMPARE(c.aux_loss_coeff(), 0.0);
  }

  // A device whose memory is not host memory (the CPU's host_addressable off, as on a GPU): the
  // expert counts and the load-balancing losses reach the host by copies (moe_host_counts); the
  // loss, the aux loss, the trainer's aux metric and every gradient equal the direct run's.
  void a_staged_device_copies_the_counts_and_the_aux_loss_to_the_host() {
    ModelConfig c = moe_config(true);
    c.moe_expert_capacity_factor = 0.5f;  // some experts drop routes: uneven blocks
    struct Run {
      double loss = 0, aux = 0, aux_sum = 0;
      std::vector<float> grads;
    };
    const auto run = [&](bool host_addressable) {
      CpuDeviceOptions options;
      options.host_addressable = host_addressable;
      CpuDevice device(options);
      Run r;
      auto made = GptModel<float>::create(c, 2, device);
      if (!made) qFatal("%s", made.status().message().c_str());
      GptModel<float>& model = **made;
      auto acts = model.new_activations();
      if (!acts || !model.init_weights(7)) qFatal("activations or weights failed");
      const std::vector<int32_t> tokens = {1, 5, 12, 3, 3, 0, 7, 7, 2, 11};
      const std::vector<int32_t> targets = {5, 12, 3, 3, 0, 7, 7, 2, 11, 12};
      model.zero_grads();
      r.loss = model.forward(**acts, tokens.data(), targets.data(), 0, 1.0f / 10);
      model.backward(**acts);
      r.aux = model.moe_aux_loss();
      r.aux_sum = model.take_moe_aux_loss_sum();
      r.grads.assign(model.grads(), model.grads() + model.arena_size());
      return r;
    };
    const Run direct = run(true), staged = run(false);
    QVERIFY(direct.aux > 0);
    QCOMPARE(staged.loss, direct.loss);
    QCOMPARE(staged.aux, direct.aux);
    QCOMPARE(direct.aux_sum, direct.aux);
    QCOMPARE(staged.aux_sum, direct.aux_sum);
    QVERIFY(staged.grads == direct.grads);
  }

  // The CPU's 16-bit op lists have the MoE ops (the float routing ops on widened rows,
  // cpu_ops_16bit.cpp; test_ops checks each against the float op bit for bit): a bf16 and an
  // fp16 MoE model (top-2 of 4 experts, the load-balancing loss, GELU with biases and SwiGLU)
  // from fp32's weights give fp32's loss and aux loss within the 16-bit loss tolerance (2e-2, as
  // test_gpt_layouts), and gradients that are finite and not zero; fp16 under a loss scale of
  // 2^10, as training runs it. The gradients are not compared tensor by tensor: rounding the
  // router's input to 16 bits flips the top-2 of a token whose second and third logits are close
  // (2 of 128 routes here), and a flipped route moves its rows to another expert, so no
  // tolerance would describe both sides.
  void the_16_bit_lists_train_moe_layers_close_to_fp32() {
    for (const bool swiglu : {false, true}) {
      ModelConfig c = moe_config(swiglu);
      c.hidden_size = 32;
      c.num_attention_heads = 4;
      c.seq_length = 16;
      c.ffn_hidden_size = 48;
      c.moe_ffn_hidden_size = 24;
      c.init_method_std = 0.05f;
      const std::string gelu_or_swiglu = swiglu ? "swiglu" : "gelu";
      const Step want = one_step<float>(c, 1.0f);
      QVERIFY2(want.error.empty(), want.error.c_str());
      QVERIFY(want.aux > 0);
      for (const Step& got : {one_step<bf16>(c, 1.0f), one_step<fp16>(c, 1024.0f)}) {
        const std::string what = gelu_or_swiglu + " " + got.type;
        QVERIFY2(got.error.empty(), (what + ": " + got.error).c_str());
        size_t flips = 0;
        for (size_t i = 0; i < want.routes.size(); i++) flips += got.routes[i] != want.routes[i];
        const double loss = std::abs(got.loss - want.loss) / want.loss;
        const double aux = std::abs(got.aux - want.aux) / want.aux;
        double squares = 0;
        for (float g : got.grads) squares += double(g) * g;
        qInfo("%s: loss %.3g, aux loss %.3g relative to fp32; %zu of %zu routes differ",
              what.c_str(), loss, aux, flips, want.routes.size());
        QVERIFY2(loss <= 2e-2 && aux <= 2e-2, what.c_str());
        QVERIFY2(std::isfinite(squares) && squares > 0, what.c_str());
      }
    }
  }
};

QTEST_GUILESS_MAIN(MoeTest)
#include "test_moe.moc"
