// Prompt images (prompt_images.h).
#include "infer/prompt_images.h"

#include <cstdio>
#include <mutex>
#include <span>

#include "data/image_preprocess.h"

namespace lattice {

namespace {
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}
}  // namespace

Status check_image_model(const ModelConfig& config, const std::string& what) {
  if (!config.has_vision())
    return Status::invalid_argument(what +
                                    ": the model has no vision tower (a text model); "
                                    "drop the images");
  const VisionConfig& v = config.vision;
  if (v.img_h != v.img_w || v.num_channels != 3)
    return Status::invalid_argument(what + ": the model's tower takes " +
                                    std::to_string(v.num_channels) + "x" + std::to_string(v.img_h) +
                                    "x" + std::to_string(v.img_w) +
                                    " images; only square RGB towers are supported");
  return Status::ok();
}

void append_prompt_image(const ModelConfig& config, const RgbImage& image,
                         std::vector<float>& out) {
  const int size = config.vision.img_h;
  // The training data's mean and std, as the checkpoint records them (docs/vision.md).
  const ImageNorm norm = image_norm_of(config.vision);
  static std::once_flag noted;
  if (config.vision.image_norm_assumed)
    std::call_once(noted, [] {
      std::fprintf(stderr,
                   "note: the model records no image normalisation (a checkpoint from before "
                   "it was recorded, or an HF model without preprocessor_config.json); prompt "
                   "images are normalised with CLIP's mean and std (the data's default)\n");
    });
  const RgbImage square = preprocess_image(image, size, norm);
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(3) * size * size);
  normalize_image(square.pixels.data(), size, norm, out.data() + at);
}

Result<std::vector<float>> load_prompt_images(const ModelConfig& config,
                                              const std::vector<std::string>& paths) {
  if (Status s = check_image_model(config, "--image"); !s) return s;
  std::vector<float> out;
  for (const std::string& path : paths) {
    Result<RgbImage> image = read_image(path);
    if (!image)
      return Status::invalid_argument("--image " + path + ": " + image.status().message());
    append_prompt_image(config, *image, out);
  }
  return out;
}

Result<std::vector<uint8_t>> data_url_bytes(const std::string& url) {
  constexpr std::string_view kPng = "data:image/png;base64,", kJpeg = "data:image/jpeg;base64,";
  std::string_view body;
  if (url.rfind(kPng, 0) == 0)
    body = std::string_view(url).substr(kPng.size());
  else if (url.rfind(kJpeg, 0) == 0)
    body = std::string_view(url).substr(kJpeg.size());
  else if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0)
    return Status::invalid_argument(
        "the server does not fetch image URLs; send the image inline as a data URL "
        "(data:image/png;base64,... or data:image/jpeg;base64,...)");
  else
    return Status::invalid_argument(
        "an image URL must be a data URL, data:image/png;base64,... or data:image/jpeg;base64,...");
  std::vector<uint8_t> out;
  uint32_t bits = 0;
  int held = 0;
  for (char c : body) {
    if (c == '=') break;
    const int v = base64_value(c);
    if (v < 0) return Status::invalid_argument("the image's data URL is not valid base64");
    bits = (bits << 6) | static_cast<uint32_t>(v);
    held += 6;
    if (held >= 8) {
      held -= 8;
      out.push_back(static_cast<uint8_t>(bits >> held));
    }
  }
  return out;
}

std::vector<int32_t> expand_image_markers(
    const ModelConfig& config, const std::string& text,
    const std::function<std::vector<int32_t>(std::string_view, bool)>& encode) {
  const int Np = config.vision.patches();
  std::vector<int32_t> ids;
  for (size_t from = 0;;) {
    const size_t at = text.find(kImageMarker, from);
    const std::string_view piece(text.data() + from,
                                 (at == std::string::npos ? text.size() : at) - from);
    std::vector<int32_t> part = encode(piece, from == 0);
    ids.insert(ids.end(), part.begin(), part.end());
    if (at == std::string::npos) break;
    ids.insert(ids.end(), Np, config.image_token_id());
    from = at + kImageMarker.size();
  }
  return ids;
}

size_t count_image_markers(const std::string& text) {
  size_t n = 0;
  for (size_t at = text.find(kImageMarker); at != std::string::npos;
       at = text.find(kImageMarker, at + kImageMarker.size()))
    n++;
  return n;
}

std::vector<int32_t> tokenize_image_text(const Tokenizer& tok, const ModelConfig& config,
                                         const std::string& text) {
  return expand_image_markers(config, text, [&](std::string_view piece, bool first) {
    return first ? tokenize_with_bos(tok, piece) : tok.encode(piece);
  });
}

Result<std::vector<int32_t>> tokenize_with_images(const Tokenizer& tok, const ModelConfig& config,
                                                  const std::string& prompt, size_t images) {
  std::string text = prompt;
  size_t markers = count_image_markers(text);
  if (markers == 0 && images > 0) {
    text = std::string(kImageMarker) + "\n" + text;
    markers = 1;
  }
  if (markers != images)
    return Status::invalid_argument("the prompt has " + std::to_string(markers) +
                                    " <image> marker(s) for " + std::to_string(images) +
                                    " --image(s); give one image per <image>");
  return tokenize_image_text(tok, config, text);
}

std::string decode_prompt(const Tokenizer& tok, const std::vector<int32_t>& prompt) {
  const int32_t V = tok.vocab_size();
  std::string out;
  for (size_t i = 0; i < prompt.size();) {
    size_t j = i;
    if (prompt[i] >= V) {
      while (j < prompt.size() && prompt[j] >= V) j++;
      out += kImageMarker;
    } else {
      while (j < prompt.size() && prompt[j] < V) j++;
      out += tok.decode(std::span<const int32_t>(prompt.data() + i, j - i));
    }
    i = j;
  }
  return out;
}

std::vector<int32_t> prompt_text_tail(const Tokenizer& tok, const std::vector<int32_t>& prompt) {
  size_t start = 0;
  for (size_t i = 0; i < prompt.size(); i++)
    if (prompt[i] >= tok.vocab_size()) start = i + 1;
  return std::vector<int32_t>(prompt.begin() + start, prompt.end());
}

}  // namespace lattice
