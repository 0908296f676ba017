// Small model configurations for tests: the few fields a test cares about, the rest at the
// ModelConfig defaults. Dropout is off unless the test turns it on.
#pragma once

#include <string>
#include <vector>

#include "lattice/model_config.h"
#include "lattice/train_options.h"

namespace lattice::testing {

inline ModelConfig tiny_config(int layers, int hidden, int heads, int seq, int vocab) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.seq_length = seq;
  c.vocab_size = vocab;
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  return c;
}

// A LLaVA-style model (docs/vision.md) for tests: a 2-layer LM of width 32 over 120 tokens
// (padded to 128, so the image placeholder id 120 lies inside the padded vocabulary), GPT-2 or
// Llama-shaped (RoPE, RMSNorm, SwiGLU, untied head, no biases), with a 2-layer CLIP tower of width
// 16 on 16 x 16 images in 8-pixel patches (4 tokens an image), every layer run.
inline ModelConfig tiny_vlm_config(bool llama, int images_per_sample, int seq, float init_std) {
  ModelConfig c = tiny_config(2, 32, 4, seq, 120);
  c.init_method_std = init_std;
  if (llama) {
    c.position_embedding_type = "rope";
    c.normalization = "RMSNorm";
    c.swiglu = true;
    c.ffn_hidden_size = 48;
    c.untie_embeddings_and_output_weights = true;
    c.disable_bias_linear = true;
  }
  c.vision_model_type = "clip";
  VisionConfig& v = c.vision;
  v.num_layers = 2;
  v.hidden_size = 16;
  v.num_attention_heads = 2;
  v.ffn_hidden_size = 24;
  v.img_h = v.img_w = 16;
  v.patch_dim = 8;
  v.select_layer = -1;  // every layer runs (a layer past it would get no update in a reference)
  v.lm_hidden_size = c.hidden_size;
  v.init_method_std = init_std;
  v.images_per_sample = images_per_sample;
  return c;
}

// The flags of a tiny CLIP tower for `lattice train` and parse_train_flags: `layers` layers of
// width 16 with 2 heads on 16 x 16 images in 8-pixel patches (4 tokens an image), as
// tiny_vlm_config's tower but with the default MLP width.
inline std::vector<std::string> tiny_tower_flags(int layers) {
  return {"--vision-model-type",
          "clip",
          "--vision-num-layers",
          std::to_string(layers),
          "--vision-hidden-size",
          "16",
          "--vision-num-attention-heads",
          "2",
          "--img-h",
          "16",
          "--img-w",
          "16",
          "--patch-dim",
          "8"};
}

// A --device cuda run of two layers that the CUDA backend accepts as it is (head size 64, an MLP
// slice that is a multiple of 8, mock data, one iteration, no validation; 2 micro-batches, so
// DP 1 and DP 2 both fit): the base the capability and --device tests change one flag of.
inline TrainOptions cuda_ready_options() {
  TrainOptions o;
  o.model = tiny_config(2, 128, 2, 64, 256);  // head size 64
  o.tokenizer.vocab_size = 255;
  o.micro_batch_size = 2;
  o.global_batch_size = 4;
  o.train_iters = 1;
  o.mock_data = true;
  o.eval_iters = 0;
  o.device = "cuda";
  return o;
}

}  // namespace lattice::testing
