// Tokenizers as Megatron names them (--tokenizer-type): GPT2BPETokenizer,
// SentencePieceTokenizer / GPTSentencePieceTokenizer, HuggingFaceTokenizer, NullTokenizer. All
// are immutable once built, and encode/decode may be called from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/status.h"

namespace lattice {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text` (no EOD appended).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Text of `ids`; ids outside the vocabulary are an error the caller checks with vocab_size().
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Number of ids the tokenizer can produce (before Megatron's padding).
  virtual int vocab_size() const = 0;
  // End-of-document id, appended by --append-eod.
  virtual int32_t eod() const = 0;
  // Megatron's --tokenizer-type name.
  virtual std::string type() const = 0;
  // The id the tokenizer puts before every text when it adds its special tokens, as Hugging
  // Face's add_special_tokens=True does and so Megatron's tokenize() (preprocessing,
  // generation): Llama 3's <|begin_of_text|> where its tokenizer.json's template says so.
  // None for Megatron's own tokenizers, which add nothing.
  virtual std::optional<int32_t> bos() const { return std::nullopt; }
};

// Megatron's tokenizer.tokenize(text): bos() if any, then encode(text).
std::vector<int32_t> tokenize_with_bos(const Tokenizer& tokenizer, std::string_view text);

struct TokenizerOptions {
  std::string type = "NullTokenizer";  // --tokenizer-type
  std::string vocab_file;              // --vocab-file (GPT2BPETokenizer: vocab.json / encoder.json)
  std::string merge_file;              // --merge-file (GPT2BPETokenizer: merges.txt / vocab.bpe)
  std::string model_file;              // --tokenizer-model (SentencePiece .model;
                                       //   HuggingFaceTokenizer: tokenizer.json or its directory)
  int vocab_size = 0;                  // --vocab-size (NullTokenizer)
};

inline TokenizerOptions null_tokenizer(int vocab_size) {
  TokenizerOptions o;
  o.vocab_size = vocab_size;
  return o;
}

// The directory installers/fetch-gpt2-vocab.sh fills with GPT-2's vocab.json and merges.txt:
// default_data_dir() (lattice/data.h) + "/gpt2".
std::string gpt2_vocab_dir();
// The directory installers/fetch-hf-tokenizers.sh fills with Llama 3's and Qwen 3's
// tokenizer.json (llama3/, qwen3/) and the reference, Hugging Face's tokenizers for Node
// (reference/node_modules): default_data_dir() + "/hf-tokenizers".
std::string hf_tokenizers_dir();

// Builds the tokenizer `options.type` names; errors name the flag or file that is wrong.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const TokenizerOptions& options);

}  // namespace lattice
