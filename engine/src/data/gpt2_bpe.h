// GPT2BPETokenizer: GPT-2's byte-level BPE from vocab.json (encoder.json) and merges.txt
// (vocab.bpe), producing the ids of OpenAI's encoder. Text is split by GPT-2's regex
// (gpt2_pretokenize.h), each word's bytes are merged by rank, and words already seen are
// served from a cache private to each thread (Note [per-thread word cache], bpe_word_cache.h).
// Non-goal: special tokens inside text; "<|endoftext|>" in text is encoded as plain text,
// as GPT-2's encoder does, and eod() is only ever appended by the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_core.h"
#include "lattice/status.h"
#include "lattice/tokenizer.h"

namespace lattice {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // Reads the vocabulary (a JSON object token -> id, ids 0..V-1 each used once, tokens spelt
  // in GPT-2's byte alphabet, with all 256 single bytes and "<|endoftext|>") and the merges
  // (an optional "#version" first line, then one "left right" pair per line, highest
  // priority first). Errors name the file and, where there is one, the line.
  static Result<std::unique_ptr<Gpt2BpeTokenizer>> load(const std::string& vocab_json,
                                                        const std::string& merges_txt);
  ~Gpt2BpeTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  // Bytes of the ids' tokens, concatenated; a sequence that cuts a UTF-8 character gives
  // its bytes as they are. Ids outside [0, vocab_size()) are skipped (asserted in debug).
  std::string decode(std::span<const int32_t> ids) const override;
  int vocab_size() const override { return core_.token_count(); }
  int32_t eod() const override { return eod_; }
  std::string type() const override { return "GPT2BPETokenizer"; }

 private:
  Gpt2BpeTokenizer();

  bpe::BpeCore core_;  // the tokens' bytes, the merges and the word cache
  int32_t eod_ = 0;
};

}  // namespace lattice
