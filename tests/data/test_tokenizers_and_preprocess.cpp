// Tokenizers (NullTokenizer, SentencePiece trained here, Megatron's wrappers), the document
// readers, and `preprocess` end to end on real files; the data-parallel batch slices.
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <fstream>
#include <set>

#include "common/files.h"
#include "data/batch_sampler.h"
#include "data/documents.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/sentencepiece_tokenizer.h"
#include "lattice/tokenizer.h"

using namespace lattice;

namespace {
std::string write_file(const QTemporaryDir& dir, const char* name, const std::string& text) {
  const std::string path = dir.filePath(name).toStdString();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}
std::vector<std::string> read_all(const std::string& path, InputFormat f,
                                  std::vector<std::string> keys = {"text"}) {
  Result<DocumentReader> r = DocumentReader::open(path, f, keys);
  if (!r) qFatal("%s", r.status().message().c_str());
  std::vector<Document> docs;
  while (true) {
    Result<size_t> n = r->read(2, docs);  // small batches exercise the streaming
    if (!n) qFatal("%s", n.status().message().c_str());
    if (*n == 0) break;
  }
  std::vector<std::string> out;
  for (const Document& d : docs)
    for (const std::string& f : d.fields) out.push_back(f);
  return out;
}
std::vector<int32_t> document_tokens(const IndexedDataset& d, size_t doc) {
  std::vector<int32_t> ids;
  for (int64_t s = d.document_index()[doc]; s < d.document_index()[doc + 1]; s++) {
    const size_t n = static_cast<size_t>(d.sequence_lengths()[s]), at = ids.size();
    ids.resize(at + n);
    d.read(static_cast<size_t>(s), 0, n, ids.data() + at);
  }
  return ids;
}
TokenizerOptions tokenizer(const std::string& type, int vocab_size = 0,
                           const std::string& model_file = "") {
  TokenizerOptions o;
  o.type = type;
  o.vocab_size = vocab_size;
  o.model_file = model_file;
  return o;
}
const char* kCorpus =
    "The quick brown fox jumps over the lazy dog.\nA journey of a thousand miles begins with "
    "a single step.\nTo be or not to be, that is the question.\nAll that glitters is not "
    "gold.\nCaf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\n";
}  // namespace

class TokenizersAndPreprocess : public QObject {
  Q_OBJECT
 private slots:
  void null_tokenizer_is_megatrons() {
    auto t = make_tokenizer(tokenizer("NullTokenizer", 100));
    QVERIFY(t.is_ok());
    QCOMPARE((*t)->vocab_size(), 101);  // EOD = --vocab-size, one more id
    QCOMPARE((*t)->eod(), 100);
    QCOMPARE((*t)->encode("5 17 0 99"), (std::vector<int32_t>{5, 17, 0, 99}));
    const std::vector<int32_t> ids = {3, 1, 4};
    QCOMPARE((*t)->decode(ids), std::string("3 1 4"));
  }

  void tokenizer_errors_name_the_flag() {
    auto a = make_tokenizer(tokenizer("GPT2BPETokenizer"));
    QVERIFY(!a.is_ok());
    QVERIFY2(a.status().message().find("--vocab-file") != std::string::npos,
             a.status().message().c_str());
    auto b = make_tokenizer(tokenizer("SentencePieceTokenizer", 0, "/nonexistent.model"));
    QVERIFY(!b.is_ok());
    QVERIFY2(b.status().message().find("/nonexistent.model") != std::string::npos,
             b.status().message().c_str());
    auto c = make_tokenizer(tokenizer("WordPiece"));
    QVERIFY(!c.is_ok());
    QVERIFY2(c.status().message().find("--tokenizer-type 'WordPiece'") != std::string::npos,
             c.status().message().c_str());
  }

  void document_formats() {
    QTemporaryDir dir;
    const auto lines = write_file(dir, "a.txt", "one\ntwo words\r\n\nthree");
    QCOMPARE(read_all(lines, InputFormat::kLines),
             (std::vector<std::string>{"one", "two words", "", "three"}));
    const auto paras = write_file(dir, "b.txt", "p1 l1\np1 l2\n\n\np2\n");
    QCOMPARE(read_all(paras, InputFormat::kParagraphs),
             (std::vector<std::string>{"p1 l1\np1 l2", "p2"}));
    const auto fortune = write_file(dir, "c", "first\nfortune\n%\nsecond\n%\n");
    QCOMPARE(read_all(fortune, InputFormat::kFortune),
             (std::vector<std::string>{"first\nfortune", "second"}));
    QCOMPARE(*detect_input_format(fortune), InputFormat::kFortune);
    const auto jsonl = write_file(
        dir, "d.jsonl",
        "{\"text\": \"a\\nb\", \"title\": \"T\"}\n{\"title\": \"U\", \"text\": \"c\"}\n");
    QCOMPARE(*detect_input_format(jsonl), InputFormat::kJsonl);
    QCOMPARE(read_all(jsonl, InputFormat::kJsonl, {"text", "title"}),
             (std::vector<std::string>{"a\nb", "T", "c", "U"}));
  }

  void bad_jsonl_line_names_file_and_line() {
    QTemporaryDir dir;
    const auto jsonl =
        write_file(dir, "bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
    Result<DocumentReader> r = DocumentReader::open(jsonl, InputFormat::kJsonl, {"text"});
    QVERIFY(r.is_ok());
    std::vector<Document> docs;
    Result<size_t> n = r->read(10, docs);
    QVERIFY(!n.is_ok());
    QVERIFY2(n.status().message().find(jsonl + ":2:") != std::string::npos,
             n.status().message().c_str());
  }

  void sentencepiece_trains_and_round_trips() {
    QTemporaryDir dir;
    std::vector<std::string> texts;
    for (int i = 0; i < 40; i++) texts.push_back(kCorpus);
    SentencePieceTrainOptions o;
    o.model_prefix = dir.filePath("sp").toStdString();
    o.vocab_size = 300;
    o.threads = 2;
    const Status trained = train_sentencepiece(texts, o);
    QVERIFY2(trained.is_ok(), trained.message().c_str());
    auto gpt = load_sentencepiece(o.model_prefix + ".model", true);
    QVERIFY(gpt.is_ok());
    QCOMPARE((*gpt)->vocab_size(), 300);
    const std::string text = "All that glitters is not gold. Caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC";
    const std::vector<int32_t> ids = (*gpt)->encode(text);
    QVERIFY(!ids.empty());
    QCOMPARE((*gpt)->decode(ids), text);
    // Megatron's SentencePieceTokenizer appends <CLS> <SEP> <EOD> <MASK> and keeps them whole.
    auto sp = load_sentencepiece(o.model_prefix + ".model", false);
    QVERIFY(sp.is_ok());
    QCOMPARE((*sp)->vocab_size(), 304);  // pad, bos and eos are pieces of the trained model
    QCOMPARE((*sp)->eod(), 302);
    const std::vector<int32_t> with_special = (*sp)->encode("gold<EOD>gold");
    QVERIFY(std::count(with_special.begin(), with_special.end(), 302) == 1);
  }

  void preprocess_writes_megatron_datasets_in_input_order() {
    QTemporaryDir dir;
    std::string jsonl;
    for (int i = 0; i < 300; i++)
      jsonl += "{\"text\": \"" + std::to_string(i) + " " + std::to_string(i % 7) +
               "\", \"id\": \"" + std::to_string(i) + "\"}\n";
    jsonl += "{\"text\": \"\", \"id\": \"300\"}\n";  // an empty document: no tokens, no EOD
    const auto input = write_file(dir, "in.jsonl", jsonl);
    PreprocessOptions o;
    o.inputs = {input};
    o.json_keys = {"text", "id"};
    o.tokenizer = tokenizer("NullTokenizer", 1000);
    o.append_eod = true;
    std::vector<std::string> bytes;
    for (int workers : {1, 2}) {
      o.workers = workers;
      o.output_prefix = dir.filePath(QString("w%1").arg(workers)).toStdString();
      Result<PreprocessReport> r = preprocess(o, nullptr);
      QVERIFY2(r.is_ok(), r.is_ok() ? "" : r.status().message().c_str());
      QCOMPARE(r->documents, size_t(301));
      QCOMPARE(r->outputs.size(), size_t(2));
      auto d = IndexedDataset::open(o.output_prefix + "_text_document");
      QVERIFY2(d.is_ok(), d.is_ok() ? "" : d.status().message().c_str());
      QCOMPARE((*d)->dtype(), TokenDtype::kU16);
      QCOMPARE((*d)->num_documents(), size_t(301));
      QCOMPARE(document_tokens(**d, 123), (std::vector<int32_t>{123, 123 % 7, 1000}));
      QVERIFY(document_tokens(**d, 300).empty());
      auto ids = IndexedDataset::open(o.output_prefix + "_id_document");
      QVERIFY(ids.is_ok());
      QCOMPARE(document_tokens(**ids, 42), (std::vector<int32_t>{42, 1000}));
      bytes.push_back(testing::slurp(o.output_prefix + "_text_document.bin"));
    }
    QVERIFY2(bytes[0] == bytes[1], "two workers wrote different bytes than one");
  }

  void preprocess_refuses_ids_outside_the_vocabulary() {
    QTemporaryDir dir;
    const auto input = write_file(dir, "in.txt", "1 2 3\n4 5000 6\n");
    PreprocessOptions o;
    o.inputs = {input};
    o.output_prefix = dir.filePath("out").toStdString();
    o.tokenizer = tokenizer("NullTokenizer", 100);
    Result<PreprocessReport> r = preprocess(o, nullptr);
    QVERIFY(!r.is_ok());
    QVERIFY2(r.status().message().find("document 2 encodes to id 5000") != std::string::npos,
             r.status().message().c_str());
  }

  void data_parallel_slices_are_disjoint_and_cover_the_global_batch() {
    const int micro = 3, dp = 4, micro_batches = 5, global = micro * dp * micro_batches;
    for (int64_t consumed : {int64_t{0}, int64_t{global * 7}}) {
      std::set<int64_t> seen;
      for (int rank = 0; rank < dp; rank++)
        for (int m = 0; m < micro_batches; m++)
          for (int b = 0; b < micro; b++) {
            const int64_t s = sample_index(consumed, micro, dp, rank, m, b);
            QVERIFY2(seen.insert(s).second, qPrintable(QString("sample %1 read twice").arg(s)));
            QVERIFY(s >= consumed && s < consumed + global);
          }
      QCOMPARE(seen.size(), size_t(global));
    }
  }
};

QTEST_APPLESS_MAIN(TokenizersAndPreprocess)
#include "test_tokenizers_and_preprocess.moc"
