// Image decoding and preprocessing (data/image_io.h, data/image_preprocess.h) against
// independent references written by tests/data/image_reference.py: PNGs from a pure-Python
// encoder of every colour type and depth (pixel-exact), PNG and JPEG from Pillow (JPEG: equal to
// Pillow's own decode, within kJpegTolerance), PyTorch's float64 antialiased bicubic
// interpolate, LLaVA's expand2square and CLIP normalisation in float64; and the one-sentence
// errors for missing, empty, truncated, corrupt and unsupported files; decoding from memory.
#include <QtTest/QtTest>

#include <QProcess>
#include <QTemporaryDir>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "data/image_io.h"
#include "data/image_preprocess.h"

using namespace lattice;

namespace {

const std::string kReference = std::string(LATTICE_SOURCE_DIR) + "/tests/data/image_reference.py";
// Pillow (Debian's python3-pil) decodes with the same libjpeg-turbo and the same settings
// (islow DCT, fancy upsampling), so its pixels are expected exactly.
constexpr int kJpegTolerance = 0;
// torch's float64 interpolate sums the same taps, possibly in another order.
constexpr double kResizeTolerance = 1e-9;
// float32 arithmetic on values of magnitude < 2.2.
constexpr double kNormTolerance = 2e-6;

template <typename T>
std::vector<T> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

struct Case {
  int h = 0, w = 0, out_h = 0, out_w = 0;
};

std::string first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                             int width, int tolerance, int* worst) {
  *worst = 0;
  std::string where;
  for (size_t i = 0; i < std::min(got.size(), want.size()); i++) {
    const int d = std::abs(int(got[i]) - int(want[i]));
    if (d > *worst) {
      *worst = d;
      if (d > tolerance && where.empty())
        where = "pixel (y " + std::to_string(i / 3 / width) + ", x " +
                std::to_string(i / 3 % width) + ", channel " + std::to_string(i % 3) + ") is " +
                std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
    }
  }
  return where;
}

}  // namespace

class ImageDataTest : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::map<std::string, Case> cases_;
  std::string path(const std::string& name) const {
    return dir_.filePath(name.c_str()).toStdString();
  }

  RgbImage raw_image(const std::string& name, int h, int w) {
    return RgbImage{w, h, read_raw<uint8_t>(path(name))};
  }

 private slots:
  void initTestCase() {
    QProcess p;
    p.start("/usr/bin/python3", {QString::fromStdString(kReference), dir_.path()});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, ("image_reference.py failed (it needs numpy, torch and Pillow: "
                                 "installers/install-deps.sh --tests): " +
                                 p.readAllStandardError().toStdString())
                                    .c_str());
    std::ifstream meta(path("meta.txt"));
    std::string line;
    while (std::getline(meta, line)) {
      std::istringstream in(line);
      std::string name;
      Case c;
      in >> name >> c.h >> c.w >> c.out_h >> c.out_w;
      cases_[name] = c;
    }
    QVERIFY(cases_.size() >= 20);
  }

  // Every PNG colour type and depth (gray 1/2/4/8/16, RGB, RGBA, gray+alpha at 8 and 16,
  // palette 4/8 with tRNS, gray with a tRNS key), an Adam7-interlaced RGB PNG and Pillow's RGB
  // PNG, pixel for pixel.
  void pngDecodesPixelExact() {
    int checked = 0;
    for (const auto& [name, c] : cases_) {
      if (name.rfind("png_", 0) != 0 && name != "pil_rgb") continue;
      Result<RgbImage> got = read_image(path(name + ".png"));
      QVERIFY2(got.is_ok(), got.status().message().c_str());
      QCOMPARE(got->width, c.w);
      QCOMPARE(got->height, c.h);
      int worst = 0;
      const std::string diff =
          first_difference(got->pixels, read_raw<uint8_t>(path(name + ".rgb")), c.w, 0, &worst);
      QVERIFY2(diff.empty(), (name + ": " + diff).c_str());
      checked++;
    }
    QCOMPARE(checked, 16);
  }

  void pngWrittenByLatticeReadsBack() {
    RgbImage image{19, 5, std::vector<uint8_t>(19 * 5 * 3)};
    for (size_t i = 0; i < image.pixels.size(); i++) image.pixels[i] = uint8_t(i * 37 + 11);
    const std::string file = path("lattice.png");
    const Status written = write_png(file, image);
    QVERIFY2(written.is_ok(), written.message().c_str());
    Result<RgbImage> back = read_image(file);
    QVERIFY2(back.is_ok(), back.status().message().c_str());
    QCOMPARE(back->width, 19);
    QCOMPARE(back->height, 5);
    QVERIFY(back->pixels == image.pixels);
    // Pillow reads the same pixels from it.
    QProcess p;
    p.start("/usr/bin/python3",
            {"-c",
             "import sys; from PIL import Image; "
             "sys.stdout.buffer.write(Image.open(sys.argv[1]).convert('RGB').tobytes())",
             QString::fromStdString(file)});
    QVERIFY(p.waitForFinished(60000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    const QByteArray pil = p.readAllStandardOutput();
    QVERIFY(std::vector<uint8_t>(pil.begin(), pil.end()) == image.pixels);
  }

  // Baseline 4:4:4 and 4:2:0, progressive and grayscale JPEGs from Pillow, against Pillow's own
  // decode; and near the pixels that were encoded (a check that the picture is the right one).
  void jpegDecodesAsPillow() {
    for (const char* name : {"jpg_q95_444", "jpg_q75_420", "jpg_progressive", "jpg_gray"}) {
      const Case c = cases_.at(name);
      Result<RgbImage> got = read_image(path(std::string(name) + ".jpg"));
      QVERIFY2(got.is_ok(), got.status().message().c_str());
      QCOMPARE(got->width, c.w);
      QCOMPARE(got->height, c.h);
      int worst = 0;
      std::string diff =
          first_difference(got->pixels, read_raw<uint8_t>(path(std::string(name) + ".pil.rgb")),
                           c.w, kJpegTolerance, &worst);
      QVERIFY2(diff.empty(), (std::string(name) + " against Pillow: " + diff).c_str());
      const std::vector<uint8_t> source = read_raw<uint8_t>(path(std::string(name) + ".src.rgb"));
      double total = 0;
      for (size_t i = 0; i < source.size(); i++) total += std::abs(got->pixels[i] - source[i]);
      const double mean = total / source.size();
      QVERIFY2(mean < 4.0, (std::string(name) + ": mean error against the encoded pixels " +
                            std::to_string(mean) + " >= 4")
                               .c_str());
    }
  }

  // decode_image (bytes in memory, as the server's data URLs) gives read_image's pixels for a
  // PNG and a JPEG, and names the given name in its errors.
  void decodingFromMemoryEqualsTheFile() {
    for (const char* name : {"pil_rgb.png", "jpg_q75_420.jpg"}) {
      std::ifstream in(path(name), std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
      QVERIFY(!bytes.empty());
      Result<RgbImage> file = read_image(path(name));
      Result<RgbImage> memory = decode_image(bytes.data(), bytes.size(), "part");
      QVERIFY2(file.is_ok() && memory.is_ok(), name);
      QCOMPARE(memory->width, file->width);
      QCOMPARE(memory->height, file->height);
      QVERIFY2(memory->pixels == file->pixels, name);
      Result<RgbImage> cut = decode_image(bytes.data(), bytes.size() / 2, "messages[0]");
      QVERIFY(!cut.is_ok());
      QVERIFY2(cut.status().message().find("'messages[0]'") != std::string::npos,
               cut.status().message().c_str());
    }
  }

  void cmykJpegIsRefusedNamingTheFile() {
    Result<RgbImage> got = read_image(path("jpg_cmyk.jpg"));
    QVERIFY(!got.is_ok());
    const std::string m = got.status().message();
    QVERIFY2(
        m.find(path("jpg_cmyk.jpg")) != std::string::npos && m.find("CMYK") != std::string::npos,
        m.c_str());
  }

  void badFilesGiveOneSentenceNamingTheFile_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("source");  // "" for a missing file
    QTest::addColumn<int>("keep");        // bytes of the source kept (-1: all)
    QTest::addColumn<int>("flip");        // byte offset xor'ed with 0x55 (-1: none)
    QTest::addColumn<QString>("phrase");
    QTest::newRow("missing") << "missing.png"
                             << "" << -1 << -1 << "cannot open image";
    QTest::newRow("empty") << "empty.png"
                           << "png_rgb8.png" << 0 << -1 << "is empty";
    QTest::newRow("truncated png")
        << "cut.png"
        << "png_rgb8.png" << 120 << -1 << "is not a valid PNG or is truncated";
    QTest::newRow("corrupt png") << "flip.png"
                                 << "png_rgb8.png" << -1 << 60
                                 << "is not a valid PNG or is truncated";
    QTest::newRow("truncated jpeg")
        << "cut.jpg"
        << "jpg_q95_444.jpg" << 900 << -1 << "is not a valid JPEG or is truncated";
    QTest::newRow("header-only jpeg")
        << "head.jpg"
        << "jpg_q95_444.jpg" << 40 << -1 << "is not a valid JPEG or is truncated";
    QTest::newRow("too large") << "huge.png"
                               << "png_huge.png" << -1 << -1
                               << "is 20000x10000, more than 178956970 pixels";
    QTest::newRow("not an image") << "text.png"
                                  << "meta.txt" << -1 << -1 << "is neither a PNG nor a JPEG";
  }
  void badFilesGiveOneSentenceNamingTheFile() {
    QFETCH(QString, file);
    QFETCH(QString, source);
    QFETCH(int, keep);
    QFETCH(int, flip);
    QFETCH(QString, phrase);
    const std::string target = path(file.toStdString());
    if (!source.isEmpty()) {
      std::vector<uint8_t> bytes = read_raw<uint8_t>(path(source.toStdString()));
      if (keep >= 0) bytes.resize(static_cast<size_t>(keep));
      if (flip >= 0) bytes[static_cast<size_t>(flip)] ^= 0x55;
      std::ofstream(target, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
    Result<RgbImage> got = read_image(target);
    QVERIFY2(!got.is_ok(), ("decoded " + target).c_str());
    const std::string m = got.status().message();
    QVERIFY2(m.find("'" + target + "'") != std::string::npos, m.c_str());
    QVERIFY2(m.find(phrase.toStdString()) != std::string::npos, m.c_str());
    QVERIFY2(m.find('\n') == std::string::npos, m.c_str());
  }

  // Down (37 -> 16), up (10 -> 23), mixed (30x18 -> 13x29) and 64 -> 224 against PyTorch's
  // float64 F.interpolate(mode="bicubic", align_corners=False, antialias=True).
  void bicubicResizeEqualsTorch() {
    for (const char* name : {"resize_down", "resize_up", "resize_mixed", "resize_big"}) {
      const Case c = cases_.at(name);
      const std::vector<uint8_t> in = read_raw<uint8_t>(path(std::string(name) + ".u8"));
      const std::vector<double> want = read_raw<double>(path(std::string(name) + ".f64"));
      QCOMPARE(want.size(), size_t(c.out_h) * c.out_w * 3);
      std::vector<double> got(want.size());
      resize_bicubic(in.data(), c.h, c.w, c.out_h, c.out_w, got.data());
      for (size_t i = 0; i < got.size(); i++)
        if (!(std::fabs(got[i] - want[i]) <= kResizeTolerance))
          QFAIL((std::string(name) + " element " + std::to_string(i) + ": " +
                 std::to_string(got[i]) + " vs torch " + std::to_string(want[i]) +
                 " (tolerance 1e-9)")
                    .c_str());
      // The stored form: rounded to nearest and clamped.
      const RgbImage small = resize_image(RgbImage{c.w, c.h, in}, c.out_h, c.out_w);
      for (size_t i = 0; i < got.size(); i++) {
        const double r = std::clamp(std::round(want[i]), 0.0, 255.0);
        const bool tie = std::fabs(std::fabs(want[i] - std::trunc(want[i])) - 0.5) < 1e-6;
        if (!tie && small.pixels[i] != r)
          QFAIL((std::string(name) + " rounded element " + std::to_string(i) + ": " +
                 std::to_string(small.pixels[i]) + ", expected " + std::to_string(r))
                    .c_str());
      }
    }
  }

  void padToSquareIsLlavasExpand2Square() {
    QCOMPARE(int(pad_colour(ImageNorm{})[0]), 122);
    QCOMPARE(int(pad_colour(ImageNorm{})[1]), 116);
    QCOMPARE(int(pad_colour(ImageNorm{})[2]), 104);
    for (const char* name : {"pad_wide", "pad_tall", "pad_square"}) {
      const Case c = cases_.at(name);
      const RgbImage got =
          pad_to_square(RgbImage{c.w, c.h, read_raw<uint8_t>(path(std::string(name) + ".u8"))},
                        pad_colour(ImageNorm{}));
      QCOMPARE(got.width, c.out_w);
      QCOMPARE(got.height, c.out_h);
      int worst = 0;
      const std::string diff = first_difference(
          got.pixels, read_raw<uint8_t>(path(std::string(name) + ".rgb")), got.width, 0, &worst);
      QVERIFY2(diff.empty(), (std::string(name) + ": " + diff).c_str());
    }
  }

  void normalisationIsClips() {
    const std::vector<uint8_t> in = read_raw<uint8_t>(path("norm.u8"));
    const std::vector<double> want = read_raw<double>(path("norm.f64"));  // (3, 8, 8)
    std::vector<float> got(want.size());
    normalize_image(in.data(), 8, ImageNorm{}, got.data());
    for (size_t i = 0; i < got.size(); i++)
      QVERIFY2(std::fabs(got[i] - want[i]) <= kNormTolerance,
               ("chw element " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
                std::to_string(want[i]))
                   .c_str());
  }
};

QTEST_GUILESS_MAIN(ImageDataTest)
#include "test_image_data.moc"
