// One line of a JSONL corpus, read as Megatron's tools/preprocess_data.py reads it
// (json.loads(line)[key]): the string under a top-level key. Only strings are taken; a list
// of pre-split sentences (which Megatron also accepts) is refused.
#pragma once

#include <cstddef>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/status.h"

namespace lattice {

// The string stored under `key` in the JSON object on `line` (surrounding whitespace and a
// trailing '\r' are allowed; of a repeated key the last wins, as in Python). `corrupt` when the
// line is not valid JSON, naming the column; `invalid_argument` naming the key when the line
// is not an object, the key is missing or its value is not a string. Messages do not name the
// file or line number: the caller prefixes them. Thread-safe.
Result<std::string> jsonl_field(std::string_view line, const std::string& key);

// The next batch of a JSONL file's non-blank lines, for preprocessors that parse a batch on
// several threads and write it in order.
struct JsonlBatch {
  std::vector<std::string> lines;
  std::vector<size_t> numbers;  // each line's 1-based number in the file (blank ones counted)
};
// Reads up to `max_lines` non-blank lines of `in` into `batch` (cleared first); `number` counts
// the lines read so far (start it at 0) and `bytes` grows by each line's size plus its newline.
// False once `in` is exhausted; the batch may then still hold lines.
bool read_jsonl_batch(std::istream& in, size_t max_lines, size_t& number, size_t& bytes,
                      JsonlBatch& batch);

}  // namespace lattice
