// The regular expressions of Hugging Face tokenizer.json pre-tokenisers ("Split" with a
// "Regex" pattern, and ByteLevel's GPT-2 pattern), matched as Hugging Face's Oniguruma matches
// them: at each position the alternatives are tried in order, quantifiers are greedy and give
// characters back, lookaheads are atomic, and the first match found wins.
// Supported, which is what the Llama 3, Qwen 2/3 and GPT-2 patterns use: literals, escapes
// (\r \n \t \f \v \e \a, \xHH, \x{H..}, \uHHHH, escaped punctuation), ".", character classes
// with ranges, negation, \s and \p{L} / \p{N} (also \p{Letter}, \p{Number}, \P{..}, \p{^..});
// \s \S \p \P outside classes; groups (capturing ones match as non-capturing), (?i:...) and
// (?i) (which, as in Oniguruma's Ruby syntax, takes the rest of its group, alternatives and
// all) for ASCII letters (with Oniguruma's extra folds: U+017F matches s, U+212A matches k);
// quantifiers ? * + {n} {n,} {n,m} {,m}; (?=...) and (?!...). Anything else (anchors, \d,
// \w, \b, other properties, lookbehind, backreferences, lazy or possessive quantifiers) is
// refused by compile() with the construct and its place in the pattern.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/unicode_classes.h"
#include "lattice/status.h"

namespace lattice::hf {

struct RegexNode;  // hf_regex_tree.h

class Regex {
 public:
  // Compiles `pattern` (UTF-8) with `classes` (which must outlive the Regex) for \p and \s.
  // The error names the unsupported construct and the character offset where it starts.
  static Result<Regex> compile(std::string_view pattern, const unicode::CharClassTable& classes);

  // Appends the pieces of `text` that Hugging Face's Split(pattern, behavior "Isolated",
  // invert false) gives: every match, and every stretch between matches, in order, so that
  // the pieces tile `text`. An empty match splits nothing. Bytes that are not UTF-8 are one
  // character each, in no class. Thread-safe (scratch space is per thread).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  // The byte length of the first match at the start of `text`, or -1 if none (for tests).
  int64_t match_length(std::string_view text) const;

 private:
  // A set of code points: ASCII by bitmap; above ASCII by class (bit per unicode::CharClass)
  // or by listed ranges, then negated.
  struct CharSet {
    uint64_t ascii[2] = {0, 0};  // final membership of U+0000..U+007F (negation applied)
    uint8_t classes = 0;         // CharClass bits, for code points >= U+0080
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive, code points >= U+0080
    bool negated = false;
    bool contains(uint32_t cp, uint8_t cls) const {
      if (cp < 0x80) return (ascii[cp >> 6] >> (cp & 63)) & 1;
      bool in = (classes >> cls) & 1;
      for (size_t i = 0; !in && i < ranges.size(); i++)
        in = cp >= ranges[i].first && cp <= ranges[i].second;
      return in != negated;
    }
  };
  enum class Op : uint8_t {
    kRun,    // `set` repeated min..max times, greedily, giving characters back on failure
    kSplit,  // try x, then y
    kJump,   // go to x
    kLook,   // the body at x (ending in kMatch) must match here (or not, if negate)
    kMatch,
  };
  struct Inst {
    Op op = Op::kMatch;
    bool negate = false;
    uint32_t set = 0;
    uint32_t min = 0, max = 0;
    int32_t x = 0, y = 0;
  };
  static constexpr uint32_t kUnbounded = ~uint32_t{0};
  friend class RegexParser;

  // The text as characters: code point, class, byte offset.
  struct Chars {
    std::vector<uint32_t> cp;      // (n)
    std::vector<uint8_t> cls;      // (n) unicode::CharClass
    std::vector<uint32_t> offset;  // (n + 1) byte offset of each character, then the length
  };
  struct Frame {
    int32_t pc;
    uint32_t pos;
    uint32_t lo;  // kRun frames: the fewest characters to fall back to; kNoRun otherwise
  };
  void decode(std::string_view text, Chars& chars) const;
  // Runs the program from instruction `pc` at character `pos`; on a match sets *end.
  bool run(const Chars& chars, int32_t pc, uint32_t pos, uint32_t* end,
           std::vector<Frame>& stack) const;

  void lay_out(const RegexNode& n, std::vector<std::pair<size_t, const RegexNode*>>& deferred);
  // Fills first_: see Note [first characters] in hf_regex.cpp.
  void find_first_characters();

  std::vector<CharSet> sets_;
  std::vector<Inst> program_;  // starts at 0; lookahead bodies follow the main kMatch
  // (program size) per instruction, the ASCII characters a match from there can start with
  // (bit per code point); all set where it may also start otherwise or match empty.
  std::vector<std::array<uint64_t, 2>> first_;
  const unicode::CharClassTable* classes_ = nullptr;
};

}  // namespace lattice::hf
