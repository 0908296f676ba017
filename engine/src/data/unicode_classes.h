// The four classes of code point that the pre-tokenisation regexes distinguish: \p{L}, \p{N},
// \s (Unicode White_Space) and the rest, as two references define them: the GPT-2 encoder
// Megatron runs (OpenAI's encoder.py on Python's `regex`), and Hugging Face's tokenizers
// (Oniguruma), whose Unicode is older and so classes the newest letters and digits as other;
// and Hugging Face's word characters. The ranges are generated (make_unicode_classes.js);
// CharClassTable looks the classes up.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lattice::unicode {

enum class CharClass : uint8_t {
  kOther = 0,   // [^\s\p{L}\p{N}]: punctuation, symbols, marks, controls, unassigned
  kLetter = 1,  // \p{L}
  kNumber = 2,  // \p{N}
  kSpace = 3,   // \s: Unicode White_Space (U+0085 in, U+FEFF out)
};

struct CharClassRange {
  uint32_t first, last;  // inclusive code points
  CharClass cls;
};

// Sorted, disjoint, maximal ranges of every code point not in kOther (Python regex's view).
extern const CharClassRange kCharClassRanges[];
extern const std::size_t kCharClassRangeCount;
// The Node / ICU / Unicode versions the ranges were read from.
extern const char* const kCharClassSource;
// Where Hugging Face's tokenizers class a code point otherwise, sorted and disjoint, and the
// reference they were read from.
extern const CharClassRange kHfCharClassOverrides[];
extern const std::size_t kHfCharClassOverrideCount;
extern const char* const kHfCharClassSource;
// Sorted, disjoint, maximal ranges of the word characters (Rust regex's \w: letters, marks,
// decimal digits, connector punctuation) that an added token's single_word looks at.
struct CodePointRange {
  uint32_t first, last;  // inclusive
};
extern const CodePointRange kHfWordRanges[];
extern const std::size_t kHfWordRangeCount;
bool hf_is_word(uint32_t cp);

// Two-level lookup of a code point's class: blocks of 256 code points, identical blocks
// shared (about 130 distinct blocks, 34 KB). Immutable once built; any thread may read it.
class CharClassTable {
 public:
  // kCharClassRanges, then `overrides` on top.
  explicit CharClassTable(std::span<const CharClassRange> overrides = {});
  // `cp` must be below 0x110000.
  CharClass lookup(uint32_t cp) const {
    return static_cast<CharClass>(blocks_[block_of_[cp >> 8] * 256u + (cp & 255u)]);
  }

 private:
  static constexpr uint32_t kCodePoints = 0x110000, kBlocks = kCodePoints / 256;
  std::array<uint16_t, kBlocks> block_of_{};  // (kBlocks) index into blocks_ / 256
  std::vector<uint8_t> blocks_;               // (distinct blocks * 256) classes
};

// The classes of Python's `regex` (GPT2BPETokenizer) and of Hugging Face's tokenizers
// (HuggingFaceTokenizer); built on first use.
const CharClassTable& python_regex_classes();
const CharClassTable& hf_classes();

}  // namespace lattice::unicode
