// Images in prompts for a vision-language model (docs/vision.md, "Generation"): decoded (files
// or data: URLs, one decoder: data/image_io.h), preprocessed as training's data (pad to square,
// resize to the tower's size, the checkpoint's mean and std, VisionConfig::image_mean and
// image_std: data/image_preprocess.h), and a
// prompt's `<image>` markers expanded to Np placeholder ids each (Note [image rows] in
// model/gpt_vision.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/image_io.h"
#include "lattice/model_config.h"
#include "lattice/status.h"
#include "lattice/tokenizer.h"

namespace lattice {

constexpr std::string_view kImageMarker = "<image>";

// Ok for a model with a vision tower whose input is square RGB; else why not, `what` (the flag or
// field) naming the images.
Status check_image_model(const ModelConfig& config, const std::string& what);

// Appends `image`, preprocessed and normalised (3, img_h, img_w) with the model's recorded mean
// and std, to `out`. A checkpoint that predates them (VisionConfig::image_norm_assumed) gets
// CLIP's and a note on stderr, once per process.
void append_prompt_image(const ModelConfig& config, const RgbImage& image, std::vector<float>& out);

// The images at `paths` as one (I, 3, img_h, img_w) array. Errors: check_image_model, a file
// that does not decode (naming it).
Result<std::vector<float>> load_prompt_images(const ModelConfig& config,
                                              const std::vector<std::string>& paths);

// The bytes of a "data:image/png;base64,..." (or image/jpeg) URL. Errors: any other URL (the
// server does not fetch), bad base64.
Result<std::vector<uint8_t>> data_url_bytes(const std::string& url);

// The ids of `text` with each `<image>` as Np placeholder ids: encode(piece, first) encodes the
// text between markers (`first`: the piece that starts the prompt).
std::vector<int32_t> expand_image_markers(
    const ModelConfig& config, const std::string& text,
    const std::function<std::vector<int32_t>(std::string_view, bool)>& encode);

// How many `<image>` markers `text` holds.
size_t count_image_markers(const std::string& text);

// The ids of `text` with each `<image>` expanded (expand_image_markers), the tokenizer's BOS, if
// any, first (as tokenize_with_bos).
std::vector<int32_t> tokenize_image_text(const Tokenizer& tok, const ModelConfig& config,
                                         const std::string& text);

// A --prompt's ids: tokenize_image_text; a prompt without `<image>` gets "<image>\n" prepended
// (as LLaVA's data). Errors: markers and `images` disagree.
Result<std::vector<int32_t>> tokenize_with_images(const Tokenizer& tok, const ModelConfig& config,
                                                  const std::string& prompt, size_t images);

// The prompt as text: each run of image placeholder ids (ids outside the tokenizer's
// vocabulary, which it cannot decode) as `<image>`.
std::string decode_prompt(const Tokenizer& tok, const std::vector<int32_t>& prompt);

// The prompt's ids after its last image placeholder (all of them without one): the text a
// continuation is decoded together with.
std::vector<int32_t> prompt_text_tail(const Tokenizer& tok, const std::vector<int32_t>& prompt);

}  // namespace lattice
