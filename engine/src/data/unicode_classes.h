// The four classes of code point that GPT-2's pre-tokenisation regex distinguishes, as the
// reference encoder (OpenAI's encoder.py in Megatron, on Python's `regex`) defines them:
// \p{L}, \p{N}, \s (Unicode White_Space), and the rest.
// The ranges are generated (make_unicode_classes.js); lookups go through gpt2_pretokenize.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lattice::unicode {

enum class CharClass : uint8_t {
  kOther = 0,   // [^\s\p{L}\p{N}]: punctuation, symbols, marks, controls, unassigned
  kLetter = 1,  // \p{L}
  kNumber = 2,  // \p{N}
  kSpace = 3,   // Python regex's \s: Unicode White_Space (U+0085 in, U+FEFF out)
};

struct CharClassRange {
  uint32_t first, last;  // inclusive code points
  CharClass cls;
};

// Sorted, disjoint, maximal ranges of every code point not in kOther.
extern const CharClassRange kCharClassRanges[];
extern const std::size_t kCharClassRangeCount;
// The Node / ICU / Unicode versions the ranges were read from.
extern const char* const kCharClassSource;

}  // namespace lattice::unicode
