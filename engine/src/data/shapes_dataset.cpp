// The shapes dataset generator (shapes_dataset.h).
#include "data/shapes_dataset.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

namespace lattice {

namespace {

// An integer in [0, n) and a fraction in [0, 1) from the engine's raw output, so the stream is
// the same on every standard library (the <random> distributions are not).
int pick(std::mt19937_64& rng, int n) {
  return static_cast<int>(rng() % static_cast<uint64_t>(n));
}
double fraction(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) / 9007199254740992.0;  // 2^53
}

Shape random_shape(std::mt19937_64& rng, int size) {
  Shape s;
  s.shape = pick(rng, 3);
  s.colour = pick(rng, 6);
  s.cell = pick(rng, 9);
  const double cell = size / 3.0;
  s.radius = cell * (0.28 + 0.12 * fraction(rng));
  const double slack = std::max(cell / 2 - s.radius - 1.0, 0.0);  // keeps the shape in its cell
  s.cx = (s.cell % 3 + 0.5) * cell + slack * (2 * fraction(rng) - 1);
  s.cy = (s.cell / 3 + 0.5) * cell + slack * (2 * fraction(rng) - 1);
  return s;
}

bool inside(const Shape& s, double px, double py) {
  const double dx = px - s.cx, dy = py - s.cy, r = s.radius;
  switch (s.shape) {
    case 0:
      return dx * dx + dy * dy <= r * r;
    case 1:
      return std::fabs(dx) <= 0.85 * r && std::fabs(dy) <= 0.85 * r;
    default:
      return dy >= -r && dy <= r && std::fabs(dx) <= (dy + r) / 2;
  }
}

std::string position_phrase(int cell) {
  return cell == 4 ? "in the center" : std::string("at the ") + kPositionNames[cell];
}

}  // namespace

std::string shape_caption(const Shape& s) {
  const std::string colour = kColourNames[s.colour];
  return (colour[0] == 'o' ? "an " : "a ") + colour + " " + kShapeNames[s.shape] + " " +
         position_phrase(s.cell);
}

RgbImage draw_shape(const Shape& s, int size) {
  RgbImage image{size, size, std::vector<uint8_t>(static_cast<size_t>(size) * size * 3)};
  for (int y = 0; y < size; y++)
    for (int x = 0; x < size; x++) {
      const uint8_t* c = inside(s, x + 0.5, y + 0.5) ? kColours[s.colour] : kBackground;
      std::copy(c, c + 3, &image.pixels[(static_cast<size_t>(y) * size + x) * 3]);
    }
  return image;
}

Result<ShapesReport> generate_shapes(const ShapesOptions& o) {
  if (o.output_dir.empty()) return Status::invalid_argument("--output-dir is required");
  if (o.image_size < 12 || o.image_size > 1024)
    return Status::invalid_argument("--image-size " + std::to_string(o.image_size) +
                                    " is outside 12..1024");
  if (o.train < 0 || o.valid < 0 || o.train + o.valid == 0)
    return Status::invalid_argument("--train and --valid must be non-negative, not both 0");
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(fs::path(o.output_dir) / "images", error);
  if (error)
    return Status::io_error("cannot create '" + o.output_dir + "/images': " + error.message());
  std::mt19937_64 rng(o.seed);
  ShapesReport report;
  for (const char* split : {"train", "valid"}) {
    const int count = std::string(split) == "train" ? o.train : o.valid;
    const std::string captions_path = o.output_dir + "/" + split + ".jsonl";
    const std::string chat_path = o.output_dir + "/" + split + "_chat.jsonl";
    std::ofstream captions(captions_path), chat(chat_path);
    if (!captions) return Status::io_error("cannot write '" + captions_path + "'");
    if (!chat) return Status::io_error("cannot write '" + chat_path + "'");
    for (int i = 0; i < count; i++) {
      const Shape s = random_shape(rng, o.image_size);
      char name[64];
      std::snprintf(name, sizeof name, "images/%s_%05d.png", split, i);
      if (Status st = write_png(o.output_dir + "/" + name, draw_shape(s, o.image_size)); !st)
        return st;
      const nlohmann::json caption = {{"image", name},
                                      {"text", shape_caption(s)},
                                      {"shape", kShapeNames[s.shape]},
                                      {"colour", kColourNames[s.colour]},
                                      {"position", kPositionNames[s.cell]}};
      const nlohmann::json turns = nlohmann::json::array(
          {{{"from", "human"}, {"value", "<image>\nWhat shape is in the image?"}},
           {{"from", "gpt"}, {"value", std::string("a ") + kShapeNames[s.shape]}},
           {{"from", "human"}, {"value", "What colour is it?"}},
           {{"from", "gpt"}, {"value", kColourNames[s.colour]}},
           {{"from", "human"}, {"value", "Where is it?"}},
           {{"from", "gpt"}, {"value", position_phrase(s.cell)}}});
      captions << caption.dump() << "\n";
      chat << nlohmann::json{{"image", name}, {"conversations", turns}}.dump() << "\n";
    }
    if (!captions.flush()) return Status::io_error("cannot write '" + captions_path + "'");
    if (!chat.flush()) return Status::io_error("cannot write '" + chat_path + "'");
    (std::string(split) == "train" ? report.train : report.valid) = count;
  }
  return report;
}

}  // namespace lattice
