// What the byte-level BPE tokenizers share (GPT2BPETokenizer, HuggingFaceTokenizer): GPT-2's
// byte alphabet, the tokens' bytes by id, merging one word by rank, and the per-thread word
// cache that makes repeated words cheap. Pre-tokenisation, special tokens and file formats
// are the tokenizers' own.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/bpe_word_cache.h"
#include "lattice/status.h"

namespace lattice::bpe {

// The whole of a tokenizer file; errors say "cannot open <what> '<path>': <reason>".
Result<std::string> read_file(const std::string& path, const char* what);
// `text` as JSON; errors say "<where> is not valid JSON: <what and line>".
Result<nlohmann::json> parse_json(const std::string& text, const std::string& where);

// GPT-2's bytes_to_unicode(): every byte is spelt as one printable code point (the printable
// Latin-1 bytes as themselves, the others from U+0100 on), which is how vocab.json,
// merges.txt and tokenizer.json write tokens.
// The raw bytes `spelling` stands for, or false if a character of it is not in the alphabet.
bool unspell(std::string_view spelling, std::string& bytes);
// The inverse: `bytes` spelt in the alphabet.
std::string spell(std::string_view bytes);

// Token bytes -> id, looked up by string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocabulary = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeCore {
 public:
  BpeCore();
  ~BpeCore();
  BpeCore(const BpeCore&) = delete;
  BpeCore& operator=(const BpeCore&) = delete;

  // Setup, before any encode. `tokens` (V): the bytes of each id ("" for an id with none).
  void set_tokens(const std::vector<std::string>& tokens);
  // The id of each single byte's token, which merging starts from.
  void set_byte_ids(const int32_t (&byte_ids)[256]);
  // Merge rules: the pair (left, right) becomes `merged`; lower rank merges first; a pair
  // added twice keeps its later rank (as a dict or hash map built from the list in order).
  void reserve_merges(size_t count);
  void add_merge(int32_t left, int32_t right, uint32_t rank, int32_t merged);
  // Hugging Face's ignore_merges: a word that is itself in `vocabulary` (bytes -> id) becomes
  // that one token without merging. The map must outlive the core.
  void set_whole_words(const Vocabulary* vocabulary) { whole_words_ = vocabulary; }

  // Appends to `ids` the ids of the words next() returns, in order, until it returns an
  // empty view. Words already seen on this thread come from its cache (Note [per-thread word
  // cache], bpe_word_cache.h). Thread-safe.
  template <class NextWord>
  void encode_words(NextWord&& next, std::vector<int32_t>& ids) const;
  // Appends the ids of one word, merged now (no cache, no whole-word lookup).
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  int32_t token_count() const { return static_cast<int32_t>(token_offsets_.size()) - 1; }
  std::string_view token(int32_t id) const {
    return std::string_view(token_bytes_)
        .substr(token_offsets_[id], token_offsets_[id + 1] - token_offsets_[id]);
  }
  int32_t byte_id(unsigned char b) const { return byte_ids_[b]; }

 private:
  // One merge rule, in an open-addressing table.
  struct MergeSlot {
    uint64_t key = kEmpty;  // left << 32 | right
    uint32_t rank = 0;
    int32_t merged = 0;
    static constexpr uint64_t kEmpty = ~uint64_t{0};
  };
  static constexpr size_t kShortWord = 64;  // longer words merge through a heap

  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  void merge_short_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_long_word(std::string_view word, std::vector<int32_t>& out) const;
  // merge_word, or the whole word's id under ignore_merges.
  void tokenize_word(std::string_view word, std::vector<int32_t>& out) const;

  std::string token_bytes_;              // bytes of every token, concatenated in id order
  std::vector<uint32_t> token_offsets_;  // (V + 1) token i is token_bytes_[off[i], off[i+1])
  int32_t byte_ids_[256] = {};           // id of the token of each single byte
  std::vector<MergeSlot> merges_;        // power-of-two size, at most half full
  const Vocabulary* whole_words_ = nullptr;
  uint64_t cache_owner_;  // never reused, so a thread cannot serve words of a dead core
};

template <class NextWord>
void BpeCore::encode_words(NextWord&& next, std::vector<int32_t>& ids) const {
  WordCache& cache = thread_word_cache(cache_owner_);
  // Words go through in batches: the cache slots of a whole batch are requested from memory
  // while the next words are found, before the first is read, so that the misses overlap.
  constexpr int kBatch = 16;
  std::string_view words[kBatch];
  WordKey keys[kBatch];
  for (int n = kBatch; n == kBatch;) {
    for (n = 0; n < kBatch; n++) {
      words[n] = next();
      if (words[n].empty()) break;
      if (words[n].size() > 1 && words[n].size() <= WordCache::kMaxWordBytes) {
        keys[n] = WordKey(words[n]);
        cache.prefetch(keys[n]);
      }
    }
    for (int i = 0; i < n; i++) {
      const std::string_view word = words[i];
      if (word.size() == 1) {
        ids.push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
      } else if (word.size() > WordCache::kMaxWordBytes) {
        tokenize_word(word, ids);
      } else if (!cache.find(word, keys[i], ids)) {
        const size_t before = ids.size();
        tokenize_word(word, ids);
        cache.insert(word, keys[i], ids.data() + before, ids.size() - before);
      }
    }
  }
}

}  // namespace lattice::bpe
