// An image as a vision encoder takes it, the way LLaVA-1.5 prepares it: padded to a square
// with the mean colour, resized to --image-size (bicubic, Note [bicubic resize]) and stored as
// uint8 RGB; normalised with the encoder's mean and std into float CHW when a batch is built.
#pragma once

#include <array>
#include <cstdint>

#include "data/image_io.h"
#include "lattice/vision_config.h"

namespace lattice {

// Per-channel mean and std (RGB, on pixel / 255). The defaults are CLIP's (OpenAI CLIP and
// LLaVA's image processor).
struct ImageNorm {
  std::array<float, 3> mean = kClipImageMean;
  std::array<float, 3> std = kClipImageStd;
};

// The normalisation a model's tower was trained with (VisionConfig::image_mean, image_std).
inline ImageNorm image_norm_of(const VisionConfig& v) {
  return {v.image_mean, v.image_std};
}

// The colour LLaVA pads with: int(255 * mean[c]) (truncated), (122, 116, 104) for CLIP.
std::array<uint8_t, 3> pad_colour(const ImageNorm& norm);

// LLaVA's expand2square: the image centred on a square of `colour` whose side is its longer
// side (offset (long - short) / 2, rounded down); a square image is returned unchanged.
RgbImage pad_to_square(const RgbImage& image, std::array<uint8_t, 3> colour);

// Note [bicubic resize]: the separable bicubic resampling of PIL's Image.resize(BICUBIC) and of
// torch.nn.functional.interpolate(mode="bicubic", align_corners=False, antialias=True): the
// cubic kernel with a = -0.5, its support widened by the scale when shrinking (so a downscale
// averages every input pixel, no aliasing), taps clipped at the borders and the weights
// renormalised, rows first then columns. Unlike PIL, the intermediate pass is kept in float64
// rather than rounded to 8 bits; the result equals PyTorch's float64 interpolate.
// `in` (h, w, 3) uint8 -> `out` (out_h, out_w, 3) float64, unrounded and unclamped.
void resize_bicubic(const uint8_t* in, int h, int w, int out_h, int out_w, double* out);

// resize_bicubic rounded to the nearest integer and clamped to [0, 255].
RgbImage resize_image(const RgbImage& image, int out_h, int out_w);

// pad_to_square with pad_colour(norm), then resize_image to size x size: the stored form.
RgbImage preprocess_image(const RgbImage& image, int size, const ImageNorm& norm);

// chw[c][y][x] = (hwc[y][x][c] / 255 - mean[c]) / std[c]: hwc (size, size, 3) uint8 ->
// chw (3, size, size) float32.
void normalize_image(const uint8_t* hwc, int size, const ImageNorm& norm, float* chw);

}  // namespace lattice
