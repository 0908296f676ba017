// `lattice data preprocess`: documents -> token ids -> Megatron's indexed dataset, one output
// pair per JSON key (`{prefix}_{key}_document.bin/.idx`), in input order, with --workers
// threads encoding batches of documents in parallel. With --sft, conversations (chat_data.h)
// rendered by a chat template: tokens to `{prefix}_text_document` and their loss mask (uint8,
// the same lengths) to `{prefix}_text_document_loss_mask` (preprocess_chat.cpp).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "data/documents.h"
#include "lattice/tokenizer.h"

namespace lattice {

struct PreprocessOptions {
  std::vector<std::string> inputs;                // --input (several files are concatenated)
  InputFormat format = InputFormat::kAuto;        // --input-format
  std::vector<std::string> json_keys = {"text"};  // --json-keys
  std::string output_prefix;                      // --output-prefix
  TokenizerOptions tokenizer;                     // --tokenizer-type and its files
  bool append_eod = false;                        // --append-eod
  int workers = 1;                                // --workers
  int log_interval = 10000;                       // --log-interval (documents)
  bool sft = false;                               // --sft: chat / prompt-response JSONL
  std::string chat_template;                      // --chat-template: name or file ("" = the
                                                  //   tokenizer's own, else "default")
  bool images = false;                            // --images: image-text JSONL
                                                  //   (image_text_dataset.h)
  int image_size = 224;                           // --image-size: stored images' side
  // --image-mean R G B and --image-std R G B: the normalisation training applies (on pixel /
  // 255; recorded in _images.json, the pad colour int(255 * mean)); empty: CLIP's.
  std::vector<std::string> image_mean, image_std;
};

struct PreprocessReport {
  size_t documents = 0, tokens = 0, bytes = 0;
  double seconds = 0;
  std::vector<std::string> outputs;  // the prefixes written, one per key
};

// The suffix of the loss-mask dataset beside an SFT token dataset: `{data}_loss_mask`.
inline constexpr const char* kLossMaskSuffix = "_loss_mask";

// Writes progress lines ("Processed N documents (X docs/s, Y MB/s).") to `log` when set.
Result<PreprocessReport> preprocess(const PreprocessOptions& options, std::ostream* log);
// The --sft path of preprocess().
Result<PreprocessReport> preprocess_chat(const PreprocessOptions& options, std::ostream* log);
// The --images path of preprocess() is preprocess_image_text (image_text_dataset.h).

}  // namespace lattice
