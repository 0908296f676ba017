// Byte-level BPE (see bpe_core.h): GPT-2's byte alphabet, merging one word by rank, and the
// per-thread word cache.
#include "data/bpe_core.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <queue>
#include <utility>

#include <nlohmann/json.hpp>

namespace lattice::bpe {

namespace {

constexpr uint32_t kNoRank = ~uint32_t{0};

// GPT-2's bytes_to_unicode(): every byte is spelt as one printable code point; the bytes
// that are printable Latin-1 stand for themselves, the others map to U+0100 onwards.
struct ByteAlphabet {
  uint32_t char_of_byte[256];
  int16_t byte_of_char[0x144];  // -1 where the code point spells no byte
  ByteAlphabet() {
    std::fill(std::begin(byte_of_char), std::end(byte_of_char), int16_t{-1});
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; b++) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      char_of_byte[b] = printable ? b : next++;
      byte_of_char[char_of_byte[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet kAlphabet;

}  // namespace

Result<std::string> read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::io_error(std::string("cannot open ") + what + " '" + path +
                            "': " + std::strerror(errno));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::string text(size > 0 ? static_cast<size_t>(size) : 0, '\0');
  if (size < 0 || !in.read(text.data(), size))
    return Status::io_error(std::string("cannot read ") + what + " '" + path + "'");
  return text;
}

Result<nlohmann::json> parse_json(const std::string& text, const std::string& where) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line …"
    if (const size_t cut = what.find("] "); cut != std::string::npos) what.erase(0, cut + 2);
    return Status::corrupt(where + " is not valid JSON: " + what);
  }
}

bool unspell(std::string_view spelling, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < spelling.size();) {
    const auto b0 = static_cast<unsigned char>(spelling[i]);
    uint32_t cp = b0;
    if (b0 >= 0x80) {  // the alphabet ends at U+0143: two-byte characters only
      if ((b0 & 0xE0) != 0xC0 || i + 1 >= spelling.size()) return false;
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(spelling[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      i += 1;
    }
    if (cp >= std::size(kAlphabet.byte_of_char) || kAlphabet.byte_of_char[cp] < 0) return false;
    bytes.push_back(static_cast<char>(kAlphabet.byte_of_char[cp]));
  }
  return true;
}

std::string spell(std::string_view bytes) {
  std::string s;
  for (const char c : bytes) {
    const uint32_t cp = kAlphabet.char_of_byte[static_cast<unsigned char>(c)];
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return s;
}

WordCache& thread_word_cache(uint64_t owner) {
  struct Entry {
    uint64_t owner;
    std::unique_ptr<WordCache> cache;
  };
  constexpr size_t kMaxTokenizers = 4;
  thread_local std::vector<Entry> entries;  // most recently used first
  if (!entries.empty() && entries.front().owner == owner) return *entries.front().cache;
  auto it = std::find_if(entries.begin(), entries.end(),
                         [&](const Entry& e) { return e.owner == owner; });
  if (it == entries.end()) {
    if (entries.size() == kMaxTokenizers) entries.pop_back();
    entries.insert(entries.begin(), Entry{owner, std::make_unique<WordCache>()});
  } else {
    std::rotate(entries.begin(), it, it + 1);
  }
  return *entries.front().cache;
}

namespace {
std::atomic<uint64_t> next_cache_owner{1};
}  // namespace

BpeCore::BpeCore() : cache_owner_(next_cache_owner.fetch_add(1)) {}
BpeCore::~BpeCore() = default;

void BpeCore::set_tokens(const std::vector<std::string>& tokens) {
  token_bytes_.clear();
  token_offsets_.assign(1, 0);
  token_offsets_.reserve(tokens.size() + 1);
  for (const std::string& token : tokens) {
    token_bytes_ += token;
    token_offsets_.push_back(static_cast<uint32_t>(token_bytes_.size()));
  }
}

void BpeCore::set_byte_ids(const int32_t (&byte_ids)[256]) {
  std::copy(std::begin(byte_ids), std::end(byte_ids), byte_ids_);
}

void BpeCore::reserve_merges(size_t count) {
  size_t slots = 1024;
  while (slots < 2 * count) slots *= 2;
  merges_.assign(slots, MergeSlot{});
}

namespace {
size_t merge_slot_index(uint64_t key, size_t size) {
  return (key * 0x9E3779B97F4A7C15ull >> 20) & (size - 1);
}
}  // namespace

// A pair listed twice keeps its later rank, as a Python dict or JavaScript object built
// from the list in order does in GPT-2's and the reference's encoders.
void BpeCore::add_merge(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  size_t i = merge_slot_index(key, merges_.size());
  while (merges_[i].key != MergeSlot::kEmpty && merges_[i].key != key) {
    i = (i + 1) & (merges_.size() - 1);
  }
  merges_[i] = {key, rank, merged};
}

const BpeCore::MergeSlot* BpeCore::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  for (size_t i = merge_slot_index(key, merges_.size());; i = (i + 1) & (merges_.size() - 1)) {
    const MergeSlot& s = merges_[i];
    if (s.key == key) return &s;
    if (s.key == MergeSlot::kEmpty) return nullptr;
  }
}

// Note [merge order]
// Merging takes the leftmost of the lowest-ranked pairs, merges it, and looks again, as
// Hugging Face's BPE does. GPT-2's encoder merges every occurrence of the lowest-ranked pair
// at once instead; that gives the same result as long as a merged token takes part only in
// merges ranked after the one that made it, so that no new pair can jump the queue, which
// Gpt2BpeTokenizer::load() checks (BPE training guarantees it). Short words rescan an array
// of pair ranks; long ones (a run of CJK or of dashes) use a heap.

void BpeCore::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() <= kShortWord) {
    merge_short_word(word, out);
  } else {
    merge_long_word(word, out);
  }
}

void BpeCore::merge_short_word(std::string_view word, std::vector<int32_t>& out) const {
  int32_t ids[kShortWord];     // (n) the word's tokens
  uint32_t ranks[kShortWord];  // (n - 1) rank of merging tokens i and i + 1, kNoRank if none
  int32_t merged[kShortWord];  // (n - 1) what that merge makes
  size_t n = word.size();
  for (size_t i = 0; i < n; i++) ids[i] = byte_ids_[static_cast<unsigned char>(word[i])];
  auto rate = [&](size_t i) {
    const MergeSlot* m = find_merge(ids[i], ids[i + 1]);
    ranks[i] = m ? m->rank : kNoRank;
    merged[i] = m ? m->merged : 0;
  };
  for (size_t i = 0; i + 1 < n; i++) rate(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; i++) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNoRank) break;
    ids[best] = merged[best];
    // Token best + 1 is gone: everything after it moves down one place.
    std::memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof(int32_t));
    if (best + 2 < n - 1) {
      std::memmove(ranks + best + 1, ranks + best + 2, (n - best - 3) * sizeof(uint32_t));
      std::memmove(merged + best + 1, merged + best + 2, (n - best - 3) * sizeof(int32_t));
    }
    n--;
    if (best > 0) rate(best - 1);
    if (best + 1 < n) rate(best);
  }
  out.insert(out.end(), ids, ids + n);
}

void BpeCore::merge_long_word(std::string_view word, std::vector<int32_t>& out) const {
  // Tokens as a linked list in byte order; a dead token has id -1.
  struct Token {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
  };
  // A pair that could merge; stale once either side has changed.
  struct Candidate {
    uint32_t rank;
    int32_t pos;  // index of the left token
    int32_t left, right, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Token> tokens(n);
  for (int32_t i = 0; i < n; i++) {
    tokens[i] = {byte_ids_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto offer = [&](int32_t pos) {
    if (pos < 0 || tokens[pos].next < 0) return;
    const int32_t next = tokens[pos].next;
    if (const MergeSlot* m = find_merge(tokens[pos].id, tokens[next].id)) {
      heap.push({m->rank, pos, tokens[pos].id, tokens[next].id, m->merged});
    }
  };
  for (int32_t i = 0; i + 1 < n; i++) offer(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Token& left = tokens[c.pos];
    if (left.id != c.left || left.next < 0 || tokens[left.next].id != c.right) continue;
    Token& right = tokens[left.next];
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) tokens[right.next].prev = c.pos;
    right.id = -1;
    offer(left.prev);
    offer(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = tokens[i].next) out.push_back(tokens[i].id);
}

void BpeCore::tokenize_word(std::string_view word, std::vector<int32_t>& out) const {
  if (whole_words_) {
    if (const auto it = whole_words_->find(word); it != whole_words_->end()) {
      out.push_back(it->second);
      return;
    }
  }
  merge_word(word, out);
}

}  // namespace lattice::bpe
