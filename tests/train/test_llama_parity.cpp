// Lattice's Llama family against an independent PyTorch implementation of Hugging Face's
// LlamaForCausalLM semantics (llama_reference.py, float64): from the same weights, five AdamW
// steps on the same tokens give the same losses, grad norms and weights. Lattice in double must
// agree to float64 rounding (the files carry float32: 1e-6); Lattice in float, as users train,
// within the 1e-4 on losses and 1e-3 on weights. Two architectures: Llama 3's (GQA with 2
// groups, SwiGLU, RMSNorm, untied head, no biases) with RoPE on half of each head (GPT-NeoX's
// partial rotary), and Qwen2's (QKV bias, MQA: 1 group, RoPE on every dimension, tied head).
// The float comparison after Adam is ill-conditioned where a true gradient is (nearly) zero:
// Adam turns float32's rounding noise there into full-size steps. A key bias is such a tensor
// where its dims barely rotate (it shifts every score of a row alike), so the QKV-bias model
// rotates all dims with theta 10000 (with 8-dim heads and theta 1e6 the slowest pair turns 3e-5
// rad per position, and float32 misses that bias by 0.5 % after five steps). Greedy generation
// (the inference model, its key/value cache of grouped heads, RoPE at each row's position) from
// the initial weights continues a prompt with the reference's tokens. The hf_export_* cases
// check the Hugging Face export the same way: the reference's forward over transformers' names
// and config.json (--hf-loss, written apart from its Megatron-named forward) gives the loss
// Lattice's fp64 forward gives, so the name and row mapping keeps the model; for a Mixtral-like
// MoE model mixtral_reference.py's MixtralSparseMoeBlock over the exported experts. Skipped where
// Debian's python3-torch is missing (installers/install-deps.sh --tests).
#include <QtTest/QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <cmath>
#include <fstream>

#include "checkpoint/hf_model.h"
#include "checkpoint/safetensors.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "common/torch_reference.h"
#include "lattice/infer.h"
#include "lattice/kernels.h"
#include "lattice/train_options.h"
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
    // Varied tokens, each with a target that is a function of it: a mapping five steps learn.
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
  std::vector<double> losses, norms;
  std::vector<float> weights;  // (arena) after the last step
};

// kSteps AdamW steps of the whole model in compute type A from `initial` (arena order).
template <typename A>
Trained train(const ModelConfig& c, const OptimizerConfig& o, const std::vector<float>& initial,
              const Steps& steps) {
  using G = accum_t<A>;
  GptModel<A> model(c, kBatch);
  std::copy(initial.begin(), initial.end(), model.params());
  AdamW<A> adam(model.layout(), o);
  GptActivations<A> acts(c, kBatch);
  const int N = kBatch * c.seq_length;
  Trained t;
  for (int step = 0; step < kSteps; step++) {
    model.zero_grads();
    t.losses.push_back(
        model.forward(acts, steps.tokens[step].data(), steps.targets[step].data(), 0, 1.0f / N));
    model.backward(acts);
    t.norms.push_back(adam.step(model.params(), model.grads(), o.lr));
  }
  const G* p = model.params();
  t.weights.assign(p, p + model.arena_size());
  return t;
}

// Llama 3's architecture, tiny: GQA with 2 groups, SwiGLU, RMSNorm, untied head, no biases.
ModelConfig llama3_like() {
  ModelConfig c = testing::tiny_config(2, 32, 4, 16, 128);
  c.init_method_std = 0.1f;
  c.position_embedding_type = "rope";
  c.rotary_base = 500000.0f;
  c.normalization = "RMSNorm";
  c.norm_epsilon = 1e-5f;
  c.swiglu = true;
  c.ffn_hidden_size = 48;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.untie_embeddings_and_output_weights = true;
  c.disable_bias_linear = true;
  return c;
}

// Qwen2's: QKV bias, MQA (1 group), RoPE on every dimension, tied head.
ModelConfig qwen2_like() {
  ModelConfig c = testing::tiny_config(2, 32, 4, 16, 128);
  c.init_method_std = 0.1f;
  c.position_embedding_type = "rope";
  c.normalization = "RMSNorm";
  c.norm_epsilon = 1e-6f;
  c.swiglu = true;
  c.ffn_hidden_size = 40;
  c.group_query_attention = true;
  c.num_query_groups = 1;
  c.disable_bias_linear = true;
  c.add_qkv_bias = true;
  return c;
}

}  // namespace

class LlamaParity : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  // Runs the reference and both Lattice runs for `c`; compares them.
  void check(const QString& name, const ModelConfig& c) {
    if (!torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
    kernels::set_num_threads(2);
    OptimizerConfig o;
    o.lr = 1e-2f;  // large steps, so that five of them move every weight measurably
    o.weight_decay = 0.1f;
    o.clip_grad = 1.0f;
    o.lr_decay_style = "constant";

    GptModel<float> init(c, kBatch);
    QVERIFY(init.init_weights(7).is_ok());
    const ParamLayout& layout = init.layout();
    const std::vector<float> initial(init.params(), init.params() + init.arena_size());
    auto write = [&](const std::string& path, const std::vector<float>& arena) {
      std::vector<safetensors::TensorSource> sources;
      for (const ParamTensor& t : layout.tensors())
        sources.push_back({t.name, t.global_shape, arena.data() + t.offset, {}});
      return safetensors::write(path, sources);
    };
    const std::string weights = dir_.filePath(name + "-init.safetensors").toStdString();
    const std::string theirs = dir_.filePath(name + "-torch.safetensors").toStdString();
    const std::string spec = dir_.filePath(name + ".json").toStdString();
    QVERIFY(write(weights, initial).is_ok());
    const Steps steps = make_steps(c);
    {
      QJsonObject config{{"layers", c.num_layers},       {"vocab", c.vocab_size},
                         {"hidden", c.hidden_size},      {"heads", c.num_attention_heads},
                         {"groups", c.kv_heads()},       {"rotary_dim", c.rotary_dim()},
                         {"rotary_base", c.rotary_base}, {"eps", c.norm_epsilon}};
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
      text += "], \"generate\": {\"prompt\": [5, 77, 3, 120], \"tokens\": 10}}";
      std::ofstream(spec) << text.toStdString();
    }
    const testing::Run py =
        testing::run_process(kPython,
                             {QString(LATTICE_SOURCE_DIR) + "/tests/train/llama_reference.py",
                              QString::fromStdString(weights), QString::fromStdString(spec),
                              QString::fromStdString(theirs)},
                             {}, 300000);
    QVERIFY2(py.exit_code == 0, qPrintable(py.err));
    const QJsonObject result = QJsonDocument::fromJson(py.out.toUtf8()).object();
    const QJsonArray torch_losses = result["losses"].toArray(),
                     torch_norms = result["grad_norms"].toArray();
    QCOMPARE(torch_losses.size(), kSteps);

    const Trained exact = train<double>(c, o, initial, steps);
    const Trained single = train<float>(c, o, initial, steps);
    for (int s = 0; s < kSteps; s++) {
      const double want = torch_losses[s].toDouble(), norm = torch_norms[s].toDouble();
      auto verify = [&](const char* what, double got, double expected, double rel) {
        QVERIFY2(std::abs(got - expected) <= rel * std::abs(expected),
                 qPrintable(QString("%1 %2, step %3: lattice %4, pytorch %5 (rel tolerance %6)")
                                .arg(name, what)
                                .arg(s + 1)
                                .arg(got, 0, 'g', 15)
                                .arg(expected, 0, 'g', 15)
                                .arg(rel)));
      };
      verify("fp64 loss", exact.losses[s], want, 1e-9);
      verify("fp64 grad norm", exact.norms[s], norm, 1e-7);
      verify("fp32 loss", single.losses[s], want, 1e-4);
    }
    QVERIFY2(exact.losses.back() < exact.losses.front(), "the five steps did not lower the loss");

    {  // greedy generation from the initial weights (Generator::random draws init_weights(7))
      std::unique_ptr<Generator> gen = Generator::random(c, 7, nullptr);
      GenerationRequest r;
      r.prompt = {5, 77, 3, 120};
      r.tokens_to_generate = 10;
      r.sampling.temperature = 0.0f;
      r.stop_at_eod = false;
      auto out = gen->generate({r});
      QVERIFY2(out.is_ok(), out.is_ok() ? "" : out.status().message().c_str());
      QStringList got, want;
      for (int32_t id : (*out)[0].tokens) got << QString::number(id);
      for (const QJsonValue& id : result["generated"].toArray())
        want << QString::number(id.toInt());
      QVERIFY2(got == want, qPrintable(QString("%1 greedy continuation: lattice [%2], pytorch [%3]")
                                           .arg(name, got.join(' '), want.join(' '))));
    }

    auto file = safetensors::File::open(theirs);
    QVERIFY2(file.is_ok(), "cannot read the reference's weights");
    int compared = 0;
    for (const ParamTensor& t : layout.tensors()) {
      const safetensors::TensorInfo* info = file->find(t.name);
      QVERIFY2(info, qPrintable("the reference has no tensor " + QString::fromStdString(t.name)));
      QCOMPARE(info->numel, t.numel);
      std::vector<float> want(t.numel);
      QVERIFY(file->read_float(*info, want.data()).is_ok());
      double rms = 0;
      for (float w : want) rms += double(w) * w;
      rms = std::sqrt(rms / t.numel);
      for (size_t i = 0; i < t.numel; i++) {
        const double w = want[i], fp64 = exact.weights[t.offset + i],
                     fp32 = single.weights[t.offset + i];
        // The files hold float32: 1e-6 covers its rounding of the float64 results.
        const double tight = 1e-6 * std::abs(w) + 1e-8;
        const double loose = 1e-3 * std::max(std::abs(w), rms);
        if (std::abs(fp64 - w) > tight || std::abs(fp32 - w) > loose)
          QFAIL(qPrintable(QString("%1 %2[%3] after %4 steps: lattice fp64 %5, fp32 %6, pytorch "
                                   "%7 (tolerances %8, %9)")
                               .arg(name, QString::fromStdString(t.name))
                               .arg(i)
                               .arg(kSteps)
                               .arg(fp64, 0, 'g', 10)
                               .arg(fp32, 0, 'g', 10)
                               .arg(w, 0, 'g', 10)
                               .arg(tight, 0, 'g', 3)
                               .arg(loose, 0, 'g', 3)));
      }
      compared++;
    }
    QCOMPARE(compared, static_cast<int>(layout.tensors().size()));
  }

  // Exports `c`'s initial weights as a Hugging Face model; the reference's loss of one batch over
  // that directory (`script`'s --hf-loss) must be Lattice's fp64 forward loss of the same weights
  // to 1e-9.
  void check_hf_export(const QString& name, const ModelConfig& c,
                       const QString& script = "llama_reference.py") {
    QVERIFY(c.validate().empty());
    if (!torch_available())
      QSKIP("python3-torch is not installed (installers/install-deps.sh --tests)");
    kernels::set_num_threads(2);
    GptModel<float> init(c, kBatch);
    QVERIFY(init.init_weights(11).is_ok());
    // Every tensor distinct, the norms and biases too (they start at one and zero): a swap of
    // two of them shows in the loss.
    for (size_t i = 0; i < init.arena_size(); i++)
      init.params()[i] += 0.05f * std::sin(0.7f * static_cast<float>(i) + 0.3f);
    const std::string model_dir = dir_.filePath(name + "-hf").toStdString();
    const Status exported = export_hf(model_dir, c, init.layout(), init.params());
    QVERIFY2(exported.is_ok(), exported.message().c_str());
    const Steps steps = make_steps(c);
    const std::string tokens = dir_.filePath(name + "-tokens.json").toStdString();
    std::ofstream(tokens) << ("{\"tokens\": " + rows_json(steps.tokens[0], c.seq_length) +
                              ", \"targets\": " + rows_json(steps.targets[0], c.seq_length) + "}")
                                 .toStdString();
    const testing::Run py =
        testing::run_process(kPython,
                             {QString(LATTICE_SOURCE_DIR) + "/tests/train/" + script, "--hf-loss",
                              QString::fromStdString(model_dir), QString::fromStdString(tokens)},
                             {}, 300000);
    QVERIFY2(py.exit_code == 0, qPrintable(py.err));
    const double want = QJsonDocument::fromJson(py.out.toUtf8()).object()["loss"].toDouble();

    GptModel<double> model(c, kBatch);
    std::copy(init.params(), init.params() + init.arena_size(), model.params());
    GptActivations<double> acts(c, kBatch);
    const double got =
        model.forward(acts, steps.tokens[0].data(), steps.targets[0].data(), 0, 0.0f);
    // Every expert of an MoE layer had tokens, so that each one's tensors entered the loss.
    for (int l = 0; l < c.num_layers; l++)
      for (int e = 0; c.is_moe_layer(l) && e < c.num_experts; e++)
        QVERIFY2(
            acts.layers[l].expert_counts[e] > 0,
            qPrintable(QString("%1: layer %2's expert %3 had no token").arg(name).arg(l).arg(e)));
    QVERIFY2(std::abs(got - want) <= 1e-9 * std::abs(want),
             qPrintable(QString("%1: Lattice fp64 loss %2, PyTorch over the exported Hugging Face "
                                "model %3 (rel tolerance 1e-9)")
                            .arg(name)
                            .arg(got, 0, 'g', 17)
                            .arg(want, 0, 'g', 17)));
  }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void llama3_like_model_matches_pytorch_after_five_adamw_steps() {
    ModelConfig c = llama3_like();
    c.rotary_percent = 0.5f;
    QVERIFY(c.validate().empty());
    check("llama3", c);
  }

  void qwen2_like_model_matches_pytorch_after_five_adamw_steps() {
    const ModelConfig c = qwen2_like();
    QVERIFY(c.validate().empty());
    check("qwen2", c);
  }

  // Hugging Face's Llama rotates every dimension of a head; the vocabulary is a multiple of 128,
  // so the padded logits Lattice's softmax also spans (Megatron's padding) are none.
  void hf_export_of_a_llama3_like_model_is_the_same_model() {
    check_hf_export("hf-llama3", llama3_like());
  }

  // Llama 3.1's RoPE scaling (factor 8 over 8192 original positions): with theta 500000 and 8-dim
  // heads the four frequencies have wavelengths 6, 167, 4443 and 118143, so one is kept below
  // 8192 / 4, one interpolated and one divided by the factor above 8192.
  void hf_export_of_a_llama31_like_model_is_the_same_model() {
    ModelConfig c = llama3_like();
    c.use_rope_scaling = true;
    c.rope_scaling_factor = 8.0f;
    check_hf_export("hf-llama31", c);
  }

  void hf_export_of_a_qwen2_like_model_is_the_same_model() {
    check_hf_export("hf-qwen2", qwen2_like());
  }

  // Mixtral's shape: Llama 3's attention, an MoE MLP in every layer (4 SwiGLU experts of width
  // 40, top-2; Mixtral's routing is Lattice's), written as MixtralForCausalLM.
  void hf_export_of_a_mixtral_like_model_is_the_same_model() {
    ModelConfig c = llama3_like();
    c.num_experts = 4;
    c.moe_router_topk = 2;
    c.moe_ffn_hidden_size = 40;
    c.moe_aux_loss_coeff = 0.02f;
    check_hf_export("hf-mixtral", c, "mixtral_reference.py");
  }
};

QTEST_GUILESS_MAIN(LlamaParity)
#include "test_llama_parity.moc"
