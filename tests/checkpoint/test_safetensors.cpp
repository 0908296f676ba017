// Specification of the safetensors reader and writer: what the writer puts on disk, that the
// reader gives it back exactly, and that every malformed file is refused with a message
// naming the file and the problem.
#include <QTemporaryDir>
#include <QTest>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "common/files.h"

namespace st = lattice::safetensors;

namespace {

using lattice::testing::slurp;
using lattice::testing::spit;

// A file from its parts: the 8-byte little-endian header length, the header, the data.
std::string raw_file(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return n;
}

// The three tensors most tests write: a matrix, a vector, a scalar.
struct Sample {
  std::vector<float> matrix = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};  // (2, 3)
  std::vector<float> vector = {7.0f, 8.0f, 9.0f, 10.0f};                  // (4)
  float scalar = 42.0f;                                                   // ()
  std::vector<st::TensorSource> sources() const {
    return {{"layer.matrix", {2, 3}, matrix.data(), nullptr},
            {"bias", {4}, vector.data(), nullptr},
            {"scale", {}, &scalar, nullptr}};
  }
};

}  // namespace

class TestSafetensors : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string path(const std::string& name) const {
    return dir_.filePath(QString::fromStdString(name)).toStdString();
  }
  // A valid file written by the writer, as bytes, for the corruption cases to damage.
  std::string sample_file_bytes() {
    const Sample sample;
    const std::string p = path("sample.safetensors");
    const lattice::Status s = st::write(p, sample.sources());
    return s ? slurp(p) : std::string();
  }

 private slots:
  void round_trip_keeps_names_shapes_metadata_and_bytes() {
    const Sample sample;
    const std::string p = path("round_trip.safetensors");
    const lattice::Status written = st::write(p, sample.sources(), {{"format", "pt"}});
    QVERIFY2(written, written.message().c_str());

    auto opened = st::File::open(p);
    QVERIFY2(opened, opened.status().message().c_str());
    const st::File& file = opened.value();
    QCOMPARE(file.tensors().size(), size_t{3});
    QCOMPARE(file.metadata().at("format"), std::string("pt"));
    struct Expected {
      const char* name;
      std::vector<int64_t> shape;
      const float* data;
      size_t numel;
    };
    for (const Expected& e : {Expected{"layer.matrix", {2, 3}, sample.matrix.data(), 6},
                              Expected{"bias", {4}, sample.vector.data(), 4},
                              Expected{"scale", {}, &sample.scalar, 1}}) {
      const st::TensorInfo* t = file.find(e.name);
      QVERIFY2(t, (std::string("tensor ") + e.name + " is missing after the round trip").c_str());
      QVERIFY2(t->dtype == st::Dtype::kF32, e.name);
      QVERIFY2(t->shape == e.shape,
               (std::string(e.name) + " has shape " + st::shape_to_string(t->shape) + ", wrote " +
                st::shape_to_string(e.shape))
                   .c_str());
      QCOMPARE(t->numel, e.numel);
      const auto bytes = file.bytes(*t);
      QCOMPARE(bytes.size(), e.numel * sizeof(float));
      QVERIFY2(std::memcmp(bytes.data(), e.data, bytes.size()) == 0,
               (std::string(e.name) + ": bytes differ from what was written").c_str());
      std::vector<float> as_float(t->numel);
      QVERIFY(file.read_float(*t, as_float.data()));
      for (size_t i = 0; i < e.numel; i++)
        QVERIFY2(std::bit_cast<uint32_t>(as_float[i]) == std::bit_cast<uint32_t>(e.data[i]),
                 (std::string(e.name) + "[" + std::to_string(i) + "] changed").c_str());
    }
    QVERIFY2(!std::filesystem::exists(p + ".tmp"), "the temporary file was left behind");
  }

  void writer_orders_by_name_and_pads_the_header_with_spaces() {
    Sample sample;
    std::vector<st::TensorSource> sources = sample.sources();
    const std::string a = path("order_a.safetensors"), b = path("order_b.safetensors");
    QVERIFY(st::write(a, sources, {{"format", "pt"}}));
    std::reverse(sources.begin(), sources.end());
    QVERIFY(st::write(b, sources, {{"format", "pt"}}));
    const std::string bytes = slurp(a);
    QVERIFY2(bytes == slurp(b), "the same tensors in another order gave different files");

    const uint64_t n = header_length(bytes);
    QVERIFY2(n % 8 == 0,
             ("header length " + std::to_string(n) + " is not a multiple of 8").c_str());
    QCOMPARE(bytes.size(), 8 + n + (6 + 4 + 1) * sizeof(float));
    const std::string header = bytes.substr(8, n);
    QVERIFY2(header.front() == '{', header.c_str());
    const size_t json_end = header.find_last_of('}');
    QVERIFY2(header.find_first_not_of(' ', json_end + 1) == std::string::npos,
             ("header padding is not all spaces: " + header).c_str());
    // Name order in the data: bias, layer.matrix, scale.
    auto file = st::File::open(a);
    QVERIFY2(file, file.status().message().c_str());
    QCOMPARE(file->tensors()[0].name, std::string("bias"));
    QCOMPARE(file->tensors()[1].name, std::string("layer.matrix"));
    QCOMPARE(file->tensors()[2].name, std::string("scale"));
    QCOMPARE(file->tensors()[1].begin, size_t{16});
  }

  void fill_function_supplies_data_when_there_is_no_pointer() {
    const std::string p = path("fill.safetensors");
    std::vector<st::TensorSource> sources = {{"t", {2, 2}, nullptr, [](float* out) {
                                                for (int i = 0; i < 4; i++)
                                                  out[i] = 10.0f + static_cast<float>(i);
                                              }}};
    QVERIFY(st::write(p, sources));
    auto file = st::File::open(p);
    QVERIFY2(file, file.status().message().c_str());
    std::vector<float> got(4);
    QVERIFY(file->read_float(*file->find("t"), got.data()));
    QVERIFY2(got == std::vector<float>({10, 11, 12, 13}), "fill output was not written");
  }

  void write_replaces_an_existing_file() {
    const std::string p = path("replace.safetensors");
    spit(p, "old contents");
    const float one = 1.0f;
    QVERIFY(st::write(p, {{"one", {1}, &one, nullptr}}));
    auto file = st::File::open(p);
    QVERIFY2(file, file.status().message().c_str());
    QVERIFY(file->find("one"));
  }

  void writer_rejects_bad_input_naming_the_file_and_tensor() {
    const std::string p = path("bad_input.safetensors");
    const float x = 0.0f;
    const lattice::Status twice = st::write(p, {{"w", {1}, &x, nullptr}, {"w", {1}, &x, nullptr}});
    QVERIFY(!twice);
    QVERIFY2(twice.message().find(p) != std::string::npos, twice.message().c_str());
    QVERIFY2(twice.message().find("'w' is given twice") != std::string::npos,
             twice.message().c_str());
    const lattice::Status reserved = st::write(p, {{"__metadata__", {1}, &x, nullptr}});
    QVERIFY2(!reserved && reserved.message().find("reserved") != std::string::npos,
             reserved.message().c_str());
    QVERIFY2(!std::filesystem::exists(p), "a refused write created the file");

    const std::string unwritable = path("no_such_dir/x.safetensors");
    const lattice::Status io = st::write(unwritable, {{"w", {1}, &x, nullptr}});
    QVERIFY2(!io && io.message().find(unwritable) != std::string::npos, io.message().c_str());
  }

  void missing_file_is_an_io_error_naming_it() {
    const std::string p = path("does_not_exist.safetensors");
    auto file = st::File::open(p);
    QVERIFY(!file);
    QVERIFY2(file.status().message().find("cannot open " + p) != std::string::npos,
             file.status().message().c_str());
  }

  void corrupt_files_are_refused_naming_file_and_problem_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QStringList>("expected");  // substrings of the message besides the path
    auto row = [](const char* tag, const std::string& bytes, QStringList expected) {
      QTest::newRow(tag) << QByteArray(bytes.data(), std::ssize(bytes)) << expected;
    };
    const std::string good = sample_file_bytes();
    QVERIFY(good.size() > 8);
    auto entry = [](const char* dtype, const char* shape, const char* offsets) {
      return std::string("{\"dtype\":\"") + dtype + "\",\"shape\":" + shape +
             ",\"data_offsets\":" + offsets + "}";
    };
    const std::string w8 = entry("F32", "[2]", "[0,8]");  // "w": two floats, 8 bytes
    const std::string zeros8(8, '\0'), zeros12(12, '\0'), zeros20(20, '\0');

    row("shorter than the header length", good.substr(0, 5), {"is 5 bytes long"});
    std::string huge_length = good;
    const uint64_t huge = uint64_t{1} << 40;
    std::memcpy(huge_length.data(), &huge, 8);
    row("header length past the end", huge_length,
        {"header length 1099511627776 runs past the end of the file"});
    row("truncated data", good.substr(0, good.size() - 4),
        {"tensor 'scale'", "past the end of the data", "truncated"});
    row("garbage JSON", raw_file("{\"w\": nonsense", ""), {"not valid JSON"});
    row("header not an object", raw_file("[1, 2]", ""), {"must be a JSON object"});
    row("no dtype", raw_file("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", zeros8),
        {"tensor 'w' has no \"dtype\" field"});
    row("no shape", raw_file("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", zeros8),
        {"tensor 'w' has no \"shape\" field"});
    row("no data_offsets", raw_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", zeros8),
        {"tensor 'w' has no \"data_offsets\" field"});
    row("unknown dtype", raw_file("{\"w\":" + entry("F33", "[2]", "[0,8]") + "}", zeros8),
        {"tensor 'w' has unknown dtype 'F33'", "BF16"});
    row("negative dimension", raw_file("{\"w\":" + entry("F32", "[-2]", "[0,8]") + "}", zeros8),
        {"tensor 'w' has shape [-2]", "non-negative"});
    row("offsets past the end", raw_file("{\"w\":" + entry("F32", "[16]", "[0,64]") + "}", zeros8),
        {"tensor 'w' has data_offsets [0, 64] past the end of the data (8 bytes"});
    row("offsets reversed", raw_file("{\"w\":" + entry("F32", "[2]", "[8,0]") + "}", zeros8),
        {"tensor 'w' has data_offsets [8, 0] that end before they begin"});
    row("size does not match shape",
        raw_file("{\"w\":" + entry("F32", "[3]", "[0,8]") + "}", zeros8),
        {"tensor 'w' has shape [3] and dtype F32, which is 3 x 4 bytes", "span 8 bytes"});
    row("overlapping tensors",
        raw_file("{\"a\":" + w8 + ",\"b\":" + entry("F32", "[2]", "[4,12]") + "}", zeros12),
        {"tensors 'a' [0, 8] and 'b' [4, 12] overlap"});
    row("hole between tensors",
        raw_file("{\"a\":" + w8 + ",\"b\":" + entry("F32", "[2]", "[12,20]") + "}", zeros20),
        {"data bytes [8, 12) before tensor 'b' belong to no tensor"});
    row("bytes after the last tensor", raw_file("{\"w\":" + w8 + "}", zeros12),
        {"the last 4 data bytes (after offset 8) belong to no tensor"});
    row("duplicate name", raw_file("{\"w\":" + w8 + ",\"w\":" + w8 + "}", zeros8),
        {"tensor 'w' appears twice in the header"});
    row("metadata not strings", raw_file("{\"__metadata__\":{\"epoch\":3}}", ""),
        {"__metadata__ must map strings to strings, but 'epoch' holds 3"});
  }

  void corrupt_files_are_refused_naming_file_and_problem() {
    QFETCH(QByteArray, bytes);
    QFETCH(QStringList, expected);
    const std::string p = path(std::string("corrupt_") + QTest::currentDataTag() + ".safetensors");
    spit(p, bytes.toStdString());
    auto file = st::File::open(p);
    QVERIFY2(!file, "a corrupt file was accepted");
    const std::string& message = file.status().message();
    QVERIFY2(message.find(p) != std::string::npos,
             ("message does not name the file: " + message).c_str());
    for (const QString& part : expected)
      QVERIFY2(message.find(part.toStdString()) != std::string::npos,
               ("message lacks '" + part.toStdString() + "': " + message).c_str());
  }

  void f16_and_bf16_bit_patterns_convert_exactly() {
    struct Case {
      uint16_t bits;
      float value;
    };
    const Case f16[] = {{0x3C00, 1.0f},        {0xC000, -2.0f},
                        {0x3800, 0.5f},        {0x7BFF, 65504.0f},
                        {0x0400, 0x1p-14f},                                // smallest normal
                        {0x0001, 0x1p-24f},    {0x03FF, 1023 * 0x1p-24f},  // subnormals
                        {0x3555, 0x1.554p-2f}, {0x0000, 0.0f}};
    for (const Case& c : f16)
      QVERIFY2(st::f16_to_float(c.bits) == c.value,
               ("f16 " + std::to_string(c.bits) + " gave " +
                std::to_string(st::f16_to_float(c.bits)) + ", expected " + std::to_string(c.value))
                   .c_str());
    QVERIFY2(std::signbit(st::f16_to_float(0x8000)) && st::f16_to_float(0x8000) == 0.0f, "f16 -0");
    QVERIFY2(std::isinf(st::f16_to_float(0x7C00)) && st::f16_to_float(0x7C00) > 0, "f16 +inf");
    QVERIFY2(std::isinf(st::f16_to_float(0xFC00)) && st::f16_to_float(0xFC00) < 0, "f16 -inf");
    QVERIFY2(std::isnan(st::f16_to_float(0x7E00)), "f16 nan");

    const Case bf16[] = {{0x3F80, 1.0f},      {0xC000, -2.0f},       {0x4049, 3.140625f},
                         {0x0001, 0x1p-133f}, {0x7F7F, 0x1.FEp127f}, {0x0000, 0.0f}};
    for (const Case& c : bf16)
      QVERIFY2(st::bf16_to_float(c.bits) == c.value,
               ("bf16 " + std::to_string(c.bits) + " gave " +
                std::to_string(st::bf16_to_float(c.bits)) + ", expected " + std::to_string(c.value))
                   .c_str());
    QVERIFY2(std::isinf(st::bf16_to_float(0xFF80)) && st::bf16_to_float(0xFF80) < 0, "bf16 -inf");
    QVERIFY2(std::isnan(st::bf16_to_float(0x7FC0)), "bf16 nan");
  }

  void to_float_reads_unaligned_little_endian_bytes() {
    // One odd byte first so that the values start unaligned, as they may in a file.
    const unsigned char f16_bytes[] = {0xAA, 0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38};
    std::vector<float> out(3);
    QVERIFY(st::to_float(st::Dtype::kF16, reinterpret_cast<const std::byte*>(f16_bytes + 1), 3,
                         out.data()));
    QVERIFY2(out == std::vector<float>({1.0f, -2.0f, 0.5f}), "F16 bytes 00 3C 00 C0 00 38");
    const unsigned char bf16_bytes[] = {0xAA, 0x80, 0x3F, 0x49, 0x40};
    QVERIFY(st::to_float(st::Dtype::kBF16, reinterpret_cast<const std::byte*>(bf16_bytes + 1), 2,
                         out.data()));
    QVERIFY2(out[0] == 1.0f && out[1] == 3.140625f, "BF16 bytes 80 3F 49 40");
    const unsigned char f32_bytes[] = {0xAA, 0x00, 0x00, 0x80, 0xBF};  // -1.0f
    QVERIFY(st::to_float(st::Dtype::kF32, reinterpret_cast<const std::byte*>(f32_bytes + 1), 1,
                         out.data()));
    QCOMPARE(out[0], -1.0f);
    out[0] = 5.0f;
    QVERIFY2(!st::to_float(st::Dtype::kI32, reinterpret_cast<const std::byte*>(f32_bytes), 1,
                           out.data()) &&
                 out[0] == 5.0f,
             "I32 must be refused without writing");
  }

  void read_float_converts_a_half_precision_file_and_refuses_integers() {
    const std::string p = path("mixed_dtypes.safetensors");
    const std::string header =
        "{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[4,6]},"
        "\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[6,10]}}";
    spit(p, raw_file(header, std::string("\x00\x3C\x00\xC0\x80\x3F\x07\x00\x00\x00", 10)));
    auto file = st::File::open(p);
    QVERIFY2(file, file.status().message().c_str());
    std::vector<float> out(2);
    QVERIFY(file->read_float(*file->find("h"), out.data()));
    QVERIFY2(out[0] == 1.0f && out[1] == -2.0f, "F16 tensor 'h' should read [1, -2]");
    QVERIFY(file->read_float(*file->find("b"), out.data()));
    QVERIFY2(out[0] == 1.0f, "BF16 tensor 'b' should read [1]");
    const lattice::Status refused = file->read_float(*file->find("i"), out.data());
    QVERIFY(!refused);
    QVERIFY2(refused.message().find(p) != std::string::npos &&
                 refused.message().find("'i' has dtype I32") != std::string::npos,
             refused.message().c_str());
  }
};

QTEST_APPLESS_MAIN(TestSafetensors)
#include "test_safetensors.moc"
