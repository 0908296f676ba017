// Specification of the checkpoint file primitives, without MPI: CRC-32C gives the standard
// Castagnoli values whatever the chunking and alignment, on both its hardware and table paths;
// safetensors::write streams files of any length through its staging buffers (Note
// [checkpoint writes]) and reports the size and checksum of exactly the bytes on disk.
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/safetensors.h"
#include "common/files.h"

namespace st = lattice::safetensors;
using lattice::crc32c;

namespace {

// Deterministic bytes that are not all alike (a zero buffer would hide shifting mistakes).
std::vector<unsigned char> pattern(size_t n) {
  std::vector<unsigned char> v(n);
  uint32_t x = 2463534242u;
  for (unsigned char& b : v) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    b = static_cast<unsigned char>(x);
  }
  return v;
}

QString hex(uint32_t v) {
  return QString::asprintf("%08x", v);
}

}  // namespace

class CheckpointIo : public QObject {
  Q_OBJECT

 private slots:
  void crc32c_matches_the_standard_check_values() {
    const std::string digits = "123456789";
    QCOMPARE(hex(crc32c(0, digits.data(), digits.size())), hex(0xE3069283u));
    QCOMPARE(hex(lattice::crc32c_internal::portable(0, digits.data(), digits.size())),
             hex(0xE3069283u));
    QCOMPARE(hex(crc32c(0, nullptr, 0)), hex(0u));
    // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF, and 0, 1, ..., 31.
    const std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF);
    std::vector<unsigned char> ramp(32);
    std::iota(ramp.begin(), ramp.end(), 0);
    QCOMPARE(hex(crc32c(0, zeros.data(), 32)), hex(0x8A9136AAu));
    QCOMPARE(hex(crc32c(0, ones.data(), 32)), hex(0x62A8AB43u));
    QCOMPARE(hex(crc32c(0, ramp.data(), 32)), hex(0x46DD794Eu));
  }

  // The hardware path joins three streams in blocks of 3 x 8 KiB and 3 x 256 bytes; lengths
  // around those sizes and every start alignment must give the table path's value.
  void crc32c_paths_agree_at_every_length_and_alignment() {
    const std::vector<unsigned char> data = pattern(3 * 8192 * 2 + 3 * 256 + 64);
    for (size_t offset = 0; offset < 8; offset++)
      for (size_t n :
           {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{767}, size_t{768}, size_t{769},
            size_t{3 * 8192 - 1}, size_t{3 * 8192}, size_t{3 * 8192 + 9}, data.size() - 8}) {
        const uint32_t fast = crc32c(0, data.data() + offset, n);
        const uint32_t slow = lattice::crc32c_internal::portable(0, data.data() + offset, n);
        if (fast != slow)
          QFAIL(qPrintable(QString("crc32c over %1 bytes at offset %2: hardware %3, tables %4")
                               .arg(n)
                               .arg(offset)
                               .arg(hex(fast), hex(slow))));
      }
  }

  void crc32c_in_unaligned_chunks_equals_one_pass() {
    const std::vector<unsigned char> data = pattern(100'003);
    const uint32_t whole = crc32c(0, data.data(), data.size());
    for (size_t chunk : {size_t{1}, size_t{3}, size_t{13}, size_t{4096}, size_t{30'001}}) {
      uint32_t c = 0, c_tables = 0;
      for (size_t at = 0; at < data.size(); at += chunk) {
        const size_t n = std::min(chunk, data.size() - at);
        c = crc32c(c, data.data() + at, n);
        c_tables = lattice::crc32c_internal::portable(c_tables, data.data() + at, n);
      }
      QVERIFY2(c == whole && c_tables == whole,
               qPrintable(QString("chunks of %1 bytes: %2 (tables %3), one pass %4")
                              .arg(chunk)
                              .arg(hex(c), hex(c_tables), hex(whole))));
    }
  }

  // Larger than two 16 MiB staging buffers, with an odd total length and a tensor made by a
  // fill callback: the reported size and checksum are the file's, and it reads back exactly.
  void streamed_write_reports_the_file_size_and_checksum() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = dir.filePath("big.safetensors").toStdString();
    std::vector<float> big(9'000'001), small(3);
    for (size_t i = 0; i < big.size(); i++) big[i] = static_cast<float>(i % 1000) * 0.5f;
    small = {1.0f, -2.0f, 3.0f};
    const std::vector<st::TensorSource> sources = {
        {"a.big", {static_cast<int64_t>(big.size())}, big.data(), nullptr},
        {"b.filled",
         {5},
         nullptr,
         [](float* out) {
           for (int i = 0; i < 5; i++) out[i] = static_cast<float>(i) + 0.25f;
         }},
        {"c.small", {3}, small.data(), nullptr}};
    st::Written written;
    const lattice::Status s = st::write(path, sources, {{"k", "v"}}, &written);
    QVERIFY2(s.is_ok(), s.message().c_str());
    QVERIFY2(!QFile::exists(QString::fromStdString(path + ".tmp")), "the .tmp file is left over");

    int64_t bytes = 0;
    lattice::Result<uint32_t> on_disk = lattice::checkpoint_format::file_crc(path, &bytes);
    QVERIFY(on_disk.is_ok());
    QCOMPARE(static_cast<int64_t>(written.bytes), bytes);
    QCOMPARE(hex(written.crc32c), hex(*on_disk));
    QVERIFY2(bytes % 4096 != 0, "pick sizes whose total is not a multiple of the alignment");

    lattice::Result<st::File> f = st::File::open(path);
    QVERIFY2(f.is_ok(), f.status().message().c_str());
    std::vector<float> back(big.size());
    QVERIFY(f->read_float(*f->find("a.big"), back.data()).is_ok());
    for (size_t i = 0; i < big.size(); i++)
      if (back[i] != big[i])
        QFAIL(qPrintable(QString("a.big[%1] = %2, wrote %3").arg(i).arg(back[i]).arg(big[i])));
    float filled[5], tail[3];
    QVERIFY(f->read_float(*f->find("b.filled"), filled).is_ok());
    QVERIFY(f->read_float(*f->find("c.small"), tail).is_ok());
    QCOMPARE(filled[4], 4.25f);
    QCOMPARE(tail[2], 3.0f);
  }

  void small_write_is_exact_too() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("one.safetensors").toStdString();
    const float x = 7.0f;
    st::Written written;
    QVERIFY(st::write(path, {{"x", {}, &x, nullptr}}, {}, &written).is_ok());
    const std::string bytes = lattice::testing::slurp(path);
    QCOMPARE(static_cast<size_t>(written.bytes), bytes.size());
    QCOMPARE(hex(written.crc32c), hex(crc32c(0, bytes.data(), bytes.size())));
  }
};

QTEST_GUILESS_MAIN(CheckpointIo)
#include "test_checkpoint_io.moc"
