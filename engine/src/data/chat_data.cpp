// Parsing SFT JSONL lines (chat_data.h).
#include "data/chat_data.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace lattice {

namespace {

using nlohmann::json;

Result<std::string> string_member(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return Status::invalid_argument(where + " has no \"" + key + "\"");
  if (!it->is_string())
    return Status::invalid_argument(where + "'s \"" + key + "\" is a JSON " + it->type_name() +
                                    ", not a string");
  return it->get<std::string>();
}

}  // namespace

Result<json> parse_json_object(std::string_view line) {
  json j;
  try {
    j = json::parse(line.begin(), line.end());
  } catch (const json::parse_error& e) {
    return Status::invalid_argument("not valid JSON (byte " + std::to_string(e.byte) + ")");
  }
  if (!j.is_object())
    return Status::invalid_argument("the line is a JSON " + std::string(j.type_name()) +
                                    ", not an object");
  return j;
}

Result<Conversation> parse_chat_line(std::string_view line) {
  Result<json> parsed = parse_json_object(line);
  if (!parsed) return parsed.status();
  const json& j = *parsed;
  Conversation c;
  if (auto messages = j.find("messages"); messages != j.end()) {
    if (!messages->is_array()) return Status::invalid_argument("\"messages\" is not a list");
    for (size_t k = 0; k < messages->size(); k++) {
      const json& m = (*messages)[k];
      const std::string where = "message " + std::to_string(k + 1);
      if (!m.is_object()) return Status::invalid_argument(where + " is not a JSON object");
      Result<std::string> role = string_member(m, "role", where);
      if (!role) return role.status();
      if (*role != "system" && *role != "user" && *role != "assistant")
        return Status::invalid_argument("role '" + *role +
                                        "' is not one of system, user, assistant");
      Result<std::string> content = string_member(m, "content", where);
      if (!content) return content.status();
      c.push_back({*role, *content});
    }
  } else if (j.contains("prompt") || j.contains("response")) {
    if (j.contains("system")) {
      Result<std::string> system = string_member(j, "system", "the line");
      if (!system) return system.status();
      c.push_back({"system", *system});
    }
    Result<std::string> prompt = string_member(j, "prompt", "the line");
    if (!prompt) return prompt.status();
    Result<std::string> response = string_member(j, "response", "the line");
    if (!response) return response.status();
    c.push_back({"user", *prompt});
    c.push_back({"assistant", *response});
  } else {
    return Status::invalid_argument(
        "the line has neither \"messages\" nor \"prompt\" and \"response\"");
  }
  bool assistant = false;
  for (const ChatMessage& m : c) assistant |= m.role == "assistant";
  if (!assistant) return Status::invalid_argument("the conversation has no assistant message");
  return c;
}

Result<std::vector<Conversation>> read_chat_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error("cannot open '" + path + "'");
  std::vector<Conversation> out;
  std::string line;
  for (size_t number = 1; std::getline(in, line); number++) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<Conversation> c = parse_chat_line(line);
    if (!c)
      return Status::invalid_argument(path + " line " + std::to_string(number) + ": " +
                                      c.status().message());
    out.push_back(std::move(*c));
  }
  return out;
}

}  // namespace lattice
