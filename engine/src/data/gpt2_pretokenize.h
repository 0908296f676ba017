// GPT-2's pre-tokenisation regex, written out by hand over UTF-8:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \p and \s as Python's `regex` defines them (unicode_classes.h), because the reference
// encoder (Megatron's GPT2BPETokenizer, OpenAI's encoder.py) runs it there; JavaScript's \s
// (npm gpt-3-encoder) differs on U+0085 and U+FEFF. Bytes that are not valid UTF-8 count as
// one "other" character each, so any byte string splits into words that tile it exactly.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "data/unicode_classes.h"

namespace lattice::gpt2 {

// Class of each byte as an ASCII character (unicode::CharClass values), kNotAscii for the
// bytes of multi-byte characters.
inline constexpr uint8_t kNotAscii = 4;
inline constexpr std::array<uint8_t, 256> kByteClass = [] {
  using unicode::CharClass;
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; c++) {
    CharClass cls = CharClass::kOther;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cls = CharClass::kLetter;
    if (c >= '0' && c <= '9') cls = CharClass::kNumber;
    if (c == ' ' || (c >= '\t' && c <= '\r')) cls = CharClass::kSpace;
    t[c] = c < 0x80 ? static_cast<uint8_t>(cls) : kNotAscii;
  }
  return t;
}();

// Splits `text` into the successive matches of GPT-2's pattern; the text must outlive it.
// Not thread-safe itself (it holds a position); make one per call.
class WordSplitter {
 public:
  explicit WordSplitter(std::string_view text);

  // The next word, or an empty view once the text is used up. Inline for the common case,
  // a run of ASCII letters, digits or punctuation with or without a leading space.
  std::string_view next() {
    const unsigned char* start = pos_;
    if (start == end_) return {};
    const unsigned char* p = start;
    if (*p == ' ' && p + 1 < end_) p++;  // " ?" in front of \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+
    const uint8_t cls = kByteClass[*p];
    if (cls == kSpace || cls == kNotAscii || *start == '\'') return next_general();
    for (p++; p < end_ && kByteClass[*p] == cls;) p++;
    if (p < end_ && *p >= 0x80) return next_general();  // the run may go on past ASCII
    pos_ = p;
    return {reinterpret_cast<const char*>(start), static_cast<size_t>(p - start)};
  }

 private:
  static constexpr uint8_t kSpace = static_cast<uint8_t>(unicode::CharClass::kSpace);
  // Byte length of the character at `p` (1 for an invalid byte) and its class.
  struct Char {
    uint32_t length;
    uint8_t cls;
  };
  std::string_view next_general();
  Char char_at(const unsigned char* p) const;
  // Advances `p` past the characters of class `cls`.
  const unsigned char* skip_run(const unsigned char* p, uint8_t cls) const;

  const unsigned char* pos_;
  const unsigned char* end_;
  const unicode::CharClassTable* table_;
};

}  // namespace lattice::gpt2
