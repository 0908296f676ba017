// Chat templates (chat_template.h): loading Hugging Face's, the built-ins, and the
// conversation -> tokens + loss mask rendering used by SFT preprocessing.
#include "data/chat_template.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/bpe_core.h"

namespace lattice {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Built-in templates, in the same Jinja subset as Hugging Face's.
constexpr const char* kChatml =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
constexpr const char* kLlama3 =
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}";
// Plain role markers for tokenizers without a template (the demo SentencePiece model). The
// assistant turn ends with eos_token, which bind_eod() makes the tokenizer's EOD text.
constexpr const char* kDefault =
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{- 'System: ' + message.content + '\\n' }}"
    "{%- elif message.role == 'user' %}{{- 'User: ' + message.content + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- 'Assistant: ' + message.content + eos_token + '\\n' }}"
    "{%- else %}{{- raise_exception('the default chat template has no role ' + message.role) }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %}";

// Texts that end an assistant turn in the templates of the common model families.
const char* const kKnownTurnEnds[] = {"<|eot_id|>",      "<|im_end|>", "<|end|>",
                                      "<end_of_turn>",   "</s>",       "<|endoftext|>",
                                      "<|end_of_text|>", "<|eom_id|>"};

std::string token_text(const json& config, const char* key) {
  if (!config.contains(key)) return "";
  const json& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string())
    return t["content"].get<std::string>();
  return "";
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_source(const std::string& source, const std::string& name,
                                               std::string bos_token, std::string eos_token) {
  Result<jinja::Template> t = jinja::Template::parse(source, name);
  if (!t) return t.status();
  ChatTemplate c;
  c.name_ = name;
  c.template_ = std::move(*t);
  c.bos_token_ = std::move(bos_token);
  c.eos_token_ = std::move(eos_token);
  if (!c.eos_token_.empty()) c.end_of_turn_.push_back(c.eos_token_);
  for (const char* end : kKnownTurnEnds)
    if (end != c.eos_token_) c.end_of_turn_.push_back(end);
  return c;
}

Result<ChatTemplate> ChatTemplate::from_tokenizer_config(const std::string& path) {
  fs::path file = path;
  std::error_code ec;
  if (fs::is_directory(file, ec)) file /= "tokenizer_config.json";
  Result<std::string> text = bpe::read_file(file.string(), "tokenizer config");
  if (!text) return text.status();
  const std::string where = "tokenizer config '" + file.string() + "'";
  Result<json> config = bpe::parse_json(*text, where);
  if (!config) return config.status();
  if (!config->is_object() || !config->contains("chat_template"))
    return Status::invalid_argument(where +
                                    " has no chat_template; pass --chat-template with a "
                                    "built-in name (chatml, llama3, default) or a file");
  const json& t = (*config)["chat_template"];
  std::string source;
  if (t.is_string()) {
    source = t.get<std::string>();
  } else if (t.is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
    for (const json& entry : t)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        source = entry["template"].get<std::string>();
    if (source.empty())
      return Status::invalid_argument(where +
                                      ": chat_template is a list without a \"default\" entry");
  } else {
    return Status::invalid_argument(where + ": chat_template is neither a string nor a list");
  }
  return from_source(source, where + " chat_template", token_text(*config, "bos_token"),
                     token_text(*config, "eos_token"));
}

Result<ChatTemplate> ChatTemplate::builtin(const std::string& name) {
  if (name == "chatml")
    return from_source(kChatml, "built-in chat template 'chatml'", "", "<|im_end|>");
  if (name == "llama3")
    return from_source(kLlama3, "built-in chat template 'llama3'", "<|begin_of_text|>",
                       "<|eot_id|>");
  if (name == "default") {
    Result<ChatTemplate> c = from_source(kDefault, "built-in chat template 'default'", "", "");
    if (c) c->ends_with_eod_ = true;
    return c;
  }
  return Status::invalid_argument("unknown built-in chat template '" + name +
                                  "' (chatml, llama3, default)");
}

Status ChatTemplate::bind_eod(const Tokenizer& tokenizer) {
  if (!ends_with_eod_ || !eos_token_.empty()) return Status::ok();
  const int32_t eod = tokenizer.eod();
  const std::string text = tokenizer.decode(std::span<const int32_t>(&eod, 1));
  const std::vector<int32_t> back = tokenizer.encode(text);
  eod_marker_ = text.empty() || back.size() != 1 || back[0] != eod;
  eos_token_ = eod_marker_ ? kEodMarker : text;
  end_of_turn_.insert(end_of_turn_.begin(), eos_token_);
  return Status::ok();
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer, std::string_view text) const {
  if (!eod_marker_) return tokenizer.encode(text);
  std::vector<int32_t> ids;
  const std::string_view marker = kEodMarker;
  while (true) {
    const size_t at = text.find(marker);
    const std::vector<int32_t> piece = tokenizer.encode(text.substr(0, at));
    ids.insert(ids.end(), piece.begin(), piece.end());
    if (at == std::string_view::npos) return ids;
    ids.push_back(tokenizer.eod());
    text.remove_prefix(at + marker.size());
  }
}

Result<std::string> ChatTemplate::render(std::span<const ChatMessage> messages,
                                         bool add_generation_prompt) const {
  using jinja::Value;
  jinja::List list;
  for (const ChatMessage& m : messages)
    list.push_back(
        Value::new_dict({{"role", Value::string(m.role)}, {"content", Value::string(m.content)}}));
  const jinja::Dict variables = {{"messages", Value::new_list(std::move(list))},
                                 {"add_generation_prompt", Value::boolean(add_generation_prompt)},
                                 {"bos_token", Value::string(bos_token_)},
                                 {"eos_token", Value::string(eos_token_)},
                                 {"tools", Value::none()}};
  return template_.render(variables);
}

Result<ChatTemplate> chat_template_for(const TokenizerOptions& tokenizer,
                                       const std::string& override_name_or_path) {
  Result<ChatTemplate> chosen = Status::internal("no template");
  if (!override_name_or_path.empty()) {
    const std::string& o = override_name_or_path;
    std::error_code ec;
    if (o == "chatml" || o == "llama3" || o == "default") {
      chosen = ChatTemplate::builtin(o);
    } else if (fs::is_directory(o, ec) || fs::path(o).extension() == ".json") {
      chosen = ChatTemplate::from_tokenizer_config(o);
    } else if (fs::exists(o, ec)) {
      Result<std::string> source = bpe::read_file(o, "chat template");
      if (!source) return source.status();
      chosen = ChatTemplate::from_source(*source, "chat template '" + o + "'", "", "");
    } else {
      return Status::invalid_argument(
          "--chat-template '" + o + "' is neither a built-in (chatml, llama3, default) nor a file");
    }
  } else if (tokenizer.type == "HuggingFaceTokenizer") {
    fs::path dir = tokenizer.model_file;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
    const fs::path config = dir / "tokenizer_config.json";
    if (fs::exists(config, ec)) {
      Result<std::string> text = bpe::read_file(config.string(), "tokenizer config");
      if (!text) return text.status();
      Result<json> parsed = bpe::parse_json(*text, "tokenizer config '" + config.string() + "'");
      if (!parsed) return parsed.status();
      if (parsed->is_object() && parsed->contains("chat_template"))
        chosen = ChatTemplate::from_tokenizer_config(config.string());
    }
  }
  if (!chosen) {
    if (!override_name_or_path.empty()) return chosen.status();
    chosen = ChatTemplate::builtin("default");
  }
  if (chosen && chosen->ends_turns_with_eod()) {
    Result<std::unique_ptr<Tokenizer>> t = make_tokenizer(tokenizer);
    if (!t) return t.status();
    if (Status s = chosen->bind_eod(**t); !s) return s;
  }
  return chosen;
}

}  // namespace lattice
