// LoRA (Note [LoRA] in engine/src/model/param_layout.h) in one process: the adapted model starts
// as its base (B = 0); training moves the adapters alone, every base weight staying bit for bit
// what it was (weight decay on, so a base tensor the optimizer touched would move); the
// adapters' gradients match finite differences in fp64 with LoRA dropout on, for GPT-2 and for
// the Llama shape (SwiGLU's (2, F, C) FC1, no biases).
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <random>

#include "common/tiny_model.h"
#include "lattice/kernels.h"
#include "model/gpt.h"
#include "optim/adamw.h"

using namespace lattice;

namespace {

ModelConfig lora_config(bool llama) {
  ModelConfig c = testing::tiny_config(2, 32, 4, 16, 64);
  if (llama) {
    c.position_embedding_type = "rope";
    c.normalization = "RMSNorm";
    c.norm_epsilon = 1e-5f;
    c.swiglu = true;
    c.ffn_hidden_size = 48;
    c.disable_bias_linear = true;
    c.untie_embeddings_and_output_weights = true;
  }
  c.lora_rank = 4;
  c.lora_alpha = 8;
  return c;
}

void random_tokens(std::vector<int32_t>& tokens, std::vector<int32_t>& targets, int vocab) {
  std::mt19937 rng(3);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = rng() % vocab, targets[i] = rng() % vocab;
}

}  // namespace

class Lora : public QObject {
  Q_OBJECT
 private slots:
  void layout_freezes_everything_but_the_adapters() {
    const ModelConfig c = lora_config(false);
    const ParamLayout layout(c);
    int adapters = 0;
    for (const ParamTensor& t : layout.tensors()) {
      const bool adapter = t.name.find(".adapter.") != std::string::npos;
      QVERIFY2(adapter != t.frozen, qPrintable(QString::fromStdString(t.name)));
      adapters += adapter;
    }
    QCOMPARE(adapters, 2 * 4 * c.num_layers);  // A and B on four linears per layer
    QCOMPARE(static_cast<int64_t>(layout.trainable_numel()), c.lora_parameters());
    ModelConfig qkv_only = c;
    qkv_only.lora_target_modules = "linear_qkv";
    const ParamLayout qkv_layout(qkv_only);
    const ParamTensor* b =
        qkv_layout.find("decoder.layers.1.self_attention.linear_qkv.adapter.linear_out.weight");
    QVERIFY(b);
    QCOMPARE(b->global_shape, (std::vector<int64_t>{c.qkv_width(), 4}));
    QVERIFY(!qkv_layout.find("decoder.layers.0.mlp.linear_fc1.adapter.linear_in.weight"));
    ModelConfig bad = c;
    bad.lora_target_modules = "linear_qkv,q_proj";
    QVERIFY(!bad.validate().empty());
  }

  void step_zero_equals_the_base_model() {
    kernels::set_num_threads(1);
    for (bool llama : {false, true}) {
      ModelConfig base = lora_config(llama);
      base.lora_rank = 0;
      const ModelConfig adapted = lora_config(llama);
      const int B = 2, N = B * base.seq_length;
      std::vector<int32_t> tokens(N), targets(N);
      random_tokens(tokens, targets, base.vocab_size);
      GptModel<double> a(base, B), b(adapted, B);
      QVERIFY(a.init_weights(7));
      QVERIFY(b.init_weights(7));  // base tensors drawn by name: the same values
      GptActivations<double> acts_a(base, B), acts_b(adapted, B);
      const double la = a.forward(acts_a, tokens.data(), targets.data(), 1, 0.0f);
      const double lb = b.forward(acts_b, tokens.data(), targets.data(), 1, 0.0f);
      QVERIFY2(
          std::abs(la - lb) <= 1e-12 * la,
          qPrintable(QString("llama %1: base %2, LoRA at step 0 %3").arg(llama).arg(la).arg(lb)));
    }
  }

  void training_moves_only_the_adapters() {
    kernels::set_num_threads(2);
    ModelConfig c = lora_config(false);
    c.hidden_dropout = 0.1f;
    c.lora_dropout = 0.1f;
    const int B = 4, N = B * c.seq_length;
    GptModel<float> model(c, B);
    QVERIFY(model.init_weights(1));
    const std::vector<float> initial(model.params(), model.params() + model.arena_size());
    OptimizerConfig oc;
    oc.lr = 1e-2f;
    oc.weight_decay = 0.1f;
    AdamW<float> opt(model.layout(), oc);
    GptActivations<float> acts(c, B);
    std::vector<int32_t> tokens(N), targets(N);
    random_tokens(tokens, targets, c.vocab_size);
    // A rule the adapters can learn: the next token is the token + 1. (The frozen random word
    // embedding of std 0.02 bounds the logits, so the loss cannot fall far below ln 128.)
    for (int i = 0; i < N; i++) targets[i] = (tokens[i] + 1) % c.vocab_size;
    double first = 0, last = 0;
    for (int step = 1; step <= 60; step++) {
      model.zero_grads();
      last = model.forward(acts, tokens.data(), targets.data(), step, 1.0f / N);
      model.backward(acts);
      // Note [LoRA]: the gradient arena holds the adapters alone, packed.
      size_t adapters = 0;
      for (const ParamTensor& t : model.layout().tensors())
        if (!t.frozen) {
          QVERIFY2(t.grad_offset == (adapters + 15) / 16 * 16, t.name.c_str());
          adapters = t.grad_offset + t.numel;
        } else {
          QCOMPARE(t.grad_offset, ParamTensor::kNoGradient);
        }
      QCOMPARE(model.grad_size(), adapters);
      QVERIFY(model.grad_size() < model.arena_size() / 4);
      opt.step(model.params(), model.grads(), oc.lr);
      if (step == 1) first = last;
    }
    QVERIFY2(last < 0.95 * first, qPrintable(QString("loss %1 -> %2").arg(first).arg(last)));
    for (const ParamTensor& t : model.layout().tensors()) {
      const float* now = model.params() + t.offset;
      const float* was = initial.data() + t.offset;
      if (t.frozen) {
        QVERIFY2(std::memcmp(now, was, t.numel * sizeof(float)) == 0,
                 qPrintable(QString("frozen %1 changed").arg(t.name.c_str())));
      } else {
        size_t moved = 0;
        for (size_t i = 0; i < t.numel; i++) moved += now[i] != was[i];
        QVERIFY2(
            moved > t.numel / 2,
            qPrintable(
                QString("adapter %1: %2 of %3 moved").arg(t.name.c_str()).arg(moved).arg(t.numel)));
      }
    }
  }

  // A 16-bit model scales the adapter's hidden through G (lora_scale): the bf16 loss and the
  // adapters' gradients agree with fp32's on the same weights within test_gpt_layouts' 16-bit
  // tolerance.
  void bf16_adapters_agree_with_fp32() {
    kernels::set_num_threads(1);
    const ModelConfig c = lora_config(false);
    const int B = 2, N = B * c.seq_length;
    GptModel<float> f(c, B);
    GptModel<bf16> h(c, B);
    QVERIFY(f.init_weights(3));
    std::mt19937 rng(4);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (const ParamTensor& t : f.layout().tensors())
      if (t.name.find("linear_out") != std::string::npos)
        for (size_t i = 0; i < t.numel; i++) f.params()[t.offset + i] = normal(rng);
    h.upload(f.params());
    std::vector<int32_t> tokens(N), targets(N);
    random_tokens(tokens, targets, c.vocab_size);
    GptActivations<float> fa(c, B);
    GptActivations<bf16> ha(c, B);
    f.zero_grads();
    h.zero_grads();
    const double lf = f.forward(fa, tokens.data(), targets.data(), 1, 1.0f / N);
    const double lh = h.forward(ha, tokens.data(), targets.data(), 1, 1.0f / N);
    f.backward(fa);
    h.backward(ha);
    GptModel<float> base(c, B);  // the same weights with B = 0
    QVERIFY(base.init_weights(3));
    GptActivations<float> ba(c, B);
    const double lb = base.forward(ba, tokens.data(), targets.data(), 1, 0.0f);
    QVERIFY2(std::abs(lf - lb) > 10 * std::abs(lf - lh),
             qPrintable(QString("the adapters move the loss %1 -> %2, bf16 is off by %3")
                            .arg(lb)
                            .arg(lf)
                            .arg(lh - lf)));
    QVERIFY2(std::abs(lf - lh) <= 2e-2 * lf,
             qPrintable(QString("fp32 %1, bf16 %2").arg(lf).arg(lh)));
    for (const ParamTensor& t : f.layout().tensors()) {
      if (t.frozen) continue;
      // Direction and size separately: bf16's rounding through two layers' backward moves
      // single elements by several percent of the largest (beyond test_gpt_layouts' 5e-2 for
      // the deepest B), while a wrong scale or a missing term changes the norm or the direction.
      double dot = 0, ff = 0, hh = 0;
      for (size_t i = 0; i < t.numel; i++) {
        const double a = f.grads()[t.grad_offset + i], b = h.grads()[t.grad_offset + i];
        dot += a * b, ff += a * a, hh += b * b;
      }
      const double cosine = dot / std::sqrt(ff * hh), ratio = std::sqrt(hh / ff);
      QVERIFY2(cosine > 0.99 && std::abs(ratio - 1) < 0.05,
               qPrintable(QString("%1: bf16 gradient against fp32's: cosine %2, norm ratio %3")
                              .arg(t.name.c_str())
                              .arg(cosine)
                              .arg(ratio)));
    }
  }

  // d loss / d theta for adapter elements against central differences of the same training
  // forward (same dropout seed, so the same masks), in fp64.
  void adapter_gradients_match_finite_differences() {
    kernels::set_num_threads(1);
    for (bool llama : {false, true}) {
      ModelConfig c = lora_config(llama);
      c.lora_dropout = 0.2f;
      const int B = 2, N = B * c.seq_length;
      GptModel<double> model(c, B);
      QVERIFY(model.init_weights(5));
      std::mt19937 rng(9);
      std::normal_distribution<double> normal(0.0, 0.05);
      for (const ParamTensor& t : model.layout().tensors())  // B != 0 so A has a gradient
        if (t.name.find("linear_out") != std::string::npos)
          for (size_t i = 0; i < t.numel; i++) model.params()[t.offset + i] = normal(rng);
      std::vector<int32_t> tokens(N), targets(N);
      random_tokens(tokens, targets, c.vocab_size);
      GptActivations<double> acts(c, B);
      model.zero_grads();
      model.forward(acts, tokens.data(), targets.data(), 42, 1.0f / N);
      model.backward(acts);
      const std::vector<double> grads(model.grads(), model.grads() + model.grad_size());
      for (const ParamTensor& t : model.layout().tensors()) {
        if (t.frozen) continue;
        for (size_t i : {size_t{0}, t.numel / 3, t.numel - 1}) {
          double& p = model.params()[t.offset + i];
          const double keep = p, h = 1e-5;
          p = keep + h;
          const double up = model.forward(acts, tokens.data(), targets.data(), 42, 1.0f / N);
          p = keep - h;
          const double down = model.forward(acts, tokens.data(), targets.data(), 42, 1.0f / N);
          p = keep;
          const double numeric = (up - down) / (2 * h), analytic = grads[t.grad_offset + i];
          QVERIFY2(std::abs(numeric - analytic) <= 1e-6 + 1e-4 * std::abs(numeric),
                   qPrintable(QString("llama %1: %2[%3]: backward %4, finite difference %5")
                                  .arg(llama)
                                  .arg(t.name.c_str())
                                  .arg(i)
                                  .arg(analytic, 0, 'g', 10)
                                  .arg(numeric, 0, 'g', 10)));
        }
      }
    }
  }
};

QTEST_GUILESS_MAIN(Lora)
#include "test_lora.moc"
