// `lattice data preprocess --images` and the image-text reader (image_text_dataset.h). Batches
// of lines are parsed, tokenised and their images decoded and resized by --workers threads,
// then written in input order.
#include "data/image_text_dataset.h"

#include <omp.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "data/jsonl.h"

namespace lattice {

namespace {

struct Prepared {
  ImageTextTokens text;
  std::vector<RgbImage> images;  // each (S, S, 3)
};

Result<Prepared> prepare(std::string_view line, const std::string& directory,
                         const ChatTemplate& chat, const Tokenizer& tokenizer, int image_size,
                         const ImageNorm& norm) {
  Result<ImageTextSample> sample = parse_image_text_line(line, directory);
  if (!sample) return sample.status();
  Result<ImageTextTokens> text =
      tokenize_image_text(*sample, chat, tokenizer, tokenizer.vocab_size());
  if (!text) return text.status();
  Prepared p{std::move(*text), {}};
  for (const std::string& path : sample->images) {
    Result<RgbImage> image = read_image(path);
    if (!image) return image.status();
    p.images.push_back(preprocess_image(*image, image_size, norm));
  }
  return p;
}

Status write_metadata(const std::string& path, int image_size, int32_t image_token_id,
                      const ImageNorm& norm) {
  nlohmann::json j = {{"image_size", image_size},
                      {"image_token_id", image_token_id},
                      {"image_placeholder", std::string(kImagePlaceholder)},
                      {"layout", "uint8 RGB (S, S, 3), one sequence per image"},
                      {"resize", "pad to square with int(255 * mean), bicubic (a = -0.5)"},
                      {"mean", norm.mean},
                      {"std", norm.std}};
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return Status::io_error("cannot write '" + path + "'");
  return Status::ok();
}

// --image-mean or --image-std's three values (`values` empty: keeps `out`, CLIP's). Errors: not
// three numbers, a std that is not positive.
Status channel_values(const char* flag, const std::vector<std::string>& values, bool positive,
                      std::array<float, 3>& out) {
  if (values.empty()) return Status::ok();
  std::string all;
  for (const std::string& v : values) all += (all.empty() ? "" : " ") + v;
  const std::string rule = std::string("--") + flag + " '" + all + "' must be three numbers R G B" +
                           (positive ? ", each above 0" : "");
  if (values.size() != 3) return Status::invalid_argument(rule);
  for (size_t c = 0; c < 3; c++) {
    char* end = nullptr;
    const float x = std::strtof(values[c].c_str(), &end);
    if (end == values[c].c_str() || *end != '\0' || !std::isfinite(x) || (positive && x <= 0))
      return Status::invalid_argument(rule);
    out[c] = x;
  }
  return Status::ok();
}

}  // namespace

Result<PreprocessReport> preprocess_image_text(const PreprocessOptions& o, std::ostream* log) {
  if (o.append_eod)
    return Status::invalid_argument(
        "--append-eod does not apply with --images: captions end "
        "with EOD and chat templates end each turn");
  if (o.image_size < 1 || o.image_size > 4096)
    return Status::invalid_argument("--image-size " + std::to_string(o.image_size) +
                                    " is outside 1..4096");
  Result<std::unique_ptr<Tokenizer>> made = make_tokenizer(o.tokenizer);
  if (!made) return made.status();
  const Tokenizer& tokenizer = **made;
  Result<ChatTemplate> chat = chat_template_for(o.tokenizer, o.chat_template);
  if (!chat) return chat.status();
  const int32_t image_token_id = tokenizer.vocab_size();  // Note [image-text tokens]
  ImageNorm norm;
  if (Status s = channel_values("image-mean", o.image_mean, false, norm.mean); !s) return s;
  if (Status s = channel_values("image-std", o.image_std, true, norm.std); !s) return s;

  PreprocessReport report;
  const std::string prefix = o.output_prefix + "_text_document";
  const std::string mask_prefix = prefix + kLossMaskSuffix;
  const std::string images_prefix = prefix + kImagesSuffix;
  auto tokens_out =
      IndexedDatasetBuilder::create(prefix, token_dtype_for_vocab(image_token_id + 1));
  if (!tokens_out) return tokens_out.status();
  auto mask_out = IndexedDatasetBuilder::create(mask_prefix, TokenDtype::kU8);
  if (!mask_out) return mask_out.status();
  auto images_out = IndexedDatasetBuilder::create(images_prefix, TokenDtype::kU8);
  if (!images_out) return images_out.status();
  report.outputs = {prefix, mask_prefix, images_prefix};

  const auto start = std::chrono::steady_clock::now();
  constexpr size_t kBatch = 256;
  std::vector<int32_t> ids;
  size_t images = 0;
  for (const std::string& input : o.inputs) {
    std::ifstream in(input, std::ios::binary);
    if (!in) return Status::io_error("cannot open --input '" + input + "'");
    const std::string directory = std::filesystem::path(input).parent_path().string();
    size_t number = 0;
    bool more = true;
    JsonlBatch batch;
    while (more) {
      more = read_jsonl_batch(in, kBatch, number, report.bytes, batch);
      const std::vector<std::string>& lines = batch.lines;
      std::vector<Result<Prepared>> prepared(lines.size(), Status::internal("not prepared"));
#pragma omp parallel for schedule(dynamic, 4) num_threads(std::max(o.workers, 1))
      for (size_t k = 0; k < lines.size(); k++)
        prepared[k] = prepare(lines[k], directory, *chat, tokenizer, o.image_size, norm);
      for (size_t k = 0; k < lines.size(); k++) {
        const std::string where = input + " line " + std::to_string(batch.numbers[k]) + ": ";
        if (!prepared[k]) return Status::invalid_argument(where + prepared[k].status().message());
        const Prepared& p = *prepared[k];
        for (int32_t id : p.text.tokens)
          if (id != image_token_id && (id < 0 || id >= tokenizer.vocab_size()))
            return Status::invalid_argument(where + "encodes to id " + std::to_string(id) +
                                            ", outside " + tokenizer.type() + "'s vocabulary");
        if (Status s = (*tokens_out)->add_sequence(p.text.tokens); !s) return s;
        ids.assign(p.text.loss_mask.begin(), p.text.loss_mask.end());
        if (Status s = (*mask_out)->add_sequence(ids); !s) return s;
        for (const RgbImage& image : p.images) {
          ids.assign(image.pixels.begin(), image.pixels.end());
          if (Status s = (*images_out)->add_sequence(ids); !s) return s;
        }
        (*tokens_out)->end_document();
        (*mask_out)->end_document();
        (*images_out)->end_document();
        report.documents++;
        report.tokens += p.text.tokens.size();
        images += p.images.size();
      }
    }
  }
  if (report.documents == 0) return Status::invalid_argument("--input holds no samples");
  for (auto* b : {&*tokens_out, &*mask_out, &*images_out})
    if (Status s = (*b)->finish(); !s) return s;
  if (Status s = write_metadata(images_prefix + ".json", o.image_size, image_token_id, norm); !s)
    return s;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (log) *log << images << " images of " << o.image_size << "x" << o.image_size << "\n";
  return report;
}

Result<std::unique_ptr<ImageTextDataset>> ImageTextDataset::open(const std::string& prefix) {
  auto d = std::unique_ptr<ImageTextDataset>(new ImageTextDataset);
  d->prefix_ = prefix;
  const std::string images_prefix = prefix + kImagesSuffix;
  auto tokens = IndexedDataset::open(prefix);
  if (!tokens) return tokens.status();
  auto mask = IndexedDataset::open(prefix + kLossMaskSuffix);
  if (!mask) return mask.status();
  auto images = IndexedDataset::open(images_prefix);
  if (!images) return images.status();
  d->tokens_ = std::move(*tokens);
  d->mask_ = std::move(*mask);
  d->images_ = std::move(*images);
  const std::string meta_path = images_prefix + ".json";
  std::ifstream in(meta_path);
  if (!in) return Status::io_error("cannot open '" + meta_path + "'");
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    d->image_size_ = j.at("image_size").get<int>();
    d->image_token_id_ = j.at("image_token_id").get<int32_t>();
    d->norm_.mean = j.at("mean").get<std::array<float, 3>>();
    d->norm_.std = j.at("std").get<std::array<float, 3>>();
  } catch (const nlohmann::json::exception& e) {
    return Status::corrupt("'" + meta_path + "' is not image-text metadata: " + e.what());
  }
  const size_t n = d->tokens_->num_documents();
  if (d->mask_->num_documents() != n || d->images_->num_documents() != n)
    return Status::corrupt(prefix + ": tokens, loss mask and images hold " + std::to_string(n) +
                           ", " + std::to_string(d->mask_->num_documents()) + " and " +
                           std::to_string(d->images_->num_documents()) + " samples");
  if (d->tokens_->num_sequences() != n ||
      !std::equal(d->tokens_->sequence_lengths().begin(), d->tokens_->sequence_lengths().end(),
                  d->mask_->sequence_lengths().begin(), d->mask_->sequence_lengths().end()))
    return Status::corrupt(prefix + ": the loss mask's lengths differ from the tokens'");
  const int64_t image_bytes = int64_t{d->image_size_} * d->image_size_ * 3;
  for (int32_t length : d->images_->sequence_lengths())
    if (length != image_bytes)
      return Status::corrupt(images_prefix + " holds an image of " + std::to_string(length) +
                             " bytes, not " + std::to_string(image_bytes) + " (image_size " +
                             std::to_string(d->image_size_) + ")");
  return d;
}

ImageTextDataset::Sample ImageTextDataset::text(size_t i) const {
  assert(i < size());
  Sample s;
  const size_t length = static_cast<size_t>(tokens_->sequence_lengths()[i]);
  s.tokens.resize(length);
  tokens_->read(i, 0, length, s.tokens.data());
  std::vector<int32_t> wide(length);
  mask_->read(i, 0, length, wide.data());
  s.loss_mask.assign(wide.begin(), wide.end());
  s.num_images = num_images(i);
  return s;
}

Status ImageTextDataset::check(size_t i) const {
  assert(i < size());
  const size_t length = static_cast<size_t>(tokens_->sequence_lengths()[i]);
  std::vector<int32_t> ids(length);
  tokens_->read(i, 0, length, ids.data());
  const int64_t placeholders = std::count(ids.begin(), ids.end(), image_token_id_);
  if (placeholders != num_images(i))
    return Status::corrupt(prefix_ + " sample " + std::to_string(i) + " has " +
                           std::to_string(placeholders) + " image placeholders but " +
                           std::to_string(num_images(i)) + " images");
  return Status::ok();
}

int ImageTextDataset::num_images(size_t i) const {
  assert(i < size());
  const auto index = images_->document_index();
  return static_cast<int>(index[i + 1] - index[i]);
}

int ImageTextDataset::max_images() const {
  const auto index = images_->document_index();
  int64_t most = 0;
  for (size_t i = 0; i + 1 < index.size(); i++) most = std::max(most, index[i + 1] - index[i]);
  return static_cast<int>(most);
}

void ImageTextDataset::read_image(size_t i, int k, uint8_t* hwc) const {
  assert(k < num_images(i));
  const size_t bytes = size_t(image_size_) * image_size_ * 3;
  std::vector<int32_t> wide(bytes);
  images_->read(static_cast<size_t>(images_->document_index()[i] + k), 0, bytes, wide.data());
  std::copy(wide.begin(), wide.end(), hwc);
}

ImageTextDataset::Sample ImageTextDataset::sample(size_t i) const {
  Sample s = text(i);
  const size_t bytes = size_t(image_size_) * image_size_ * 3;
  s.images.resize(s.num_images * bytes);
  for (int k = 0; k < s.num_images; k++) read_image(i, k, s.images.data() + k * bytes);
  return s;
}

}  // namespace lattice
