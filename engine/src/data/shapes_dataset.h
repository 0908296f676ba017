// `lattice data shapes`: a small synthetic vision-language task that a model can learn on a CPU
// in minutes. Each image is one coloured circle, square or triangle in one cell of a 3x3 grid
// on a white background, drawn without anti-aliasing (every pixel is the background or the
// shape's colour), with its caption and questions. Seeded and deterministic across platforms
// (mt19937_64 and integer arithmetic only for the draws).
#pragma once

#include <cstdint>
#include <string>

#include "data/image_io.h"

namespace lattice {

struct ShapesOptions {
  std::string output_dir;
  int train = 1000;      // --train: training images
  int valid = 200;       // --valid: held-out images (drawn after the training ones)
  int image_size = 64;   // --image-size
  uint64_t seed = 1234;  // --seed
};

inline constexpr const char* kShapeNames[] = {"circle", "square", "triangle"};
inline constexpr const char* kColourNames[] = {"red",    "green",  "blue",
                                               "yellow", "purple", "orange"};
inline constexpr uint8_t kColours[][3] = {{220, 30, 30},  {30, 160, 40},  {30, 70, 220},
                                          {230, 200, 20}, {140, 40, 170}, {240, 130, 20}};
inline constexpr uint8_t kBackground[3] = {255, 255, 255};
// Cell (row, column) of the 3x3 grid, row-major from the top left.
inline constexpr const char* kPositionNames[] = {"top left",    "top",    "top right",
                                                 "left",        "center", "right",
                                                 "bottom left", "bottom", "bottom right"};

struct Shape {
  int shape = 0, colour = 0, cell = 0;  // indices into the tables above
  double cx = 0, cy = 0, radius = 0;    // pixels; the shape lies inside its cell
};

// "a red circle at the top left" ("an orange ...", "... in the center" for the middle cell).
std::string shape_caption(const Shape& s);

// The shape on the background, size x size. Pixel (x, y) is inside when its centre
// (x + 0.5, y + 0.5) is: circle |p - c| <= r; square |dx|, |dy| <= 0.85 r; triangle (apex up)
// cy - r <= py <= cy + r and |dx| <= (py - cy + r) / 2.
RgbImage draw_shape(const Shape& s, int size);

struct ShapesReport {
  int train = 0, valid = 0;
};

// Writes, under output_dir: images/{train,valid}_NNNNN.png, and for each split
// {split}.jsonl (captions: {"image", "text", "shape", "colour", "position"}) and
// {split}_chat.jsonl (LLaVA conversations: what shape, what colour, where), ready for
// `lattice data preprocess --images`. Errors name the file or the flag.
Result<ShapesReport> generate_shapes(const ShapesOptions& options);

}  // namespace lattice
