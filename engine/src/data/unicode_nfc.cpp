// NFC (unicode_nfc.h): a quick check over the text, then, where it fails, the three steps of
// Unicode's algorithm (UAX #15) over code points. Hangul syllables are composed and decomposed
// by arithmetic; everything else comes from the generated tables.
#include "data/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/utf8.h"

namespace lattice::unicode {

namespace {

// Hangul syllables: S = 0xAC00 + (L * 21 + V) * 28 + T (Unicode ch. 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;

struct NfcTables {
  // Per code point: bits 0-5 the combining class rank (0 for starters), kDecomposes, kMaybe
  // (may compose with what precedes it: NFC_QC=Maybe), kNo (never in NFC: NFC_QC=No).
  static constexpr uint8_t kRankMask = 0x3F, kMaybe = 0x40, kNo = 0x80;
  std::vector<uint8_t> info;                                                  // (0x110000)
  std::unordered_map<uint32_t, std::pair<uint32_t, uint32_t>> decomposition;  // cp -> pool span
  std::vector<uint32_t> pool;
  std::unordered_map<uint64_t, uint32_t> composite;  // first << 21 | second -> composite

  NfcTables() : info(0x110000, 0) {
    // Items are "A=B" or "A.B=C" or "A-B=C", hex, separated by spaces.
    auto each = [](const char* text, auto&& item) {
      for (const char* p = text; *p;) {
        std::vector<uint32_t> left;
        char* end = nullptr;
        while (*p == ' ') p++;
        if (!*p) break;
        for (;;) {
          left.push_back(static_cast<uint32_t>(std::strtoul(p, &end, 16)));
          p = end;
          if (*p == '=') break;
          p++;  // '.' or '-'
        }
        std::vector<uint32_t> right;
        for (p++;;) {
          right.push_back(static_cast<uint32_t>(std::strtoul(p, &end, 16)));
          p = end;
          if (*p != '.') break;
          p++;
        }
        item(left, right);
      }
    };
    each(kNfcDecompositions, [&](const std::vector<uint32_t>& cp, const std::vector<uint32_t>& d) {
      decomposition[cp[0]] = {static_cast<uint32_t>(pool.size()), static_cast<uint32_t>(d.size())};
      pool.insert(pool.end(), d.begin(), d.end());
      info[cp[0]] |= kNo;  // until it turns out to be a primary composite below
    });
    each(kNfcCombiningRanks,
         [&](const std::vector<uint32_t>& range, const std::vector<uint32_t>& r) {
           for (uint32_t cp = range[0]; cp <= range[1]; cp++)
             info[cp] |= static_cast<uint8_t>(r[0]);
         });
    each(kNfcCompositions, [&](const std::vector<uint32_t>& pair, const std::vector<uint32_t>& p) {
      composite[(uint64_t{pair[0]} << 21) | pair[1]] = p[0];
      info[pair[1]] |= kMaybe;
      info[p[0]] &= static_cast<uint8_t>(~kNo);
    });
    for (uint32_t v = kVBase; v < kVBase + kVCount; v++) info[v] |= kMaybe;
    for (uint32_t t = kTBase + 1; t < kTBase + kTCount; t++) info[t] |= kMaybe;
  }

  uint8_t rank(uint32_t cp) const { return cp < 0x110000 ? info[cp] & kRankMask : 0; }

  void decompose(uint32_t cp, std::vector<uint32_t>& out) const {
    if (cp >= kSBase && cp < kSBase + kSCount) {
      const uint32_t s = cp - kSBase;
      out.push_back(kLBase + s / (kVCount * kTCount));
      out.push_back(kVBase + (s % (kVCount * kTCount)) / kTCount);
      if (s % kTCount) out.push_back(kTBase + s % kTCount);
      return;
    }
    const auto it = cp < 0x110000 ? decomposition.find(cp) : decomposition.end();
    if (it == decomposition.end()) {
      out.push_back(cp);
    } else {
      out.insert(out.end(), pool.begin() + it->second.first,
                 pool.begin() + it->second.first + it->second.second);
    }
  }

  // The primary composite of `a` then `b`, or 0.
  uint32_t compose(uint32_t a, uint32_t b) const {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
      return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
        b < kTBase + kTCount)
      return a + (b - kTBase);
    if (a >= 0x110000 || b >= 0x110000) return 0;
    const auto it = composite.find((uint64_t{a} << 21) | b);
    return it == composite.end() ? 0 : it->second;
  }
};

const NfcTables& tables() {
  static const NfcTables t;
  return t;
}

// Code points stand for themselves; a byte that is not UTF-8 is kept as 0x110000 + byte.
constexpr uint32_t kRawByte = 0x110000;

}  // namespace

bool to_nfc(std::string_view text, std::string& out) {
  const NfcTables& t = tables();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();

  // Quick check (UAX #15): no NFC_QC=No or Maybe character and non-starters in order.
  bool normal = true;
  uint8_t last_rank = 0;
  for (const unsigned char* q = p; q < end && normal;) {
    if (*q < 0x80) {
      q++;
      last_rank = 0;
      continue;
    }
    const Utf8Char c = decode_utf8(q, end);
    q += c.length;
    if (c.cp == kNotUtf8) {
      last_rank = 0;
      continue;
    }
    const uint8_t info = t.info[c.cp];
    const uint8_t rank = info & NfcTables::kRankMask;
    if ((info & (NfcTables::kNo | NfcTables::kMaybe)) || (rank != 0 && rank < last_rank))
      normal = false;
    last_rank = rank;
  }
  if (normal) return false;

  // 1. Full canonical decomposition.
  std::vector<uint32_t> cps;
  cps.reserve(text.size() + 8);
  for (const unsigned char* q = p; q < end;) {
    const Utf8Char c = decode_utf8(q, end);
    q += c.length;
    if (c.cp == kNotUtf8) {
      cps.push_back(kRawByte + q[-1]);
    } else {
      t.decompose(c.cp, cps);
    }
  }
  // 2. Canonical ordering: each run of non-starters sorted by class, stably.
  for (size_t i = 0; i < cps.size();) {
    if (t.rank(cps[i]) == 0) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && t.rank(cps[j]) != 0) j++;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [&](uint32_t a, uint32_t b) { return t.rank(a) < t.rank(b); });
    i = j;
  }
  // 3. Canonical composition: a character joins the last starter unless blocked (a character
  // between them of class 0 or of its class or higher).
  size_t kept = 0, starter = 0;
  int last = -1;  // class of the last kept character; -1: no starter yet, composition off
  for (size_t i = 0; i < cps.size(); i++) {
    const uint32_t c = cps[i];
    const int rank = t.rank(c);
    if (last == 0 || (last > 0 && last < rank)) {
      if (const uint32_t composite = t.compose(cps[starter], c)) {
        cps[starter] = composite;
        continue;
      }
    }
    if (rank == 0) {
      starter = kept;
      last = 0;
    } else if (last >= 0) {
      last = rank;
    }
    cps[kept++] = c;
  }
  out.clear();
  out.reserve(text.size());
  for (size_t i = 0; i < kept; i++) {
    if (cps[i] >= kRawByte) {
      out.push_back(static_cast<char>(cps[i] - kRawByte));
    } else {
      append_utf8(out, cps[i]);
    }
  }
  return true;
}

}  // namespace lattice::unicode
