// CharClassTable (unicode_classes.h): the generated ranges as a two-level table.
#include <algorithm>
#include <map>
#include <string>

#include "data/unicode_classes.h"

namespace lattice::unicode {

CharClassTable::CharClassTable(std::span<const CharClassRange> overrides) {
  std::vector<uint8_t> all(kCodePoints, static_cast<uint8_t>(CharClass::kOther));
  auto paint = [&](std::span<const CharClassRange> ranges) {
    for (const CharClassRange& r : ranges)
      for (uint32_t cp = r.first; cp <= r.last; cp++) all[cp] = static_cast<uint8_t>(r.cls);
  };
  paint({kCharClassRanges, kCharClassRangeCount});
  paint(overrides);
  std::map<std::string, uint16_t> seen;
  for (uint32_t b = 0; b < kBlocks; b++) {
    std::string block(reinterpret_cast<const char*>(all.data()) + b * 256, 256);
    auto [it, inserted] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
    if (inserted) blocks_.insert(blocks_.end(), block.begin(), block.end());
    block_of_[b] = it->second;
  }
}

const CharClassTable& python_regex_classes() {
  static const CharClassTable table;
  return table;
}

const CharClassTable& hf_classes() {
  static const CharClassTable table({kHfCharClassOverrides, kHfCharClassOverrideCount});
  return table;
}

bool hf_is_word(uint32_t cp) {
  const CodePointRange* end = kHfWordRanges + kHfWordRangeCount;
  const CodePointRange* it = std::upper_bound(
      kHfWordRanges, end, cp, [](uint32_t c, const CodePointRange& r) { return c < r.first; });
  return it != kHfWordRanges && cp <= it[-1].last;
}

}  // namespace lattice::unicode
