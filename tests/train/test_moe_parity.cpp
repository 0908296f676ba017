// Lattice's MoE layers (Note [MoE layer] in model/gpt_moe.cpp) against an independent PyTorch
// float64 implementation of Megatron-core's MoE semantics (moe_reference.py): from the same
// weights, five AdamW steps on the same tokens give the same losses, load-balancing losses, grad
// norms and weights, Lattice in double to 1e-9 (the weights travel as JSON float64; relative to
// the tensor's rms where an element is near zero). Cases: a
// Llama-shaped model (SwiGLU experts, no biases) with 4 experts, top-2 and the aux loss; a
// GPT-2-shaped one (GELU experts with biases) with MoE on every other layer (--moe-layer-freq 2);
// and token dropping (capacity factor 1.0) under a router made unbalanced, where the dropped
// routes are checked to be there. Skipped where Debian's python3-torch is missing
// (installers/install-deps.sh --tests).
#include <QtTest/QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <cmath>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "common/torch_reference.h"
#include "lattice/kernels.h"
#include "model/gpt.h"
#include "optim/adamw.h"

using namespace lattice;
using testing::kPython;
using testing::rows_json;
using testing::torch_available;

namespace {
constexpr int kSteps = 5, kBatch = 2;

struct Steps {
  std::vector<std::vector<int32_t>> tokens, targets;  // kSteps x (B * T)
};

Steps make_steps(const ModelConfig& c) {
  Steps s;
  const int N = kBatch * c.seq_length;
  for (int step = 0; step < kSteps; step++) {
    std::vector<int32_t> tokens(N), targets(N);
    for (int i = 0; i < N; i++) {
      tokens[i] = (i * 37 + step * 101 + 11) % c.vocab_size;
      targets[i] = (tokens[i] * 7 + 3) % c.vocab_size;
    }
    s.tokens.push_back(tokens);
    s.targets.push_back(targets);
  }
  return s;
}

struct Trained {
  std::vector<double> losses, aux, norms;
  std::vector<double> weights;  // (arena) after the last step
  int dropped = 0;              // routes dropped over the steps (every MoE layer)
};

// kSteps AdamW steps of the whole model in double from `initial` (arena order); grad_scale 1/N,
// so the load-balancing loss enters with weight grad_scale N = 1, as in the reference.
Trained train(const ModelConfig& c, const OptimizerConfig& o, const std::vector<float>& initial,
              const Steps& steps) {
  GptModel<double> model(c, kBatch);
  std::copy(initial.begin(), initial.end(), model.params());
  AdamW<double> adam(model.layout(), o);
  GptActivations<double> acts(c, kBatch);
  const int N = kBatch * c.seq_length;
  Trained t;
  for (int step = 0; step < kSteps; step++) {
    model.zero_grads();
    t.losses.push_back(
        model.forward(acts, steps.tokens[step].data(), steps.targets[step].data(), 0, 1.0f / N));
    t.aux.push_back(model.moe_aux_loss());
    for (int l = 0; l < c.num_layers; l++)
      if (model.layout().is_moe(l))
        for (int i = 0; i < N * c.moe_router_topk; i++)
          t.dropped += acts.layers[l].route_slot[i] < 0;
    model.backward(acts);
    t.norms.push_back(adam.step(model.params(), model.grads(), o.lr));
  }
  const double* p = model.params();
  t.weights.assign(p, p + model.arena_size());
  return t;
}

ModelConfig llama_moe() {
  ModelConfig c = testing::tiny_config(2, 32, 4, 16, 128);
  c.init_method_std = 0.1f;
  c.position_embedding_type = "rope";
  c.normalization = "RMSNorm";
  c.swiglu = true;
  c.ffn_hidden_size = 48;
  c.moe_ffn_hidden_size = 24;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.untie_embeddings_and_output_weights = true;
  c.disable_bias_linear = true;
  c.num_experts = 4;
  c.moe_router_topk = 2;
  c.moe_aux_loss_coeff = 0.01f;
  return c;
}

}  // namespace

class MoeParity : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  // Runs the reference and Lattice in double for `c` (initial weights: init_weights(7), the
  // routers' scaled by router_scale); compares them. Returns the routes Lattice dropped.
  int check(const QString& name, const ModelConfig& c, float router_scale = 1.0f) {
    if (!torch_available()) return -1;
    kernels::set_num_threads(2);
    OptimizerConfig o;
    o.lr = 1e-2f;
    o.weight_decay = 0.1f;
    o.clip_grad = 1.0f;
    o.lr_decay_style = "constant";

    GptModel<float> init(c, kBatch);
    if (!init.init_weights(7).is_ok()) return -2;
    const ParamLayout& layout = init.layout();
    for (const ParamTensor& t : layout.tensors())
      if (t.name.find("mlp.router.weight") != std::string::npos)
        for (size_t i = 0; i < t.numel; i++) init.params()[t.offset + i] *= router_scale;
    const std::vector<float> initial(init.params(), init.params() + init.arena_size());
    std::vector<safetensors::TensorSource> sources;
    for (const ParamTensor& t : layout.tensors())
      sources.push_back({t.name, t.global_shape, initial.data() + t.offset, {}});
    const std::string weights = dir_.filePath(name + "-init.safetensors").toStdString();
    const std::string spec = dir_.filePath(name + ".json").toStdString();
    if (!safetensors::write(weights, sources).is_ok()) return -3;
    const Steps steps = make_steps(c);
    {
      QJsonObject config{{"layers", c.num_layers},
                         {"hidden", c.hidden_size},
                         {"heads", c.num_attention_heads},
                         {"groups", c.kv_heads()},
                         {"rotary_dim", c.rope() ? c.rotary_dim() : 0},
                         {"rotary_base", c.rotary_base},
                         {"rms", c.rms_norm()},
                         {"eps", c.norm_epsilon},
                         {"swiglu", c.swiglu},
                         {"experts", c.num_experts},
                         {"topk", c.moe_router_topk},
                         {"aux_coeff", c.aux_loss_coeff()},
                         {"capacity_factor", c.moe_expert_capacity_factor},
                         {"layer_freq", c.moe_layer_freq}};
      QJsonObject optim{
          {"lr", o.lr},        {"beta1", o.adam_beta1},          {"beta2", o.adam_beta2},
          {"eps", o.adam_eps}, {"weight_decay", o.weight_decay}, {"clip_grad", o.clip_grad}};
      QString text = "{\"config\": " + QJsonDocument(config).toJson(QJsonDocument::Compact) +
                     ", \"optim\": " + QJsonDocument(optim).toJson(QJsonDocument::Compact) +
                     ", \"steps\": [";
      for (int s = 0; s < kSteps; s++)
        text += QString(s ? ", " : "") +
                "{\"tokens\": " + rows_json(steps.tokens[s], c.seq_length) +
                ", \"targets\": " + rows_json(steps.targets[s], c.seq_length) + "}";
      text += "]}";
      std::ofstream(spec) << text.toStdString();
    }
    const testing::Run py =
        testing::run_process(kPython,
                             {QString(LATTICE_SOURCE_DIR) + "/tests/train/moe_reference.py",
                              QString::fromStdString(weights), QString::fromStdString(spec)},
                             {}, 300000);
    if (py.exit_code != 0) {
      qWarning("%s", qPrintable(py.err));
      return -4;
    }
    const QJsonObject result = QJsonDocument::fromJson(py.out.toUtf8()).object();
    const QJsonArray torch_losses = result["losses"].toArray(),
                     torch_aux = result["aux_losses"].toArray(),
                     torch_norms = result["grad_norms"].toArray();
    if (torch_losses.size() != kSteps) return -5;

    const Trained exact = train(c, o, initial, steps);
    auto verify = [&](const QString& what, double got, double expected, double rel) {
      if (std::abs(got - expected) <= rel * std::abs(expected) + 1e-15) return true;
      qWarning("%s", qPrintable(QString("%1 %2: lattice %3, pytorch %4 (rel tolerance %5)")
                                    .arg(name, what)
                                    .arg(got, 0, 'g', 17)
                                    .arg(expected, 0, 'g', 17)
                                    .arg(rel)));
      return false;
    };
    bool ok = true;
    for (int s = 0; s < kSteps; s++) {
      const QString step = QString(", step %1").arg(s + 1);
      ok &= verify("fp64 loss" + step, exact.losses[s], torch_losses[s].toDouble(), 1e-9);
      ok &= verify("fp64 aux loss" + step, exact.aux[s], torch_aux[s].toDouble(), 1e-9);
      ok &= verify("fp64 grad norm" + step, exact.norms[s], torch_norms[s].toDouble(), 1e-9);
    }
    if (c.aux_loss_coeff() > 0 && !(exact.aux[0] > 0)) {
      qWarning("%s: the load-balancing loss is %g with --moe-aux-loss-coeff %g", qPrintable(name),
               exact.aux[0], c.aux_loss_coeff());
      ok = false;
    }
    const QJsonObject theirs = result["weights"].toObject();
    int compared = 0;
    for (const ParamTensor& t : layout.tensors()) {
      const QJsonArray want = theirs[QString::fromStdString(t.name)].toArray();
      if (want.size() != static_cast<int>(t.numel)) {
        qWarning("%s: the reference has %d values of %s, Lattice %zu", qPrintable(name),
                 static_cast<int>(want.size()), t.name.c_str(), t.numel);
        return -6;
      }
      double rms = 0;
      for (const QJsonValue& v : want) rms += v.toDouble() * v.toDouble();
      rms = std::sqrt(rms / static_cast<double>(t.numel));
      for (size_t i = 0; i < t.numel; i++) {
        const double w = want[static_cast<int>(i)].toDouble(), got = exact.weights[t.offset + i];
        // Relative to the element, or to the tensor's scale where the element is near 0: a key
        // bias has a zero true gradient, so Adam's steps there are rounding noise (~1e-13).
        if (std::abs(got - w) > 1e-9 * std::max(std::abs(w), rms)) {
          qWarning("%s",
                   qPrintable(QString("%1 %2[%3] after %4 steps: lattice fp64 %5, pytorch "
                                      "%6 (tolerance 1e-9 x max(|pytorch|, the tensor's rms))")
                                  .arg(name, QString::fromStdString(t.name))
                                  .arg(i)
                                  .arg(kSteps)
                                  .arg(got, 0, 'g', 17)
                                  .arg(w, 0, 'g', 17)));
          return -7;
        }
      }
      compared++;
    }
    if (compared != static_cast<int>(layout.tensors().size()) || !ok) return -8;
    if (!(exact.losses.back() < exact.losses.front())) {
      qWarning("%s: the five steps did not lower the loss", qPrintable(name));
      return -9;
    }
    return exact.dropped;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    if (!torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
  }

  void llama_shaped_moe_top2_with_aux_loss_matches_pytorch() {
    const ModelConfig c = llama_moe();
    QVERIFY(c.validate().empty());
    const int dropped = check("llama-moe", c);
    QVERIFY2(dropped == 0,
             qPrintable(QString("check returned %1 (see the warnings)").arg(dropped)));
  }

  // GELU experts with biases (the dense MLP's bias rule), learned positions, LayerNorm, tied
  // head; layer 0 MoE, layer 1 dense (--moe-layer-freq 2); top-1 routing (weight 1).
  void gpt2_shaped_moe_every_other_layer_matches_pytorch() {
    ModelConfig c = testing::tiny_config(2, 32, 4, 16, 128);
    c.init_method_std = 0.1f;
    c.ffn_hidden_size = 64;
    c.num_experts = 4;
    c.moe_router_topk = 1;
    c.moe_aux_loss_coeff = 0.02f;
    c.moe_layer_freq = 2;
    QVERIFY(c.validate().empty());
    const int dropped = check("gpt2-moe", c);
    QVERIFY2(dropped == 0,
             qPrintable(QString("check returned %1 (see the warnings)").arg(dropped)));
  }

  // Capacity factor 1.0: each expert keeps ceil(32 x 2 / 4) = 16 of the 64 routes; the router
  // scaled by 8 sends the tokens unevenly, so routes are dropped (by weight, Megatron's "probs").
  void token_dropping_at_capacity_factor_one_matches_pytorch() {
    ModelConfig c = llama_moe();
    c.moe_token_dropping = true;
    c.moe_expert_capacity_factor = 1.0f;
    QVERIFY(c.validate().empty());
    const int dropped = check("dropping-moe", c, 8.0f);
    QVERIFY2(dropped > 0, qPrintable(QString("check returned %1: no route was dropped, or the "
                                             "comparison failed (see the warnings)")
                                         .arg(dropped)));
  }
};

QTEST_GUILESS_MAIN(MoeParity)
#include "test_moe_parity.moc"
