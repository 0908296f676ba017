// HuggingFaceTokenizer::load: tokenizer.json section by section, refusing what the tokenizer
// cannot reproduce (see hf_tokenizer.h) with the file and the setting named, and the end-of-
// document token from tokenizer_config.json.
#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/hf_tokenizer.h"
#include "data/unicode_nfc.h"

namespace lattice {

namespace {

using nlohmann::json;

// Hugging Face's ByteLevel regex (GPT-2's pattern), used when ByteLevel.use_regex is true.
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool flag(const json& object, const char* key, bool absent) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? absent : it->is_boolean() && it->get<bool>();
}
std::string text(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}
std::string type_of(const json& object) {
  return object.is_object() ? text(object, "type") : "";
}

Status refuse(const std::string& where, const std::string& what) {
  return Status::invalid_argument(where + ": " + what);
}

// A Split "String" pattern as a regex that matches exactly it.
std::string escaped(const std::string& literal) {
  std::string out;
  for (const char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<HuggingFaceTokenizer>> HuggingFaceTokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "tokenizer.json";
  if (!fs::exists(file, ec)) {
    return Status::io_error("--tokenizer-model '" + path + "': " +
                            (file.string() == path ? std::string("no such file")
                                                   : "no tokenizer.json in that directory"));
  }
  Result<std::string> content = bpe::read_file(file.string(), "tokenizer.json");
  if (!content) return content.status();
  const std::string where = "tokenizer.json '" + file.string() + "'";
  Result<json> parsed = bpe::parse_json(*content, where);
  if (!parsed) return parsed.status();
  const json& j = *parsed;
  if (!j.is_object()) return Status::corrupt(where + " does not hold a JSON object");

  std::unique_ptr<HuggingFaceTokenizer> t(new HuggingFaceTokenizer());
  const json none;
  auto section = [&](const char* key) -> const json& {
    const auto it = j.find(key);
    return it == j.end() ? none : *it;
  };
  if (Status s = t->read_normalizer(section("normalizer"), where); !s) return s;
  if (Status s = t->read_model(j, where); !s) return s;
  if (Status s = t->read_pre_tokenizer(section("pre_tokenizer"), where); !s) return s;
  if (Status s = t->read_post_processor(j, where); !s) return s;
  const json& decoder = section("decoder");
  const std::string decoder_type = type_of(decoder);
  bool byte_level_decoder = decoder_type == "ByteLevel" || decoder.is_null();
  if (decoder_type == "Sequence" && decoder.contains("decoders") && decoder["decoders"].is_array())
    byte_level_decoder = std::all_of(decoder["decoders"].begin(), decoder["decoders"].end(),
                                     [](const json& d) { return type_of(d) == "ByteLevel"; });
  if (!byte_level_decoder)
    return refuse(where, "decoder " + decoder.dump() + " is not supported (only ByteLevel)");
  if (Status s = t->read_eod(file.parent_path().string(), where); !s) return s;
  return t;
}

Status HuggingFaceTokenizer::read_normalizer(const json& normalizer, const std::string& where) {
  if (normalizer.is_null()) return Status::ok();
  const std::string type = type_of(normalizer);
  std::vector<json> parts = {normalizer};
  if (type == "Sequence" && normalizer.contains("normalizers") &&
      normalizer["normalizers"].is_array())
    parts.assign(normalizer["normalizers"].begin(), normalizer["normalizers"].end());
  for (const json& n : parts) {
    if (type_of(n) != "NFC")
      return refuse(where, "normalizer " + n.dump() + " is not supported (only NFC)");
    nfc_ = true;
  }
  return Status::ok();
}

Status HuggingFaceTokenizer::read_model(const json& file, const std::string& where) {
  if (!file.contains("model") || !file["model"].is_object())
    return Status::corrupt(where + " has no \"model\" object");
  const json& model = file["model"];
  if (type_of(model) != "BPE")
    return refuse(where, "model.type \"" + type_of(model) + "\" is not supported (only BPE)");
  if (flag(model, "byte_fallback", false))
    return refuse(where, "model.byte_fallback true is not supported (only byte-level BPE)");
  if (model.contains("dropout") && model["dropout"].is_number() &&
      model["dropout"].get<double>() > 0)
    return refuse(where, "model.dropout " + model["dropout"].dump() + " is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!text(model, key).empty())
      return refuse(where, std::string("model.") + key + " \"" + text(model, key) +
                               "\" is not supported (only null or \"\")");
  if (!model.contains("vocab") || !model["vocab"].is_object() || model["vocab"].empty())
    return Status::corrupt(where + ": model.vocab must be a non-empty object of token -> id");
  if (!model.contains("merges") || !model["merges"].is_array())
    return Status::corrupt(where + ": model.merges must be an array");
  const json& added = file.contains("added_tokens") ? file["added_tokens"] : json::array();
  if (!added.is_array()) return Status::corrupt(where + ": added_tokens must be an array");

  // The vocabulary's ids as the file gives them.
  std::unordered_map<std::string, int32_t> spelled;  // the vocabulary as the file spells it
  spelled.reserve(model["vocab"].size());
  int64_t max_id = -1;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX)
      return Status::corrupt(where + ": model.vocab token \"" + token + "\" has id " + id.dump());
    spelled.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
    max_id = std::max(max_id, id.get<int64_t>());
  }
  // Added tokens get their ids as Hugging Face's AddedVocabulary::add_tokens gives them (the
  // file's "id" is only checked there): an added token's text that is already a token keeps
  // that id, others follow the largest id so far (the vocabulary's size at first). For files
  // Hugging Face wrote, these are the file's ids.
  std::vector<AddedToken> added_tokens;
  std::unordered_map<std::string, int32_t> added_ids;  // content -> id
  int64_t max_added = -1;
  const int64_t model_size = static_cast<int64_t>(spelled.size());
  for (const json& a : added) {
    if (!a.is_object() || text(a, "content").empty())
      return Status::corrupt(where + ": added token " + a.dump() + " has no content");
    AddedToken token;
    token.content = text(a, "content");
    token.single_word = flag(a, "single_word", false);
    token.lstrip = flag(a, "lstrip", false);
    token.rstrip = flag(a, "rstrip", false);
    token.normalized = flag(a, "normalized", !flag(a, "special", false));
    int64_t id;
    if (const auto it = added_ids.find(token.content); it != added_ids.end()) {
      id = it->second;
    } else if (const auto v = spelled.find(token.content); v != spelled.end()) {
      id = v->second;
    } else {
      id = max_added < 0                                  ? model_size
           : (max_added >= model_size || model_size == 0) ? max_added + 1
                                                          : model_size;
    }
    if (id >= INT32_MAX) return Status::corrupt(where + ": too many added tokens");
    token.id = static_cast<int32_t>(id);
    added_ids[token.content] = token.id;
    max_added = std::max(max_added, id);
    max_id = std::max(max_id, id);
    added_tokens.push_back(std::move(token));
  }

  std::vector<std::string> tokens(max_id + 1);  // (V) bytes of each id
  std::vector<bool> taken(max_id + 1, false);
  std::string bytes;
  for (const auto& [token, id] : spelled) {
    if (taken[id])
      return Status::corrupt(where + ": model.vocab gives id " + std::to_string(id) + " twice");
    taken[id] = true;
    // A token outside the byte alphabet cannot come out of encode(); decode() gives its text,
    // as Hugging Face's ByteLevel decoder does.
    if (bpe::unspell(token, bytes)) {
      tokens[id] = bytes;
      vocabulary_.emplace(bytes, id);
    } else {
      tokens[id] = token;
    }
  }
  for (AddedToken& token : added_tokens) {
    tokens[token.id] = token.content;  // as written in the text, which decode() gives back
    if (token.normalized) {
      std::string normalized;
      if (nfc_ && unicode::to_nfc(token.content, normalized)) token.content = normalized;
      normalized_added_.add(std::move(token));
    } else {
      raw_added_.add(std::move(token));
    }
  }
  core_.set_tokens(tokens);

  int32_t byte_ids[256];
  for (int b = 0; b < 256; b++) {
    const std::string spelling = bpe::spell(std::string(1, static_cast<char>(b)));
    const auto it = spelled.find(spelling);
    if (it == spelled.end())
      return Status::corrupt(where + ": model.vocab lacks the token of byte " + std::to_string(b) +
                             " (\"" + spelling + "\"), which byte-level BPE needs");
    byte_ids[b] = it->second;
  }
  core_.set_byte_ids(byte_ids);

  // Merges, "left right" or ["left", "right"], highest priority first.
  const json& merges = model["merges"];
  core_.reserve_merges(merges.size());
  for (size_t rank = 0; rank < merges.size(); rank++) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space != std::string::npos && s.find(' ', space + 1) == std::string::npos)
        left = s.substr(0, space), right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    }
    auto at = [&] { return where + ": model.merges[" + std::to_string(rank) + "] " + m.dump(); };
    if (left.empty() || right.empty())
      return Status::corrupt(at() + " is not two tokens (\"a b\" or [\"a\", \"b\"])");
    const auto l = spelled.find(left), r = spelled.find(right), made = spelled.find(left + right);
    if (l == spelled.end() || r == spelled.end() || made == spelled.end()) {
      const std::string missing = l == spelled.end()   ? left
                                  : r == spelled.end() ? right
                                                       : left + right;
      return Status::corrupt(at() + ": \"" + missing + "\" is not in model.vocab");
    }
    core_.add_merge(l->second, r->second, static_cast<uint32_t>(rank), made->second);
  }
  if (flag(model, "ignore_merges", false)) core_.set_whole_words(&vocabulary_);
  return Status::ok();
}

Status HuggingFaceTokenizer::read_pre_tokenizer(const json& pre, const std::string& where) {
  std::vector<json> parts = {pre};
  if (type_of(pre) == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array())
    parts.assign(pre["pretokenizers"].begin(), pre["pretokenizers"].end());
  for (const json& p : parts) {
    const std::string type = type_of(p);
    const std::string here = where + ": pre_tokenizer " + type;
    if (!steps_.empty() && steps_.back().byte_level)
      return refuse(where, "pre_tokenizer ByteLevel must come last (" + type + " follows it)");
    PreTokenizeStep step;
    std::string pattern;
    if (type == "ByteLevel") {
      step.byte_level = true;
      step.add_prefix_space = flag(p, "add_prefix_space", true);
      if (flag(p, "use_regex", true)) pattern = kByteLevelPattern;
    } else if (type == "Split") {
      const json pat = p.contains("pattern") ? p["pattern"] : json();
      if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
        pattern = pat["Regex"].get<std::string>();
      } else if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
        pattern = escaped(pat["String"].get<std::string>());
      } else {
        return Status::corrupt(here + " has no pattern {\"Regex\": ...} or {\"String\": ...}");
      }
      if (text(p, "behavior") != "Isolated")
        return refuse(where, "pre_tokenizer Split behavior \"" + text(p, "behavior") +
                                 "\" is not supported (only Isolated)");
      if (flag(p, "invert", false))
        return refuse(where, "pre_tokenizer Split invert true is not supported");
    } else {
      return refuse(where, "pre_tokenizer " + (type.empty() ? p.dump() : type) +
                               " is not supported (only Split and ByteLevel)");
    }
    if (!pattern.empty()) {
      Result<hf::Regex> re = hf::Regex::compile(pattern, unicode::hf_classes());
      if (!re) return refuse(here + " pattern " + json(pattern).dump(), re.status().message());
      step.regex = std::move(*re);
    }
    steps_.push_back(std::move(step));
  }
  if (steps_.empty() || !steps_.back().byte_level)
    return refuse(where,
                  "pre_tokenizer must end with ByteLevel (byte-level BPE), got " + pre.dump());
  return Status::ok();
}

Status HuggingFaceTokenizer::read_post_processor(const json& file, const std::string& where) {
  const json post = file.contains("post_processor") ? file["post_processor"] : json();
  std::vector<json> parts = {post};
  if (type_of(post) == "Sequence" && post.contains("processors") && post["processors"].is_array())
    parts.assign(post["processors"].begin(), post["processors"].end());
  for (const json& p : parts) {
    const std::string type = type_of(p);
    if (p.is_null() || type == "ByteLevel") continue;  // offsets only
    if (type != "TemplateProcessing")
      return refuse(where, "post_processor " + (type.empty() ? p.dump() : type) +
                               " is not supported (only TemplateProcessing and ByteLevel)");
    // "single": [{"SpecialToken": {"id": name}}, {"Sequence": {"id": "A"}}, ...]
    std::vector<int32_t> before, after;
    bool text_seen = false;
    const json single = p.contains("single") ? p["single"] : json();
    for (const json& item : single.is_array() ? single : json::array()) {
      if (item.contains("Sequence")) {
        text_seen = true;
        continue;
      }
      const std::string name =
          item.contains("SpecialToken") ? text(item["SpecialToken"], "id") : std::string();
      const json* special = nullptr;
      if (p.contains("special_tokens") && p["special_tokens"].contains(name))
        special = &p["special_tokens"][name];
      if (!special || !special->contains("ids") || !(*special)["ids"].is_array())
        return Status::corrupt(where + ": post_processor template item " + item.dump() +
                               " names no entry of special_tokens");
      for (const json& id : (*special)["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size())
          return Status::corrupt(where + ": post_processor special token \"" + name + "\" has id " +
                                 id.dump() + ", not a token");
        (text_seen ? after : before).push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    }
    if (!after.empty() || before.size() > 1)
      return refuse(where, "post_processor TemplateProcessing " + single.dump() +
                               " is not supported (only one special token before the text)");
    if (before.size() == 1) bos_ = before[0];
  }
  return Status::ok();
}

Status HuggingFaceTokenizer::read_eod(const std::string& directory, const std::string& where) {
  // transformers' eos_token: tokenizer_config.json, else special_tokens_map.json.
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string path = (std::filesystem::path(directory) / name).string();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    Result<std::string> content = bpe::read_file(path, name);
    if (!content) return content.status();
    const std::string config_where = std::string(name) + " '" + path + "'";
    Result<json> config = bpe::parse_json(*content, config_where);
    if (!config) return config.status();
    if (!config->is_object() || !config->contains("eos_token")) continue;
    const json& eos = (*config)["eos_token"];
    const std::string token = eos.is_object()   ? text(eos, "content")
                              : eos.is_string() ? eos.get<std::string>()
                                                : "";
    if (token.empty()) continue;
    const std::optional<int32_t> id = token_id(token);
    if (!id)
      return Status::corrupt(config_where + ": eos_token \"" + token + "\" is not a token of " +
                             where);
    eod_ = *id;
    return Status::ok();
  }
  for (const char* token : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
    if (const std::optional<int32_t> id = token_id(token)) {
      eod_ = *id;
      return Status::ok();
    }
  }
  return Status::corrupt(where +
                         ": no end-of-document token: no eos_token in a tokenizer_config.json "
                         "beside it, and none of <|endoftext|>, <|end_of_text|>, </s> is a token");
}

}  // namespace lattice
