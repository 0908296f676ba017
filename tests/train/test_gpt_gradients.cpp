// The whole model's analytic gradients (every parameter tensor, dropout on) agree with
// central finite differences of its loss computed in double precision.
#include <QtTest/QtTest>

#include "common/grad_check.h"
#include "common/tiny_model.h"
#include "lattice/kernels.h"
#include "model/gpt.h"

using lattice::GptActivations;
using lattice::GptModel;
using lattice::ModelConfig;

class GptGradients : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { lattice::kernels::set_num_threads(2); }

  void every_parameter_gradient_matches_finite_differences() {
    ModelConfig c = lattice::testing::tiny_config(2, 8, 2, 5, 13);
    c.ffn_hidden_size = 12;
    c.max_position_embeddings = 6;
    c.make_vocab_size_divisible_by = 8;  // padded to 16: padding rows get gradients too
    c.attention_dropout = 0.2f;
    c.hidden_dropout = 0.1f;
    c.init_method_std = 0.3f;  // large enough that every path carries signal
    const int B = 2, N = B * c.seq_length;
    GptModel<double> model(c, B);
    model.init_weights(7);
    // Non-trivial norms and biases, so their gradients are not degenerate.
    auto noise = lattice::testing::random_vector(model.arena_size(), 8, 0.1);
    for (size_t i = 0; i < model.arena_size(); i++) model.params()[i] += noise[i];
    GptActivations<double> acts(c, B);
    const std::vector<int32_t> tokens = {1, 5, 12, 3, 3, 0, 7, 7, 2, 11};
    const std::vector<int32_t> targets = {5, 12, 3, 3, 0, 7, 7, 2, 11, 12};
    const float scale = 1.0f / N;
    const uint64_t dropout_seed = 42;

    model.zero_grads();
    model.forward(acts, tokens.data(), targets.data(), dropout_seed, scale);
    model.backward(acts);
    std::vector<double> analytic(model.grads(), model.grads() + model.arena_size());
    std::vector<double> params(model.params(), model.params() + model.arena_size());
    auto loss = [&] {
      std::copy(params.begin(), params.end(), model.params());
      return model.forward(acts, tokens.data(), targets.data(), dropout_seed, scale);
    };
    int checked = 0;
    for (const lattice::ParamTensor& t : model.layout().tensors()) {
      std::vector<size_t> indices;
      for (size_t i = 0; i < t.numel; i++) indices.push_back(t.offset + i);
      const std::string err = lattice::testing::check_gradient(t.name, params, analytic, loss, 1e-5,
                                                               1e-8, indices, 1e-5);
      QVERIFY2(err.empty(), err.c_str());
      checked += static_cast<int>(t.numel);
    }
    QVERIFY(checked > 1000);
  }

  void evaluation_forward_has_no_dropout_and_matches_training_without_it() {
    ModelConfig c = lattice::testing::tiny_config(1, 8, 2, 4, 10);
    c.make_vocab_size_divisible_by = 1;
    c.attention_dropout = 0.1f;  // the training forward must apply it
    GptModel<double> model(c, 1);
    model.init_weights(3);
    GptActivations<double> acts(c, 1);
    const std::vector<int32_t> tokens = {1, 2, 3, 4}, targets = {2, 3, 4, 5};
    const double eval1 = model.forward(acts, tokens.data(), targets.data(), 1, 0.0f);
    const double eval2 = model.forward(acts, tokens.data(), targets.data(), 2, 0.0f);
    QCOMPARE(eval1, eval2);  // no dropout: the key does not matter
    const double train = model.forward(acts, tokens.data(), targets.data(), 1, 1.0f);
    QVERIFY2(train != eval1, "training forward should apply dropout");
  }
};

QTEST_APPLESS_MAIN(GptGradients)
#include "test_gpt_gradients.moc"
