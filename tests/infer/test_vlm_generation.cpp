// Generation from a LLaVA-style vision-language model (Note [image rows at inference] in
// infer/infer_model.cpp): from the same weights, InferenceModel's logits of a prompt holding
// images equal the training model's (GptModel<float>::load_images + forward) at every row, to
// fp32 tolerance, for a GPT-2 language model with a CLIP tower (one image) and a Llama-shaped
// one (RoPE, two images); the generator's greedy continuation follows those logits, and other
// images change it; a request whose images and placeholders disagree is refused; a group of
// requests runs the tower once per distinct image.
#include <QTest>

#include <cmath>
#include <random>

#include "common/tiny_model.h"
#include "infer/infer_model.h"
#include "lattice/infer.h"
#include "lattice/kernels.h"
#include "model/gpt.h"

using namespace lattice;

namespace {

ModelConfig vlm(bool llama) {
  return testing::tiny_vlm_config(llama, llama ? 2 : 1, 24, 0.3f);
}

// T tokens: text, then each image's Np placeholders from row 2 (one text row between images).
std::vector<int32_t> prompt_tokens(const ModelConfig& c) {
  const int T = c.seq_length, Np = c.vision.patches(), I = c.vision.images_per_sample;
  std::vector<int32_t> x(T);
  for (int t = 0; t < T; t++) x[t] = (t * 37 + 11) % c.vocab_size;
  for (int k = 0; k < I * Np; k++) x[2 + k + k / Np] = c.image_token_id();
  return x;
}

std::vector<float> random_images(const ModelConfig& c, unsigned seed) {
  const VisionConfig& v = c.vision;
  std::vector<float> images(static_cast<size_t>(v.images_per_sample) * v.num_channels * v.img_h *
                            v.img_w);
  std::mt19937 rng(seed);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  for (float& p : images) p = pixel(rng);
  return images;
}

}  // namespace

class VlmGeneration : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { kernels::set_num_threads(2); }

  void logits_equal_the_training_forward_data() {
    QTest::addColumn<bool>("llama");
    QTest::newRow("gpt2 clip") << false;
    QTest::newRow("llama clip, two images") << true;
  }
  void logits_equal_the_training_forward() {
    QFETCH(bool, llama);
    const ModelConfig c = vlm(llama);
    QVERIFY(c.validate().empty());
    GptModel<float> full(c, 1);
    QVERIFY(full.init_weights(7));
    auto made = full.new_activations();
    QVERIFY(made.is_ok());
    GptActivations<float>& acts = **made;
    const int T = c.seq_length, V = c.vocab_size, Vp = c.padded_vocab_size();
    const std::vector<int32_t> tokens = prompt_tokens(c);
    const std::vector<float> images = random_images(c, 3);
    std::vector<int32_t> targets(T, 0);
    QVERIFY(full.load_images(acts, tokens.data(), images.data()).is_ok());
    full.forward(acts, tokens.data(), targets.data(), 0, 0.0f);

    std::unique_ptr<Generator> gen = Generator::from_weights(c, full.params(), 1);
    InferenceModel& m = gen->model();
    m.reserve(1, T);
    const VisionConfig& v = c.vision;
    const size_t pixels = static_cast<size_t>(v.num_channels) * v.img_h * v.img_w;
    const int Np = v.patches(), I = v.images_per_sample;
    std::vector<float> patches;
    for (int i = 0; i < I; i++) {
      const float* out = m.encode_image(images.data() + i * pixels);
      patches.insert(patches.end(), out, out + static_cast<size_t>(Np) * c.hidden_size);
    }
    std::vector<const float*> image_rows(T, nullptr);
    std::vector<int32_t> slot_ids(T, 0), positions(T), rows(T);
    for (int t = 0, k = 0; t < T; t++) {
      positions[t] = rows[t] = t;
      if (tokens[t] == c.image_token_id())
        image_rows[t] = patches.data() + static_cast<size_t>(k++) * c.hidden_size;
    }
    const float* logits = m.forward(tokens.data(), slot_ids.data(), positions.data(), T,
                                    rows.data(), T, image_rows.data());
    double max_diff = 0, max_ref = 0;
    for (int t = 0; t < T; t++)
      for (int i = 0; i < V; i++) {
        const double want = acts.logits[static_cast<size_t>(t) * Vp + i];
        max_diff = std::max(max_diff, std::abs(logits[static_cast<size_t>(t) * Vp + i] - want));
        max_ref = std::max(max_ref, std::abs(want));
      }
    QVERIFY2(
        max_diff <= 1e-5 * max_ref,
        qPrintable(QString("max |diff| %1 > 1e-5 x max |logit| %2").arg(max_diff).arg(max_ref)));

    // The generator: the prompt up to the last image row and the images give the training
    // forward's greedy next token there; other images give other logits.
    const int last = 2 + I * Np + (I - 1) - 1;
    GenerationRequest r;
    r.prompt.assign(tokens.begin(), tokens.begin() + last + 1);
    r.tokens_to_generate = 1;
    r.sampling.temperature = 0.0f;
    r.stop_at_eod = false;
    r.images = images;
    r.top_logprobs = 3;
    auto out = gen->generate({r});
    QVERIFY2(out.is_ok(), out.is_ok() ? "" : out.status().message().c_str());
    const float* want = acts.logits + static_cast<size_t>(last) * Vp;
    QCOMPARE((*out)[0].tokens.at(0), static_cast<int32_t>(std::max_element(want, want + V) - want));
    GenerationRequest other = r;
    other.images = random_images(c, 4);
    auto out2 = gen->generate({other});
    QVERIFY(out2.is_ok());
    QVERIFY((*out2)[0].top_logprobs.at(0).at(0).logprob !=
            (*out)[0].top_logprobs.at(0).at(0).logprob);

    // One image too few for the placeholders.
    other.images.resize(other.images.size() - pixels);
    auto refused = gen->generate({other});
    QVERIFY(!refused.is_ok());
    QVERIFY2(refused.status().message().find("image placeholder tokens") != std::string::npos,
             refused.status().message().c_str());
  }

  // Note [one tower run per image] (generator.cpp): three requests in one group, the first two
  // with the same images (two choices of one question), the third with others. The tower runs
  // once per distinct image (2 I, not 3 I), and every request's prompt log-probabilities equal
  // those it gets alone.
  void a_group_runs_the_tower_once_per_distinct_image() {
    const ModelConfig c = vlm(true);
    std::unique_ptr<Generator> gen = Generator::random(c, 5, nullptr);
    const int I = c.vision.images_per_sample, Np = c.vision.patches();
    const std::vector<int32_t> tokens = prompt_tokens(c);
    const int prompt_length = 2 + I * Np + (I - 1) + 3;
    std::vector<GenerationRequest> requests(3);
    for (int i = 0; i < 3; i++) {
      GenerationRequest& r = requests[i];
      r.prompt.assign(tokens.begin(), tokens.begin() + prompt_length);
      r.prompt.back() = 5 + i;  // a different last token for each choice
      r.tokens_to_generate = 0;
      r.prompt_logprobs = true;
      r.images = random_images(c, i < 2 ? 11 : 12);
    }
    const size_t before = gen->model().images_encoded();
    auto together = gen->generate(requests);
    QVERIFY2(together.is_ok(), together.is_ok() ? "" : together.status().message().c_str());
    QCOMPARE(gen->model().images_encoded() - before, static_cast<size_t>(2 * I));
    for (int i = 0; i < 3; i++) {
      auto alone = gen->generate({requests[i]});
      QVERIFY(alone.is_ok());
      const std::vector<float>& a = (*together)[i].prompt_logprobs;
      const std::vector<float>& b = (*alone)[0].prompt_logprobs;
      QCOMPARE(a.size(), b.size());
      for (size_t t = 0; t < a.size(); t++)
        QVERIFY2(std::abs(a[t] - b[t]) <= 1e-5f * std::max(1.0f, std::abs(b[t])),
                 qPrintable(QString("request %1, token %2: %3 in the group, %4 alone")
                                .arg(i)
                                .arg(t)
                                .arg(a[t])
                                .arg(b[t])));
    }
    // The shared images are what they say: the third request's differ from the first's.
    QVERIFY((*together)[2].prompt_logprobs.back() != (*together)[0].prompt_logprobs.back());
  }
};

QTEST_GUILESS_MAIN(VlmGeneration)
#include "test_vlm_generation.moc"
