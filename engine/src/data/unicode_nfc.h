// Unicode NFC (canonical decomposition, canonical ordering, canonical composition) as Hugging
// Face's NFC normaliser computes it, for tokenizer.json files whose normalizer is NFC (Qwen).
// Its tables are read from that normaliser (make_unicode_classes.js), whose Unicode is older
// than the current one: compositions added since (e.g. U+11938) are not made, as there.
// Bytes that are not UTF-8 (utf8.h) are kept as they are and compose with nothing.
#pragma once

#include <string>
#include <string_view>

namespace lattice::unicode {

// Generated data (unicode_nfc_data.cpp), in the format its header describes.
extern const char* const kNfcSource;
extern const char* const kNfcDecompositions;
extern const char* const kNfcCombiningRanks;
extern const char* const kNfcCompositions;

// Returns false, leaving `out` alone, when `text` is in NFC already (Unicode's quick check,
// which passes for most text, ASCII always); otherwise sets `out` to the NFC of `text` and
// returns true. Thread-safe; the tables are built on first use.
bool to_nfc(std::string_view text, std::string& out);

}  // namespace lattice::unicode
