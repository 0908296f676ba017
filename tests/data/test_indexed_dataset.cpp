// Specification of Megatron's indexed dataset (.bin/.idx): what the builder puts on disk, read
// back field by field straight from the format (not through IndexedDataset); that files built
// by hand from the format are read correctly; and that every corrupt pair is refused with a
// message naming the file, the field and the values.
#include <QTemporaryDir>
#include <QTest>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/files.h"
#include "data/indexed_dataset.h"

using lattice::IndexedDataset;
using lattice::IndexedDatasetBuilder;
using lattice::TokenDtype;

namespace {

using lattice::testing::slurp;
using lattice::testing::spit;

// Little-endian integers appended byte by byte, independent of the host and of the engine.
struct Bytes {
  std::string data;
  void put(uint64_t value, int size) {
    for (int i = 0; i < size; i++) data += static_cast<char>((value >> (8 * i)) & 0xff);
  }
  void u8(uint8_t v) { put(v, 1); }
  void u16(uint16_t v) { put(v, 2); }
  void i32(int32_t v) { put(static_cast<uint32_t>(v), 4); }
  void i64(int64_t v) { put(static_cast<uint64_t>(v), 8); }
  void u64(uint64_t v) { put(v, 8); }
};

// Reads the same back, failing the test when the file ends early.
struct Cursor {
  const std::string& data;
  size_t at = 0;
  uint64_t get(int size) {
    if (at + size > data.size()) {
      QTest::qFail(qPrintable(QString("read of %1 bytes at offset %2 passes the end (%3 bytes)")
                                  .arg(size)
                                  .arg(at)
                                  .arg(data.size())),
                   __FILE__, __LINE__);
      return 0;
    }
    uint64_t value = 0;
    for (int i = 0; i < size; i++)
      value |= static_cast<uint64_t>(static_cast<uint8_t>(data[at + i])) << (8 * i);
    at += size;
    return value;
  }
};

// The .idx of Megatron's _IndexWriter, from the format: magic, version 1, dtype code, N, D + 1,
// int32 lengths, int64 byte offsets (cumulative length * itemsize from 0), int64 document index.
std::string megatron_idx(uint8_t code, int itemsize, const std::vector<int32_t>& lengths,
                         const std::vector<int64_t>& document_index) {
  Bytes b;
  b.data = std::string("MMIDIDX\0\0", 9);
  b.u64(1);
  b.u8(code);
  b.u64(lengths.size());
  b.u64(document_index.size());
  for (int32_t length : lengths) b.i32(length);
  int64_t pointer = 0;
  for (int32_t length : lengths) {
    b.i64(pointer);
    pointer += int64_t{length} * itemsize;
  }
  for (int64_t d : document_index) b.i64(d);
  return b.data;
}

// Offsets of the fields in an .idx with N sequences.
constexpr size_t kVersionAt = 9, kCodeAt = 17, kCountAt = 18, kDocCountAt = 26, kLengthsAt = 34;
size_t pointers_at(size_t n) {
  return kLengthsAt + 4 * n;
}
size_t documents_at(size_t n) {
  return kLengthsAt + 12 * n;
}

void overwrite(std::string& bytes, size_t at, uint64_t value, int size) {
  for (int i = 0; i < size; i++) bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

// The pair the corruption cases start from: uint16, sequences of 2, 3 and 1 tokens in two
// documents ({0, 1}, {2}); .idx is 34 + 36 + 24 = 94 bytes, .bin 12 bytes.
const std::vector<int32_t> kLengths = {2, 3, 1};
const std::vector<int64_t> kDocuments = {0, 2, 3};
std::string base_idx() {
  return megatron_idx(8, 2, kLengths, kDocuments);
}
std::string base_bin() {
  Bytes b;
  for (uint16_t t : {10, 11, 20, 21, 65535, 30}) b.u16(t);
  return b.data;
}

std::vector<int32_t> read_all(const IndexedDataset& data, size_t seq) {
  std::vector<int32_t> tokens(data.sequence_lengths()[seq]);
  data.read(seq, 0, tokens.size(), tokens.data());
  return tokens;
}

}  // namespace

class TestIndexedDataset : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string path(const char* name) const { return (dir_.path() + "/" + name).toStdString(); }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  // (1) Every byte the builder writes, checked against the format by a reader written here.
  void builderWritesMegatronsFormatByteForByte() {
    const std::string prefix = path("built");
    {
      auto created = IndexedDatasetBuilder::create(prefix, TokenDtype::kU16);
      QVERIFY2(created.is_ok(), created.status().message().c_str());
      auto& builder = *created.value();
      // document 0: two sentences; document 1: one empty sequence; document 2: none at all;
      // document 3: one sequence.
      const std::vector<int32_t> s0 = {1, 2, 3}, s1 = {65535}, s2 = {}, s3 = {7, 258};
      QVERIFY(builder.add_sequence(s0));
      QVERIFY(builder.add_sequence(s1));
      builder.end_document();
      QVERIFY(builder.add_sequence(s2));
      builder.end_document();
      builder.end_document();
      QVERIFY(builder.add_sequence(s3));
      builder.end_document();
      QVERIFY2(
          !std::filesystem::exists(prefix + ".bin") && !std::filesystem::exists(prefix + ".idx"),
          "the files must not appear before finish()");
      lattice::Status s = builder.finish();
      QVERIFY2(s.is_ok(), s.message().c_str());
    }
    QVERIFY(!std::filesystem::exists(prefix + ".bin.tmp"));
    QVERIFY(!std::filesystem::exists(prefix + ".idx.tmp"));

    const std::string bin = slurp(prefix + ".bin");
    QCOMPARE(bin, std::string("\x01\x00\x02\x00\x03\x00\xff\xff\x07\x00\x02\x01", 12));

    const std::string idx = slurp(prefix + ".idx");
    Cursor c{idx};
    QCOMPARE(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
    c.at = 9;
    QCOMPARE(c.get(8), uint64_t{1});  // version
    QCOMPARE(c.get(1), uint64_t{8});  // dtype code: uint16
    QCOMPARE(c.get(8), uint64_t{4});  // sequences
    QCOMPARE(c.get(8), uint64_t{5});  // document-index entries, the leading 0 included
    for (uint64_t length : {3, 1, 0, 2}) QCOMPARE(c.get(4), length);
    for (uint64_t pointer : {0, 6, 8, 8}) QCOMPARE(c.get(8), pointer);  // bytes, not tokens
    for (uint64_t doc : {0, 2, 3, 3, 4}) QCOMPARE(c.get(8), doc);
    QCOMPARE(c.at, idx.size());  // nothing after the document index
    QCOMPARE(idx.size(), size_t{34 + 4 * 4 + 8 * 4 + 8 * 5});
    // And the same bytes as the format written out independently.
    QCOMPARE(idx, megatron_idx(8, 2, {3, 1, 0, 2}, {0, 2, 3, 3, 4}));
  }

  void builderWritesInt32AsMegatron() {
    const std::string prefix = path("built32");
    {
      auto builder = IndexedDatasetBuilder::create(prefix, TokenDtype::kI32);
      QVERIFY(builder.is_ok());
      const std::vector<int32_t> s0 = {100000, -1, 0};
      QVERIFY((*builder)->add_sequence(s0));
      (*builder)->end_document();
      QVERIFY((*builder)->finish());
    }
    QCOMPARE(slurp(prefix + ".bin"), std::string("\xa0\x86\x01\x00\xff\xff\xff\xff\0\0\0\0", 12));
    QCOMPARE(slurp(prefix + ".idx"), megatron_idx(4, 4, {3}, {0, 1}));
  }

  void builderWithNothingWritesAnEmptyDataset() {
    const std::string prefix = path("empty");
    {
      auto builder = IndexedDatasetBuilder::create(prefix, TokenDtype::kU16);
      QVERIFY((*builder)->finish());
    }
    QCOMPARE(slurp(prefix + ".bin"), std::string());
    QCOMPARE(slurp(prefix + ".idx"), megatron_idx(8, 2, {}, {0}));
    auto data = IndexedDataset::open(prefix);
    QVERIFY2(data.is_ok(), data.status().message().c_str());
    QCOMPARE((*data)->num_sequences(), size_t{0});
    QCOMPARE((*data)->num_documents(), size_t{0});
  }

  void unfinishedBuilderLeavesNoFiles() {
    const std::string prefix = path("abandoned");
    {
      auto builder = IndexedDatasetBuilder::create(prefix, TokenDtype::kU16);
      const std::vector<int32_t> s0 = {1, 2};
      QVERIFY((*builder)->add_sequence(s0));
      QVERIFY(std::filesystem::exists(prefix + ".bin.tmp"));
    }
    QVERIFY(!std::filesystem::exists(prefix + ".bin.tmp"));
    QVERIFY(!std::filesystem::exists(prefix + ".bin"));
    QVERIFY(!std::filesystem::exists(prefix + ".idx"));
  }

  void finishRefusesASequenceOutsideADocument() {
    auto builder = IndexedDatasetBuilder::create(path("open_doc"), TokenDtype::kU16);
    const std::vector<int32_t> s0 = {1};
    QVERIFY((*builder)->add_sequence(s0));
    (*builder)->end_document();
    QVERIFY((*builder)->add_sequence(s0));
    const lattice::Status s = (*builder)->finish();
    QVERIFY(!s.is_ok());
    QVERIFY2(s.message().find("sequences 1..1 were added after the last end_document()") !=
                 std::string::npos,
             s.message().c_str());
  }

  void createFailsInAMissingDirectory() {
    auto builder = IndexedDatasetBuilder::create(path("no/such/dir/x"), TokenDtype::kU16);
    QVERIFY(!builder.is_ok());
    QVERIFY2(builder.status().message().find("cannot create " + path("no/such/dir/x") +
                                             ".bin.tmp") != std::string::npos,
             builder.status().message().c_str());
  }

  // (2) Pairs written from the format by hand are read as the format says.
  void readsHandBuiltUint16Pair() {
    const std::string prefix = path("hand16");
    spit(prefix + ".idx", base_idx());
    spit(prefix + ".bin", base_bin());
    auto opened = IndexedDataset::open(prefix);
    QVERIFY2(opened.is_ok(), opened.status().message().c_str());
    const IndexedDataset& data = *opened.value();
    QCOMPARE(data.dtype(), TokenDtype::kU16);
    QCOMPARE(data.prefix(), prefix);
    QCOMPARE(data.num_sequences(), size_t{3});
    QCOMPARE(data.num_documents(), size_t{2});
    QCOMPARE(data.num_tokens(), size_t{6});
    QCOMPARE(std::vector<int32_t>(data.sequence_lengths().begin(), data.sequence_lengths().end()),
             kLengths);
    QCOMPARE(std::vector<int64_t>(data.document_index().begin(), data.document_index().end()),
             kDocuments);
    QCOMPARE(read_all(data, 0), (std::vector<int32_t>{10, 11}));
    QCOMPARE(read_all(data, 1), (std::vector<int32_t>{20, 21, 65535}));  // no sign extension
    QCOMPARE(read_all(data, 2), (std::vector<int32_t>{30}));
    int32_t middle[2] = {};
    data.read(1, 1, 2, middle);  // tokens 1..2 of sequence 1
    QCOMPARE(middle[0], 21);
    QCOMPARE(middle[1], 65535);
  }

  void readsHandBuiltInt32Pair() {
    const std::string prefix = path("hand32");
    // Three documents: {seq 0, seq 1, seq 2}, {}, {seq 3}.
    spit(prefix + ".idx", megatron_idx(4, 4, {1, 2, 0, 2}, {0, 3, 3, 4}));
    Bytes bin;
    for (int32_t t : {70000, -5, 2147483647, 0, 50257}) bin.i32(t);
    spit(prefix + ".bin", bin.data);
    auto opened = IndexedDataset::open(prefix);
    QVERIFY2(opened.is_ok(), opened.status().message().c_str());
    const IndexedDataset& data = *opened.value();
    QCOMPARE(data.dtype(), TokenDtype::kI32);
    QCOMPARE(data.num_sequences(), size_t{4});
    QCOMPARE(data.num_documents(), size_t{3});
    QCOMPARE(data.num_tokens(), size_t{5});
    QCOMPARE(read_all(data, 0), (std::vector<int32_t>{70000}));
    QCOMPARE(read_all(data, 1), (std::vector<int32_t>{-5, 2147483647}));
    QCOMPARE(read_all(data, 2), (std::vector<int32_t>{}));
    QCOMPARE(read_all(data, 3), (std::vector<int32_t>{0, 50257}));
  }

  void roundTripsEveryTokenDtype() {
    struct Case {
      TokenDtype dtype;
      std::vector<int32_t> tokens;
    };
    const Case cases[] = {{TokenDtype::kU8, {0, 255, 7}},
                          {TokenDtype::kI8, {-128, 127, 0}},
                          {TokenDtype::kI16, {-32768, 32767, 1}},
                          {TokenDtype::kU16, {0, 65535, 50256}},
                          {TokenDtype::kI32, {INT32_MIN, INT32_MAX, 0}}};
    for (const Case& c : cases) {
      const std::string prefix = path("round_") + lattice::token_dtype_name(c.dtype);
      {
        auto builder = IndexedDatasetBuilder::create(prefix, c.dtype);
        QVERIFY(builder.is_ok());
        QVERIFY((*builder)->add_sequence(c.tokens));
        (*builder)->end_document();
        QVERIFY((*builder)->finish());
      }
      QCOMPARE(slurp(prefix + ".bin").size(), 3 * lattice::token_dtype_size(c.dtype));
      auto data = IndexedDataset::open(prefix);
      QVERIFY2(data.is_ok(), data.status().message().c_str());
      QCOMPARE((*data)->dtype(), c.dtype);
      QVERIFY2(read_all(**data, 0) == c.tokens, lattice::token_dtype_name(c.dtype));
    }
  }

  // (3) Every corruption refused with a message naming the file, the field and the values.
  void refusesCorruptPairs_data() {
    QTest::addColumn<QByteArray>("idx");
    QTest::addColumn<QByteArray>("bin");
    QTest::addColumn<QString>("message");  // {idx} and {bin} stand for the two paths
    auto row = [](const char* name, const std::string& idx, const std::string& bin,
                  const char* message) {
      QTest::newRow(name) << QByteArray(idx.data(), std::ssize(idx))
                          << QByteArray(bin.data(), std::ssize(bin)) << QString(message);
    };
    const std::string idx = base_idx(), bin = base_bin();
    const size_t n = kLengths.size();
    auto with = [&](size_t at, uint64_t value, int size) {
      std::string bytes = idx;
      overwrite(bytes, at, value, size);
      return bytes;
    };

    std::string magic = idx;
    magic[7] = 'Y';
    row("wrong magic", magic, bin,
        "{idx}: the file starts with bytes 4d4d49444944585900, not Megatron's index magic "
        "\"MMIDIDX\\0\\0\" (4d4d49444944580000); it is not a Megatron indexed dataset");
    row("empty idx", "", bin, "{idx}: the file is 0 bytes long, shorter than the 34-byte header");
    row("header cut short", idx.substr(0, 20), bin,
        "{idx}: the file is 20 bytes long, shorter than the 34-byte header");
    row("version 2", with(kVersionAt, 2, 8), bin,
        "{idx}: the version is 2 but Megatron's format has only version 1");
    row("dtype code 9", with(kCodeAt, 9, 1), bin,
        "{idx}: the dtype code is 9, not one of Megatron's codes 1..8");
    row("dtype code 0", with(kCodeAt, 0, 1), bin,
        "{idx}: the dtype code is 0, not one of Megatron's codes 1..8");
    row("int64 tokens", with(kCodeAt, 5, 1), bin,
        "{idx}: the dtype code is 5 (int64), which does not hold int32 token ids exactly");
    row("float32 tokens", with(kCodeAt, 7, 1), bin,
        "{idx}: the dtype code is 7 (float32), which does not hold int32 token ids exactly");
    row("truncated idx", idx.substr(0, idx.size() - 1), bin,
        "{idx}: the file is truncated: the header declares 3 sequences and 3 document-index "
        "entries, which take 94 bytes but the file is 93 bytes");
    row("sequence count too large", with(kCountAt, 4, 8), bin,
        "{idx}: the file is truncated: the header declares 4 sequences and 3 document-index "
        "entries, which take 106 bytes but the file is 94 bytes");
    row("sequence count overflows", with(kCountAt, uint64_t{1} << 62, 8), bin,
        "{idx}: the header declares 4611686018427387904 sequences and 3 document-index entries, "
        "which take more than 2^64 bytes; the file is 94 bytes");
    row("document count overflows", with(kDocCountAt, ~uint64_t{0}, 8), bin,
        "which take more than 2^64 bytes; the file is 94 bytes");
    row("trailing bytes", idx + std::string(5, '\0'), bin,
        "{idx}: the file has 5 trailing bytes after the document index: the header declares 3 "
        "sequences and 3 document-index entries, which take 94 bytes but the file is 99 bytes");
    row("multimodal modes", idx + std::string(3, '\0'), bin,
        "(as many as sequences: a multimodal index with sequence modes, which Lattice does not "
        "read)");
    std::string no_documents = idx.substr(0, documents_at(n));
    overwrite(no_documents, kDocCountAt, 0, 8);
    row("empty document index", no_documents, bin,
        "{idx}: the document index is empty; it must hold at least its leading 0");
    row("negative length", with(kLengthsAt + 4 * 1, static_cast<uint32_t>(-2), 4), bin,
        "{idx}: sequence 1 has a negative length, -2");
    row("pointer past the previous end", with(pointers_at(n) + 8 * 2, 12, 8), bin,
        "{idx}: sequence 2 points to byte 12 but the sequences before it end at byte 10");
    row("pointer inside the previous sequence", with(pointers_at(n) + 8 * 1, 2, 8), bin,
        "{idx}: sequence 1 points to byte 2 but the sequences before it end at byte 4");
    row("first pointer not 0", with(pointers_at(n), 2, 8), bin,
        "{idx}: sequence 0 points to byte 2 but the sequences before it end at byte 0");
    row("negative pointer", with(pointers_at(n) + 8, static_cast<uint64_t>(-4), 8), bin,
        "{idx}: sequence 1 points to byte -4 but the sequences before it end at byte 4");
    row("truncated bin", idx, bin.substr(0, 11),
        "{bin} is truncated: it is 11 bytes but {idx} says sequence 2 (1 uint16 tokens from "
        "byte 10) ends at byte 12");
    row("empty bin", idx, "",
        "{bin} is truncated: it is 0 bytes but {idx} says sequence 0 (2 uint16 tokens from "
        "byte 0) ends at byte 4");
    row("bin longer than the index says", idx, bin + "xx",
        "{bin} is 14 bytes but the 3 sequences in {idx} end at byte 12; the two files do not "
        "belong together");
    row("uint16 offsets under an int32 code", with(kCodeAt, 4, 1), bin,
        "{idx}: sequence 1 points to byte 4 but the sequences before it end at byte 8");
    row("uint16 tokens under an int32 index", megatron_idx(4, 4, kLengths, kDocuments), bin,
        "{bin} is truncated: it is 12 bytes but {idx} says sequence 1 (3 int32 tokens from byte "
        "8) ends at byte 20");
    row("document index not starting at 0", with(documents_at(n), 1, 8), bin,
        "{idx}: the document index starts at 1, not at 0");
    row("document index decreasing", with(documents_at(n) + 8, 4, 8), bin,
        "{idx}: document index entry 2 is 3, less than entry 1 (4); the entries must not "
        "decrease");
    row("document index not ending at N", with(documents_at(n) + 16, 2, 8), bin,
        "{idx}: the document index ends at 2 but there are 3 sequences; its last entry must be "
        "the sequence count");
  }

  void refusesCorruptPairs() {
    QFETCH(QByteArray, idx);
    QFETCH(QByteArray, bin);
    QFETCH(QString, message);
    const std::string prefix = path("corrupt");
    spit(prefix + ".idx", idx.toStdString());
    spit(prefix + ".bin", bin.toStdString());
    const std::string expected = message.replace("{idx}", QString::fromStdString(prefix + ".idx"))
                                     .replace("{bin}", QString::fromStdString(prefix + ".bin"))
                                     .toStdString();
    auto opened = IndexedDataset::open(prefix);
    QVERIFY2(!opened.is_ok(), "a corrupt pair was opened");
    QVERIFY2(opened.status().message().find(expected) != std::string::npos,
             ("expected \"" + expected + "\" in \"" + opened.status().message() + "\"").c_str());

    // The in-memory path (the fuzzer's) applies the same checks.
    auto in_memory = lattice::open_indexed_dataset_in_memory(
        prefix, std::as_bytes(std::span(idx.constData(), idx.size())),
        std::as_bytes(std::span(bin.constData(), bin.size())));
    QVERIFY(!in_memory.is_ok());
    QCOMPARE(in_memory.status().message(), opened.status().message());
  }

  void refusesAMissingFile() {
    const std::string prefix = path("half");
    spit(prefix + ".idx", base_idx());
    auto opened = IndexedDataset::open(prefix);
    QVERIFY(!opened.is_ok());
    QCOMPARE(opened.status().message(),
             "cannot open " + prefix + ".bin: No such file or directory");

    opened = IndexedDataset::open(path("nothing"));
    QVERIFY(!opened.is_ok());
    QCOMPARE(opened.status().message(),
             "cannot open " + path("nothing") + ".idx: No such file or directory");

    std::filesystem::create_directory(path("dir.bin"));
    spit(path("dir.idx"), base_idx());
    opened = IndexedDataset::open(path("dir"));
    QVERIFY(!opened.is_ok());
    QCOMPARE(opened.status().message(), "cannot read " + path("dir") + ".bin: not a regular file");
  }

  // (4) Megatron's dtype rule and the builder's range check.
  void dtypeFollowsTheVocabularySize() {
    QCOMPARE(lattice::token_dtype_for_vocab(50257), TokenDtype::kU16);
    QCOMPARE(lattice::token_dtype_for_vocab(65499), TokenDtype::kU16);
    QCOMPARE(lattice::token_dtype_for_vocab(65500), TokenDtype::kI32);
    QCOMPARE(lattice::token_dtype_for_vocab(128256), TokenDtype::kI32);
    QCOMPARE(lattice::token_dtype_size(TokenDtype::kU16), size_t{2});
    QCOMPARE(lattice::token_dtype_size(TokenDtype::kI32), size_t{4});
    QCOMPARE(std::string(lattice::token_dtype_name(TokenDtype::kU16)), std::string("uint16"));
  }

  void builderRefusesATokenOutsideTheDtype() {
    const std::string prefix = path("range");
    auto builder = IndexedDatasetBuilder::create(prefix, TokenDtype::kU16);
    QVERIFY(builder.is_ok());
    const std::vector<int32_t> fine = {1, 2}, too_big = {5, 65535, 65536}, negative = {-1};
    QVERIFY((*builder)->add_sequence(fine));
    lattice::Status s = (*builder)->add_sequence(too_big);
    QVERIFY(!s.is_ok());
    QCOMPARE(s.message(), prefix +
                              ".bin: token 65536 at position 2 of sequence 1 does not fit "
                              "the dataset's dtype uint16 (0..65535)");
    s = (*builder)->add_sequence(negative);
    QVERIFY(!s.is_ok());
    QCOMPARE(s.message(), prefix +
                              ".bin: token -1 at position 0 of sequence 1 does not fit the "
                              "dataset's dtype uint16 (0..65535)");
    // A refused sequence leaves no trace: the dataset holds only the sequences accepted.
    QVERIFY((*builder)->add_sequence(fine));
    (*builder)->end_document();
    QVERIFY((*builder)->finish());
    QCOMPARE(slurp(prefix + ".bin"), std::string("\x01\0\x02\0\x01\0\x02\0", 8));
    QCOMPARE(slurp(prefix + ".idx"), megatron_idx(8, 2, {2, 2}, {0, 2}));
  }

  void builderRefusesNonTokenDtypes() {
    for (TokenDtype dtype : {TokenDtype::kI64, TokenDtype::kF32, TokenDtype::kF64}) {
      auto builder = IndexedDatasetBuilder::create(path("float"), dtype);
      QVERIFY(!builder.is_ok());
      QCOMPARE(builder.status().message(),
               path("float") + ".bin: cannot write tokens as " + lattice::token_dtype_name(dtype) +
                   "; token datasets are uint8, int8, int16, uint16 or int32");
    }
  }
};

QTEST_GUILESS_MAIN(TestIndexedDataset)
#include "test_indexed_dataset.moc"
