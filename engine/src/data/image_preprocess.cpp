// Padding, resizing and normalisation of images for a vision encoder (image_preprocess.h).
#include "data/image_preprocess.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

namespace lattice {

namespace {

// PIL's bicubic_filter (a = -0.5), support 2.
double cubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// The taps of each output index along one axis: input [first, first + count) with weights,
// as PIL's precompute_coeffs (and PyTorch's antialiased interpolation) compute them.
struct Taps {
  std::vector<int> first, count;
  std::vector<double> weights;  // (out, width) row-major, zero past count
  int width = 0;
};

Taps taps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  Taps t;
  t.width = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.weights.assign(static_cast<size_t>(out_size) * t.width, 0.0);
  for (int i = 0; i < out_size; i++) {
    const double center = (i + 0.5) * scale;
    // C casts truncate toward zero, as PIL's (int) and PyTorch's static_cast do.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    double* w = &t.weights[static_cast<size_t>(i) * t.width];
    double total = 0;
    for (int x = lo; x < hi; x++) total += w[x - lo] = cubic((x - center + 0.5) / filter_scale);
    if (total != 0)
      for (int x = lo; x < hi; x++) w[x - lo] /= total;
    t.first.push_back(lo);
    t.count.push_back(hi - lo);
  }
  return t;
}

}  // namespace

std::array<uint8_t, 3> pad_colour(const ImageNorm& norm) {
  std::array<uint8_t, 3> c{};
  for (int k = 0; k < 3; k++)
    c[k] = static_cast<uint8_t>(std::clamp(static_cast<int>(255.0 * norm.mean[k]), 0, 255));
  return c;
}

RgbImage pad_to_square(const RgbImage& image, std::array<uint8_t, 3> colour) {
  if (image.width == image.height) return image;
  const int side = std::max(image.width, image.height);
  const int x0 = (side - image.width) / 2, y0 = (side - image.height) / 2;
  RgbImage out{side, side, std::vector<uint8_t>(static_cast<size_t>(side) * side * 3)};
  for (size_t p = 0; p < out.pixels.size(); p += 3)
    std::copy(colour.begin(), colour.end(), out.pixels.begin() + p);
  for (int y = 0; y < image.height; y++)
    std::copy_n(&image.pixels[static_cast<size_t>(y) * image.width * 3], image.width * 3,
                &out.pixels[(static_cast<size_t>(y + y0) * side + x0) * 3]);
  return out;
}

void resize_bicubic(const uint8_t* in, int h, int w, int out_h, int out_w, double* out) {
  assert(h > 0 && w > 0 && out_h > 0 && out_w > 0);
  const Taps horizontal = taps(w, out_w), vertical = taps(h, out_h);
  std::vector<double> rows(static_cast<size_t>(h) * out_w * 3);  // (h, out_w, 3)
  for (int y = 0; y < h; y++)
    for (int x = 0; x < out_w; x++) {
      const double* wt = &horizontal.weights[static_cast<size_t>(x) * horizontal.width];
      for (int c = 0; c < 3; c++) {
        double sum = 0;
        for (int k = 0; k < horizontal.count[x]; k++)
          sum += wt[k] * in[(static_cast<size_t>(y) * w + horizontal.first[x] + k) * 3 + c];
        rows[(static_cast<size_t>(y) * out_w + x) * 3 + c] = sum;
      }
    }
  for (int y = 0; y < out_h; y++) {
    const double* wt = &vertical.weights[static_cast<size_t>(y) * vertical.width];
    for (int x = 0; x < out_w; x++)
      for (int c = 0; c < 3; c++) {
        double sum = 0;
        for (int k = 0; k < vertical.count[y]; k++)
          sum += wt[k] * rows[(static_cast<size_t>(vertical.first[y] + k) * out_w + x) * 3 + c];
        out[(static_cast<size_t>(y) * out_w + x) * 3 + c] = sum;
      }
  }
}

RgbImage resize_image(const RgbImage& image, int out_h, int out_w) {
  std::vector<double> exact(static_cast<size_t>(out_h) * out_w * 3);
  resize_bicubic(image.pixels.data(), image.height, image.width, out_h, out_w, exact.data());
  RgbImage out{out_w, out_h, std::vector<uint8_t>(exact.size())};
  for (size_t i = 0; i < exact.size(); i++)
    out.pixels[i] = static_cast<uint8_t>(std::clamp(std::lround(exact[i]), 0L, 255L));
  return out;
}

RgbImage preprocess_image(const RgbImage& image, int size, const ImageNorm& norm) {
  RgbImage square = pad_to_square(image, pad_colour(norm));
  if (square.width == size) return square;
  return resize_image(square, size, size);
}

void normalize_image(const uint8_t* hwc, int size, const ImageNorm& norm, float* chw) {
  const size_t plane = static_cast<size_t>(size) * size;
  for (int c = 0; c < 3; c++) {
    const float mean = norm.mean[c], std = norm.std[c];
    for (size_t p = 0; p < plane; p++)
      chw[c * plane + p] = (static_cast<float>(hwc[p * 3 + c]) / 255.0f - mean) / std;
  }
}

}  // namespace lattice
