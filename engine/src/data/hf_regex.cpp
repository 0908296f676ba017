// Matching (hf_regex.h): the text is decoded once into characters, then the program runs depth
// first from each position with an explicit stack of the choices left to try.
#include "data/hf_regex.h"

#include "data/utf8.h"

namespace lattice::hf {

namespace {
constexpr uint32_t kNoRun = ~uint32_t{0};
}  // namespace

void Regex::decode(std::string_view text, Chars& chars) const {
  chars.cp.clear(), chars.cls.clear(), chars.offset.clear();
  const auto* begin = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = begin + text.size();
  for (const unsigned char* p = begin; p < end;) {
    const unicode::Utf8Char c = unicode::decode_utf8(p, end);
    chars.cp.push_back(c.cp);
    chars.cls.push_back(c.cp == unicode::kNotUtf8 ? static_cast<uint8_t>(unicode::CharClass::kOther)
                                                  : static_cast<uint8_t>(classes_->lookup(c.cp)));
    chars.offset.push_back(static_cast<uint32_t>(p - begin));
    p += c.length;
  }
  chars.offset.push_back(static_cast<uint32_t>(text.size()));
}

// Depth first, Oniguruma's order: a kSplit tries x and remembers y; a kRun takes as many
// characters as it may and remembers that it could take fewer. On failure the most recent
// choice is resumed. A lookahead runs its body on the same stack above a mark, atomically.
bool Regex::run(const Chars& chars, int32_t pc, uint32_t pos, uint32_t* end,
                std::vector<Frame>& stack) const {
  const size_t base = stack.size();
  const uint32_t n = static_cast<uint32_t>(chars.cp.size());
  for (;;) {
    const Inst& in = program_[pc];
    bool ok = true;
    switch (in.op) {
      case Op::kRun: {
        const CharSet& set = sets_[in.set];
        uint32_t k = 0;
        while (k < in.max && pos + k < n && set.contains(chars.cp[pos + k], chars.cls[pos + k]))
          k++;
        if (k < in.min) {
          ok = false;
          break;
        }
        if (k > in.min) stack.push_back({pc + 1, pos + k - 1, pos + in.min});
        pos += k;
        pc++;
        break;
      }
      case Op::kSplit:
        stack.push_back({in.y, pos, kNoRun});
        pc = in.x;
        break;
      case Op::kJump:
        pc = in.x;
        break;
      case Op::kLook: {
        uint32_t ignored;
        const bool matched = run(chars, in.x, pos, &ignored, stack);
        ok = matched != in.negate;
        pc++;
        break;
      }
      case Op::kMatch:
        *end = pos;
        stack.resize(base);
        return true;
    }
    if (ok) continue;
    if (stack.size() == base) return false;
    Frame& f = stack.back();
    pc = f.pc;
    pos = f.pos;
    if (f.lo == kNoRun || f.pos == f.lo) {
      stack.pop_back();
    } else {
      f.pos--;  // next time, one character fewer
    }
  }
}

void Regex::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  thread_local Chars chars;
  thread_local std::vector<Frame> stack;
  decode(text, chars);
  const uint32_t n = static_cast<uint32_t>(chars.cp.size());
  auto piece = [&](uint32_t from, uint32_t to) {
    pieces.push_back(text.substr(chars.offset[from], chars.offset[to] - chars.offset[from]));
  };
  // Oniguruma's search from each position on. A match ends the stretch before it; so does an
  // empty match (it splits there), except right after a match, as rust-onig's find_iter skips
  // an empty match that follows the last one.
  uint32_t gap = 0;  // start of the characters no match has taken
  uint32_t last_end = ~uint32_t{0};
  for (uint32_t pos = 0; pos < n;) {
    uint32_t end;
    if (!run(chars, 0, pos, &end, stack)) {
      pos++;
      continue;
    }
    if (gap < pos && (end > pos || pos != last_end)) {
      piece(gap, pos);
      gap = pos;
    }
    if (end > pos) {
      piece(pos, end);
      gap = last_end = pos = end;
    } else {
      last_end = pos++;
    }
  }
  if (gap < n) piece(gap, n);
}

int64_t Regex::match_length(std::string_view text) const {
  Chars chars;
  std::vector<Frame> stack;
  decode(text, chars);
  uint32_t end;
  if (!run(chars, 0, 0, &end, stack)) return -1;
  return chars.offset[end];
}

}  // namespace lattice::hf
