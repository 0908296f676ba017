// SentencePiece through libsentencepiece, with Megatron's two wrappers: SentencePieceTokenizer
// (adds <CLS>, <SEP>, <EOD>, <MASK> and the pad/bos/eos pieces when absent; EOD = <EOD>;
// special tokens in text are kept whole) and GPTSentencePieceTokenizer (the model's own
// pieces only; EOD = the model's eos id). Training: train_sentencepiece.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lattice/tokenizer.h"

namespace lattice {

// `gpt_variant` selects GPTSentencePieceTokenizer; errors name the model file.
Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& model_file,
                                                      bool gpt_variant);

struct SentencePieceTrainOptions {
  std::string model_prefix;  // writes {prefix}.model and {prefix}.vocab
  int vocab_size = 8000;
  std::string model_type = "bpe";  // bpe | unigram
  double character_coverage = 1.0;
  int64_t max_sentences = 2000000;  // input_sentence_size: a sample of this many lines
  uint64_t seed = 1234;
  int threads = 0;  // 0: all cores
};

// Trains on `texts` (each split into lines, as SentencePiece learns from lines).
Status train_sentencepiece(const std::vector<std::string>& texts,
                           const SentencePieceTrainOptions& options);

}  // namespace lattice
