// Image-text data for vision-language training (LLaVA style): JSONL samples with images ->
// tokens with an image placeholder id, their loss mask, and the preprocessed images, as indexed
// datasets; and the reader that gives sample i back. Batching and the encoder are not here.
// See docs/data.md, "Image-text data".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"
#include "data/image_preprocess.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"

namespace lattice {

// The text that marks where an image goes, as in LLaVA.
inline constexpr std::string_view kImagePlaceholder = "<image>";

// One JSONL line, in one of three forms (paths relative to the JSONL file's directory):
//   {"image": "a.png", "text": "..."}                                     captioning (plain)
//   {"image": "a.png" | ["a.png", ...], "conversations": [{"from": "human" | "gpt" | "system",
//     "value": "<image>\n..."}, ...]}                                      LLaVA chat
//   {"messages": [{"role": "user", "content": [{"type": "image", "image": "a.png"},
//     {"type": "text", "text": "..."}]}, ...]}                            OpenAI-style chat
// In the chat forms each <image> in a message's text is one image, in order; a LLaVA sample with
// one image and no <image> gets "<image>\n" before its first human message (as LLaVA does). An
// OpenAI image part becomes "<image>\n" in its message's text, and its parts are concatenated;
// a string content is also accepted. <image> may not appear in an assistant message.
struct ImageTextSample {
  bool plain = false;                 // the captioning form
  std::string text;                   // plain: the caption
  std::vector<ChatMessage> messages;  // chat forms, with <image> in their contents
  std::vector<std::string> images;    // resolved paths, in placeholder order
};

// The sample on one line; errors are one sentence without the file and line (the caller
// prefixes "<file> line N: "). `directory` is where relative image paths start.
Result<ImageTextSample> parse_image_text_line(std::string_view line, const std::string& directory);

// Note [image-text tokens]: the image placeholder id is the tokenizer's vocab_size(), one past
// its text vocabulary, so no text encodes to it; the model puts the projected image features at
// those positions and never looks the id up in its embedding (the token dtype is chosen to hold
// it). Each image is one placeholder token here; the model expands it to its patch count.
// Plain: [image] + encode(text) + [EOD], mask 1 on the text and EOD. Chat: the conversation is
// rendered by the chat template, the text is cut at each <image> and at the assistant turns'
// boundaries (note "chat-spans"), each piece encoded on its own (as LLaVA's
// tokenizer_image_token encodes the pieces between images), with the placeholder id between
// pieces; mask 1 on assistant turns.
struct ImageTextTokens {
  std::vector<int32_t> tokens;     // (T)
  std::vector<uint8_t> loss_mask;  // (T)
};
Result<ImageTextTokens> tokenize_image_text(const ImageTextSample& sample,
                                            const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer, int32_t image_token_id);

// `lattice data preprocess --images`: the JSONL inputs to
//   {prefix}_text_document.bin/.idx              tokens, one document per sample
//   {prefix}_text_document_loss_mask.bin/.idx    uint8 loss mask, the same lengths
//   {prefix}_text_document_images.bin/.idx       uint8, one document per sample holding one
//                                                sequence (S, S, 3) per image, in order
//   {prefix}_text_document_images.json           image_size, image_token_id, mean, std
// Images are decoded, padded to a square and resized to options.image_size
// (image_preprocess.h), by options.workers threads. An unreadable image fails the whole run
// with the JSONL file and line, and the image's own error.
Result<PreprocessReport> preprocess_image_text(const PreprocessOptions& options, std::ostream* log);

// The suffixes beside the token dataset.
inline constexpr const char* kImagesSuffix = "_images";

// Reads what preprocess_image_text wrote. open() reads the indices only (not the documents, so
// it takes no longer for a large dataset than its .idx files' reading) and checks that the three
// datasets have the same number of documents, the mask the same lengths as the tokens and every
// image the size the .json states; check(i) that sample i has as many images as placeholder
// tokens (a document's tokens are read only when its sample is). Errors name the file and the
// sample. Thread-safe.
class ImageTextDataset {
 public:
  struct Sample {
    std::vector<int32_t> tokens;     // (T)
    std::vector<uint8_t> loss_mask;  // (T)
    std::vector<uint8_t> images;     // (n, S, S, 3), n = placeholders in tokens
    int num_images = 0;
  };
  // `prefix` is the token dataset's: {output-prefix}_text_document.
  static Result<std::unique_ptr<ImageTextDataset>> open(const std::string& prefix);
  size_t size() const { return tokens_->num_documents(); }
  int image_size() const { return image_size_; }
  int32_t image_token_id() const { return image_token_id_; }
  const ImageNorm& norm() const { return norm_; }
  // Preconditions (asserted): i < size(), k < num_images(i).
  Sample sample(size_t i) const;
  Sample text(size_t i) const;     // sample(i) without reading its images (`images` empty)
  int num_images(size_t i) const;  // from the images' document index, no read
  Status check(size_t i) const;    // sample i's placeholders and images agree (reads its tokens)
  void read_image(size_t i, int k, uint8_t* hwc) const;  // sample i's image k, (S, S, 3)
  int max_images() const;  // the most images of any sample, from the images' document index

 private:
  std::string prefix_;  // the token dataset's, for errors
  std::unique_ptr<IndexedDataset> tokens_, mask_, images_;
  int image_size_ = 0;
  int32_t image_token_id_ = 0;
  ImageNorm norm_;
};

}  // namespace lattice
