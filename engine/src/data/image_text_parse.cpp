// Image-text JSONL lines and their tokens (image_text_dataset.h): the three line forms, and
// Note [image-text tokens].
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/chat_data.h"
#include "data/image_text_dataset.h"

namespace lattice {

namespace {

using nlohmann::json;

std::string resolve(const std::string& directory, const std::string& path) {
  const std::filesystem::path p(path);
  if (p.is_absolute() || directory.empty()) return path;
  return (std::filesystem::path(directory) / p).string();
}

Result<std::string> text_of(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return Status::invalid_argument(where + " has no \"" + key + "\"");
  if (!it->is_string())
    return Status::invalid_argument(where + "'s \"" + key + "\" is a JSON " + it->type_name() +
                                    ", not a string");
  return it->get<std::string>();
}

// "image": a path or a list of paths.
Status image_paths(const json& j, const std::string& directory, std::vector<std::string>& out) {
  auto it = j.find("image");
  if (it == j.end()) return Status::ok();
  if (it->is_string()) {
    out.push_back(resolve(directory, it->get<std::string>()));
    return Status::ok();
  }
  if (!it->is_array())
    return Status::invalid_argument("\"image\" is a JSON " + std::string(it->type_name()) +
                                    ", not a path or a list of paths");
  for (const json& p : *it) {
    if (!p.is_string()) return Status::invalid_argument("\"image\" lists a non-string");
    out.push_back(resolve(directory, p.get<std::string>()));
  }
  return Status::ok();
}

size_t count_placeholders(std::string_view text) {
  size_t n = 0;
  for (size_t at = text.find(kImagePlaceholder); at != std::string_view::npos;
       at = text.find(kImagePlaceholder, at + kImagePlaceholder.size()))
    n++;
  return n;
}

Status parse_llava(const json& j, ImageTextSample& s) {
  const json& turns = j["conversations"];
  if (!turns.is_array()) return Status::invalid_argument("\"conversations\" is not a list");
  for (size_t k = 0; k < turns.size(); k++) {
    const std::string where = "turn " + std::to_string(k + 1);
    if (!turns[k].is_object()) return Status::invalid_argument(where + " is not a JSON object");
    Result<std::string> from = text_of(turns[k], "from", where);
    if (!from) return from.status();
    Result<std::string> value = text_of(turns[k], "value", where);
    if (!value) return value.status();
    const std::string role = *from == "human"    ? "user"
                             : *from == "gpt"    ? "assistant"
                             : *from == "system" ? "system"
                                                 : "";
    if (role.empty())
      return Status::invalid_argument(where + ": \"from\" '" + *from +
                                      "' is not one of human, gpt, system");
    s.messages.push_back({role, *value});
  }
  size_t placeholders = 0;
  for (const ChatMessage& m : s.messages) placeholders += count_placeholders(m.content);
  if (placeholders == 0 && s.images.size() == 1)
    for (ChatMessage& m : s.messages)
      if (m.role == "user") {
        m.content = std::string(kImagePlaceholder) + "\n" + m.content;
        break;
      }
  return Status::ok();
}

Status parse_messages(const json& j, const std::string& directory, ImageTextSample& s) {
  const json& messages = j["messages"];
  if (!messages.is_array()) return Status::invalid_argument("\"messages\" is not a list");
  for (size_t k = 0; k < messages.size(); k++) {
    const std::string where = "message " + std::to_string(k + 1);
    const json& m = messages[k];
    if (!m.is_object()) return Status::invalid_argument(where + " is not a JSON object");
    Result<std::string> role = text_of(m, "role", where);
    if (!role) return role.status();
    if (*role != "system" && *role != "user" && *role != "assistant")
      return Status::invalid_argument(where + ": role '" + *role +
                                      "' is not one of system, user, assistant");
    auto content = m.find("content");
    if (content == m.end()) return Status::invalid_argument(where + " has no \"content\"");
    std::string text;
    if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        if (!part.is_object()) return Status::invalid_argument(where + " has a non-object part");
        Result<std::string> type = text_of(part, "type", where + "'s part");
        if (!type) return type.status();
        if (*type == "text") {
          Result<std::string> t = text_of(part, "text", where + "'s text part");
          if (!t) return t.status();
          text += *t;
        } else if (*type == "image") {
          Result<std::string> path = text_of(part, "image", where + "'s image part");
          if (!path) return path.status();
          s.images.push_back(resolve(directory, *path));
          text += std::string(kImagePlaceholder) + "\n";
        } else {
          return Status::invalid_argument(where + ": part type '" + *type +
                                          "' is not one of text, image");
        }
      }
    } else {
      return Status::invalid_argument(where + "'s \"content\" is neither a string nor a list");
    }
    s.messages.push_back({*role, text});
  }
  return Status::ok();
}

}  // namespace

Result<ImageTextSample> parse_image_text_line(std::string_view line, const std::string& directory) {
  Result<json> parsed = parse_json_object(line);
  if (!parsed) return parsed.status();
  const json& j = *parsed;
  ImageTextSample s;
  if (j.contains("messages")) {
    if (j.contains("image"))
      return Status::invalid_argument(
          "\"messages\" lines name their images in {\"type\": \"image\"} parts, not \"image\"");
    if (Status st = parse_messages(j, directory, s); !st) return st;
  } else {
    if (Status st = image_paths(j, directory, s.images); !st) return st;
    if (j.contains("conversations")) {
      if (Status st = parse_llava(j, s); !st) return st;
    } else if (j.contains("text")) {
      Result<std::string> text = text_of(j, "text", "the line");
      if (!text) return text.status();
      if (count_placeholders(*text) != 0)
        return Status::invalid_argument(
            "a {\"image\", \"text\"} caption may not hold <image> (its image goes first); use "
            "\"conversations\" to place images");
      s.plain = true;
      s.text = *text;
      return s;
    } else {
      return Status::invalid_argument(
          "the line has none of \"text\", \"conversations\" or \"messages\"");
    }
  }
  size_t placeholders = 0;
  bool assistant = false;
  for (const ChatMessage& m : s.messages) {
    placeholders += count_placeholders(m.content);
    assistant |= m.role == "assistant";
    if (m.role == "assistant" && count_placeholders(m.content) != 0)
      return Status::invalid_argument(
          "an assistant message holds <image>; images go in user "
          "or system messages");
  }
  if (!assistant) return Status::invalid_argument("the conversation has no assistant message");
  if (placeholders != s.images.size())
    return Status::invalid_argument("the conversation has " + std::to_string(placeholders) +
                                    " <image> placeholders but " + std::to_string(s.images.size()) +
                                    " images");
  return s;
}

Result<ImageTextTokens> tokenize_image_text(const ImageTextSample& sample,
                                            const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer, int32_t image_token_id) {
  ImageTextTokens out;
  if (sample.plain) {
    out.tokens.assign(sample.images.size(), image_token_id);
    const std::vector<int32_t> text = tokenizer.encode(sample.text);
    out.tokens.insert(out.tokens.end(), text.begin(), text.end());
    out.tokens.push_back(tokenizer.eod());
    out.loss_mask.assign(sample.images.size(), 0);
    out.loss_mask.resize(out.tokens.size(), 1);
    return out;
  }
  Result<std::string> rendered = chat_template.render(sample.messages, false);
  if (!rendered) return rendered.status();
  const std::string& full = *rendered;
  Result<std::vector<std::pair<size_t, size_t>>> spans =
      assistant_turn_spans(chat_template, sample.messages, full);
  if (!spans) return spans.status();
  std::vector<size_t> cuts = {0, full.size()}, images;
  for (size_t at = full.find(kImagePlaceholder); at != std::string::npos;
       at = full.find(kImagePlaceholder, at + kImagePlaceholder.size())) {
    images.push_back(at);
    cuts.push_back(at);
    cuts.push_back(at + kImagePlaceholder.size());
  }
  if (images.size() != sample.images.size())
    return Status::invalid_argument(chat_template.name() + " renders " +
                                    std::to_string(images.size()) + " <image> placeholders for " +
                                    std::to_string(sample.images.size()) + " images");
  for (const auto& [begin, end] : *spans) {
    cuts.push_back(begin);
    cuts.push_back(end);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (size_t k = 0; k + 1 < cuts.size(); k++) {
    const size_t begin = cuts[k], end = cuts[k + 1];
    if (std::find(images.begin(), images.end(), begin) != images.end()) {
      out.tokens.push_back(image_token_id);
      out.loss_mask.push_back(0);
      continue;
    }
    const bool assistant = std::any_of(spans->begin(), spans->end(), [&](const auto& s) {
      return begin >= s.first && end <= s.second;
    });
    const std::vector<int32_t> ids =
        chat_template.encode(tokenizer, std::string_view(full).substr(begin, end - begin));
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.loss_mask.insert(out.loss_mask.end(), ids.size(), assistant ? 1 : 0);
  }
  if (std::find(out.loss_mask.begin(), out.loss_mask.end(), 1) == out.loss_mask.end())
    return Status::invalid_argument("the assistant messages encode to no tokens");
  return out;
}

}  // namespace lattice
