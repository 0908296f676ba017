// GPT2BPETokenizer: GPT-2's byte-level BPE from vocab.json (encoder.json) and merges.txt
// (vocab.bpe), producing the ids of OpenAI's encoder. Text is split by GPT-2's regex
// (gpt2_pretokenize.h), each word's bytes are merged by rank, and words already seen are
// served from a cache private to each thread (see the note on caches in gpt2_bpe.cpp).
// Non-goal: special tokens inside text; "<|endoftext|>" in text is encoded as plain text,
// as GPT-2's encoder does, and eod() is only ever appended by the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
  int vocab_size() const override { return static_cast<int>(token_offsets_.size()) - 1; }
  int32_t eod() const override { return eod_; }
  std::string type() const override { return "GPT2BPETokenizer"; }

 private:
  // One merge rule: the pair (left, right) becomes `merged`; lower rank merges first.
  struct MergeSlot {
    uint64_t key = kEmpty;  // left << 32 | right
    uint32_t rank = 0;
    int32_t merged = 0;
    static constexpr uint64_t kEmpty = ~uint64_t{0};
  };

  static constexpr size_t kShortWord = 64;  // longer words merge through a heap

  Gpt2BpeTokenizer();
  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  void add_merge(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  // Appends the ids of one pre-tokenised word to `out` (no cache).
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_short_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_long_word(std::string_view word, std::vector<int32_t>& out) const;

  std::string token_bytes_;              // bytes of every token, concatenated in id order
  std::vector<uint32_t> token_offsets_;  // (V + 1) token i is token_bytes_[off[i], off[i+1])
  int32_t byte_ids_[256] = {};           // id of the token of each single byte
  std::vector<MergeSlot> merges_;        // open addressing, power-of-two size
  int32_t eod_ = 0;
  uint64_t cache_owner_;  // never reused, so a thread cannot serve words of a dead tokenizer
};

}  // namespace lattice
