// Regex (hf_regex.h): the parsed pattern (hf_regex_parse.cpp) is laid out as a backtracking
// program (kRun / kSplit / kJump / kLook / kMatch, as Thompson's and Pike's matchers have it,
// but run depth first so that the first match in Oniguruma's order wins); to match, the text
// is decoded once into characters and the program runs from each position with an explicit
// stack of the choices left to try.
#include "data/hf_regex.h"

#include <utility>
#include <vector>

#include "data/hf_regex_tree.h"

#include "data/utf8.h"

namespace lattice::hf {

namespace {
constexpr uint32_t kNoRun = ~uint32_t{0};
}  // namespace

// Lays out `n` at the end of the program (a kRun per set, kSplit / kJump for choices and
// loops, a {m,n} as m copies then n - m optional ones); lookahead bodies go to `deferred`.
void Regex::lay_out(const RegexNode& n,
                    std::vector<std::pair<size_t, const RegexNode*>>& deferred) {
  switch (n.kind) {
    case RegexNode::kSet: {
      Inst i;
      i.op = Op::kRun, i.set = n.set, i.min = 1, i.max = 1;
      program_.push_back(i);
      return;
    }
    case RegexNode::kSeq:
      for (const RegexNode& k : n.kids) lay_out(k, deferred);
      return;
    case RegexNode::kLook: {
      Inst i;
      i.op = Op::kLook, i.negate = n.negate;
      deferred.push_back({program_.size(), &n.kids[0]});
      program_.push_back(i);
      return;
    }
    case RegexNode::kAlt: {
      std::vector<size_t> to_end;  // jumps to patch to the end of the alternation
      for (size_t k = 0; k < n.kids.size(); k++) {
        const size_t split = program_.size();
        if (k + 1 < n.kids.size()) program_.push_back({Op::kSplit});
        lay_out(n.kids[k], deferred);
        if (k + 1 < n.kids.size()) {
          to_end.push_back(program_.size());
          program_.push_back({Op::kJump});
          program_[split].x = static_cast<int32_t>(split + 1);
          program_[split].y = static_cast<int32_t>(program_.size());
        }
      }
      for (size_t j : to_end) program_[j].x = static_cast<int32_t>(program_.size());
      return;
    }
    case RegexNode::kRepeat: {
      const RegexNode& body = n.kids[0];
      if (body.kind == RegexNode::kSet) {  // the common case, one instruction
        Inst i;
        i.op = Op::kRun, i.set = body.set, i.min = n.min, i.max = n.max;
        program_.push_back(i);
        return;
      }
      for (uint32_t k = 0; k < n.min; k++) lay_out(body, deferred);
      if (n.max == kUnbounded) {  // L: split(body, out); body; jump L
        const size_t loop = program_.size();
        program_.push_back({Op::kSplit});
        lay_out(body, deferred);
        Inst back;
        back.op = Op::kJump, back.x = static_cast<int32_t>(loop);
        program_.push_back(back);
        program_[loop].x = static_cast<int32_t>(loop + 1);
        program_[loop].y = static_cast<int32_t>(program_.size());
        return;
      }
      std::vector<size_t> splits;  // each optional copy may be skipped to the end
      for (uint32_t k = n.min; k < n.max; k++) {
        splits.push_back(program_.size());
        program_.push_back({Op::kSplit});
        lay_out(body, deferred);
      }
      for (size_t s : splits) {
        program_[s].x = static_cast<int32_t>(s + 1);
        program_[s].y = static_cast<int32_t>(program_.size());
      }
      return;
    }
  }
}

Result<Regex> Regex::compile(std::string_view pattern, const unicode::CharClassTable& classes) {
  Regex re;
  re.classes_ = &classes;
  Result<RegexNode> tree = parse_regex(pattern, re);
  if (!tree) return tree.status();
  // The main program, then each lookahead body (which may hold lookaheads of its own).
  std::vector<std::pair<size_t, const RegexNode*>> deferred;
  re.lay_out(*tree, deferred);
  re.program_.push_back({Op::kMatch});
  for (size_t i = 0; i < deferred.size(); i++) {
    re.program_[deferred[i].first].x = static_cast<int32_t>(re.program_.size());
    re.lay_out(*deferred[i].second, deferred);
    re.program_.push_back({Op::kMatch});
  }
  re.find_first_characters();
  return re;
}

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
