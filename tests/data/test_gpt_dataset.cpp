// Specification of Lattice's GPT sample order: numpy's legacy RandomState reproduced bit for
// bit, Megatron-core's GPTDataset indices and tokens reproduced exactly (against
// tests/data/gpt_reference.json, written by an independent numpy transcription of
// Megatron), the properties every GPT sample order must have, blending, --split, and the
// on-disk index cache. The dataset is an in-memory fake: token p of sequence s is s*1000+p.
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/gpt_indices.h"
#include "data/index_cache.h"
#include "data/numpy_random.h"

namespace fs = std::filesystem;
using lattice::IndexSource;
using lattice::NumpyRandomState;
namespace gi = lattice::gpt_index;

namespace {

int32_t token_of(size_t sequence, size_t position) {
  return static_cast<int32_t>(sequence * 1000 + position);
}

// An IndexedDataset held in memory (one document per sequence), for tests that must not
// depend on the .bin/.idx reader.
class FakeDataset final : public lattice::IndexedDataset {
 public:
  explicit FakeDataset(std::vector<int32_t> lengths, std::string prefix = {})
      : lengths_(std::move(lengths)), prefix_(std::move(prefix)) {
    document_index_.resize(lengths_.size() + 1);
    std::iota(document_index_.begin(), document_index_.end(), int64_t{0});
    tokens_ = std::accumulate(lengths_.begin(), lengths_.end(), size_t{0});
  }
  lattice::TokenDtype dtype() const override { return lattice::TokenDtype::kI32; }
  size_t num_sequences() const override { return lengths_.size(); }
  size_t num_documents() const override { return lengths_.size(); }
  size_t num_tokens() const override { return tokens_; }
  std::span<const int32_t> sequence_lengths() const override { return lengths_; }
  std::span<const int64_t> document_index() const override { return document_index_; }
  void read(size_t seq, size_t offset, size_t count, int32_t* out) const override {
    assert(seq < lengths_.size() && offset + count <= static_cast<size_t>(lengths_[seq]));
    for (size_t i = 0; i < count; ++i) out[i] = token_of(seq, offset + i);
  }
  const std::string& prefix() const override { return prefix_; }

 private:
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_index_;  // (N + 1)
  std::string prefix_;
  size_t tokens_ = 0;
};

// A SampleSource whose sample i of source `id` starts with id * 1000000 + i.
class LabelledSource final : public lattice::SampleSource {
 public:
  LabelledSource(int id, int64_t size) : id_(id), size_(size) {}
  int64_t size() const override { return size_; }
  int seq_length() const override { return 4; }
  void sample(int64_t index, int32_t* tokens) const override {
    for (int i = 0; i < 5; ++i) tokens[i] = static_cast<int32_t>(id_ * 1000000 + index);
  }

 private:
  int id_;
  int64_t size_;
};

QJsonObject load_reference(const char* name) {
  QFile file(QStringLiteral(LATTICE_SOURCE_DIR "/tests/data/") + QString::fromUtf8(name));
  if (!file.open(QIODevice::ReadOnly)) qFatal("cannot open tests/data/%s", name);
  return QJsonDocument::fromJson(file.readAll()).object();
}

std::vector<int64_t> ints(const QJsonValue& value) {
  std::vector<int64_t> out;
  for (const QJsonValue& v : value.toArray()) out.push_back(static_cast<int64_t>(v.toDouble()));
  return out;
}

std::vector<int32_t> lengths_of(const QJsonObject& reference) {
  std::vector<int32_t> out;
  for (const int64_t v : ints(reference["sequence_lengths"]))
    out.push_back(static_cast<int32_t>(v));
  return out;
}

// "" when equal, else a message naming the array, the first differing index and both values.
template <typename A, typename B>
std::string first_difference(const std::string& what, const A& actual, const B& expected) {
  const size_t n = std::min<size_t>(std::size(actual), std::size(expected));
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int64_t>(actual[i]) != static_cast<int64_t>(expected[i])) {
      return what + "[" + std::to_string(i) + "] = " + std::to_string(actual[i]) + ", expected " +
             std::to_string(expected[i]);
    }
  }
  if (std::size(actual) != std::size(expected)) {
    return what + " has " + std::to_string(std::size(actual)) + " elements, expected " +
           std::to_string(std::size(expected));
  }
  return {};
}

#define EXPECT_SAME(what, actual, expected)                             \
  do {                                                                  \
    const std::string diff_ = first_difference(what, actual, expected); \
    QVERIFY2(diff_.empty(), diff_.c_str());                             \
  } while (false)

// make_numpy_shuffles.py's digest: h = h * 1000003 + v (mod 2**64), 16 hex digits.
std::string digest(const std::vector<int64_t>& values) {
  uint64_t h = 0;
  for (const int64_t v : values) h = h * 1000003ULL + static_cast<uint64_t>(v);
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(h));
  return buffer;
}

std::vector<int64_t> shuffled_range(NumpyRandomState& rs, int64_t n) {
  std::vector<int64_t> x(static_cast<size_t>(n));
  std::iota(x.begin(), x.end(), int64_t{0});
  rs.shuffle(std::span<int64_t>(x));
  return x;
}

std::string check_permutation(const std::string& what, const std::vector<int64_t>& actual,
                              const QJsonObject& expected) {
  if (expected.contains("permutation")) {
    return first_difference(what, actual, ints(expected["permutation"]));
  }
  const auto head = ints(expected["head"]);
  const auto tail = ints(expected["tail"]);
  std::string diff = first_difference(
      what + " head", std::vector<int64_t>(actual.begin(), actual.begin() + std::ssize(head)),
      head);
  if (diff.empty()) {
    diff = first_difference(
        what + " tail", std::vector<int64_t>(actual.end() - std::ssize(tail), actual.end()), tail);
  }
  if (diff.empty() && digest(actual) != expected["digest"].toString().toStdString()) {
    diff = what + " digest " + digest(actual) + ", expected " +
           expected["digest"].toString().toStdString();
  }
  return diff;
}

std::vector<int32_t> sample_tokens(const lattice::SampleSource& source, int64_t index) {
  std::vector<int32_t> tokens(static_cast<size_t>(source.seq_length() + 1));
  source.sample(index, tokens.data());
  return tokens;
}

// Lengths 1..40 from a fixed pattern, a zero-length sequence among them.
std::vector<int32_t> pattern_lengths(size_t n) {
  std::vector<int32_t> lengths(n);
  for (size_t i = 0; i < n; ++i) lengths[i] = static_cast<int32_t>((i * 53 + 7) % 40 + 1);
  if (n > 5) lengths[5] = 0;
  return lengths;
}

// Writes `{prefix}.bin/.idx` with the fake's tokens plus `base` (one document per sequence).
void write_dataset(const std::string& prefix, const std::vector<int32_t>& lengths,
                   int32_t base = 0) {
  auto builder = lattice::IndexedDatasetBuilder::create(prefix, lattice::TokenDtype::kI32);
  QVERIFY2(builder.is_ok(), builder.status().message().c_str());
  for (size_t s = 0; s < lengths.size(); ++s) {
    std::vector<int32_t> tokens(static_cast<size_t>(lengths[s]));
    for (size_t p = 0; p < tokens.size(); ++p) tokens[p] = base + token_of(s, p);
    const lattice::Status added = (*builder)->add_sequence(tokens);
    QVERIFY2(added.is_ok(), added.message().c_str());
    (*builder)->end_document();
  }
  const lattice::Status finished = (*builder)->finish();
  QVERIFY2(finished.is_ok(), finished.message().c_str());
}

lattice::GptDatasetOptions options_for(const QTemporaryDir& dir, int seq_length, uint64_t seed) {
  lattice::GptDatasetOptions options;
  options.seq_length = seq_length;
  options.seed = seed;
  options.cache_dir = dir.filePath(QStringLiteral("cache")).toStdString();
  return options;
}

}  // namespace

class TestGptDataset : public QObject {
  Q_OBJECT

 private slots:
  // ---- numpy's legacy RandomState --------------------------------------------------------
  void numpyRawOutputsMatchLegacySeeding() {
    for (const QJsonValue& c : load_reference("numpy_shuffles.json")["cases"].toArray()) {
      const auto seed = static_cast<uint32_t>(c["seed"].toDouble());
      NumpyRandomState rs(seed);
      std::vector<int64_t> raw;
      for (int i = 0; i < 16; ++i) raw.push_back(rs.next_uint32());
      EXPECT_SAME("raw_uint32 seed " + std::to_string(seed), raw, ints(c["raw_uint32"]));
    }
  }

  void numpyBoundedDrawsAbove32BitsUseTwoWords() {
    for (const QJsonValue& c : load_reference("numpy_shuffles.json")["cases"].toArray()) {
      const auto seed = static_cast<uint32_t>(c["seed"].toDouble());
      NumpyRandomState rs(seed);
      const QJsonArray expected = c["interval_1e12"].toArray();
      for (qsizetype i = 0; i < expected.size(); ++i) {
        const uint64_t draw = rs.random_interval(1000000000000ULL);
        QCOMPARE(QString::number(draw), expected[i].toString());
      }
    }
  }

  void numpyShufflesMatchForEverySeedAndSize() {
    for (const QJsonValue& c : load_reference("numpy_shuffles.json")["cases"].toArray()) {
      const auto seed = static_cast<uint32_t>(c["seed"].toDouble());
      for (const QJsonValue& s : c["shuffles"].toArray()) {
        NumpyRandomState rs(seed);
        const auto n = static_cast<int64_t>(s["n"].toDouble());
        const std::string diff = check_permutation(
            "shuffle(arange(" + std::to_string(n) + ")) seed " + std::to_string(seed),
            shuffled_range(rs, n), s.toObject());
        QVERIFY2(diff.empty(), diff.c_str());
      }
    }
  }

  void numpyConsecutiveShufflesContinueOneStream() {
    for (const QJsonValue& c : load_reference("numpy_shuffles.json")["cases"].toArray()) {
      const auto seed = static_cast<uint32_t>(c["seed"].toDouble());
      NumpyRandomState rs(seed);
      for (const QJsonValue& s : c["consecutive"].toArray()) {
        const auto n = static_cast<int64_t>(s["n"].toDouble());
        const std::string diff = check_permutation(
            "consecutive shuffle of " + std::to_string(n) + " seed " + std::to_string(seed),
            shuffled_range(rs, n), s.toObject());
        QVERIFY2(diff.empty(), diff.c_str());
      }
    }
  }

  // ---- Megatron-core reference -------------------------------------------------------------
  void indicesMatchMegatronReference() {
    const QJsonObject reference = load_reference("gpt_reference.json");
    const std::vector<int32_t> lengths = lengths_of(reference);
    for (const QJsonValue& c : reference["gpt"].toArray()) {
      const std::string name = c["name"].toString().toStdString();
      const gi::GptIndices ix = gi::build_gpt_indices(
          lengths, static_cast<size_t>(c["doc_begin"].toDouble()),
          static_cast<size_t>(c["doc_end"].toDouble()),
          static_cast<int64_t>(c["num_samples"].toDouble()), c["seq_length"].toInt(),
          static_cast<uint32_t>(c["seed"].toDouble()));
      QVERIFY2(ix.num_epochs == c["num_epochs"].toInt(), (name + " num_epochs").c_str());
      QVERIFY2(ix.separate_final_epoch == c["separate_final_epoch"].toBool(),
               (name + " separate_final_epoch").c_str());
      EXPECT_SAME(name + " document_index", ix.document_index, ints(c["document_index"]));
      EXPECT_SAME(name + " sample_index", ix.sample_index, ints(c["sample_index"]));
      EXPECT_SAME(name + " shuffle_index", ix.shuffle_index, ints(c["shuffle_index"]));
    }
  }

  void samplesMatchMegatronReference() {
    const QJsonObject reference = load_reference("gpt_reference.json");
    auto data = std::make_shared<FakeDataset>(lengths_of(reference));
    for (const QJsonValue& c : reference["gpt"].toArray()) {
      const std::string name = c["name"].toString().toStdString();
      QTemporaryDir dir;
      const auto options =
          options_for(dir, c["seq_length"].toInt(), static_cast<uint64_t>(c["seed"].toDouble()));
      // Twice: built, then loaded from the cache; both must give Megatron's tokens.
      for (int pass = 0; pass < 2; ++pass) {
        auto built = lattice::build_gpt_dataset(
            data, static_cast<size_t>(c["doc_begin"].toDouble()),
            static_cast<size_t>(c["doc_end"].toDouble()),
            static_cast<int64_t>(c["num_samples"].toDouble()), "train", options);
        QVERIFY2(built.is_ok(), built.status().message().c_str());
        const auto& dataset = **built;
        QCOMPARE(dataset.size(), static_cast<int64_t>(c["shuffle_index"].toArray().size()));
        const QJsonArray samples = c["first_samples"].toArray();
        for (qsizetype i = 0; i < samples.size(); ++i) {
          EXPECT_SAME(name + " pass " + std::to_string(pass) + " sample " + std::to_string(i),
                      sample_tokens(dataset, i), ints(samples[i]));
        }
      }
    }
  }

  void blendingIndicesMatchMegatronReference() {
    const QJsonObject blend = load_reference("gpt_reference.json")["blend"].toObject();
    std::vector<double> raw;
    for (const QJsonValue& w : blend["raw_weights"].toArray()) raw.push_back(w.toDouble());
    const std::vector<double> builder = gi::normalize(raw);
    const std::vector<double> blended = gi::normalize(builder);
    const auto size = static_cast<int64_t>(blend["size"].toDouble());
    const gi::BlendingIndices ix = gi::build_blending_indices(blended, size);
    EXPECT_SAME("dataset_index", ix.dataset_index, ints(blend["dataset_index"]));
    EXPECT_SAME("dataset_sample_index", ix.dataset_sample_index,
                ints(blend["dataset_sample_index"]));
    EXPECT_SAME("target sizes", gi::size_per_dataset(builder, size, 0.0),
                ints(blend["target_sizes"]));
    EXPECT_SAME("buffer sizes", gi::size_per_dataset(builder, size, gi::kMidLevelDatasetSurplus),
                ints(blend["buffer_sizes"]));
  }

  void splitBoundariesMatchMegatronReference() {
    for (const QJsonValue& c : load_reference("gpt_reference.json")["splits"].toArray()) {
      const std::string split = c["split"].toString().toStdString();
      const auto n = static_cast<size_t>(c["n"].toDouble());
      auto bounds = lattice::split_boundaries(split, n);
      QVERIFY2(bounds.is_ok(), bounds.status().message().c_str());
      QCOMPARE(bounds->size(), size_t{4});
      const QJsonArray expected = c["bounds"].toArray();
      for (qsizetype s = 0; s < 3; ++s) {
        const std::string what =
            "--split " + split + " n " + std::to_string(n) + " split " + std::to_string(s);
        if (expected[s].isNull()) {  // Megatron builds no such split: ours is empty
          QVERIFY2((*bounds)[s] == (*bounds)[s + 1], what.c_str());
        } else {
          const std::vector<size_t> actual = {(*bounds)[s], (*bounds)[s + 1]};
          EXPECT_SAME(what, actual, ints(expected[s]));
        }
      }
    }
  }

  // ---- properties of every GPT sample order ----------------------------------------------
  void everySampleHasSeqPlusOneTokensFromWholeDocumentRuns() {
    auto data = std::make_shared<FakeDataset>(pattern_lengths(97));
    QTemporaryDir dir;
    const int seq = 32;
    auto built = lattice::build_gpt_dataset(data, 0, 97, 500, "train", options_for(dir, seq, 9));
    QVERIFY2(built.is_ok(), built.status().message().c_str());
    const auto& dataset = **built;
    QVERIFY(dataset.size() >= 500);
    std::vector<int32_t> tokens(static_cast<size_t>(seq + 3));
    for (int64_t i = 0; i < dataset.size(); ++i) {
      std::fill(tokens.begin(), tokens.end(), -7);
      dataset.sample(i, tokens.data());
      QVERIFY2(tokens[seq + 1] == -7 && tokens[seq + 2] == -7,
               ("sample " + std::to_string(i) + " wrote past seq_length + 1 tokens").c_str());
      for (int t = 0; t <= seq; ++t) {
        QVERIFY2(tokens[t] >= 0,
                 ("sample " + std::to_string(i) + " token " + std::to_string(t) + " not written")
                     .c_str());
        // Within a sample a document continues (+1) or the next one starts at position 0.
        if (t > 0 && tokens[t] != tokens[t - 1] + 1) {
          QVERIFY2(tokens[t] % 1000 == 0, ("sample " + std::to_string(i) + " token " +
                                           std::to_string(t) + " jumps into a document")
                                              .c_str());
        }
      }
    }
  }

  void consecutiveSamplesOfAnUnshuffledEpochShareExactlyOneToken() {
    const FakeDataset data(pattern_lengths(60));
    const auto lengths = data.sequence_lengths();
    std::vector<int32_t> document_index(60);  // one epoch, documents in order, no shuffle
    std::iota(document_index.begin(), document_index.end(), 0);
    const int seq = 16;
    const int64_t epoch_tokens = gi::tokens_per_epoch(lengths, 0, 60);
    const std::vector<int64_t> sample_index =
        gi::build_sample_index(lengths, document_index, seq, 1, epoch_tokens);
    const auto samples = static_cast<int64_t>(sample_index.size() / 2) - 1;
    QCOMPARE(samples, (epoch_tokens - 1) / seq);
    std::vector<int32_t> corpus;  // the epoch's tokens, documents concatenated
    for (size_t s = 0; s < 60; ++s) {
      for (int32_t p = 0; p < lengths[s]; ++p) corpus.push_back(token_of(s, p));
    }
    std::vector<int32_t> previous, current(seq + 1);
    for (int64_t i = 0; i < samples; ++i) {
      gi::gather_sample(data, document_index, sample_index, i, seq, current.data());
      // Sample i is corpus[i * seq, i * seq + seq + 1): its last token opens sample i + 1.
      EXPECT_SAME(
          "unshuffled sample " + std::to_string(i), current,
          std::vector<int32_t>(corpus.begin() + i * seq, corpus.begin() + i * seq + seq + 1));
      if (!previous.empty()) {
        QVERIFY2(previous.back() == current.front(),
                 ("samples " + std::to_string(i - 1) + " and " + std::to_string(i) +
                  " do not share their boundary token")
                     .c_str());
        QVERIFY2(previous[seq - 1] != current.front(),
                 ("samples " + std::to_string(i - 1) + " and " + std::to_string(i) +
                  " share more than one token")
                     .c_str());
      }
      previous = current;
    }
  }

  void sameSeedSameOrderNewSeedNewOrder() {
    auto data = std::make_shared<FakeDataset>(pattern_lengths(80));
    QTemporaryDir dir_a, dir_b, dir_c;
    auto a = lattice::build_gpt_dataset(data, 0, 80, 300, "train", options_for(dir_a, 24, 1234));
    auto b = lattice::build_gpt_dataset(data, 0, 80, 300, "train", options_for(dir_b, 24, 1234));
    auto c = lattice::build_gpt_dataset(data, 0, 80, 300, "train", options_for(dir_c, 24, 1235));
    QVERIFY(a.is_ok() && b.is_ok() && c.is_ok());
    QCOMPARE((*a)->size(), (*b)->size());
    int64_t differing = 0;
    for (int64_t i = 0; i < (*a)->size(); ++i) {
      EXPECT_SAME("seed 1234 sample " + std::to_string(i), sample_tokens(**a, i),
                  sample_tokens(**b, i));
      if (i < (*c)->size() && sample_tokens(**a, i) != sample_tokens(**c, i)) ++differing;
    }
    QVERIFY2(differing > (*a)->size() / 2, "seed 1235 gives nearly the order of seed 1234");
  }

  // ---- blending ---------------------------------------------------------------------------
  void blendHonoursWeightsWithinOneSampleAtEveryPrefix() {
    const std::vector<double> weights = {0.2, 0.3, 0.5};
    const int64_t n = 10000;
    std::vector<std::pair<double, std::unique_ptr<lattice::SampleSource>>> sources;
    for (int k = 0; k < 3; ++k) {
      sources.emplace_back(weights[k] * 7.0, std::make_unique<LabelledSource>(k, n));
    }
    auto blended = lattice::blend_datasets(std::move(sources), n);
    QVERIFY2(blended.is_ok(), blended.status().message().c_str());
    QCOMPARE((*blended)->size(), n);
    std::vector<int64_t> count(3, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t label = sample_tokens(**blended, i)[0];
      const int k = label / 1000000;
      // Each source is read in order: its j-th appearance is its sample j.
      QCOMPARE(static_cast<int64_t>(label % 1000000), count[static_cast<size_t>(k)]);
      ++count[static_cast<size_t>(k)];
      for (size_t d = 0; d < 3; ++d) {
        const double error =
            static_cast<double>(count[d]) - weights[d] * static_cast<double>(i + 1);
        QVERIFY2(std::abs(error) < 1.0, ("after " + std::to_string(i + 1) + " samples source " +
                                         std::to_string(d) + " is off by " + std::to_string(error))
                                            .c_str());
      }
    }
    for (size_t d = 0; d < 3; ++d) {
      const double share = static_cast<double>(count[d]) / static_cast<double>(n);
      QVERIFY2(std::abs(share - weights[d]) <= 0.01 * weights[d],
               ("source " + std::to_string(d) + " share " + std::to_string(share)).c_str());
    }
  }

  void blendRefusesBadWeightsAndShortSources() {
    std::vector<std::pair<double, std::unique_ptr<lattice::SampleSource>>> negative;
    negative.emplace_back(-1.0, std::make_unique<LabelledSource>(0, 10));
    negative.emplace_back(2.0, std::make_unique<LabelledSource>(1, 10));
    auto bad = lattice::blend_datasets(std::move(negative), 5);
    QVERIFY(!bad.is_ok());
    QVERIFY2(bad.status().message().find("--data-path") != std::string::npos,
             bad.status().message().c_str());

    std::vector<std::pair<double, std::unique_ptr<lattice::SampleSource>>> short_source;
    short_source.emplace_back(1.0, std::make_unique<LabelledSource>(0, 10));
    short_source.emplace_back(1.0, std::make_unique<LabelledSource>(1, 3));
    auto too_few = lattice::blend_datasets(std::move(short_source), 20);
    QVERIFY(!too_few.is_ok());
    QVERIFY2(too_few.status().message().find("has only 3") != std::string::npos,
             too_few.status().message().c_str());
  }

  // ---- --split ----------------------------------------------------------------------------
  void splitBoundariesOfCommonSplits() {
    using Bounds = std::vector<size_t>;
    QCOMPARE(*lattice::split_boundaries("969,30,1", 1000), (Bounds{0, 969, 999, 1000}));
    QCOMPARE(*lattice::split_boundaries("100,0,0", 50), (Bounds{0, 50, 50, 50}));
    QCOMPARE(*lattice::split_boundaries("1,1,1", 3), (Bounds{0, 1, 2, 3}));
    QCOMPARE(*lattice::split_boundaries("1,1,1", 50), (Bounds{0, 17, 33, 50}));
    QCOMPARE(*lattice::split_boundaries(" 98 , 2 ", 1000), (Bounds{0, 980, 1000, 1000}));
    // Python's round() takes halves to even: 0.25 * 50 = 12.5 -> 12.
    QCOMPARE(*lattice::split_boundaries("2.5,2.5,5", 50), (Bounds{0, 12, 25, 50}));
  }

  void badSplitStringsAreErrorsNamingTheFlag() {
    for (const char* split : {"a,b", "0,0,0", "-1,2,3", "", "1,2,3,4", "1,,2", "1.2.3", "5e2"}) {
      const auto bounds = lattice::split_boundaries(split, 100);
      QVERIFY2(!bounds.is_ok(), split);
      QVERIFY2(bounds.status().message().find("--split \"" + std::string(split) + "\"") !=
                   std::string::npos,
               bounds.status().message().c_str());
    }
  }

  // ---- --data-path over real .bin/.idx files ---------------------------------------------
  void dataPathOfOnePrefixSplitsLikeMegatron() {
    QTemporaryDir dir;
    const std::string prefix = dir.filePath(QStringLiteral("a_text_document")).toStdString();
    std::vector<int32_t> lengths = pattern_lengths(100);
    lengths[5] = 3;  // Megatron's preprocessing writes no empty documents
    write_dataset(prefix, lengths);
    if (QTest::currentTestFailed()) return;
    lattice::GptDatasetOptions options;
    options.seq_length = 16;
    auto splits = lattice::build_gpt_splits({{1.0, prefix}}, "90,10,0", 200, 20, 5, options);
    QVERIFY2(splits.is_ok(), splits.status().message().c_str());
    QVERIFY(splits->train && splits->valid && !splits->test);  // no test documents
    QVERIFY(splits->train->size() >= 200 && splits->valid->size() >= 20);
    QVERIFY(fs::exists(dir.filePath(QStringLiteral("cache")).toStdString()));
    // The same samples as the split [0, 90) of an in-memory dataset with these lengths.
    auto fake = std::make_shared<FakeDataset>(lengths);
    QTemporaryDir fake_dir;
    auto expected = lattice::build_gpt_dataset(fake, 0, 90, 200, "train",
                                               options_for(fake_dir, 16, options.seed));
    QVERIFY(expected.is_ok());
    QCOMPARE(splits->train->size(), (*expected)->size());
    for (int64_t i = 0; i < splits->train->size(); ++i) {
      EXPECT_SAME("train sample " + std::to_string(i), sample_tokens(*splits->train, i),
                  sample_tokens(**expected, i));
    }
    const auto valid = sample_tokens(*splits->valid, 0);
    QVERIFY2(valid.front() / 1000 >= 90, "a valid sample from a train document");

    auto bad = lattice::build_gpt_splits({{1.0, prefix}}, "a,b", 200, 20, 5, options);
    QVERIFY(!bad.is_ok() && bad.status().message().find("--split") != std::string::npos);
    auto missing = lattice::build_gpt_splits({{1.0, prefix + "_missing"}}, "1", 1, 0, 0, options);
    QVERIFY(!missing.is_ok());
  }

  void dataPathOfWeightedPrefixesBlendsLikeMegatron() {
    QTemporaryDir dir;
    const std::string a = dir.filePath(QStringLiteral("a_text_document")).toStdString();
    const std::string b = dir.filePath(QStringLiteral("b_text_document")).toStdString();
    std::vector<int32_t> lengths = pattern_lengths(100);
    lengths[5] = 3;
    write_dataset(a, lengths);
    const std::vector<int32_t> b_lengths(lengths.begin(), lengths.begin() + 60);
    const int32_t b_base = 500000;  // tells b's tokens from a's
    write_dataset(b, b_lengths, b_base);
    if (QTest::currentTestFailed()) return;
    lattice::GptDatasetOptions options;
    options.seq_length = 16;
    auto splits = lattice::build_gpt_splits({{3.0, a}, {7.0, b}}, "90,10,0", 1000, 0, 0, options);
    QVERIFY2(splits.is_ok(), splits.status().message().c_str());
    QVERIFY(splits->train && !splits->valid && !splits->test);  // no valid samples asked for
    QCOMPARE(splits->train->size(), int64_t{300 + 700});        // ceil(1000 * w) per prefix

    // Megatron's members: a's documents [0, 90) with ceil(300 * 1.005) = 302 samples, b's
    // [0, 54) with ceil(700 * 1.005) = 704, interleaved by the greedy rule on the weights
    // normalised twice (builder, then BlendedDataset).
    QTemporaryDir fake_dir;
    auto member_a = lattice::build_gpt_dataset(std::make_shared<FakeDataset>(lengths), 0, 90, 302,
                                               "train", options_for(fake_dir, 16, 1234));
    auto member_b = lattice::build_gpt_dataset(std::make_shared<FakeDataset>(b_lengths), 0, 54, 704,
                                               "train", options_for(fake_dir, 16, 1234));
    QVERIFY(member_a.is_ok() && member_b.is_ok());
    const auto weights =
        lattice::gpt_index::normalize(lattice::gpt_index::normalize(std::vector<double>{3.0, 7.0}));
    const auto ix = lattice::gpt_index::build_blending_indices(weights, 1000);
    for (int64_t i = 0; i < 1000; ++i) {
      const bool from_b = ix.dataset_index[static_cast<size_t>(i)] == 1;
      std::vector<int32_t> expected = sample_tokens(
          from_b ? **member_b : **member_a, ix.dataset_sample_index[static_cast<size_t>(i)]);
      if (from_b) {
        for (int32_t& t : expected) t += b_base;
      }
      EXPECT_SAME("blended sample " + std::to_string(i), sample_tokens(*splits->train, i),
                  expected);
    }
  }

  // ---- the on-disk cache ------------------------------------------------------------------
  void secondBuildLoadsFromTheCache() {
    const FakeDataset data(pattern_lengths(70), "/nonexistent/corpus_text_document");
    QTemporaryDir dir;
    const auto options = options_for(dir, 16, 1234);
    const auto first = lattice::load_or_build_gpt_indices(data, 0, 70, 250, "train", options);
    QVERIFY2(first.source == IndexSource::kBuiltAndSaved, first.note.c_str());
    const auto key = lattice::gpt_index_cache_key(data, 0, 70, 250, "train", 16, 1234);
    const std::string sample_file =
        lattice::gpt_index_cache_path(options.cache_dir, key, "train", "sample_index.bin");
    QVERIFY2(fs::exists(sample_file), sample_file.c_str());
    const auto written = fs::last_write_time(sample_file);

    const auto second = lattice::load_or_build_gpt_indices(data, 0, 70, 250, "train", options);
    QVERIFY2(second.source == IndexSource::kLoaded, second.note.c_str());
    QVERIFY(fs::last_write_time(sample_file) == written);
    EXPECT_SAME("loaded document_index", second.indices.document_index,
                first.indices.document_index);
    EXPECT_SAME("loaded sample_index", second.indices.sample_index, first.indices.sample_index);
    EXPECT_SAME("loaded shuffle_index", second.indices.shuffle_index, first.indices.shuffle_index);
    QCOMPARE(second.indices.num_epochs, first.indices.num_epochs);
    // No temporary files are left behind.
    for (const auto& entry : fs::directory_iterator(options.cache_dir)) {
      QVERIFY2(entry.path().string().find(".tmp.") == std::string::npos, entry.path().c_str());
    }
  }

  void corruptOrStaleCacheFilesAreRebuilt() {
    const FakeDataset data(pattern_lengths(70), "/nonexistent/corpus_text_document");
    QTemporaryDir dir;
    const auto options = options_for(dir, 16, 77);
    const auto reference = lattice::load_or_build_gpt_indices(data, 0, 70, 250, "train", options);
    const auto key = lattice::gpt_index_cache_key(data, 0, 70, 250, "train", 16, 77);
    const auto path = [&](const char* affix) {
      return lattice::gpt_index_cache_path(options.cache_dir, key, "train", affix);
    };
    const auto damage = [&](const std::string& file, auto&& edit) {
      std::ifstream in(file, std::ios::binary);
      std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      in.close();
      edit(bytes);
      std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    };
    const std::vector<std::pair<std::string, std::function<void(std::string&)>>> damages = {
        {path("sample_index.bin"), [](std::string& b) { b[40] = static_cast<char>(b[40] ^ 1); }},
        {path("shuffle_index.bin"), [](std::string& b) { b.resize(b.size() - 9); }},
        {path("document_index.bin"), [](std::string& b) { b[0] = 'X'; }},
        {path("description.txt"), [](std::string& b) { b += "seed: 78\n"; }},
    };
    for (const auto& [file, edit] : damages) {
      damage(file, edit);
      const auto rebuilt = lattice::load_or_build_gpt_indices(data, 0, 70, 250, "train", options);
      QVERIFY2(rebuilt.source == IndexSource::kBuiltAndSaved, (file + ": " + rebuilt.note).c_str());
      EXPECT_SAME("rebuilt shuffle_index", rebuilt.indices.shuffle_index,
                  reference.indices.shuffle_index);
      const auto reloaded = lattice::load_or_build_gpt_indices(data, 0, 70, 250, "train", options);
      QVERIFY2(reloaded.source == IndexSource::kLoaded, (file + ": " + reloaded.note).c_str());
    }
    fs::remove(path("shuffle_index.bin"));
    const auto missing = lattice::load_or_build_gpt_indices(data, 0, 70, 250, "train", options);
    QVERIFY2(missing.source == IndexSource::kBuiltAndSaved, missing.note.c_str());
  }

  void cacheKeyCoversSeedSplitSamplesAndData() {
    const FakeDataset data(pattern_lengths(70), "/nonexistent/corpus_text_document");
    std::vector<int32_t> other_lengths = pattern_lengths(70);
    other_lengths[3] += 1;
    const FakeDataset other(other_lengths, "/nonexistent/corpus_text_document");
    const std::set<std::string> hashes = {
        lattice::gpt_index_cache_key(data, 0, 70, 250, "train", 16, 1234).hash,
        lattice::gpt_index_cache_key(data, 0, 70, 250, "train", 16, 1235).hash,
        lattice::gpt_index_cache_key(data, 0, 70, 251, "train", 16, 1234).hash,
        lattice::gpt_index_cache_key(data, 0, 70, 250, "train", 17, 1234).hash,
        lattice::gpt_index_cache_key(data, 1, 70, 250, "train", 16, 1234).hash,
        lattice::gpt_index_cache_key(data, 0, 70, 250, "valid", 16, 1234).hash,
        lattice::gpt_index_cache_key(other, 0, 70, 250, "train", 16, 1234).hash,
    };
    QCOMPARE(hashes.size(), size_t{7});

    QTemporaryDir dir;
    auto options = options_for(dir, 16, 1234);
    QVERIFY(lattice::load_or_build_gpt_indices(data, 0, 70, 250, "train", options).source ==
            IndexSource::kBuiltAndSaved);
    options.seed = 1235;
    const auto reseeded = lattice::load_or_build_gpt_indices(data, 0, 70, 250, "train", options);
    QVERIFY2(reseeded.source == IndexSource::kBuiltAndSaved, reseeded.note.c_str());
    size_t files = 0;
    for (const auto& entry : fs::directory_iterator(options.cache_dir)) {
      (void)entry;
      ++files;
    }
    QCOMPARE(files, size_t{8});  // two keys, four files each
  }

  void defaultCacheDirIsBesideThePrefix() {
    QTemporaryDir dir;
    auto data = std::make_shared<FakeDataset>(
        pattern_lengths(40), dir.filePath(QStringLiteral("corpus_text_document")).toStdString());
    lattice::GptDatasetOptions options;
    options.seq_length = 8;
    auto built = lattice::build_gpt_dataset(data, 0, 40, 50, "train", options);
    QVERIFY2(built.is_ok(), built.status().message().c_str());
    size_t files = 0;
    for (const auto& entry :
         fs::directory_iterator(dir.filePath(QStringLiteral("cache")).toStdString())) {
      QVERIFY2(entry.path().filename().string().find("-GPTDataset-train-") == 16,
               entry.path().c_str());
      ++files;
    }
    QCOMPARE(files, size_t{4});
  }

  void unwritableCacheFallsBackToMemory() {
    QTemporaryDir dir;
    const std::string blocker = dir.filePath(QStringLiteral("not_a_directory")).toStdString();
    std::ofstream(blocker) << "a file where the cache directory would go";
    const FakeDataset data(pattern_lengths(40), "/nonexistent/corpus_text_document");
    lattice::GptDatasetOptions options;
    options.seq_length = 8;
    options.cache_dir = blocker + "/cache";
    const auto loaded = lattice::load_or_build_gpt_indices(data, 0, 40, 50, "train", options);
    QVERIFY(loaded.source == IndexSource::kBuiltInMemory);
    QVERIFY2(loaded.note.find(options.cache_dir) != std::string::npos, loaded.note.c_str());
    QVERIFY(loaded.indices.num_samples() >= 50);

    auto shared = std::make_shared<FakeDataset>(pattern_lengths(40));
    auto built = lattice::build_gpt_dataset(shared, 0, 40, 50, "train", options);
    QVERIFY2(built.is_ok(), built.status().message().c_str());
  }

  // ---- argument errors --------------------------------------------------------------------
  void badArgumentsAreErrorsNamingTheFlag() {
    auto data = std::make_shared<FakeDataset>(pattern_lengths(40));
    QTemporaryDir dir;
    auto options = options_for(dir, 8, 1ULL << 32);
    auto seed = lattice::build_gpt_dataset(data, 0, 40, 10, "train", options);
    QVERIFY(!seed.is_ok());
    QVERIFY2(seed.status().message().find("--seed 4294967296") != std::string::npos,
             seed.status().message().c_str());
    options = options_for(dir, 1, 1234);
    auto seq = lattice::build_gpt_dataset(data, 0, 40, 10, "train", options);
    QVERIFY(!seq.is_ok());
    QVERIFY2(seq.status().message().find("--seq-length 1") != std::string::npos,
             seq.status().message().c_str());
    options = options_for(dir, 8, 1234);
    auto empty = lattice::build_gpt_dataset(data, 5, 6, 10, "valid", options);  // length 0
    QVERIFY(!empty.is_ok());
    QVERIFY2(empty.status().message().find("valid split") != std::string::npos,
             empty.status().message().c_str());
    auto outside = lattice::build_gpt_dataset(data, 0, 41, 10, "train", options);
    QVERIFY(!outside.is_ok());
  }
};

QTEST_GUILESS_MAIN(TestGptDataset)
#include "test_gpt_dataset.moc"
