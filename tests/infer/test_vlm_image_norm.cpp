// A vision-language model's image normalisation from data to generation (docs/vision.md,
// "Generation"): `lattice data preprocess --images --image-mean --image-std` records non-CLIP
// statistics, `lattice train` on that data writes them into the checkpoint's vision config, and
// the prompt images `lattice generate --image` / `serve` build from the checkpoint
// (load_prompt_images) are bit for bit the images training fed the tower for the same file,
// so the generator's greedy token and its log-probability are the training forward's. A
// checkpoint written before the statistics were recorded reads as CLIP's (image_norm_assumed).
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "data/image_io.h"
#include "data/image_preprocess.h"
#include "data/image_text_source.h"
#include "data/preprocess.h"
#include "infer/prompt_images.h"
#include "lattice/infer.h"
#include "lattice/kernels.h"
#include "model/gpt.h"

using namespace lattice;

namespace {

constexpr int kVocab = 15, kSize = 16;
const std::vector<std::string> kMean = {"0.3", "0.6", "0.5"}, kStd = {"0.2", "0.35", "0.15"};

// A 20 x 12 image (not square: preprocessing pads it with int(255 * mean)) of varied pixels.
RgbImage test_image() {
  RgbImage image;
  image.width = 20;
  image.height = 12;
  image.pixels.resize(static_cast<size_t>(image.width) * image.height * 3);
  for (size_t i = 0; i < image.pixels.size(); i++)
    image.pixels[i] = static_cast<uint8_t>((i * 53 + 17) % 256);
  return image;
}

}  // namespace

class VlmImageNorm : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::string path(const char* name) const { return dir_.filePath(name).toStdString(); }
  std::string checkpoint_;  // the trained run's iteration directory

 private slots:
  void initTestCase() {
    kernels::set_num_threads(2);
    QVERIFY(dir_.isValid());
    QVERIFY(write_png(path("a.png"), test_image()).is_ok());
    std::ofstream(path("data.jsonl")) << R"({"image": "a.png", "text": "3 4 5 6"})"
                                      << "\n";
    PreprocessOptions o;
    o.inputs = {path("data.jsonl")};
    o.output_prefix = path("data");
    o.tokenizer = null_tokenizer(kVocab);
    o.images = true;
    o.image_size = kSize;
    o.image_mean = kMean;
    o.image_std = kStd;
    auto report = preprocess(o, nullptr);
    QVERIFY2(report.is_ok(), report.is_ok() ? "" : report.status().message().c_str());
    const testing::Run run = testing::run_process(
        LATTICE_CLI_PATH,
        QStringList{"train",
                    "--data-path",
                    QString::fromStdString(path("data_text_document")),
                    "--split",
                    "100,0,0",
                    "--tokenizer-type",
                    "NullTokenizer",
                    "--vocab-size",
                    QString::number(kVocab),
                    "--num-layers",
                    "1",
                    "--hidden-size",
                    "32",
                    "--num-attention-heads",
                    "4",
                    "--seq-length",
                    "12",
                    "--init-method-std",
                    "0.3",
                    "--micro-batch-size",
                    "1",
                    "--global-batch-size",
                    "1",
                    "--train-iters",
                    "1",
                    "--eval-iters",
                    "0",
                    "--no-db",
                    "--save",
                    QString::fromStdString(path("ckpt"))} +
            testing::qt_args(testing::tiny_tower_flags(1)),
        {}, 120000, {QString("LATTICE_DATA_DIR=") + dir_.filePath("lattice-data")});
    QVERIFY2(run.exit_code == 0, qPrintable(run.out + run.err));
    checkpoint_ = path("ckpt/iter_0000001");
  }

  // The checkpoint records the data's statistics; the prompt image equals training's sample
  // image to the bit; greedy generation from it gives the training forward's token and
  // log-probability.
  void generation_sees_the_images_training_saw() {
    auto reader = CheckpointReader::open(checkpoint_);
    QVERIFY2(reader.is_ok(), reader.is_ok() ? "" : reader.status().message().c_str());
    ModelConfig c = (*reader)->model();
    QVERIFY(c.has_vision() && !c.vision.image_norm_assumed);
    for (int ch = 0; ch < 3; ch++) {
      QCOMPARE(c.vision.image_mean[ch], std::stof(kMean[ch]));
      QCOMPARE(c.vision.image_std[ch], std::stof(kStd[ch]));
    }

    ImageTextSourceOptions so;
    so.seq_length = 12;
    so.patches = c.vision.patches();
    so.img_h = so.img_w = kSize;
    so.image_token_id = c.image_token_id();
    auto splits =
        build_image_text_splits({{1.0, path("data_text_document")}}, "100,0,0", 1, 0, 0, so);
    QVERIFY2(splits.is_ok(), splits.is_ok() ? "" : splits.status().message().c_str());
    const SampleSource& source = *splits->train;
    std::vector<float> trained(static_cast<size_t>(3) * kSize * kSize);
    source.sample_images(0, trained.data());
    auto prompt = load_prompt_images(c, {path("a.png")});
    QVERIFY2(prompt.is_ok(), prompt.is_ok() ? "" : prompt.status().message().c_str());
    QCOMPARE(prompt->size(), trained.size());
    for (size_t i = 0; i < trained.size(); i++)
      QVERIFY2((*prompt)[i] == trained[i],
               qPrintable(QString("prompt image element %1: %2, training's %3 (bit for bit)")
                              .arg(i)
                              .arg((*prompt)[i])
                              .arg(trained[i])));

    // The training forward on the prompt [3, image rows, 4, ...] and training's image, against
    // the generator's greedy token after the image rows from the prompt image (weights: the
    // checkpoint's shapes, seeded).
    c.vision.images_per_sample = 1;
    GptModel<float> model(c, 1);
    QVERIFY(model.init_weights(7));
    auto made = model.new_activations();
    QVERIFY(made.is_ok());
    const int T = c.seq_length, V = c.vocab_size, Vp = c.padded_vocab_size();
    const int Np = c.vision.patches(), last = Np;  // row 0: a token, rows 1..Np: the image
    std::vector<int32_t> tokens(T, 4), targets(T, 0);
    tokens[0] = 3;
    for (int k = 1; k <= Np; k++) tokens[k] = c.image_token_id();
    QVERIFY(model.load_images(**made, tokens.data(), trained.data()).is_ok());
    model.forward(**made, tokens.data(), targets.data(), 0, 0.0f);
    const float* logits = (*made)->logits + static_cast<size_t>(last) * Vp;
    const int want = static_cast<int>(std::max_element(logits, logits + V) - logits);
    double sum = 0;
    for (int i = 0; i < V; i++) sum += std::exp(double(logits[i]) - logits[want]);
    const double want_logprob = -std::log(sum);

    std::unique_ptr<Generator> gen = Generator::from_weights(c, model.params(), 1);
    GenerationRequest r;
    r.prompt.assign(tokens.begin(), tokens.begin() + last + 1);
    r.tokens_to_generate = 1;
    r.sampling.temperature = 0.0f;
    r.stop_at_eod = false;
    r.images = *prompt;
    r.top_logprobs = 1;
    auto out = gen->generate({r});
    QVERIFY2(out.is_ok(), out.is_ok() ? "" : out.status().message().c_str());
    QCOMPARE((*out)[0].tokens.at(0), want);
    const double got = (*out)[0].top_logprobs.at(0).at(0).logprob;
    QVERIFY2(std::abs(got - want_logprob) <= 1e-5 * std::max(1.0, std::abs(want_logprob)),
             qPrintable(QString("generated token %1's log-probability %2, the training forward's "
                                "%3 (tolerance 1e-5)")
                            .arg(want)
                            .arg(got)
                            .arg(want_logprob)));
  }

  // A checkpoint written before the statistics were recorded: CLIP's, marked assumed.
  void an_older_checkpoint_assumes_clips_statistics() {
    const std::string meta = checkpoint_ + "/metadata.json";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(meta));
    nlohmann::json* vision = nullptr;
    for (auto& [key, value] : j.items())
      if (value.is_object() && value.contains("vision")) vision = &value["vision"];
    QVERIFY2(vision && vision->contains("image_mean"),
             qPrintable(QString::fromStdString(j.dump())));
    vision->erase("image_mean");
    vision->erase("image_std");
    std::ofstream(meta) << j.dump(1);
    auto reader = CheckpointReader::open(checkpoint_);
    QVERIFY2(reader.is_ok(), reader.is_ok() ? "" : reader.status().message().c_str());
    const VisionConfig& v = (*reader)->model().vision;
    QVERIFY(v.image_norm_assumed);
    QVERIFY(v.image_mean == kClipImageMean && v.image_std == kClipImageStd);
  }
};

QTEST_GUILESS_MAIN(VlmImageNorm)
#include "test_vlm_image_norm.moc"
