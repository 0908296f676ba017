// SFT input files: one conversation per JSONL line, either chat form
//   {"messages": [{"role": "system|user|assistant", "content": "..."}, ...]}
// or prompt / response form (a user message and the assistant's reply, after an optional
// system message)
//   {"prompt": "...", "response": "...", "system": "..."}.
// Other keys are ignored. Blank lines are skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/chat_template.h"
#include "lattice/status.h"

namespace lattice {

using Conversation = std::vector<ChatMessage>;

// One JSONL line as a JSON object; invalid_argument ("not valid JSON (byte N)", "the line is a
// JSON array, not an object") otherwise. Shared by the chat and the image-text readers.
Result<nlohmann::json> parse_json_object(std::string_view line);

// The conversation on one line. invalid_argument when the line is not JSON, has neither
// "messages" nor "prompt" + "response", a message is not {"role": str, "content": str}, a role
// is not system / user / assistant, or there is no assistant message. Messages do not name the
// file or line: read_chat_jsonl and preprocessing prefix "<file> line N: ". Thread-safe.
Result<Conversation> parse_chat_line(std::string_view line);

// Every conversation of a file, in order; errors read "<file> line N: <what>".
Result<std::vector<Conversation>> read_chat_jsonl(const std::string& path);

}  // namespace lattice
