// Image-text training samples (LLaVA style) over what `lattice data preprocess --images` wrote
// (ImageTextDataset): each placeholder expanded to the encoder's patch count, and the images
// normalised for the encoder. The vision model itself is not here. See docs/data.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/image_text_dataset.h"
#include "lattice/model_config.h"
#include "lattice/vision_config.h"

namespace lattice {

struct ImageTextSourceOptions {
  int seq_length = 0;
  int patches = 0;  // Np, VisionConfig::patches(): the tokens each image becomes
  int img_h = 0;    // --img-h and --img-w: must equal the dataset's image_size
  int img_w = 0;
  int num_channels = 3;      // --num-channels: must be 3 (the images are stored RGB)
  int32_t pad_token_id = 0;  // fills a sample's tail; always masked, so only its id matters
  // The id the model takes for image positions, the tokenizer's vocabulary size (Note
  // [image-text tokens]); the dataset's must equal it. Negative: not checked.
  int32_t image_token_id = -1;
};

// The options model `m` reads its samples with, `v` its vision tower (the trainer's and
// `lattice eval`'s data paths alike).
ImageTextSourceOptions image_text_options(const ModelConfig& m, const VisionConfig& v);

// Note [image-text samples]: sample i of a split is its document i mod count, in document order,
// as SFT's one-conversation-per-sample samples (Note [SFT samples]; no packing, no shuffle),
// with seq_length + 1 tokens, positions 0..seq_length, right truncation and masked padding,
// except that each image placeholder becomes Np consecutive copies of image_token_id, all
// masked (an image token is never a target). The model puts image k's Np projected patches at
// the k-th run of Np image tokens; an image whose run truncation cuts still has its slot in
// sample_images (the model uses the patches whose tokens are in the sequence, in order).
// images_per_sample() is the most images of any document of the whole dataset (every prefix of
// the blend, every split), at least 1, so that every sample has the same image slots: a bound
// that sizes the model's buffers; the tower runs on the images whose placeholders the micro-batch
// holds (Note [present images] in model/gpt_vision.cpp).
//
// One split over documents [doc_begin, doc_end) of `data`; size() is at least num_samples and
// at least one pass over the split. `images_per_sample` >= data->max_images().
Result<std::unique_ptr<SampleSource>> build_image_text_dataset(
    std::shared_ptr<const ImageTextDataset> data, size_t doc_begin, size_t doc_end,
    int64_t num_samples, int images_per_sample, const ImageTextSourceOptions& options);

// --data-path [W1] P1 [W2 P2 ...] --split S with a vision model: as build_sft_splits (the same
// document splits and blending), each prefix ({output-prefix}_text_document) opened with
// ImageTextDataset::open. Errors: a dataset whose image_size differs from --img-h / --img-w,
// --num-channels other than 3, a dataset made with another tokenizer's image_token_id.
Result<DataSplits> build_image_text_splits(const std::vector<std::pair<double, std::string>>& blend,
                                           const std::string& split, int64_t train_samples,
                                           int64_t valid_samples, int64_t test_samples,
                                           const ImageTextSourceOptions& options);

// --mock-data with a vision model: an endless, seeded stream of one solid-colour image per
// sample (one of min(6, vocab_size - 1) colours, the normalised image of ImageNorm's defaults)
// whose tokens are Np masked image tokens, then 1 + colour, then each next text token one more
// (mod vocab_size - 1), all targets. The first text token can only be predicted from the image,
// so the loss on it falls only when the vision path works. `options` as for the real data
// (img_h = img_w = the image side, image_token_id = the vocabulary size); errors name the flags.
Result<std::unique_ptr<SampleSource>> mock_image_text_source(uint64_t seed,
                                                             const ImageTextSourceOptions& options);

}  // namespace lattice
