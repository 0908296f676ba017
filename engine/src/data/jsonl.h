// One line of a JSONL corpus, read as Megatron's tools/preprocess_data.py reads it
// (json.loads(line)[key]): the string under a top-level key. Only strings are taken; a list
// of pre-split sentences (which Megatron also accepts) is refused.
#pragma once

#include <string>
#include <string_view>

#include "lattice/status.h"

namespace lattice {

// The string stored under `key` in the JSON object on `line` (surrounding whitespace and a
// trailing '\r' are allowed; of a repeated key the last wins, as in Python). `corrupt` when the
// line is not valid JSON, naming the column; `invalid_argument` naming the key when the line
// is not an object, the key is missing or its value is not a string. Messages do not name the
// file or line number: the caller prefixes them. Thread-safe.
Result<std::string> jsonl_field(std::string_view line, const std::string& key);

}  // namespace lattice
