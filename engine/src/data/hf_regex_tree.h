// The parsed form of a pattern (hf_regex.h), between parse_regex (hf_regex_parse.cpp) and the
// program Regex::compile lays out from it (hf_regex.cpp). Internal to the regex engine.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "data/hf_regex.h"
#include "lattice/status.h"

namespace lattice::hf {

// One node of the parsed pattern.
struct RegexNode {
  enum Kind { kSet, kSeq, kAlt, kRepeat, kLook } kind = kSeq;
  uint32_t set = 0;             // kSet: index into the sets
  std::vector<RegexNode> kids;  // kSeq, kAlt: the parts; kRepeat, kLook: one body
  uint32_t min = 1, max = 1;    // kRepeat
  bool negate = false;          // kLook: (?!...)
  bool can_be_empty() const {
    switch (kind) {
      case kSet:
        return false;
      case kLook:
        return true;
      case kRepeat:
        return min == 0 || kids[0].can_be_empty();
      case kAlt:
        for (const RegexNode& k : kids)
          if (k.can_be_empty()) return true;
        return false;
      case kSeq:
        for (const RegexNode& k : kids)
          if (!k.can_be_empty()) return false;
        return true;
    }
    return true;
  }
};

// Parses `pattern`, adding its character sets to `re`; errors name the unsupported construct
// and the character offset where it starts.
Result<RegexNode> parse_regex(std::string_view pattern, Regex& re);

}  // namespace lattice::hf
