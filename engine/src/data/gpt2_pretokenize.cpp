// GPT-2's pre-tokenisation regex by hand (see gpt2_pretokenize.h). The alternatives are tried
// in the regex's order at each position; each branch below names the one it implements.
#include "data/gpt2_pretokenize.h"

#include <array>
#include <map>
#include <string>
#include <vector>

#include "data/unicode_classes.h"

namespace lattice::gpt2 {

namespace {

constexpr uint8_t kOther = static_cast<uint8_t>(unicode::CharClass::kOther);

}  // namespace

// Two-level lookup of a code point's class: blocks of 256 code points, identical blocks
// shared (132 distinct blocks, 34 KB), built once from the generated ranges.
class CharClassTable {
 public:
  CharClassTable() {
    std::vector<uint8_t> all(kCodePoints, kOther);
    for (size_t i = 0; i < unicode::kCharClassRangeCount; i++) {
      const unicode::CharClassRange& r = unicode::kCharClassRanges[i];
      for (uint32_t cp = r.first; cp <= r.last; cp++) all[cp] = static_cast<uint8_t>(r.cls);
    }
    std::map<std::string, uint16_t> seen;
    for (uint32_t b = 0; b < kBlocks; b++) {
      std::string block(reinterpret_cast<const char*>(all.data()) + b * 256, 256);
      auto [it, inserted] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
      if (inserted) blocks_.insert(blocks_.end(), block.begin(), block.end());
      block_of_[b] = it->second;
    }
  }
  uint8_t lookup(uint32_t cp) const { return blocks_[block_of_[cp >> 8] * 256u + (cp & 255u)]; }

 private:
  static constexpr uint32_t kCodePoints = 0x110000, kBlocks = kCodePoints / 256;
  std::array<uint16_t, kBlocks> block_of_{};  // (kBlocks) index into blocks_ / 256
  std::vector<uint8_t> blocks_;               // (distinct blocks * 256) classes
};

WordSplitter::WordSplitter(std::string_view text)
    : pos_(reinterpret_cast<const unsigned char*>(text.data())), end_(pos_ + text.size()) {
  static const CharClassTable table;
  table_ = &table;
}

// Decodes one UTF-8 character (rejecting overlong forms, surrogates and values past
// U+10FFFF, as a strict decoder must); anything else is a one-byte "other" character.
WordSplitter::Char WordSplitter::char_at(const unsigned char* p) const {
  const uint32_t b0 = p[0];
  if (b0 < 0x80) return {1, kByteClass[b0]};
  const ptrdiff_t left = end_ - p;
  auto cont = [&](ptrdiff_t i) { return i < left && (p[i] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1)) return {1, kOther};
    return {2, table_->lookup(((b0 & 0x1F) << 6) | (p[1] & 0x3F))};
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return {1, kOther};
    const uint32_t cp = ((b0 & 0x0F) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3F);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return {1, kOther};
    return {3, table_->lookup(cp)};
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return {1, kOther};
    const uint32_t cp =
        ((b0 & 0x07) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3F);
    if (cp < 0x10000 || cp > 0x10FFFF) return {1, kOther};
    return {4, table_->lookup(cp)};
  }
  return {1, kOther};
}

const unsigned char* WordSplitter::skip_run(const unsigned char* p, uint8_t cls) const {
  while (p < end_) {
    if (*p < 0x80) {
      if (kByteClass[*p] != cls) break;
      ++p;
    } else {
      const Char c = char_at(p);
      if (c.cls != cls) break;
      p += c.length;
    }
  }
  return p;
}

std::string_view WordSplitter::next_general() {
  const unsigned char* start = pos_;
  if (start == end_) return {};
  auto word = [&](const unsigned char* stop) {
    pos_ = stop;
    return std::string_view(reinterpret_cast<const char*>(start), stop - start);
  };
  const ptrdiff_t left = end_ - start;

  // 's|'t|'re|'ve|'m|'ll|'d (lower case only, as in GPT-2)
  if (start[0] == '\'' && left >= 2) {
    const unsigned char c1 = start[1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return word(start + 2);
    if (left >= 3) {
      const unsigned char c2 = start[2];
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
        return word(start + 3);
      }
    }
  }

  // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+` with the optional space present
  if (start[0] == ' ' && left >= 2) {
    const Char c = char_at(start + 1);
    if (c.cls != kSpace) return word(skip_run(start + 1 + c.length, c.cls));
  }

  const Char first = char_at(start);
  // The same three without the space
  if (first.cls != kSpace) return word(skip_run(start + first.length, first.cls));

  // \s+(?!\S)|\s+ : a whitespace run at the end of the text is one word; one followed by
  // a non-space gives up its last character (which then prefixes the next word or stands
  // alone), unless that would leave it empty.
  const unsigned char* last = start;  // start of the run's last character
  const unsigned char* p = start + first.length;
  while (p < end_) {
    const Char c = char_at(p);
    if (c.cls != kSpace) break;
    last = p;
    p += c.length;
  }
  if (p == end_ || last == start) return word(p);
  return word(last);
}

}  // namespace lattice::gpt2
