// Matching (hf_regex.h): the text is decoded once into characters, then the program runs depth
// first from each position with an explicit stack of the choices left to try.
#include "data/hf_regex.h"

#include "data/utf8.h"

namespace lattice::hf {

namespace {
constexpr uint32_t kNoRun = ~uint32_t{0};
}  // namespace

// Note [first characters]
// Most positions of a text are tried against alternatives that cannot start there: a letter
// against (?i:'s|'t|...) or \p{N}{1,3}. For each instruction, compile() records which ASCII
// characters a match from there can begin with (a superset: everything where a lookahead, an
// empty match or a loop makes it unclear), so that kSplit skips a branch, or the whole choice,
// without trying it. Non-ASCII characters are never filtered.
void Regex::find_first_characters() {
  constexpr std::array<uint64_t, 2> kAll = {~uint64_t{0}, ~uint64_t{0}};
  first_.assign(program_.size(), kAll);
  std::vector<uint8_t> state(program_.size(), 0);  // 0 new, 1 being computed, 2 done
  auto first = [&](auto&& self, int32_t pc) -> std::array<uint64_t, 2> {
    if (state[pc] == 2) return first_[pc];
    if (state[pc] == 1) return kAll;  // a loop: assume anything
    state[pc] = 1;
    const Inst& in = program_[pc];
    std::array<uint64_t, 2> r = kAll;
    switch (in.op) {
      case Op::kRun: {
        const CharSet& set = sets_[in.set];
        r = {set.ascii[0], set.ascii[1]};
        if (in.min == 0) {
          const auto next = self(self, pc + 1);
          r = {r[0] | next[0], r[1] | next[1]};
        }
        break;
      }
      case Op::kSplit: {
        const auto x = self(self, in.x), y = self(self, in.y);
        r = {x[0] | y[0], x[1] | y[1]};
        break;
      }
      case Op::kJump:
        r = self(self, in.x);
        break;
      case Op::kLook:
      case Op::kMatch:
        break;  // kAll
    }
    first_[pc] = r;
    state[pc] = 2;
    return r;
  };
  for (int32_t pc = 0; pc < static_cast<int32_t>(program_.size()); pc++) first(first, pc);
}

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
      case Op::kSplit: {
        // Note [first characters]: skip what cannot start with the character here.
        const uint32_t c = pos < n ? chars.cp[pos] : 0x80;
        const bool may_x = c >= 0x80 || ((first_[in.x][c >> 6] >> (c & 63)) & 1);
        const bool may_y = c >= 0x80 || ((first_[in.y][c >> 6] >> (c & 63)) & 1);
        if (may_x && may_y) {
          stack.push_back({in.y, pos, kNoRun});
          pc = in.x;
        } else if (may_x || may_y) {
          pc = may_x ? in.x : in.y;
        } else {
          ok = false;
        }
        break;
      }
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
