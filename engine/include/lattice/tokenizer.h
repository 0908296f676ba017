// Tokenizers as Megatron names them (--tokenizer-type): GPT2BPETokenizer,
// SentencePieceTokenizer / GPTSentencePieceTokenizer, NullTokenizer. All are immutable once
// built, and encode/decode may be called from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
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
};

struct TokenizerOptions {
  std::string type = "NullTokenizer";  // --tokenizer-type
  std::string vocab_file;              // --vocab-file (GPT2BPETokenizer: vocab.json / encoder.json)
  std::string merge_file;              // --merge-file (GPT2BPETokenizer: merges.txt / vocab.bpe)
  std::string model_file;              // --tokenizer-model (SentencePiece .model)
  int vocab_size = 0;                  // --vocab-size (NullTokenizer)
};

inline TokenizerOptions null_tokenizer(int vocab_size) {
  TokenizerOptions o;
  o.vocab_size = vocab_size;
  return o;
}

// The directory installers/fetch-gpt2-vocab.sh fills with GPT-2's vocab.json and merges.txt:
// $LATTICE_DATA_DIR/gpt2, else $XDG_DATA_HOME/lattice/gpt2, else
// $HOME/.local/share/lattice/gpt2.
std::string gpt2_vocab_dir();

// Builds the tokenizer `options.type` names; errors name the flag or file that is wrong.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const TokenizerOptions& options);

}  // namespace lattice
