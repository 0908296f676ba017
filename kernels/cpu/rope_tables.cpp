// RoPE's angle tables (kernels.h rope_tables): plain host code, compiled once (not per ISA).
#include <cmath>

#include "lattice/kernels.h"

namespace lattice::kernels {

void rope_tables(double* cos, double* sin, int P, int rotary_dim, double theta) {
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; i++) {
    // Hugging Face: inv_freq = 1 / base ** (arange(0, dim, 2).float() / dim), then the angle
    // t * inv_freq with t and inv_freq in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    const float inv_freq =
        static_cast<float>(1.0 / std::pow(static_cast<double>(static_cast<float>(theta)),
                                          static_cast<double>(exponent)));
    for (int p = 0; p < P; p++) {
      const float angle = static_cast<float>(p) * inv_freq;
      cos[static_cast<size_t>(p) * half + i] = std::cos(static_cast<double>(angle));
      sin[static_cast<size_t>(p) * half + i] = std::sin(static_cast<double>(angle));
    }
  }
}

}  // namespace lattice::kernels
