// libFuzzer target for jsonl_field, the JSONL line parser of the preprocessing tool: any line
// gives the "text" string or a status with a message, never a crash, a leak or a hang.
// Build and run: tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "data/jsonl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  lattice::Result<std::string> text = lattice::jsonl_field(line, "text");
  if (!text.is_ok()) {
    if (text.status().message().empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  // What comes back is a JSON string's content: valid UTF-8, so it serialises again
  // (dump() throws on invalid UTF-8), and reading the serialised form gives it back.
  const std::string again = nlohmann::json(*text).dump();
  if (nlohmann::json::parse(again).get<std::string>() != *text) __builtin_trap();
  return 0;
}
