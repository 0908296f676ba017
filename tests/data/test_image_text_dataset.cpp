// Image-text data (data/image_text_dataset.h, data/shapes_dataset.h): the three JSONL forms
// through `preprocess --images` to the indexed files and back through ImageTextDataset (tokens
// with one placeholder per image, the loss mask on the caption / assistant turns, the images
// as preprocess_image makes them); errors naming the JSONL line and the image; the shapes
// generator's determinism and captions that agree with the pixels; and the two CLI commands.
#include <QtTest/QtTest>

#include <QProcess>
#include <QTemporaryDir>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/image_text_dataset.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/shapes_dataset.h"

using namespace lattice;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

RgbImage gradient(int w, int h, int salt) {
  RgbImage image{w, h, std::vector<uint8_t>(size_t(w) * h * 3)};
  for (size_t i = 0; i < image.pixels.size(); i++) image.pixels[i] = uint8_t(i * 7 + salt);
  return image;
}

// The decoded runs of masked tokens.
std::vector<std::vector<int32_t>> masked_runs(const std::vector<int32_t>& tokens,
                                              const std::vector<uint8_t>& mask) {
  std::vector<std::vector<int32_t>> runs;
  for (size_t i = 0; i < tokens.size(); i++) {
    if (!mask[i]) continue;
    if (i == 0 || !mask[i - 1]) runs.emplace_back();
    runs.back().push_back(tokens[i]);
  }
  return runs;
}

}  // namespace

class ImageTextDatasetTest : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::string path(const std::string& name) const {
    return dir_.filePath(QString::fromStdString(name)).toStdString();
  }
  TokenizerOptions tokenizer_;

 private slots:
  void initTestCase() {
    SentencePieceTrainOptions o;
    o.model_prefix = path("sp");
    o.vocab_size = 300;
    o.threads = 2;
    std::vector<std::string> texts;
    for (int i = 0; i < 50; i++)
      texts.push_back(
          "User: What shape is in the image? Assistant: a red circle at the top left. "
          "Describe the picture. a blue square in the center. What colour is it? green");
    QVERIFY(train_sentencepiece(texts, o).is_ok());
    tokenizer_.type = "GPTSentencePieceTokenizer";
    tokenizer_.model_file = o.model_prefix + ".model";
  }

  // One line of each form, and a chat line without images; paths relative to the JSONL.
  void jsonlToIndexedAndBack() {
    std::filesystem::create_directories(path("set/pics"));
    const RgbImage wide = gradient(30, 12, 1), square = gradient(16, 16, 2);
    QVERIFY(write_png(path("set/pics/wide.png"), wide).is_ok());
    QVERIFY(write_png(path("set/pics/square.png"), square).is_ok());
    std::ofstream(path("set/data.jsonl"))
        << R"({"image": "pics/wide.png", "text": "a red circle at the top left"})"
           "\n"
        << R"({"image": "pics/square.png", "conversations": [{"from": "human", "value": "<image>\nWhat shape is in the image?"}, {"from": "gpt", "value": "a blue square"}]})"
           "\n"
        << "\n"
        << R"({"messages": [{"role": "user", "content": [{"type": "image", "image": "pics/wide.png"}, {"type": "text", "text": "Describe the picture."}, {"type": "image", "image": "pics/square.png"}]}, {"role": "assistant", "content": "green"}]})"
           "\n"
        << R"({"conversations": [{"from": "human", "value": "What colour is it?"}, {"from": "gpt", "value": "red"}]})"
           "\n";
    PreprocessOptions o;
    o.inputs = {path("set/data.jsonl")};
    o.output_prefix = path("out");
    o.tokenizer = tokenizer_;
    o.images = true;
    o.image_size = 8;
    o.workers = 2;
    Result<PreprocessReport> r = preprocess(o, nullptr);
    QVERIFY2(r.is_ok(), r.status().message().c_str());
    QCOMPARE(r->documents, size_t(4));

    auto opened = ImageTextDataset::open(path("out_text_document"));
    QVERIFY2(opened.is_ok(), opened.status().message().c_str());
    const ImageTextDataset& d = **opened;
    auto tok = make_tokenizer(tokenizer_);
    QVERIFY(tok.is_ok());
    const Tokenizer& t = **tok;
    QCOMPARE(d.size(), size_t(4));
    QCOMPARE(d.image_size(), 8);
    QCOMPARE(d.image_token_id(), int32_t(t.vocab_size()));
    const int32_t img = d.image_token_id();
    const size_t bytes = 8 * 8 * 3;
    const std::vector<uint8_t> wide8 = preprocess_image(wide, 8, ImageNorm{}).pixels;
    const std::vector<uint8_t> square8 = preprocess_image(square, 8, ImageNorm{}).pixels;
    // The 30x12 picture is padded top and bottom with (122, 116, 104) before resizing.
    QCOMPARE(int(wide8[0]), 122);
    QCOMPARE(int(wide8[1]), 116);

    // Plain: [image] caption EOD, the caption and EOD trained.
    ImageTextDataset::Sample s = d.sample(0);
    QCOMPARE(s.num_images, 1);
    QCOMPARE(s.tokens.front(), img);
    QCOMPARE(int(s.loss_mask.front()), 0);
    QCOMPARE(s.tokens.back(), t.eod());
    QVERIFY(
        std::all_of(s.loss_mask.begin() + 1, s.loss_mask.end(), [](uint8_t m) { return m == 1; }));
    QCOMPARE(t.decode(std::vector<int32_t>(s.tokens.begin() + 1, s.tokens.end() - 1)),
             std::string("a red circle at the top left"));
    QVERIFY(s.images == wide8);

    // LLaVA chat: one placeholder in the (untrained) user turn, the answer trained.
    s = d.sample(1);
    QCOMPARE(s.num_images, 1);
    QCOMPARE(std::count(s.tokens.begin(), s.tokens.end(), img), 1);
    const size_t at = std::find(s.tokens.begin(), s.tokens.end(), img) - s.tokens.begin();
    QCOMPARE(int(s.loss_mask[at]), 0);
    auto runs = masked_runs(s.tokens, s.loss_mask);
    QCOMPARE(runs.size(), size_t(1));
    QCOMPARE(runs[0].back(), t.eod());
    QCOMPARE(t.decode(std::vector<int32_t>(runs[0].begin(), runs[0].end() - 1)),
             std::string("a blue square"));
    QCOMPARE(t.decode(std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + at)),
             std::string("User:"));
    QVERIFY(s.images == square8);

    // OpenAI-style messages: two images, in part order.
    s = d.sample(2);
    QCOMPARE(s.num_images, 2);
    QCOMPARE(std::count(s.tokens.begin(), s.tokens.end(), img), 2);
    QVERIFY(std::equal(s.images.begin(), s.images.begin() + bytes, wide8.begin()));
    QVERIFY(std::equal(s.images.begin() + bytes, s.images.end(), square8.begin()));
    runs = masked_runs(s.tokens, s.loss_mask);
    QCOMPARE(runs.size(), size_t(1));
    QCOMPARE(t.decode(std::vector<int32_t>(runs[0].begin(), runs[0].end() - 1)),
             std::string("green"));

    // No image: a text-only conversation.
    s = d.sample(3);
    QCOMPARE(s.num_images, 0);
    QVERIFY(s.images.empty());
    QCOMPARE(std::count(s.tokens.begin(), s.tokens.end(), img), 0);
  }

  void badLinesNameTheLineAndTheImage_data() {
    QTest::addColumn<QByteArray>("line");
    QTest::addColumn<QString>("phrase");
    QTest::newRow("missing image")
        << QByteArray(R"({"image": "nowhere.png", "text": "a red circle"})")
        << "data.jsonl line 2: cannot open image '" + dir_.filePath("bad/nowhere.png") + "'";
    QTest::newRow("corrupt image")
        << QByteArray(R"({"image": "broken.png", "text": "a red circle"})")
        << "data.jsonl line 2: image '" + dir_.filePath("bad/broken.png") +
               "' is not a valid PNG or is truncated";
    QTest::newRow("count mismatch")
        << QByteArray(
               R"({"image": ["ok.png", "ok.png"], "conversations": [{"from": "human", "value": "<image>\nhi"}, {"from": "gpt", "value": "red"}]})")
        << "data.jsonl line 2: the conversation has 1 <image> placeholders but 2 images";
    QTest::newRow("bad from")
        << QByteArray(R"({"image": "ok.png", "conversations": [{"from": "robot", "value": "hi"}]})")
        << "data.jsonl line 2: turn 1: \"from\" 'robot' is not one of human, gpt, system";
  }
  void badLinesNameTheLineAndTheImage() {
    QFETCH(QByteArray, line);
    QFETCH(QString, phrase);
    std::filesystem::create_directories(path("bad"));
    QVERIFY(write_png(path("bad/ok.png"), gradient(4, 4, 0)).is_ok());
    const std::string good = slurp(path("bad/ok.png"));
    std::ofstream(path("bad/broken.png"), std::ios::binary) << good.substr(0, good.size() / 2);
    std::ofstream(path("bad/data.jsonl")) << R"({"image": "ok.png", "text": "fine"})"
                                             "\n"
                                          << line.toStdString() << "\n";
    PreprocessOptions o;
    o.inputs = {path("bad/data.jsonl")};
    o.output_prefix = path("bad/out");
    o.tokenizer = tokenizer_;
    o.images = true;
    o.image_size = 4;
    Result<PreprocessReport> r = preprocess(o, nullptr);
    QVERIFY(!r.is_ok());
    QVERIFY2(r.status().message().find(phrase.toStdString()) != std::string::npos,
             r.status().message().c_str());
  }

  void shapesAreDeterministic() {
    ShapesOptions o;
    o.train = 12;
    o.valid = 4;
    for (const char* name : {"shapes_a", "shapes_b"}) {
      o.output_dir = path(name);
      QVERIFY(generate_shapes(o).is_ok());
    }
    o.seed = 99;
    o.output_dir = path("shapes_c");
    QVERIFY(generate_shapes(o).is_ok());
    for (const char* file :
         {"train.jsonl", "valid_chat.jsonl", "images/train_00007.png", "images/valid_00003.png"}) {
      const std::string a = slurp(path(std::string("shapes_a/") + file));
      QVERIFY2(!a.empty(), file);
      QVERIFY2(a == slurp(path(std::string("shapes_b/") + file)), file);
    }
    QVERIFY(slurp(path("shapes_a/train.jsonl")) != slurp(path("shapes_c/train.jsonl")));
  }

  // Each caption's colour, shape and position, read back from the PNG: every non-background
  // pixel has the caption's colour and lies in the stated cell; the share of the bounding box
  // they fill tells the shape (square 1, circle pi/4, triangle 1/2).
  void shapeCaptionsAgreeWithPixels() {
    ShapesOptions o;
    o.output_dir = path("shapes_check");
    o.train = 80;
    o.valid = 20;
    QVERIFY(generate_shapes(o).is_ok());
    int checked = 0;
    for (const char* split : {"train", "valid"}) {
      std::ifstream in(path(std::string("shapes_check/") + split + ".jsonl"));
      std::string line;
      while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line);
        const std::string name = j["image"], text = j["text"];
        const std::string shape = j["shape"], colour = j["colour"], position = j["position"];
        QVERIFY2(text == (colour == "orange" ? "an " : "a ") + colour + " " + shape + " " +
                             (position == "center" ? "in the center" : "at the " + position),
                 text.c_str());
        Result<RgbImage> image = read_image(path("shapes_check/" + name));
        QVERIFY2(image.is_ok(), image.status().message().c_str());
        const int c = int(std::find(std::begin(kColourNames), std::end(kColourNames), colour) -
                          std::begin(kColourNames));
        const int cell =
            int(std::find(std::begin(kPositionNames), std::end(kPositionNames), position) -
                std::begin(kPositionNames));
        QVERIFY(c < 6 && cell < 9);
        const int size = image->width;
        const double third = size / 3.0;
        int count = 0, x0 = size, x1 = -1, y0 = size, y1 = -1;
        for (int y = 0; y < size; y++)
          for (int x = 0; x < size; x++) {
            const uint8_t* p = &image->pixels[(size_t(y) * size + x) * 3];
            if (std::equal(p, p + 3, kBackground)) continue;
            QVERIFY2(std::equal(p, p + 3, kColours[c]),
                     (name + ": a pixel is not " + colour).c_str());
            QVERIFY2(int(x / third) == cell % 3 && int(y / third) == cell / 3,
                     (name + ": a pixel lies outside the " + position + " cell").c_str());
            count++;
            x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
          }
        QVERIFY2(count >= 20,
                 (name + ": only " + std::to_string(count) + " coloured pixels").c_str());
        const double fill = double(count) / ((x1 - x0 + 1) * (y1 - y0 + 1));
        const std::string seen = fill > 0.95 ? "square" : fill > 0.65 ? "circle" : "triangle";
        QVERIFY2(seen == shape, (name + ": fills " + std::to_string(fill) + " of its box, a " +
                                 seen + ", but the caption says " + shape)
                                    .c_str());
        checked++;
      }
    }
    QCOMPARE(checked, 100);
  }

  // `lattice data shapes` then `lattice data preprocess --images` on its chat file.
  void cliShapesThenPreprocess() {
    QProcess p;
    p.start(LATTICE_CLI_PATH,
            {"data", "shapes", "--output-dir", QString::fromStdString(path("cli")), "--train", "6",
             "--valid", "2", "--image-size", "24"});
    QVERIFY(p.waitForFinished(60000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    p.start(LATTICE_CLI_PATH,
            {"data", "preprocess", "--images", "--input",
             QString::fromStdString(path("cli/train_chat.jsonl")), "--output-prefix",
             QString::fromStdString(path("cli/train")), "--image-size", "32", "--tokenizer-type",
             "GPTSentencePieceTokenizer", "--tokenizer-model",
             QString::fromStdString(tokenizer_.model_file)});
    QVERIFY(p.waitForFinished(60000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    auto d = ImageTextDataset::open(path("cli/train_text_document"));
    QVERIFY2(d.is_ok(), d.status().message().c_str());
    QCOMPARE((*d)->size(), size_t(6));
    QCOMPARE((*d)->image_size(), 32);
    const ImageTextDataset::Sample s = (*d)->sample(5);
    QCOMPARE(s.num_images, 1);
    QCOMPARE(masked_runs(s.tokens, s.loss_mask).size(), size_t(3));  // shape, colour, where
    Result<RgbImage> png = read_image(path("cli/images/train_00005.png"));
    QVERIFY(png.is_ok());
    QVERIFY(s.images == preprocess_image(*png, 32, ImageNorm{}).pixels);
  }
};

QTEST_GUILESS_MAIN(ImageTextDatasetTest)
#include "test_image_text_dataset.moc"
