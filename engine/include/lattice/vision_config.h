// The vision tower of a LLaVA-style model (issue 27): a CLIP-style ViT encoder and the
// LLaVA-1.5 MLP projector into the language model's hidden size. Flag names are Megatron's
// (--img-h, --img-w, --patch-dim, --disable-vision-class-token) and LLaVA's
// (--vision-select-layer, --vision-projector-type); docs/vision.md describes the model.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace lattice {

// CLIP's per-channel pixel statistics (RGB, on pixel / 255; OpenAI CLIP and LLaVA's image
// processor): the image-text data's default normalisation (data/image_preprocess.h ImageNorm).
constexpr std::array<float, 3> kClipImageMean = {0.48145466f, 0.4578275f, 0.40821073f};
constexpr std::array<float, 3> kClipImageStd = {0.26862954f, 0.26130258f, 0.27577711f};

struct VisionConfig {
  int num_layers = 2;           // --vision-num-layers (L)
  int hidden_size = 32;         // --vision-hidden-size (C, the encoder's width)
  int ffn_hidden_size = 0;      // --vision-ffn-hidden-size (F); 0 means 4 * hidden
  int num_attention_heads = 2;  // --vision-num-attention-heads (NH)
  int patch_dim = 8;            // --patch-dim (P): the patch side in pixels
  int img_h = 32;               // --img-h (pixels)
  int img_w = 32;               // --img-w
  int num_channels = 3;         // --num-channels
  bool class_token = true;      // cleared by --disable-vision-class-token (CLIP has one)
  bool patch_bias = false;      // --vision-patch-bias: CLIP's patch Conv2d has no bias
  // --vision-select-layer: which hidden state feeds the projector, as LLaVA's
  // mm_vision_select_layer over HF CLIP's hidden_states (index 0: the pre-LayerNorm's output,
  // i: layer i's output; negative counts from the end, -1 = the last layer). Layers past it are
  // not run. LLaVA's default -2: the penultimate layer's output.
  int select_layer = -2;
  std::string projector_type = "mlp";  // --vision-projector-type: "mlp" (Linear-GELU-Linear)
  int lm_hidden_size = 64;             // the language model's --hidden-size (H)
  float init_method_std = 0.02f;       // as the language model's --init-method-std
  // Images per sequence the tower encodes for each micro-batch (the encoder's batch is
  // micro-batch x this): the training data's most (SampleSource::images_per_sample), not a flag.
  int images_per_sample = 1;
  // The normalisation the training images had (the data's mean and std: the image-text
  // dataset's _images.json, CLIP's for --mock-data; SampleSource::image_norm), not a flag. The
  // checkpoint records it and generation normalises prompt images with it.
  std::array<float, 3> image_mean = kClipImageMean;
  std::array<float, 3> image_std = kClipImageStd;
  // Set by the checkpoint reader for a checkpoint written before the normalisation was recorded:
  // image_mean and image_std are then CLIP's, assumed.
  bool image_norm_assumed = false;

  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int patches() const { return (img_h / patch_dim) * (img_w / patch_dim); }  // Np
  int seq_length() const { return patches() + (class_token ? 1 : 0); }       // T
  // The layers the forward runs: the selected hidden state's index in [0, L].
  int layers_run() const { return select_layer < 0 ? num_layers + 1 + select_layer : select_layer; }
  // Every violated rule, one sentence each naming the flag.
  std::vector<std::string> validate() const;
  // Why tensor parallelism of `tp` ranks cannot split this tower (Note [tower tensor
  // parallelism] in model/vision_encoder.cpp), one sentence each naming the flag: TP must divide
  // its heads and its MLP's width (the projector's, the language model's width, is checked with
  // the language model's heads); empty when it can.
  std::vector<std::string> tensor_parallel_errors(int tp) const;
};

}  // namespace lattice
