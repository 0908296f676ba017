// Strict UTF-8 decoding and encoding for the tokenizers. A byte that starts no valid character
// (a stray continuation byte, an overlong form, a surrogate, a value past U+10FFFF, a cut
// sequence) decodes as one character of its own, kNotUtf8, so any byte string splits into
// characters that tile it exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lattice::unicode {

inline constexpr uint32_t kNotUtf8 = 0xFFFFFFFF;

struct Utf8Char {
  uint32_t cp;      // the code point, or kNotUtf8
  uint32_t length;  // bytes, 1 to 4 (1 for kNotUtf8)
};

// The character at `p`, which must be before `end`.
inline Utf8Char decode_utf8(const unsigned char* p, const unsigned char* end) {
  const uint32_t b0 = p[0];
  if (b0 < 0x80) return {b0, 1};
  const std::ptrdiff_t left = end - p;
  auto cont = [&](std::ptrdiff_t i) { return i < left && (p[i] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1)) return {kNotUtf8, 1};
    return {((b0 & 0x1F) << 6) | (p[1] & 0x3Fu), 2};
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return {kNotUtf8, 1};
    const uint32_t cp = ((b0 & 0x0F) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return {kNotUtf8, 1};
    return {cp, 3};
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return {kNotUtf8, 1};
    const uint32_t cp =
        ((b0 & 0x07) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
    if (cp < 0x10000 || cp > 0x10FFFF) return {kNotUtf8, 1};
    return {cp, 4};
  }
  return {kNotUtf8, 1};
}

// Appends `cp` (a Unicode scalar value) as UTF-8.
inline void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace lattice::unicode
