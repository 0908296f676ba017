// Image-text training samples (data/image_text_source.h, Note [image-text samples]): each
// placeholder expanded to Np masked image tokens, right truncation and masked padding, the
// images normalised as normalize_image makes them with zero count past a sample's own,
// images_per_sample from the whole dataset, the errors for a mismatched image size, channel
// count or image id, blending, and the micro-batch's images matching fill_micro_batch's samples
// over two data-parallel ranks (train/data_feed.h), with open_data's vision path and its
// --mock-data image-text stream.
#include <QtTest/QtTest>

#include <QTemporaryDir>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/masked_sample.h"
#include "data/image_text_source.h"
#include "lattice/kernels.h"
#include "train/data_feed.h"

using namespace lattice;
using lattice::testing::MaskedSample;
using lattice::testing::read_masked;

namespace {

constexpr int32_t kImage = 50;  // the image id: the vocabulary size of a 50-token tokenizer
constexpr int kSize = 4;        // S: 4x4 images
constexpr size_t kImageBytes = kSize * kSize * 3;
constexpr size_t kImageFloats = 3 * kSize * kSize;

struct Document {
  std::vector<int32_t> tokens, mask;
  std::vector<int> salts;  // one per image: its pixels are (i * 37 + salt) mod 256
};

std::vector<uint8_t> pixels(int salt) {
  std::vector<uint8_t> p(kImageBytes);
  for (size_t i = 0; i < kImageBytes; i++) p[i] = static_cast<uint8_t>((i * 37 + salt) % 256);
  return p;
}

// Document 0: one image; 1: two (it starts with one); 2: text only; 3: one image.
std::vector<Document> documents() {
  return {{{1, kImage, 2, 3, 4}, {0, 0, 1, 1, 1}, {5}},
          {{kImage, 5, kImage, 6, 7}, {0, 1, 0, 1, 1}, {17, 29}},
          {{8, 9}, {0, 1}, {}},
          {{13, kImage, 10, 11}, {0, 1, 1, 1}, {41}}};
}

// What `lattice data preprocess --images` writes, written directly.
bool write(const std::string& prefix, const std::vector<Document>& docs) {
  auto tokens = IndexedDatasetBuilder::create(prefix, TokenDtype::kU16);
  auto mask = IndexedDatasetBuilder::create(prefix + kLossMaskSuffix, TokenDtype::kU8);
  auto images = IndexedDatasetBuilder::create(prefix + kImagesSuffix, TokenDtype::kU8);
  if (!tokens || !mask || !images) return false;
  for (const Document& d : docs) {
    if (!(*tokens)->add_sequence(d.tokens) || !(*mask)->add_sequence(d.mask)) return false;
    for (int salt : d.salts) {
      const std::vector<uint8_t> p = pixels(salt);
      if (!(*images)->add_sequence(std::vector<int32_t>(p.begin(), p.end()))) return false;
    }
    (*tokens)->end_document();
    (*mask)->end_document();
    (*images)->end_document();
  }
  for (auto* b : {&*tokens, &*mask, &*images})
    if (!(*b)->finish()) return false;
  const ImageNorm norm;
  std::ofstream(prefix + kImagesSuffix + ".json") << nlohmann::json{
      {"image_size", kSize},
      {"image_token_id", kImage},
      {"mean", norm.mean},
      {"std", norm.std}}.dump();
  return true;
}

// The images a sample with these salts should give: normalize_image of each stored image,
// then zero count up to `count`.
std::vector<float> expected_images(const std::vector<int>& salts, int count) {
  std::vector<float> out(count * kImageFloats, 0.0f);
  for (size_t k = 0; k < salts.size(); k++)
    normalize_image(pixels(salts[k]).data(), kSize, ImageNorm{}, out.data() + k * kImageFloats);
  return out;
}

std::vector<float> images_of(const SampleSource& s, int64_t index) {
  std::vector<float> out(s.images_per_sample() * kImageFloats, -1.0f);
  s.sample_images(index, out.data());
  return out;
}

ImageTextSourceOptions options(int seq_length) {
  ImageTextSourceOptions o;
  o.seq_length = seq_length;
  o.patches = 3;
  o.img_h = o.img_w = kSize;
  o.pad_token_id = 7;
  o.image_token_id = kImage;
  return o;
}

}  // namespace

class ImageTextSourceTest : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::string prefix(const char* name) const { return dir_.filePath(name).toStdString(); }

 private slots:
  void initTestCase() { QVERIFY(write(prefix("a"), documents())); }

  void each_placeholder_becomes_np_masked_image_tokens_then_padding() {
    auto splits = build_image_text_splits({{1.0, prefix("a")}}, "100,0,0", 6, 0, 0, options(8));
    QVERIFY2(splits.is_ok(), splits.is_ok() ? "" : splits.status().message().c_str());
    const SampleSource& s = *splits->train;
    QVERIFY(s.has_loss_mask());
    QCOMPARE(s.size(), int64_t{6});
    QCOMPARE(s.image_size(), kSize);
    const MaskedSample a = read_masked(s, 0);
    QCOMPARE(a.tokens, (std::vector<int32_t>{1, kImage, kImage, kImage, 2, 3, 4, 7, 7}));
    QCOMPARE(a.mask, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 0, 0}));
    QCOMPARE(a.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
    // An image token is never a target, even where the stored mask says so.
    const MaskedSample d = read_masked(s, 3);
    QCOMPARE(d.tokens, (std::vector<int32_t>{13, kImage, kImage, kImage, 10, 11, 7, 7, 7}));
    QCOMPARE(d.mask, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 0, 0, 0}));
    // In document order, epochs repeat (Note [SFT samples]).
    QCOMPARE(read_masked(s, 4).tokens, a.tokens);
    std::vector<int32_t> plain(9);
    s.sample(4, plain.data());
    QCOMPARE(plain, a.tokens);
  }

  void truncation_cuts_an_image_run_but_keeps_its_slot() {
    auto splits = build_image_text_splits({{1.0, prefix("a")}}, "100,0,0", 4, 0, 0, options(5));
    QVERIFY(splits.is_ok());
    const SampleSource& s = *splits->train;
    const MaskedSample b = read_masked(s, 1);  // 3 + 1 + 3 + 1 + 1 tokens, cut to 6
    QCOMPARE(b.tokens, (std::vector<int32_t>{kImage, kImage, kImage, 5, kImage, kImage}));
    QCOMPARE(b.mask, (std::vector<uint8_t>{0, 0, 0, 1, 0, 0}));
    QCOMPARE(b.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
    QCOMPARE(s.images_per_sample(), 2);
    QVERIFY(images_of(s, 1) == expected_images({17, 29}, 2));
  }

  void images_are_normalised_with_zero_slots_past_the_samples_own() {
    auto splits = build_image_text_splits({{1.0, prefix("a")}}, "100,0,0", 4, 0, 0, options(8));
    QVERIFY(splits.is_ok());
    const SampleSource& s = *splits->train;
    QCOMPARE(s.images_per_sample(), 2);  // document 1 has two
    const std::vector<float> first = images_of(s, 0);
    QVERIFY(first == expected_images({5}, 2));
    // Channel 0 of pixel (0, 0): (5 / 255 - mean) / std, as normalize_image computes it.
    QCOMPARE(first[0], (5.0f / 255.0f - ImageNorm{}.mean[0]) / ImageNorm{}.std[0]);
    QVERIFY(images_of(s, 1) == expected_images({17, 29}, 2));
    QVERIFY(images_of(s, 2) == expected_images({}, 2));  // text only: all zero
  }

  void images_per_sample_counts_the_whole_dataset_not_the_split() {
    // The valid split (documents 2, 3) has at most one image, the dataset two.
    auto splits = build_image_text_splits({{1.0, prefix("a")}}, "50,50,0", 2, 2, 0, options(8));
    QVERIFY(splits.is_ok());
    QCOMPARE(splits->valid->images_per_sample(), 2);
    QCOMPARE(read_masked(*splits->valid, 0).tokens[0], 8);
    QVERIFY(images_of(*splits->valid, 1) == expected_images({41}, 2));
    // A dataset without images still gives the encoder one (zero) image per sample.
    QVERIFY(write(prefix("text"), {{{8, 9}, {0, 1}, {}}}));
    auto text = build_image_text_splits({{1.0, prefix("text")}}, "100,0,0", 1, 0, 0, options(4));
    QVERIFY(text.is_ok());
    QCOMPARE(text->train->images_per_sample(), 1);
    QVERIFY(images_of(*text->train, 0) == expected_images({}, 1));
  }

  void a_blend_fills_each_members_images() {
    QVERIFY(write(prefix("b"), {{{20, kImage, 21}, {0, 0, 1}, {99}}}));
    auto splits = build_image_text_splits({{1.0, prefix("a")}, {1.0, prefix("b")}}, "100,0,0", 8, 0,
                                          0, options(8));
    QVERIFY2(splits.is_ok(), splits.is_ok() ? "" : splits.status().message().c_str());
    const SampleSource& s = *splits->train;
    QCOMPARE(s.images_per_sample(), 2);
    const std::map<int32_t, std::vector<int>> salts = {
        {1, {5}}, {kImage, {17, 29}}, {8, {}}, {13, {41}}, {20, {99}}};
    bool saw_b = false;
    for (int64_t i = 0; i < s.size(); i++) {
      const int32_t first = read_masked(s, i).tokens[0];
      QVERIFY(salts.count(first));
      saw_b = saw_b || first == 20;
      QVERIFY2(images_of(s, i) == expected_images(salts.at(first), 2),
               ("blended sample " + std::to_string(i)).c_str());
    }
    QVERIFY(saw_b);
  }

  void a_wrong_image_size_channel_count_or_image_id_is_refused() {
    ImageTextSourceOptions o = options(8);
    o.img_w = 8;
    auto r = build_image_text_splits({{1.0, prefix("a")}}, "100,0,0", 1, 0, 0, o);
    QVERIFY(!r.is_ok());
    std::string m = r.status().message();
    QVERIFY2(m.find("--img-w 8") != std::string::npos &&
                 m.find(prefix("a") + "_images.json") != std::string::npos,
             m.c_str());
    o = options(8);
    o.num_channels = 1;
    r = build_image_text_splits({{1.0, prefix("a")}}, "100,0,0", 1, 0, 0, o);
    QVERIFY(!r.is_ok());
    m = r.status().message();
    QVERIFY2(m.find("--num-channels 1") != std::string::npos, m.c_str());
    o = options(8);
    o.image_token_id = 64;
    r = build_image_text_splits({{1.0, prefix("a")}}, "100,0,0", 1, 0, 0, o);
    QVERIFY(!r.is_ok());
    m = r.status().message();
    QVERIFY2(m.find("image_token_id 50") != std::string::npos, m.c_str());
  }

  // The images of each micro-batch row are those of the sample fill_micro_batch put there (its
  // first token names the document), over two data-parallel ranks and several batches.
  void micro_batch_images_follow_fill_micro_batchs_samples() {
    auto splits = build_image_text_splits({{1.0, prefix("a")}}, "100,0,0", 64, 0, 0, options(8));
    QVERIFY(splits.is_ok());
    const SampleSource& s = *splits->train;
    const std::map<int32_t, std::vector<int>> salts = {
        {1, {5}}, {kImage, {17, 29}}, {8, {}}, {13, {41}}};
    const int B = 3, T = 8, n = s.images_per_sample();
    std::vector<int32_t> sample(T + 1), inputs(B * T), targets(B * T);
    std::vector<float> images(B * n * kImageFloats);
    std::set<int32_t> seen;
    for (int64_t consumed : {0, 12, 25})
      for (int micro = 0; micro < 2; micro++)
        for (int rank = 0; rank < 2; rank++) {
          // The image id passes the vocabulary check of a 50-token model.
          Status st = fill_micro_batch(s, consumed, micro, B, 2, rank, kImage, sample,
                                       inputs.data(), targets.data());
          QVERIFY2(st.is_ok(), st.message().c_str());
          QVERIFY(fill_micro_batch_images(s, consumed, micro, B, 2, rank, images.data()));
          for (int b = 0; b < B; b++) {
            const int32_t first = inputs[b * T];
            seen.insert(first);
            const std::vector<float> want = expected_images(salts.at(first), n);
            QVERIFY2(std::equal(want.begin(), want.end(), images.begin() + b * n * kImageFloats),
                     ("consumed " + std::to_string(consumed) + " micro " + std::to_string(micro) +
                      " rank " + std::to_string(rank) + " row " + std::to_string(b))
                         .c_str());
          }
        }
    QCOMPARE(seen.size(), size_t(4));
    // A text source has no images to give.
    struct TextOnly final : SampleSource {
      int64_t size() const override { return 1; }
      int seq_length() const override { return 1; }
      void sample(int64_t, int32_t* tokens) const override { tokens[0] = tokens[1] = 0; }
    };
    QVERIFY(!fill_micro_batch_images(TextOnly{}, 0, 0, 1, 1, 0, images.data()).is_ok());
  }

  // Opening reads the indices only; a document whose placeholders and images disagree fails
  // the micro-batch that reads it (SampleSource::check_sample), naming the file and sample.
  void a_placeholder_image_mismatch_fails_the_batch_that_reads_it() {
    auto docs = documents();
    docs[1].salts.pop_back();  // two placeholders, one image
    QVERIFY(write(prefix("mismatch"), docs));
    auto splits =
        build_image_text_splits({{1.0, prefix("mismatch")}}, "100,0,0", 4, 0, 0, options(8));
    QVERIFY2(splits.is_ok(), splits.is_ok() ? "" : splits.status().message().c_str());
    const SampleSource& s = *splits->train;
    QVERIFY(s.check_sample(0).is_ok());
    std::vector<int32_t> sample(9), inputs(8), targets(8);
    QVERIFY(fill_micro_batch(s, 0, 0, 1, 1, 0, kImage, sample, inputs.data(), targets.data()));
    const Status st =
        fill_micro_batch(s, 0, 1, 1, 1, 0, kImage, sample, inputs.data(), targets.data());
    QVERIFY(!st.is_ok());
    const std::string want = prefix("mismatch") + " sample 1 has 2 image placeholders but 1 images";
    QVERIFY2(st.message().find(want) != std::string::npos, st.message().c_str());
  }

  void open_data_reads_image_text_splits_for_a_vision_model() {
    TrainOptions o;
    o.vision_model_type = "clip";
    o.vision.img_h = o.vision.img_w = kSize;
    o.vision.patch_dim = 2;  // Np = 4
    o.data_path = {prefix("a")};
    o.split = "100,0,0";
    o.train_iters = 2;
    o.global_batch_size = 2;
    o.eval_iters = 0;
    ModelConfig mc;
    mc.vocab_size = kImage;
    mc.seq_length = 8;
    Result<DataSources> d = open_data(o, mc);
    QVERIFY2(d.is_ok(), d.is_ok() ? "" : d.status().message().c_str());
    QCOMPARE(d->train->images_per_sample(), 2);
    QCOMPARE(read_masked(*d->train, 0).tokens,
             (std::vector<int32_t>{1, kImage, kImage, kImage, kImage, 2, 3, 4, 0}));
  }

  // --mock-data with a vision model: Np masked image tokens, then a caption whose first token
  // names the solid colour of the sample's one image, then each token one more.
  void mock_data_with_a_vision_model_ties_the_first_text_token_to_the_image() {
    TrainOptions o;
    o.vision_model_type = "clip";
    o.vision.img_h = o.vision.img_w = kSize;
    o.vision.patch_dim = 2;  // Np = 4
    o.mock_data = true;
    ModelConfig mc;
    mc.vocab_size = kImage;
    mc.seq_length = 7;
    Result<DataSources> d = open_data(o, mc);
    QVERIFY2(d.is_ok(), d.is_ok() ? "" : d.status().message().c_str());
    QVERIFY(d->valid);
    const SampleSource& s = *d->train;
    QVERIFY(s.has_loss_mask());
    QCOMPARE(s.images_per_sample(), 1);
    QCOMPARE(s.image_size(), kSize);
    std::map<int32_t, std::vector<float>> image_of_colour;
    for (int64_t i = 0; i < 40; i++) {
      const MaskedSample m = read_masked(s, i);
      const int32_t c = m.tokens[4];
      QVERIFY2(1 <= c && c <= 6, std::to_string(c).c_str());
      QCOMPARE(m.tokens,
               (std::vector<int32_t>{kImage, kImage, kImage, kImage, c, c + 1, c + 2, c + 3}));
      QCOMPARE(m.mask, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 1}));
      const std::vector<float> image = images_of(s, i);
      for (int ch = 0; ch < 3; ch++)  // a solid colour
        QVERIFY(std::all_of(image.begin() + ch * kSize * kSize,
                            image.begin() + (ch + 1) * kSize * kSize,
                            [&](float v) { return v == image[ch * kSize * kSize]; }));
      auto [at, fresh] = image_of_colour.emplace(c, image);
      QVERIFY2(at->second == image, ("sample " + std::to_string(i)).c_str());
    }
    QCOMPARE(image_of_colour.size(), size_t(6));
    for (auto a = image_of_colour.begin(); a != image_of_colour.end(); ++a)
      for (auto b = std::next(a); b != image_of_colour.end(); ++b) QVERIFY(a->second != b->second);
    // The valid stream is another seed's.
    bool differs = false;
    for (int64_t i = 0; i < 8; i++)
      differs = differs || read_masked(*d->valid, i).tokens != read_masked(s, i).tokens;
    QVERIFY(differs);
    o.vision.img_w = 8;
    QVERIFY(!open_data(o, mc).is_ok());
  }
};

QTEST_GUILESS_MAIN(ImageTextSourceTest)
#include "test_image_text_source.moc"
