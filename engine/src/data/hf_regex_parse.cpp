// parse_regex (hf_regex_tree.h): recursive descent over the pattern's code points into a
// RegexNode tree, building the character sets in the Regex as it goes; anything the engine
// does not have is refused with the construct and its place.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/hf_regex.h"
#include "data/hf_regex_tree.h"
#include "data/utf8.h"

namespace lattice::hf {

namespace {

using unicode::CharClass;

uint8_t class_bit(CharClass c) {
  return static_cast<uint8_t>(1u << static_cast<unsigned>(c));
}

}  // namespace

// Recursive descent over the pattern's code points; builds the sets as it goes.
class RegexParser {
 public:
  RegexParser(std::string_view pattern, Regex& re) : re_(re) {
    const auto* p = reinterpret_cast<const unsigned char*>(pattern.data());
    const auto* end = p + pattern.size();
    while (p < end) {
      const unicode::Utf8Char c = unicode::decode_utf8(p, end);
      cps_.push_back(c.cp);
      p += c.length;
    }
  }

  Result<RegexNode> parse() {
    bool icase = false;
    RegexNode n = alternation(icase);
    if (error_.empty() && at_ < cps_.size()) fail("unbalanced ')'", at_);
    if (!error_.empty()) return Status::invalid_argument(error_);
    return n;
  }

 private:
  static constexpr uint32_t kEnd = ~uint32_t{0};
  uint32_t peek(size_t ahead = 0) const {
    return at_ + ahead < cps_.size() ? cps_[at_ + ahead] : kEnd;
  }
  void fail(const std::string& what, size_t where) {
    if (!error_.empty()) return;
    error_ = what + " at character " + std::to_string(where) + " of the pattern";
  }
  void unsupported(const std::string& construct, size_t where) {
    fail("unsupported regex construct '" + construct + "'", where);
  }
  // The pattern's text from `from` to the current position, for messages.
  std::string text(size_t from, size_t to) const {
    std::string s;
    for (size_t i = from; i < to && i < cps_.size(); i++) unicode::append_utf8(s, cps_[i]);
    return s;
  }
  uint32_t add_set(Regex::CharSet set) {
    re_.sets_.push_back(std::move(set));
    return static_cast<uint32_t>(re_.sets_.size() - 1);
  }

  RegexNode alternation(bool& icase) {
    RegexNode alt;
    alt.kind = RegexNode::kAlt;
    alt.kids.push_back(sequence(icase));
    while (error_.empty() && peek() == '|') {
      at_++;
      alt.kids.push_back(sequence(icase));
    }
    return alt.kids.size() == 1 ? std::move(alt.kids[0]) : alt;
  }

  RegexNode sequence(bool& icase) {
    RegexNode seq;
    uint32_t last_literal = kEnd;  // for Oniguruma's multi-character case folds
    while (error_.empty() && peek() != kEnd && peek() != '|' && peek() != ')') {
      const size_t start = at_;
      uint32_t literal = kEnd;
      RegexNode atom_node = atom(icase, literal);
      if (!error_.empty()) break;
      if (inline_flag_) {
        // (?i): as in Oniguruma's Ruby syntax, the rest of the group, alternatives and all,
        // becomes one group under the flag ("a(?i)b|c" is "a(?i:b|c)").
        inline_flag_ = false;
        seq.kids.push_back(alternation(icase));
        break;
      }
      if (icase && literal < 0x80 && last_literal < 0x80) {
        // (?i) "ss" also matches U+00DF, "st" U+FB05/U+FB06, "ff" "fi" "fl" ligatures.
        const std::string pair = {static_cast<char>(last_literal | 0x20),
                                  static_cast<char>(literal | 0x20)};
        if (pair == "ss" || pair == "st" || pair == "ff" || pair == "fi" || pair == "fl")
          unsupported("(?i) " + pair + " (Oniguruma matches it as a ligature too)", start - 1);
      }
      last_literal = literal;
      quantified(atom_node, start);
      seq.kids.push_back(std::move(atom_node));
    }
    if (seq.kids.size() == 1) return std::move(seq.kids[0]);
    return seq;
  }

  // A quantifier after `node`, if any, applied to it.
  void quantified(RegexNode& node, size_t start) {
    uint32_t min = 1, max = 1;
    const size_t q = at_;
    const uint32_t c = peek();
    if (c == '?') {
      min = 0, at_++;
    } else if (c == '*') {
      min = 0, max = Regex::kUnbounded, at_++;
    } else if (c == '+') {
      max = Regex::kUnbounded, at_++;
    } else if (c == '{' && counted(min, max)) {
      // counted() consumed it
    } else {
      return;
    }
    if (peek() == '?' || peek() == '+') {
      unsupported(text(q, at_ + 1) + " (lazy or possessive quantifier)", q);
      return;
    }
    uint32_t ignored_min, ignored_max;
    if (peek() == '{' && counted(ignored_min, ignored_max, false)) {
      unsupported(text(q, at_ + 1) + "{ (a quantifier on a quantifier)", q);
      return;
    }
    if (node.kind == RegexNode::kLook) {
      unsupported("quantified lookahead", start);
      return;
    }
    if (max > 1 && node.can_be_empty()) {
      unsupported(text(start, at_) + " (repetition of what can match empty)", start);
      return;
    }
    if (max != Regex::kUnbounded && (max < min || max > 1000)) {
      unsupported(text(q, at_), q);
      return;
    }
    RegexNode r;
    r.kind = RegexNode::kRepeat, r.min = min, r.max = max;
    r.kids.push_back(std::move(node));
    node = std::move(r);
  }

  // {n} {n,} {n,m} {,m}: true (and consumed if `consume`), or false (then '{' is a literal,
  // as in Oniguruma).
  bool counted(uint32_t& min, uint32_t& max, bool consume = true) {
    size_t i = at_ + 1;
    auto number = [&](uint32_t& v) {
      const size_t from = i;
      v = 0;
      while (i < cps_.size() && cps_[i] >= '0' && cps_[i] <= '9' && v < 100000)
        v = v * 10 + (cps_[i++] - '0');
      return i > from;
    };
    uint32_t lo = 0, hi = 0;
    const bool has_lo = number(lo);
    if (i < cps_.size() && cps_[i] == '}') {
      if (!has_lo) return false;
      min = max = lo;
    } else if (i < cps_.size() && cps_[i] == ',') {
      i++;
      const bool has_hi = number(hi);
      if (i >= cps_.size() || cps_[i] != '}' || (!has_lo && !has_hi)) return false;
      min = has_lo ? lo : 0;
      max = has_hi ? hi : Regex::kUnbounded;
    } else {
      return false;
    }
    if (consume) at_ = i + 1;
    return true;
  }

  RegexNode set_node(Regex::CharSet set) {
    RegexNode n;
    n.kind = RegexNode::kSet;
    n.set = add_set(std::move(set));
    return n;
  }

  // A set of one code point, with its other cases under (?i).
  Regex::CharSet literal_set(uint32_t cp, bool icase) {
    Regex::CharSet s;
    add_literal(s, cp, icase);
    return s;
  }
  void add_literal(Regex::CharSet& s, uint32_t cp, bool icase) {
    add_range(s, cp, cp);
    if (!icase) return;
    const uint32_t lower = cp | 0x20;
    if (cp < 0x80 && lower >= 'a' && lower <= 'z') {
      add_range(s, lower & ~0x20u, lower & ~0x20u);
      add_range(s, lower, lower);
      if (lower == 's') add_range(s, 0x17F, 0x17F);    // LATIN SMALL LETTER LONG S
      if (lower == 'k') add_range(s, 0x212A, 0x212A);  // KELVIN SIGN
    } else if (cp >= 0x80 && re_.classes_->lookup(cp) == CharClass::kLetter) {
      unsupported("(?i) with a letter outside ASCII", at_ - 1);
    }
  }
  void add_range(Regex::CharSet& s, uint32_t first, uint32_t last) {
    for (uint32_t cp = first; cp <= last && cp < 0x80; cp++) s.ascii[cp >> 6] |= 1ull << (cp & 63);
    if (last >= 0x80) s.ranges.push_back({std::max<uint32_t>(first, 0x80), last});
  }
  void add_classes(Regex::CharSet& s, uint8_t bits) {
    s.classes |= bits;
    for (uint32_t cp = 0; cp < 0x80; cp++)
      if (bits & class_bit(re_.classes_->lookup(cp))) s.ascii[cp >> 6] |= 1ull << (cp & 63);
  }
  void negate(Regex::CharSet& s) {
    s.negated = !s.negated;
    s.ascii[0] = ~s.ascii[0], s.ascii[1] = ~s.ascii[1];
  }

  // After '\' (at_ on the escaped character): a class escape sets `bits` (and `negated`), a
  // literal one returns its code point; kEnd after an error.
  uint32_t escape(uint8_t& bits, bool& negated) {
    const size_t start = at_ - 1;
    const uint32_t c = peek();
    at_++;
    bits = 0, negated = false;
    auto hex = [&](size_t digits, bool braced) -> uint32_t {
      uint32_t v = 0;
      size_t n = 0;
      if (braced) at_++;
      while (n < (braced ? 8 : digits) &&
             std::isxdigit(static_cast<int>(peek() < 0x80 ? peek() : 0))) {
        const uint32_t d = peek();
        v = v * 16 + (d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
        at_++, n++;
      }
      if (n == 0 || (braced && peek() != '}') || (!braced && n != digits) || v > 0x10FFFF) {
        unsupported(text(start, at_ + 1), start);
        return kEnd;
      }
      if (braced) at_++;
      return v;
    };
    switch (c) {
      case 's':
        bits = class_bit(CharClass::kSpace);
        return kEnd;
      case 'S':
        bits = class_bit(CharClass::kSpace), negated = true;
        return kEnd;
      case 'p':
      case 'P': {
        negated = c == 'P';
        if (peek() != '{') break;
        const size_t close_from = at_;
        while (peek() != kEnd && peek() != '}') at_++;
        if (peek() != '}') break;
        std::string name = text(close_from + 1, at_);
        at_++;
        if (!name.empty() && name[0] == '^') negated = !negated, name.erase(0, 1);
        if (name == "L" || name == "Letter") bits = class_bit(CharClass::kLetter);
        if (name == "N" || name == "Number") bits = class_bit(CharClass::kNumber);
        if (bits) return kEnd;
        unsupported(text(start, at_) + " (only \\p{L} and \\p{N})", start);
        return kEnd;
      }
      case 'r':
        return '\r';
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'a':
        return 0x07;
      case 'e':
        return 0x1B;
      case 'x':
        return hex(2, peek() == '{');
      case 'u':
        return hex(4, false);
      default:
        // Escaped punctuation is itself; escaped letters and digits are classes, anchors,
        // backreferences or options this engine does not have.
        if (c != kEnd && c < 0x80 && !std::isalnum(static_cast<int>(c))) return c;
        if (c != kEnd && c >= 0x80) return c;
        break;
    }
    unsupported(text(start, std::min(at_, cps_.size())), start);
    return kEnd;
  }

  RegexNode atom(bool& icase, uint32_t& literal) {
    const size_t start = at_;
    const uint32_t c = peek();
    at_++;
    switch (c) {
      case '(':
        return group(icase, start);
      case '[':
        return char_class(icase, start);
      case '.': {  // any character but a newline, as Oniguruma's default
        Regex::CharSet s;
        add_range(s, '\n', '\n');
        negate(s);
        return set_node(std::move(s));
      }
      case '^':
      case '$':
        unsupported(text(start, at_) + " (anchor)", start);
        return {};
      case '*':
      case '+':
      case '?':
        unsupported(text(start, at_) + " (quantifier with nothing before it)", start);
        return {};
      case '\\': {
        uint8_t bits;
        bool negated;
        const uint32_t cp = escape(bits, negated);
        if (!error_.empty()) return {};
        if (cp == kEnd) {
          Regex::CharSet s;
          add_classes(s, bits);
          if (negated) negate(s);
          return set_node(std::move(s));
        }
        literal = cp;
        return set_node(literal_set(cp, icase));
      }
      default:
        literal = c;
        return set_node(literal_set(c, icase));
    }
  }

  RegexNode group(bool& icase, size_t start) {
    bool inner = icase;
    RegexNode body;
    if (peek() == '?') {
      at_++;
      const uint32_t kind = peek();
      at_++;
      if (kind == ':') {
        body = alternation(inner);
      } else if (kind == '=' || kind == '!') {
        bool look_case = icase;
        RegexNode look;
        look.kind = RegexNode::kLook, look.negate = kind == '!';
        look.kids.push_back(alternation(look_case));
        body = std::move(look);
      } else if (kind == 'i' && peek() == ':') {
        at_++;
        inner = true;
        body = alternation(inner);
      } else if (kind == 'i' && peek() == ')') {
        at_++;
        icase = true;  // for the rest of the enclosing group: sequence() takes it from here
        inline_flag_ = true;
        return RegexNode{};
      } else {
        unsupported(text(start, at_), start);
        return {};
      }
    } else {
      body = alternation(inner);  // capturing: matched the same way
    }
    if (error_.empty() && peek() != ')') fail("'(' without ')'", start);
    at_++;
    return body;
  }

  RegexNode char_class(bool icase, size_t start) {
    Regex::CharSet s;
    const bool negated = peek() == '^';
    if (negated) at_++;
    bool first = true;
    while (error_.empty()) {
      const size_t item = at_;
      uint32_t c = peek();
      if (c == kEnd) {
        fail("'[' without ']'", start);
        break;
      }
      at_++;
      if (c == ']' && !first) break;
      first = false;
      if (c == '[') {
        unsupported("[ inside a character class", item);
        break;
      }
      if (c == '&' && peek() == '&') {
        unsupported("&& (class intersection)", item);
        break;
      }
      if (c == '\\') {
        uint8_t bits;
        bool class_negated;
        c = escape(bits, class_negated);
        if (!error_.empty()) break;
        if (c == kEnd) {
          if (class_negated) unsupported(text(item, at_) + " inside a character class", item);
          add_classes(s, bits);
          continue;
        }
      }
      uint32_t last = c;
      if (peek() == '-' && peek(1) != ']' && peek(1) != kEnd) {  // a range
        at_++;
        last = peek();
        at_++;
        if (last == '\\') {
          uint8_t bits;
          bool ignored;
          last = escape(bits, ignored);
          if (last == kEnd) unsupported(text(item, at_) + " (range to a class)", item);
        }
        if (error_.empty() && last < c) fail("range out of order '" + text(item, at_) + "'", item);
        if (!error_.empty()) break;
      }
      if (icase) {  // ASCII letters get their other case; other letters are refused
        for (uint32_t cp = c; cp <= std::min<uint32_t>(last, 0x7F); cp++) add_literal(s, cp, true);
        for (uint32_t cp = std::max<uint32_t>(c, 0x80); cp <= last && error_.empty(); cp++)
          if (re_.classes_->lookup(cp) == CharClass::kLetter)
            unsupported("(?i) with a letter outside ASCII", item);
        if (last >= 0x80) add_range(s, std::max<uint32_t>(c, 0x80), last);
      } else {
        add_range(s, c, last);
      }
    }
    if (negated) negate(s);
    return set_node(std::move(s));
  }

  Regex& re_;
  bool inline_flag_ = false;  // the atom just parsed was "(?i)"
  std::vector<uint32_t> cps_;
  size_t at_ = 0;
  std::string error_;
};

Result<RegexNode> parse_regex(std::string_view pattern, Regex& re) {
  return RegexParser(pattern, re).parse();
}

}  // namespace lattice::hf
