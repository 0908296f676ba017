// RoPE's angle tables (kernels.h rope_tables): plain host code, compiled once (not per ISA).
#include <cmath>

#include "lattice/kernels.h"

namespace lattice::kernels {

namespace {

// transformers' _compute_llama3_parameters for one inverse frequency, operation by operation in
// float as torch computes it on float32 tensors (`c / t` is reciprocal(t) * c there; Python
// scalars become float). Megatron's _apply_scaling is the same formula.
float llama3_scaled(float inv_freq, float factor) {
  constexpr float kOriginal = 8192.0f, kLow = 1.0f, kHigh = 4.0f;  // Llama 3.1's
  const float low_freq_wavelen = kOriginal / kLow, high_freq_wavelen = kOriginal / kHigh;
  const float two_pi = static_cast<float>(2.0 * 3.14159265358979323846);
  const float wavelen = (1.0f / inv_freq) * two_pi;
  const float scaled = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
  const float smooth = ((1.0f / wavelen) * kOriginal - kLow) / (kHigh - kLow);
  const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
  const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
  return medium ? smoothed : scaled;
}

}  // namespace

void rope_tables(double* cos, double* sin, int P, int rotary_dim, double theta,
                 double llama3_factor) {
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; i++) {
    // Hugging Face: inv_freq = 1 / base ** (arange(0, dim, 2).float() / dim), then the angle
    // t * inv_freq with t and inv_freq in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    float inv_freq =
        static_cast<float>(1.0 / std::pow(static_cast<double>(static_cast<float>(theta)),
                                          static_cast<double>(exponent)));
    if (llama3_factor > 0) inv_freq = llama3_scaled(inv_freq, static_cast<float>(llama3_factor));
    for (int p = 0; p < P; p++) {
      const float angle = static_cast<float>(p) * inv_freq;
      cos[static_cast<size_t>(p) * half + i] = std::cos(static_cast<double>(angle));
      sin[static_cast<size_t>(p) * half + i] = std::sin(static_cast<double>(angle));
    }
  }
}

}  // namespace lattice::kernels
