// GPT-2's pre-tokenisation regex by hand (see gpt2_pretokenize.h). The alternatives are tried
// in the regex's order at each position; each branch below names the one it implements.
#include "data/gpt2_pretokenize.h"

#include "data/unicode_classes.h"
#include "data/utf8.h"

namespace lattice::gpt2 {

namespace {

constexpr uint8_t kOther = static_cast<uint8_t>(unicode::CharClass::kOther);

}  // namespace

WordSplitter::WordSplitter(std::string_view text)
    : pos_(reinterpret_cast<const unsigned char*>(text.data())), end_(pos_ + text.size()) {
  table_ = &unicode::python_regex_classes();
}

// One character (utf8.h): bytes that are not UTF-8 count as "other" characters of one byte.
WordSplitter::Char WordSplitter::char_at(const unsigned char* p) const {
  if (*p < 0x80) return {1, kByteClass[*p]};
  const unicode::Utf8Char c = unicode::decode_utf8(p, end_);
  return {c.length,
          c.cp == unicode::kNotUtf8 ? kOther : static_cast<uint8_t>(table_->lookup(c.cp))};
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
