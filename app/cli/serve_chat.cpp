// Chat completions for `lattice serve` (serve_chat.h).
#include "serve_chat.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <span>

#include "data/chat_template.h"
#include "infer/prompt_images.h"

namespace lattice::cli {

namespace {

using json = nlohmann::json;

ApiCall failed(std::string message, std::string param) {
  ApiCall c;
  c.error = ApiError{400, std::move(message), std::move(param), "invalid_request_error", ""};
  return c;
}

// The messages as ChatTurns, or the first problem (naming the message and field). A user
// message's image parts become `<image>` in its text, their URLs appended to `images` in order.
std::optional<std::string> read_messages(const json& j, std::vector<ChatTurn>& out,
                                         std::vector<std::pair<std::string, std::string>>& images) {
  const auto m = j.find("messages");
  if (m == j.end() || m->is_null()) return "messages is required (a list of {role, content})";
  if (!m->is_array() || m->empty()) return "messages must be a non-empty list of {role, content}";
  for (size_t i = 0; i < m->size(); i++) {
    const json& msg = (*m)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return at + " must be an object {role, content}";
    const auto role = msg.find("role");
    if (role == msg.end() || !role->is_string()) return at + ".role must be a string";
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant")
      return at + ".role must be \"system\", \"user\" or \"assistant\", not \"" + r + "\"";
    const auto content = msg.find("content");
    std::string text;
    if (content != msg.end() && content->is_string()) {
      text = content->get<std::string>();
    } else if (content != msg.end() && content->is_array()) {
      // Content parts: text parts joined, image parts (user messages) as `<image>`.
      for (size_t p = 0; p < content->size(); p++) {
        const json& part = (*content)[p];
        const std::string where = at + ".content[" + std::to_string(p) + "]";
        if (r == "user" && part.is_object() && part.value("type", "") == "image_url") {
          const auto u = part.find("image_url");
          const json* url = u == part.end()                        ? nullptr
                            : u->is_string()                       ? &*u
                            : u->is_object() && u->contains("url") ? &(*u)["url"]
                                                                   : nullptr;
          if (!url || !url->is_string())
            return where +
                   " must be {\"type\": \"image_url\", \"image_url\": {\"url\": "
                   "\"data:image/png;base64,...\"}}";
          text += kImageMarker;
          images.emplace_back(where, url->get<std::string>());
          continue;
        }
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          return where +
                 " must be {\"type\": \"text\", \"text\": \"...\"} or, in a user message, "
                 "{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:...\"}}";
        text += part["text"].get<std::string>();
      }
    } else {
      return at + ".content must be a string or a list of text parts";
    }
    out.push_back({r, std::move(text)});
  }
  return std::nullopt;
}

// A token's text as byte values (it may hold part of a UTF-8 character).
std::vector<int> bytes_of(const std::string& piece) {
  std::vector<int> out;
  for (char c : piece) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// Chat's logprobs entry of one token: {token, logprob, bytes, top_logprobs: [...]}.
json chat_token_logprob(int32_t id, float logprob, const std::vector<TokenLogprob>* top,
                        const Tokenizer& tokenizer) {
  auto entry = [&](int32_t t, float lp) {
    const std::string piece = tokenizer.decode(std::span<const int32_t>(&t, 1));
    return json{{"token", piece}, {"logprob", lp}, {"bytes", bytes_of(piece)}};
  };
  json e = entry(id, logprob);
  json alternatives = json::array();
  if (top)
    for (const TokenLogprob& t : *top) alternatives.push_back(entry(t.token, t.logprob));
  e["top_logprobs"] = std::move(alternatives);
  return e;
}

const char* model_name(const ApiCall& call) {
  return call.model.empty() ? "lattice" : call.model.c_str();
}

}  // namespace

Result<ChatPrompter> chat_prompter_for(const TokenizerOptions& options, const Tokenizer& tokenizer,
                                       const std::string& override_template,
                                       const ModelConfig* model) {
  Result<ChatTemplate> made = chat_template_for(options, override_template);
  if (!made) return made.status();
  auto chat_template = std::make_shared<const ChatTemplate>(std::move(*made));
  ChatPrompter p;
  for (const std::string& s : chat_template->end_of_turn())
    if (!s.empty() && s != ChatTemplate::kEodMarker) p.end_of_turn.push_back(s);
  p.encode = [chat_template, &tokenizer,
              model](const std::vector<ChatTurn>& turns) -> Result<std::vector<int32_t>> {
    std::vector<ChatMessage> messages;
    for (const ChatTurn& t : turns) messages.push_back({t.role, t.content});
    Result<std::string> text = chat_template->render(messages, /*add_generation_prompt=*/true);
    if (!text) return text.status();
    // The template writes any BOS itself (Hugging Face's apply_chat_template, whose text is
    // encoded without special tokens added); its EOD marker becomes the EOD id. A
    // vision-language model's `<image>` markers become its placeholder ids.
    if (!model || !model->has_vision()) return chat_template->encode(tokenizer, *text);
    return expand_image_markers(*model, *text, [&](std::string_view piece, bool) {
      return chat_template->encode(tokenizer, std::string(piece));
    });
  };
  return p;
}

ApiCall parse_chat_completions(const std::string& body, const Generator& generator,
                               uint64_t random_seed, const ChatPrompter& prompter) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return failed("the body is not a JSON object", "");
  std::vector<ChatTurn> turns;
  std::vector<std::pair<std::string, std::string>> image_urls;  // (field, url)
  if (std::optional<std::string> problem = read_messages(j, turns, image_urls))
    return failed(*problem, "messages");
  // Images: decoded from their data URLs (the server fetches nothing), as --image's files.
  std::vector<float> images;
  const ModelConfig& model = generator.config();
  if (!image_urls.empty()) {
    if (Status s = check_image_model(model, image_urls[0].first); !s)
      return failed(s.message(), "messages");
    for (const auto& [where, url] : image_urls) {
      Result<std::vector<uint8_t>> bytes = data_url_bytes(url);
      if (!bytes) return failed(where + ": " + bytes.status().message(), "messages");
      Result<RgbImage> image = decode_image(bytes->data(), bytes->size(), where);
      if (!image) return failed(image.status().message(), "messages");
      append_prompt_image(model, *image, images);
    }
  }
  RequestFields f(j, /*null_is_absent=*/true);
  ApiCall call;
  call.model = f.string("model").value_or("");
  GenerationRequest base;
  base.tokens_to_generate = INT32_MAX;  // OpenAI: until the context is full
  read_openai_sampling(f, base, random_seed,
                       f.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens");
  call.stream = f.boolean("stream").value_or(false);
  if (f.has("stream_options")) {
    const json& o = j["stream_options"];
    if (!call.stream)
      f.fail("stream_options", "stream_options needs stream true");
    else if (!o.is_object())
      f.fail("stream_options", "stream_options must be an object");
    else if (o.contains("include_usage") && !o["include_usage"].is_boolean())
      f.fail("stream_options", "stream_options.include_usage must be true or false");
    else
      call.include_usage = o.value("include_usage", false);
  }
  const bool logprobs = f.boolean("logprobs").value_or(false);
  const int top = static_cast<int>(f.integer("top_logprobs", 0, 20).value_or(0));
  if (f.ok() && f.has("top_logprobs") && !logprobs)
    f.fail("top_logprobs", "top_logprobs needs logprobs true");
  if (f.ok() && call.stream && top > 0)
    f.fail("top_logprobs",
           "top_logprobs are not streamed; ask with stream false, or top_logprobs 0 for the "
           "chosen tokens' log-probabilities");
  if (!f.ok()) {
    call.error = f.error();
    return call;
  }
  Result<std::vector<int32_t>> prompt = prompter.encode(turns);
  if (!prompt) return failed(prompt.status().message(), "messages");
  call.logprobs = logprobs ? top : -1;
  base.logprobs = logprobs;
  base.top_logprobs = top;
  base.prompt = std::move(*prompt);
  base.images = std::move(images);
  base.stop.insert(base.stop.end(), prompter.end_of_turn.begin(), prompter.end_of_turn.end());
  if (Status s = generator.check(base); !s)
    return failed("messages: the rendered conversation: " + s.message(), "messages");
  call.requests.push_back(std::move(base));
  call.ok = true;
  return call;
}

std::string chat_response(const ApiCall& call, const std::vector<GenerationResult>& results,
                          const Tokenizer& tokenizer, const std::string& id, int64_t created) {
  json choices = json::array();
  for (size_t i = 0; i < results.size(); i++) {
    const GenerationResult& res = results[i];
    json choice = {{"index", i},
                   {"message", {{"role", "assistant"}, {"content", res.text}}},
                   {"finish_reason", finish_reason(res)}};
    if (call.logprobs >= 0) {
      json content = json::array();
      for (size_t k = 0; k < res.tokens.size(); k++) {
        if (res.finish == FinishReason::kEod && k + 1 == res.tokens.size()) break;
        content.push_back(chat_token_logprob(
            res.tokens[k], res.logprobs.at(k),
            res.top_logprobs.empty() ? nullptr : &res.top_logprobs[k], tokenizer));
      }
      choice["logprobs"] = {{"content", content}};
    } else {
      choice["logprobs"] = nullptr;
    }
    choices.push_back(std::move(choice));
  }
  return dump_json({{"id", id},
                    {"object", "chat.completion"},
                    {"created", created},
                    {"model", model_name(call)},
                    {"choices", choices},
                    {"usage", usage_json(call, results)}});
}

ChatStream::ChatStream(const ApiCall& call, const Tokenizer& tokenizer, int32_t eod, std::string id,
                       int64_t created)
    : call_(call),
      tokenizer_(tokenizer),
      eod_(eod),
      id_(std::move(id)),
      created_(created),
      started_(call.requests.size(), false) {
  for (const GenerationRequest& r : call.requests)
    texts_.emplace_back(
        [&tokenizer](const std::vector<int32_t>& ids) { return tokenizer.decode(ids); }, r.stop);
}

std::string ChatStream::chunk(size_t index, const json& delta, const json& logprobs,
                              const char* finish_reason) {
  std::string out;
  if (!started_[index]) {  // OpenAI's first chunk names the role
    started_[index] = true;
    out += chunk(index, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
  }
  const json choice = {{"index", index},
                       {"delta", delta},
                       {"logprobs", logprobs},
                       {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
  const json c = {{"id", id_},
                  {"object", "chat.completion.chunk"},
                  {"created", created_},
                  {"model", model_name(call_)},
                  {"choices", json::array({choice})}};
  return out + "data: " + dump_json(c) + "\n\n";
}

std::string ChatStream::token(size_t index, int32_t token, float logprob) {
  const GenerationRequest& req = call_.requests.at(index);
  if (texts_[index].stopped() || (req.stop_at_eod && token == eod_)) return {};
  const std::string text = texts_[index].push(token);
  if (call_.logprobs < 0)
    return text.empty() ? std::string() : chunk(index, {{"content", text}}, nullptr, nullptr);
  const json lp = {
      {"content", json::array({chat_token_logprob(token, logprob, nullptr, tokenizer_)})}};
  return chunk(index, {{"content", text}}, lp, nullptr);
}

std::string ChatStream::finish(const std::vector<GenerationResult>& results) {
  std::string out;
  for (size_t i = 0; i < results.size() && i < texts_.size(); i++) {
    const std::string rest = texts_[i].finish(results[i].text);
    const json delta = rest.empty() ? json::object() : json{{"content", rest}};
    out += chunk(i, delta, nullptr, finish_reason(results[i]));
  }
  if (call_.include_usage) {
    const json c = {{"id", id_},
                    {"object", "chat.completion.chunk"},
                    {"created", created_},
                    {"model", model_name(call_)},
                    {"choices", json::array()},
                    {"usage", usage_json(call_, results)}};
    out += "data: " + dump_json(c) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

}  // namespace lattice::cli
