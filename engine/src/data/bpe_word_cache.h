// The per-thread word cache of the byte-level BPE tokenizers (bpe_core.h), in a header so
// that BpeCore::encode_words, a template, can inline the splitter that feeds it. Internal to
// bpe_core; see Note [per-thread word cache] below.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace lattice::bpe {

// A word as up to 16 bytes in two integers (overlapping loads; one-to-one for a given
// length) or, when longer, only hashed: what the cache compares and hashes.
struct WordKey {
  uint64_t lo = 0, hi = 0;
  uint64_t hash = 0;
  WordKey() = default;
  explicit WordKey(std::string_view word) {
    const char* p = word.data();
    const size_t n = word.size();
    if (n >= 8) {
      std::memcpy(&lo, p, 8);
      std::memcpy(&hi, p + std::min<size_t>(n, 16) - 8, 8);
    } else if (n >= 4) {
      uint32_t a, b;
      std::memcpy(&a, p, 4);
      std::memcpy(&b, p + n - 4, 4);
      lo = (uint64_t{a} << 32) | b;
    } else if (n > 0) {
      const auto* u = reinterpret_cast<const unsigned char*>(p);
      lo = (uint64_t{u[0]} << 16) | (uint64_t{u[n / 2]} << 8) | u[n - 1];
    }
    hash = hash_of(lo, hi, n);
    for (size_t i = 16; i < n; i += 8) {  // words over 16 bytes: the rest, 8 bytes at a time
      uint64_t v = 0;
      std::memcpy(&v, p + i, std::min<size_t>(8, n - i));
      hash = (hash ^ v) * 0xBF58476D1CE4E5B9ull;
      hash ^= hash >> 32;
    }
  }
  // The hash of a word of up to 16 bytes, from its key.
  static uint64_t hash_of(uint64_t lo, uint64_t hi, size_t n) {
    uint64_t h = (lo ^ (n * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 31) ^ hi) * 0x94D049BB133111EBull;
    return h ^ (h >> 32);
  }
};

// Note [per-thread word cache]
// Most words of a corpus recur, so encode() keeps the ids of each word it has merged. The
// cache belongs to the calling thread and to one tokenizer (keyed by a serial number that
// is never reused), so encode() takes no lock and threads never share cache lines. A slot
// holds a word of up to 16 bytes and up to two ids itself (99.9% of the words of English
// prose), so a hit reads one cache line. A thread keeps caches for its four most recently
// used tokenizers; a cache that reaches kMaxWords words starts over, which bounds it to
// about 20 MB. The cost: each thread merges a recurring word once itself, and the caches of a
// destroyed tokenizer stay in the threads that used it until evicted or the thread ends.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 255;  // longer words are merged every time
  static constexpr size_t kMaxWords = size_t{1} << 18;

  void prefetch(const WordKey& key) const { __builtin_prefetch(&slots_[key.hash & mask_]); }

  // Appends the ids of `word` to `out` and returns true, or returns false if not cached.
  bool find(std::string_view word, const WordKey& key, std::vector<int32_t>& out) const {
    const uint32_t tag = static_cast<uint32_t>(key.hash >> 32);
    for (size_t i = key.hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key_length == 0) return false;
      if (s.tag != tag || s.key_length != word.size()) continue;
      const bool same = word.size() <= kInlineBytes
                            ? s.lo == key.lo && s.hi == key.hi
                            : std::memcmp(keys_.data() + s.lo, word.data(), word.size()) == 0;
      if (!same) continue;
      if (s.id_count <= kInlineIds) {
        out.push_back(s.ids[0]);
        if (s.id_count == 2) out.push_back(s.ids[1]);
      } else {
        const int32_t* ids = values_.data() + s.ids[0];
        out.insert(out.end(), ids, ids + s.id_count);
      }
      return true;
    }
  }

  void insert(std::string_view word, const WordKey& key, const int32_t* ids, size_t count) {
    assert(!word.empty() && word.size() <= kMaxWordBytes && count > 0 && count <= 255);
    if (2 * (used_ + 1) > slots_.size()) {
      if (used_ >= kMaxWords) {
        *this = WordCache();
      } else {
        grow();
      }
    }
    Slot s;
    s.lo = key.lo;
    s.hi = key.hi;
    if (word.size() > kInlineBytes) {
      s.lo = keys_.size();
      keys_.append(word);
    }
    if (count <= kInlineIds) {
      std::copy(ids, ids + count, s.ids);
    } else {
      s.ids[0] = static_cast<int32_t>(values_.size());
      values_.insert(values_.end(), ids, ids + count);
    }
    s.tag = static_cast<uint32_t>(key.hash >> 32);
    s.key_length = static_cast<uint8_t>(word.size());
    s.id_count = static_cast<uint8_t>(count);
    place(s, key.hash);
    used_++;
  }

 private:
  static constexpr size_t kInlineBytes = 16, kInlineIds = 2;
  struct alignas(32) Slot {
    uint64_t lo = 0, hi = 0;  // WordKey, or lo = offset of the word in keys_ if it is longer
    int32_t ids[kInlineIds] = {0, 0};  // the ids, or ids[0] = their offset in values_
    uint32_t tag = 0;                  // high half of the hash
    uint8_t key_length = 0;            // 0: empty slot
    uint8_t id_count = 0;
  };

  void place(const Slot& slot, uint64_t hash) {
    size_t i = hash & mask_;
    while (slots_[i].key_length != 0) i = (i + 1) & mask_;
    slots_[i] = slot;
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.key_length == 0) continue;
      place(s, s.key_length <= kInlineBytes
                   ? WordKey::hash_of(s.lo, s.hi, s.key_length)
                   : WordKey(std::string_view(keys_.data() + s.lo, s.key_length)).hash);
    }
  }

  std::vector<Slot> slots_ = std::vector<Slot>(4096);  // power of two, at most half full
  size_t mask_ = 4096 - 1;
  size_t used_ = 0;
  std::string keys_;             // words over 16 bytes, concatenated
  std::vector<int32_t> values_;  // ids of words of more than two tokens, concatenated
};

// The calling thread's cache for the core numbered `owner` (see the note).
WordCache& thread_word_cache(uint64_t owner);

}  // namespace lattice::bpe
