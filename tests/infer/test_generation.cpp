// Specification of generation on a tiny random model (Megatron's initialisation with a large
// std so that the next token is clear-cut): decoding with the key/value cache is the training
// forward recomputed over the whole sequence at every step; sampling is a function of the
// seed alone; top-k 1 and a tiny top-p are greedy; batching prompts of different lengths
// changes nothing; EOD and stop strings end a sequence where they appear; a cancelled sequence
// ends where it was cancelled and its neighbours do not notice.
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <span>

#include "common/tiny_model.h"
#include "infer/infer_model.h"
#include "infer/sampling.h"
#include "lattice/infer.h"
#include "lattice/kernels.h"
#include "lattice/train.h"
#include "model/gpt.h"

using namespace lattice;

namespace {

constexpr uint64_t kSeed = 42;

ModelConfig test_config() {
  ModelConfig c = testing::tiny_config(2, 64, 4, 48, 200);
  c.init_method_std = 0.3f;
  return c;
}

// The Llama family's architecture at test_config()'s size: RoPE, RMSNorm, SwiGLU, 2 key/value
// heads for 4 query heads, an untied head, no biases.
ModelConfig llama_config() {
  ModelConfig c = test_config();
  c.position_embedding_type = "rope";
  c.normalization = "RMSNorm";
  c.swiglu = true;
  c.ffn_hidden_size = 96;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.untie_embeddings_and_output_weights = true;
  c.disable_bias_linear = true;
  return c;
}

// MoE layers on test_config() (GELU experts with biases, every other layer) or llama_config()
// (Mixtral: SwiGLU experts, no biases, every layer): 4 experts, top 2.
ModelConfig moe_config(bool llama) {
  ModelConfig c = llama ? llama_config() : test_config();
  c.num_experts = 4;
  c.moe_router_topk = 2;
  c.moe_ffn_hidden_size = 32;
  c.moe_layer_freq = llama ? 1 : 2;
  return c;
}

class SilentSink : public MetricsSink {};

GenerationRequest request(std::vector<int32_t> prompt, int n, SamplingParams s = {0.0f}) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.tokens_to_generate = n;
  r.sampling = s;
  r.stop_at_eod = false;
  return r;
}

std::vector<int32_t> generate_one(Generator& g, const GenerationRequest& r) {
  auto out = g.generate({r});
  if (!out) qFatal("%s", out.status().message().c_str());
  return (*out)[0].tokens;
}

QString ids(const std::vector<int32_t>& v) {
  QStringList s;
  for (int32_t x : v) s << QString::number(x);
  return s.join(' ');
}

// Decodes id i as "[i]", so that stop strings can name a token exactly.
class BracketTokenizer : public Tokenizer {
 public:
  BracketTokenizer(int vocab, int32_t eod) : vocab_(vocab), eod_(eod) {}
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t i : ids) {  // appended piece by piece: GCC 12 warns (-Wrestrict) on "[" + ...
      s += '[';
      s += std::to_string(i);
      s += ']';
    }
    return s;
  }
  int vocab_size() const override { return vocab_; }
  int32_t eod() const override { return eod_; }
  std::string type() const override { return "Bracket"; }

 private:
  int vocab_;
  int32_t eod_;
};

// Greedy decoding of the prompt {3, 17, 101, 5, 64} with gen's key/value cache until the
// context is full, each step's logits against `full`'s (the same weights) forward over the
// whole sequence: within 1e-5 of the largest logit, the same argmax; then the generator's own
// loop continues the prompt with the same tokens. "" or what differed.
QString cache_against_training(Generator& gen, GptModel<float>& full) {
  const ModelConfig& c = gen.config();
  auto made = full.new_activations();
  if (!made) return QString::fromStdString(made.status().message());
  GptActivations<float>& acts = **made;
  InferenceModel& m = gen.model();
  const int T = c.seq_length, V = c.vocab_size, Vp = c.padded_vocab_size();
  m.reserve(1, 64);
  std::vector<int32_t> seq = {3, 17, 101, 5, 64};
  const std::vector<int32_t> prompt = seq;
  std::vector<int32_t> positions(seq.size()), slot_ids(seq.size(), 0);
  for (size_t i = 0; i < seq.size(); i++) positions[i] = static_cast<int32_t>(i);
  int32_t last = static_cast<int32_t>(seq.size()) - 1;
  const float* logits = m.forward(seq.data(), slot_ids.data(), positions.data(),
                                  static_cast<int>(seq.size()), &last, 1);
  std::vector<int32_t> tokens(T, 0), targets(T, 0);
  while (static_cast<int>(seq.size()) < T) {
    std::copy(seq.begin(), seq.end(), tokens.begin());
    full.forward(acts, tokens.data(), targets.data(), 0, 0.0f);
    const float* want = acts.logits + (seq.size() - 1) * static_cast<size_t>(Vp);
    double max_diff = 0, max_ref = 0;
    int worst = 0;
    for (int v = 0; v < V; v++) {
      const double d = std::abs(double(logits[v]) - want[v]);
      if (d > max_diff) max_diff = d, worst = v;
      max_ref = std::max(max_ref, std::abs(double(want[v])));
    }
    if (!(max_diff <= 1e-5 * max_ref))
      return QString(
                 "step %1: logit %2 is %3 with the cache, %4 recomputed "
                 "(max |diff| %5 > 1e-5 x max |logit| %6)")
          .arg(seq.size())
          .arg(worst)
          .arg(logits[worst], 0, 'g', 9)
          .arg(want[worst], 0, 'g', 9)
          .arg(max_diff)
          .arg(max_ref);
    const int32_t a = argmax_token(logits, V), b = argmax_token(want, V);
    if (a != b)
      return QString("step %1: cached greedy token %2, recomputed %3")
          .arg(seq.size())
          .arg(a)
          .arg(b);
    seq.push_back(a);
    int32_t pos = static_cast<int32_t>(seq.size()) - 1, slot = 0, row = 0;
    logits = m.forward(&a, &slot, &pos, 1, &row, 1);
  }
  // The generator's own loop gives the same continuation; it stops when the context is full,
  // having chosen T - prompt tokens.
  const std::vector<int32_t> generated = generate_one(gen, request(prompt, 1000));
  const QString want = ids(std::vector<int32_t>(seq.begin() + prompt.size(), seq.end()));
  if (ids(generated) != want)
    return "the generator's loop gave " + ids(generated) + ", stepping by hand " + want;
  return {};
}

}  // namespace

class Generation : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { kernels::set_num_threads(2); }

  // Greedy decoding with the cache against the training model's forward over the whole
  // sequence at every step: the same tokens, and logits within 1e-5 relative (max norm); for
  // GPT-2 and for the Llama family (RoPE at each cached row's position, grouped keys and values),
  // each also with MoE layers (GPT-2's GELU experts with biases in every other layer, Mixtral's
  // SwiGLU experts in every layer: the router's softmax, top 2 of 4 renormalised).
  void kv_cache_equals_full_recompute_data() {
    QTest::addColumn<bool>("llama");
    QTest::addColumn<bool>("moe");
    QTest::newRow("gpt2") << false << false;
    QTest::newRow("llama") << true << false;
    QTest::newRow("gpt2 moe") << false << true;
    QTest::newRow("mixtral") << true << true;
  }
  void kv_cache_equals_full_recompute() {
    QFETCH(bool, llama);
    QFETCH(bool, moe);
    const ModelConfig c = moe ? moe_config(llama) : llama ? llama_config() : test_config();
    QVERIFY(c.validate().empty());
    GptModel<float> full(c, 1);
    QVERIFY(full.init_weights(kSeed));
    std::unique_ptr<Generator> gen = Generator::random(c, kSeed, nullptr);
    const QString error = cache_against_training(*gen, full);
    QVERIFY2(error.isEmpty(), qPrintable(error));
  }

  // A Mixtral-shaped model trained 3 steps with token dropping (capacity factor 1) and saved:
  // `lattice generate`'s loader gives the training forward's logits and greedy tokens (every
  // route kept at inference, so the reference is the same weights' forward without dropping).
  void trained_moe_checkpoint_generates_as_the_training_forward() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    TrainOptions o;
    o.model = moe_config(true);
    o.model.moe_expert_capacity_factor = 1.0f;
    o.model.moe_aux_loss_coeff = 0.01f;
    o.micro_batch_size = 2;
    o.global_batch_size = 2;
    o.train_iters = 3;
    o.mock_data = true;
    o.eval_iters = 0;
    o.threads = 2;
    o.optim.lr = 1e-2f;
    o.save = dir.filePath("ckpt").toStdString();
    o.no_db = true;
    SilentSink sink;
    Result<TrainSummary> trained = train(o, sink);
    QVERIFY2(trained, trained ? "" : trained.status().message().c_str());
    InferenceOptions io;
    io.load = o.save;
    Result<std::unique_ptr<Generator>> gen = Generator::load(io, nullptr);
    QVERIFY2(gen, gen ? "" : gen.status().message().c_str());
    ModelConfig c = (*gen)->config();
    QCOMPARE(c.num_experts, 4);
    c.moe_expert_capacity_factor = 0;  // the reference keeps every route, as generation does
    GptModel<float> full(c, 1);
    // The loaded weights, by name (the two arenas are the same layout of the whole model).
    const ParamLayout& from = (*gen)->model().layout();
    for (const ParamTensor& t : full.layout().tensors()) {
      const ParamTensor* w = from.find(t.name);
      QVERIFY2(w && w->numel == t.numel, t.name.c_str());
      std::copy_n((*gen)->model().params() + w->offset, t.numel, full.params() + t.offset);
    }
    full.refresh_compute_copy();
    const QString error = cache_against_training(**gen, full);
    QVERIFY2(error.isEmpty(), qPrintable(error));
  }

  void same_seed_same_sample_other_seed_other_sample() {
    std::unique_ptr<Generator> gen = Generator::random(test_config(), kSeed, nullptr);
    const SamplingParams a{2.0f, 0, 0.0f, 7}, b{2.0f, 0, 0.0f, 8};
    const auto first = generate_one(*gen, request({1, 2, 3}, 24, a));
    const auto again = generate_one(*gen, request({1, 2, 3}, 24, a));
    const auto other = generate_one(*gen, request({1, 2, 3}, 24, b));
    QCOMPARE(ids(again), ids(first));
    QVERIFY2(ids(other) != ids(first),
             qPrintable("seeds 7 and 8 drew the same 24 tokens: " + ids(first)));
    const auto greedy = generate_one(*gen, request({1, 2, 3}, 24));
    QVERIFY2(ids(first) != ids(greedy), "temperature 2 sampling drew the greedy continuation");
  }

  void top_k_1_and_tiny_top_p_are_greedy() {
    std::unique_ptr<Generator> gen = Generator::random(test_config(), kSeed, nullptr);
    const auto greedy = generate_one(*gen, request({9, 8, 7}, 20));
    QCOMPARE(ids(generate_one(*gen, request({9, 8, 7}, 20, {1.0f, 1, 0.0f, 5}))), ids(greedy));
    QCOMPARE(ids(generate_one(*gen, request({9, 8, 7}, 20, {1.0f, 0, 1e-6f, 5}))), ids(greedy));
    // On hand-made logits too, including a tie (the lower id wins).
    const float logits[] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
    std::mt19937_64 rng(1);
    SamplingScratch scratch;
    QCOMPARE(sample_token(logits, 5, {1.0f, 1, 0.0f, 1}, rng, scratch), 1);
    QCOMPARE(sample_token(logits, 5, {1.0f, 0, 1e-6f, 1}, rng, scratch), 1);
    QCOMPARE(sample_token(logits, 5, {0.0f, 0, 0.0f, 1}, rng, scratch), 1);
    // top-k 2 never draws outside {1, 3}.
    for (int i = 0; i < 200; i++) {
      const int32_t t = sample_token(logits, 5, {1.0f, 2, 0.0f, 1}, rng, scratch);
      QVERIFY2(t == 1 || t == 3, qPrintable(QString("top-k 2 drew %1").arg(t)));
    }
    const double lse = std::log(std::exp(0.5) + 2 * std::exp(3.0) + std::exp(-1.0) + std::exp(2.9));
    QVERIFY(std::abs(token_logprob(logits, 5, 4) - (2.9 - lse)) < 1e-6);
  }

  // top_logprobs: the k most likely tokens, most likely first (ties: lower id), with exactly
  // token_logprob's values; for generated tokens and, with prompt_logprobs, prompt tokens.
  void top_logprobs_are_the_most_likely_tokens() {
    const float logits[] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
    SamplingScratch scratch;
    std::vector<TokenLogprob> top;
    top_token_logprobs(logits, 5, 3, top, scratch);
    QCOMPARE(top.size(), size_t{3});
    const int32_t order[] = {1, 3, 4};
    for (int i = 0; i < 3; i++) {
      QCOMPARE(top[i].token, order[i]);
      QCOMPARE(top[i].logprob, token_logprob(logits, 5, order[i]));  // the same bits
    }
    top_token_logprobs(logits, 5, 9, top, scratch);
    QCOMPARE(top.size(), size_t{5});  // at most the vocabulary

    std::unique_ptr<Generator> gen = Generator::random(test_config(), kSeed, nullptr);
    GenerationRequest r = request({9, 8, 7, 6}, 5);  // greedy
    r.prompt_logprobs = true;
    r.top_logprobs = 4;
    auto res = gen->generate({r});
    QVERIFY(res.is_ok());
    const GenerationResult& g = (*res)[0];
    QCOMPARE(g.top_logprobs.size(), g.tokens.size());
    QCOMPARE(g.prompt_top_logprobs.size(), r.prompt.size() - 1);
    for (size_t k = 0; k < g.tokens.size(); k++) {
      QCOMPARE(g.top_logprobs[k].size(), size_t{4});
      // Greedy: the chosen token is the first alternative, with the same log-probability.
      QCOMPARE(g.top_logprobs[k][0].token, g.tokens[k]);
      QCOMPARE(g.top_logprobs[k][0].logprob, g.logprobs[k]);
      for (size_t j = 1; j < 4; j++)
        QVERIFY(g.top_logprobs[k][j].logprob <= g.top_logprobs[k][j - 1].logprob);
    }
    for (size_t k = 0; k + 1 < r.prompt.size(); k++) {
      const auto& alternatives = g.prompt_top_logprobs[k];
      QCOMPARE(alternatives.size(), size_t{4});
      QVERIFY(g.prompt_logprobs[k] <= alternatives[0].logprob);
      for (const TokenLogprob& t : alternatives)
        if (t.token == r.prompt[k + 1]) QCOMPARE(t.logprob, g.prompt_logprobs[k]);
    }
    // Without prompt_logprobs or logprobs, none.
    r.prompt_logprobs = false;
    r.logprobs = false;
    auto bare = gen->generate({r});
    QVERIFY(bare.is_ok());
    QVERIFY((*bare)[0].top_logprobs.empty() && (*bare)[0].prompt_top_logprobs.empty());
  }

  void batched_prompts_of_different_lengths_match_one_at_a_time() {
    std::unique_ptr<Generator> gen = Generator::random(test_config(), kSeed, nullptr, 4);
    std::vector<GenerationRequest> batch = {
        request({5}, 12),
        request({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 9, {1.0f, 0, 0.9f, 3}),
        request({40, 41, 42}, 15, {0.8f, 5, 0.0f, 11}),
        request({7, 7}, 0),
        request({100, 99, 98, 97, 96, 95}, 20, {1.5f, 0, 0.0f, 12}),
        request({60, 61}, 30)};  // six requests: two groups of max_batch_size 4
    batch[1].prompt_logprobs = true;
    auto together = gen->generate(batch);
    QVERIFY2(together.is_ok(), qPrintable(QString::fromStdString(together.status().message())));
    for (size_t i = 0; i < batch.size(); i++) {
      auto alone = gen->generate({batch[i]});
      QVERIFY(alone.is_ok());
      QVERIFY2(ids((*alone)[0].tokens) == ids((*together)[i].tokens),
               qPrintable(QString("prompt %1 alone: %2; batched: %3")
                              .arg(i)
                              .arg(ids((*alone)[0].tokens))
                              .arg(ids((*together)[i].tokens))));
      QCOMPARE((*together)[i].logprobs.size(), (*together)[i].tokens.size());
      for (size_t k = 0; k < (*alone)[0].logprobs.size(); k++)
        QVERIFY(std::abs((*alone)[0].logprobs[k] - (*together)[i].logprobs[k]) < 1e-4);
    }
    QCOMPARE((*together)[3].tokens.size(), size_t{0});
    QCOMPARE((*together)[1].prompt_logprobs.size(), batch[1].prompt.size() - 1);
  }

  // Cancelling one sequence of a batch ends only that one, at the step asked, and leaves the
  // others as they would be alone; a sequence cancelled before its group starts gets nothing.
  void cancel_ends_one_sequence_and_leaves_the_others() {
    std::unique_ptr<Generator> gen = Generator::random(test_config(), kSeed, nullptr, 2);
    std::vector<GenerationRequest> batch = {request({5, 6}, 12), request({1, 2, 3}, 12),
                                            request({40, 41}, 10, {0.8f, 5, 0.0f, 11}),
                                            request({9}, 8)};  // two groups of 2
    std::vector<int> seen(batch.size(), 0);
    std::vector<int> asked(batch.size(), 0);
    auto cancel = [&](int index) {
      asked[index]++;
      return (index == 1 && seen[1] >= 4) || index == 3;
    };
    auto out = gen->generate(
        batch, [&](int index, int32_t, float) { seen[index]++; }, cancel);
    QVERIFY2(out.is_ok(), qPrintable(QString::fromStdString(out.status().message())));
    QCOMPARE((*out)[1].finish, FinishReason::kCancelled);
    QCOMPARE(int((*out)[1].tokens.size()), 4);
    QCOMPARE((*out)[3].finish, FinishReason::kCancelled);
    QCOMPARE(int((*out)[3].tokens.size()), 0);
    QCOMPARE(seen[3], 0);
    for (size_t i : {size_t{0}, size_t{2}}) {
      QCOMPARE((*out)[i].finish, FinishReason::kLength);
      QVERIFY2(ids(generate_one(*gen, batch[i])) == ids((*out)[i].tokens),
               qPrintable(QString("sequence %1 changed by its neighbour's cancel").arg(i)));
    }
    QVERIFY2(asked[0] > 0 && asked[2] > 0, "every live sequence is asked");
  }

  void stops_at_eod_and_at_a_stop_string() {
    const ModelConfig c = test_config();
    std::unique_ptr<Generator> gen = Generator::random(c, kSeed, nullptr);
    const auto greedy = generate_one(*gen, request({11, 12, 13}, 20));
    QCOMPARE(int(greedy.size()), 20);
    // EOD: the tokenizer's end-of-document id is the greedy continuation's 5th token.
    const int32_t eod = greedy[4];
    size_t first_eod = 0;
    while (greedy[first_eod] != eod) first_eod++;
    BracketTokenizer tok(c.vocab_size, eod);
    gen->set_tokenizer(&tok);
    GenerationRequest r = request({11, 12, 13}, 20);
    r.stop_at_eod = true;
    auto out = gen->generate({r});
    QVERIFY(out.is_ok());
    QCOMPARE(ids((*out)[0].tokens),
             ids(std::vector<int32_t>(greedy.begin(), greedy.begin() + first_eod + 1)));
    QCOMPARE((*out)[0].finish, FinishReason::kEod);
    QCOMPARE((*out)[0].text, tok.decode(std::span(greedy.data(), first_eod)));
    // A stop string: the 8th token's text; the text ends before it.
    const int32_t stop_id = greedy[7];
    size_t first_stop = 0;
    while (greedy[first_stop] != stop_id) first_stop++;
    r.stop_at_eod = false;
    r.stop = {tok.decode(std::span(&stop_id, 1))};
    out = gen->generate({r});
    QVERIFY(out.is_ok());
    QCOMPARE((*out)[0].finish, FinishReason::kStop);
    QCOMPARE(int((*out)[0].tokens.size()), int(first_stop) + 1);
    QCOMPARE((*out)[0].text, tok.decode(std::span(greedy.data(), first_stop)));
    // Without either, the length ends it.
    r.stop.clear();
    out = gen->generate({r});
    QCOMPARE((*out)[0].finish, FinishReason::kLength);
  }

  void bad_requests_name_the_problem() {
    const ModelConfig c = test_config();
    std::unique_ptr<Generator> gen = Generator::random(c, kSeed, nullptr);
    struct Case {
      GenerationRequest r;
      const char* says;
    };
    std::vector<int32_t> too_long(c.seq_length + 1, 1);
    const Case cases[] = {{request({}, 5), "empty"},
                          {request(too_long, 5), "context is 48"},
                          {request({1, 500}, 5), "token id 500"},
                          {request({1}, -1), "0 or more"},
                          {request({1}, 5, {-1.0f, 0, 0.0f, 0}), "temperature"},
                          {request({1}, 5, {1.0f, 0, 2.0f, 0}), "top-p"}};
    for (const Case& k : cases) {
      auto out = gen->generate({k.r});
      QVERIFY(!out.is_ok());
      QVERIFY2(out.status().message().find(k.says) != std::string::npos,
               out.status().message().c_str());
    }
  }
};

QTEST_GUILESS_MAIN(Generation)
#include "test_generation.moc"
