// Bytes as C-escaped text for failure messages of the tokenizer tests: printable ASCII as is,
// everything else (and '\') as \xNN, so that any byte string prints on one line.
#pragma once

#include <string>
#include <string_view>

namespace lattice::testing {

inline std::string escaped(std::string_view bytes) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F && u != '\\') {
      out += c;
    } else {
      out += {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
    }
  }
  return out;
}

}  // namespace lattice::testing
