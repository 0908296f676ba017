// Micro-batches of tokens and images for a tiny LLaVA-style model (tiny_model.h's
// tiny_vlm_config), shared by the VLM tests that train it step by step in one process.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "lattice/model_config.h"

namespace lattice::testing {

struct VlmSteps {
  std::vector<std::vector<int32_t>> tokens, targets;  // steps x (B * T)
  std::vector<std::vector<float>> images;             // steps x (B I, Cin, H, W)
};

// `steps` copies of one batch of `batch` sequences (so a few steps lower the loss even where
// only the projector trains): sequence b holds text tokens, then each of its images as Np
// placeholder rows from row 1 + b (sequence 1 of a one-image model starts its image near the
// end, so the sequence cuts it off). Targets: the next token where it is text, else ignored
// (-1). Pixels: normal(0, 1) from a fixed seed.
inline VlmSteps vlm_steps(const ModelConfig& c, int steps, int batch) {
  const VisionConfig& v = c.vision;
  const int T = c.seq_length, Np = v.patches(), I = v.images_per_sample;
  const int32_t image = c.image_token_id();
  VlmSteps s;
  for (int step = 0; step < steps; step++) {
    std::mt19937 rng(11);
    std::normal_distribution<float> pixel(0.0f, 1.0f);
    std::vector<int32_t> tokens(batch * T), targets(batch * T);
    for (int b = 0; b < batch; b++) {
      int32_t* x = tokens.data() + b * T;
      for (int t = 0; t < T; t++) x[t] = (t * 37 + b * 53 + 11) % c.vocab_size;
      const int first = I == 1 && b == 1 ? T - Np / 2 : 1 + b;
      for (int k = 0; k < I * Np && first + k + k / Np < T; k++)
        x[first + k + k / Np] = image;  // one text row between two images
      for (int t = 0; t < T; t++) {
        const int32_t next = t + 1 < T ? x[t + 1] : (x[t] * 7 + 3) % c.vocab_size;
        targets[b * T + t] = next == image ? -1 : next;
      }
    }
    std::vector<float> images(static_cast<size_t>(batch) * I * v.num_channels * v.img_h * v.img_w);
    for (float& p : images) p = pixel(rng);
    s.tokens.push_back(tokens);
    s.targets.push_back(targets);
    s.images.push_back(images);
  }
  return s;
}

}  // namespace lattice::testing
