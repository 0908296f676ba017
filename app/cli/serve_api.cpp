// Request parsing and response writing for `lattice serve` (serve_api.h).
#include "serve_api.h"

#include <cmath>
#include <span>
#include <nlohmann/json.hpp>

namespace lattice::cli {

namespace {

using json = nlohmann::json;

std::string dump(const json& j) {
  // Single tokens of a byte-level BPE can be part of a UTF-8 character: replace, not throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiCall failed(std::string message) {
  ApiCall c;
  c.error = std::move(message);
  return c;
}

// Encodes and checks each prompt; fills call.requests from `base`.
bool add_prompts(ApiCall& call, const std::vector<std::string>& prompts,
                 const GenerationRequest& base, const Tokenizer& tokenizer,
                 const Generator& generator) {
  for (size_t i = 0; i < prompts.size(); i++) {
    GenerationRequest r = base;
    r.prompt = tokenizer.encode(prompts[i]);
    if (Status s = generator.check(r); !s) {
      call.error = "prompt " + std::to_string(i) + ": " + s.message();
      return false;
    }
    call.requests.push_back(std::move(r));
  }
  return true;
}

const char* finish_reason(const GenerationResult& res) {
  return res.finish == FinishReason::kLength ? "length" : "stop";
}

bool is_int(const json& v) {
  return v.is_number_integer() || v.is_number_unsigned();
}

}  // namespace

ApiCall parse_megatron_api(const std::string& body, const Tokenizer& tokenizer,
                           const Generator& generator, uint64_t random_seed) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return failed("the body is not a JSON object");
  if (!j.contains("prompts")) return failed("prompts argument required");
  const json& p = j["prompts"];
  if (!p.is_array()) return failed("prompts is not a list of strings");
  if (p.empty()) return failed("prompts is empty");
  if (p.size() > kMaxPrompts)
    return failed("Maximum number of prompts is " + std::to_string(kMaxPrompts));
  std::vector<std::string> prompts;
  for (const json& s : p) {
    if (!s.is_string()) return failed("prompts is not a list of strings");
    prompts.push_back(s.get<std::string>());
  }
  GenerationRequest base;
  base.tokens_to_generate = 64;
  if (j.contains("tokens_to_generate")) {
    const json& v = j["tokens_to_generate"];
    if (!is_int(v) || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 20))
      return failed("tokens_to_generate must be an integer greater than or equal to 0");
    base.tokens_to_generate = v.get<int>();
  }
  bool logprobs = false;
  if (j.contains("logprobs")) {
    if (!j["logprobs"].is_boolean()) return failed("logprobs must be a boolean value");
    logprobs = j["logprobs"].get<bool>();
  }
  if (base.tokens_to_generate == 0 && !logprobs)
    return failed("tokens_to_generate=0 implies logprobs should be True");
  base.sampling.temperature = 1.0f;
  if (j.contains("temperature")) {
    const json& v = j["temperature"];
    if (!v.is_number())
      return failed(
          "temperature must be a positive number less than or "
          "equal to 100.0");
    const double t = v.get<double>();
    if (!(t > 0.0 && t <= 100.0))
      return failed("temperature must be a positive number less than or equal to 100.0");
    base.sampling.temperature = static_cast<float>(t);
  }
  if (j.contains("top_k")) {
    const json& v = j["top_k"];
    if (!is_int(v) || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000)
      return failed(
          "top_k must be an integer equal to or greater than 0 and less than or "
          "equal to 1000");
    base.sampling.top_k = v.get<int>();
  }
  if (j.contains("top_p")) {
    const json& v = j["top_p"];
    if (!v.is_number()) return failed("top_p must be a positive float less than or equal to 1.0");
    const double tp = v.get<double>();
    if (!(tp >= 0.0 && tp <= 1.0)) return failed("top_p must be less than or equal to 1.0");
    if (tp > 0.0 && base.sampling.top_k > 0)
      return failed("cannot set both top-k and top-p samplings.");
    base.sampling.top_p = static_cast<float>(tp);
  }
  base.sampling.seed = random_seed;
  if (j.contains("random_seed")) {
    const json& v = j["random_seed"];
    if (!is_int(v)) return failed("random_seed must be integer");
    if (v.get<int64_t>() < 0) return failed("random_seed must be a positive integer");
    base.sampling.seed = v.get<uint64_t>();
  }
  base.prompt_logprobs = logprobs;
  base.logprobs = logprobs;
  ApiCall call;
  call.logprobs = logprobs ? 1 : -1;
  for (const std::string& s : prompts)
    if (s.empty()) return failed("prompts must not be empty (add_BOS is not supported)");
  if (!add_prompts(call, prompts, base, tokenizer, generator)) return call;
  call.ok = true;
  return call;
}

ApiCall parse_completions(const std::string& body, const Tokenizer& tokenizer,
                          const Generator& generator, uint64_t random_seed) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return failed("the body is not a JSON object");
  ApiCall call;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return failed("model must be a string");
    call.model = j["model"].get<std::string>();
  }
  if (!j.contains("prompt")) return failed("prompt is required (a string or a list of strings)");
  std::vector<std::string> prompts;
  const json& p = j["prompt"];
  if (p.is_string()) {
    prompts.push_back(p.get<std::string>());
  } else if (p.is_array()) {
    if (p.empty()) return failed("prompt is an empty list");
    if (p.size() > kMaxPrompts)
      return failed("prompt has " + std::to_string(p.size()) + " entries; at most " +
                    std::to_string(kMaxPrompts));
    for (const json& s : p) {
      if (!s.is_string()) return failed("prompt must be a string or a list of strings");
      prompts.push_back(s.get<std::string>());
    }
  } else {
    return failed("prompt must be a string or a list of strings");
  }
  GenerationRequest base;
  base.tokens_to_generate = 16;
  if (j.contains("max_tokens") && !j["max_tokens"].is_null()) {
    const json& v = j["max_tokens"];
    if (!is_int(v) || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 20))
      return failed("max_tokens must be an integer >= 0");
    base.tokens_to_generate = v.get<int>();
  }
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    const json& v = j["temperature"];
    if (!v.is_number() || !(v.get<double>() >= 0.0 && v.get<double>() <= 2.0))
      return failed("temperature must be a number between 0 and 2");
    base.sampling.temperature = static_cast<float>(v.get<double>());
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    const json& v = j["top_p"];
    if (!v.is_number() || !(v.get<double>() > 0.0 && v.get<double>() <= 1.0))
      return failed("top_p must be a number in (0, 1]");
    base.sampling.top_p = v.get<double>() >= 1.0 ? 0.0f : static_cast<float>(v.get<double>());
  }
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    const json& v = j["top_k"];
    if (!is_int(v) || v.get<int64_t>() < 0) return failed("top_k must be an integer >= 0");
    base.sampling.top_k = v.get<int>();
  }
  if (j.contains("n") && !j["n"].is_null()) {
    if (!is_int(j["n"]) || j["n"].get<int64_t>() != 1) return failed("n must be 1");
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) return failed("stream must be a boolean");
    call.stream = j["stream"].get<bool>();
  }
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    const json& v = j["logprobs"];
    if (!is_int(v) || v.get<int64_t>() < 0 || v.get<int64_t>() > 5)
      return failed("logprobs must be an integer between 0 and 5");
    call.logprobs = v.get<int>();
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& v = j["stop"];
    if (v.is_string()) {
      base.stop.push_back(v.get<std::string>());
    } else if (v.is_array() && v.size() <= 4) {
      for (const json& s : v) {
        if (!s.is_string()) return failed("stop must be a string or a list of up to 4 strings");
        base.stop.push_back(s.get<std::string>());
      }
    } else {
      return failed("stop must be a string or a list of up to 4 strings");
    }
    for (const std::string& s : base.stop)
      if (s.empty()) return failed("stop strings must not be empty");
  }
  base.sampling.seed = random_seed;
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!is_int(j["seed"])) return failed("seed must be an integer");
    base.sampling.seed = static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  base.logprobs = call.logprobs >= 0;
  for (const std::string& s : prompts)
    if (s.empty()) return failed("prompt must not be empty");
  if (!add_prompts(call, prompts, base, tokenizer, generator)) return call;
  call.ok = true;
  return call;
}

std::string megatron_response(const ApiCall& call, const std::vector<GenerationResult>& results,
                              const Tokenizer& tokenizer) {
  json text = json::array(), segments = json::array(), logprobs = json::array();
  for (size_t i = 0; i < results.size(); i++) {
    const GenerationRequest& req = call.requests[i];
    const GenerationResult& res = results[i];
    std::vector<int32_t> ids = req.prompt;
    size_t generated = res.tokens.size();
    if (res.finish == FinishReason::kEod && generated > 0) generated--;  // EOD not shown
    ids.insert(ids.end(), res.tokens.begin(), res.tokens.begin() + generated);
    text.push_back(tokenizer.decode(ids));
    json seg = json::array();
    for (int32_t id : ids) seg.push_back(tokenizer.decode(std::span<const int32_t>(&id, 1)));
    segments.push_back(std::move(seg));
    if (call.logprobs > 0) {
      // Megatron: the log-probability of every token after the first, prompt included.
      json lp = json::array();
      for (float v : res.prompt_logprobs) lp.push_back(v);
      for (size_t k = 0; k < generated; k++) lp.push_back(res.logprobs[k]);
      logprobs.push_back(std::move(lp));
    }
  }
  json out = {{"text", text}, {"segments", segments}};
  out["logprobs"] = call.logprobs > 0 ? logprobs : json(nullptr);
  return dump(out);
}

std::string completions_response(const ApiCall& call, const std::vector<GenerationResult>& results,
                                 const Tokenizer& tokenizer, const std::string& id,
                                 int64_t created) {
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < results.size(); i++) {
    const GenerationResult& res = results[i];
    prompt_tokens += static_cast<int64_t>(call.requests[i].prompt.size());
    completion_tokens += static_cast<int64_t>(res.tokens.size());
    json choice = {{"text", res.text}, {"index", i}};
    choice["finish_reason"] = finish_reason(res);
    if (call.logprobs >= 0) {
      json tokens = json::array(), token_logprobs = json::array(), offsets = json::array();
      size_t offset = 0;
      for (size_t k = 0; k < res.tokens.size(); k++) {
        if (res.finish == FinishReason::kEod && k + 1 == res.tokens.size()) break;
        const std::string piece = tokenizer.decode(std::span<const int32_t>(&res.tokens[k], 1));
        tokens.push_back(piece);
        token_logprobs.push_back(res.logprobs[k]);
        offsets.push_back(offset);
        offset += piece.size();
      }
      choice["logprobs"] = {{"tokens", tokens},
                            {"token_logprobs", token_logprobs},
                            {"top_logprobs", nullptr},
                            {"text_offset", offsets}};
    } else {
      choice["logprobs"] = nullptr;
    }
    choices.push_back(std::move(choice));
  }
  const json out = {{"id", id},
                    {"object", "text_completion"},
                    {"created", created},
                    {"model", call.model.empty() ? "lattice" : call.model},
                    {"choices", choices},
                    {"usage",
                     {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens}}}};
  return dump(out);
}

std::string megatron_error(const std::string& message) {
  return dump(json{{"message", message}});
}

std::string openai_error(const std::string& message) {
  return dump(json{{"error",
                    {{"message", message},
                     {"type", "invalid_request_error"},
                     {"param", nullptr},
                     {"code", nullptr}}},
                   {"message", message}});
}

CompletionStream::CompletionStream(const ApiCall& call, const Tokenizer& tokenizer, int32_t eod,
                                   std::string id, int64_t created)
    : call_(call), tokenizer_(tokenizer), eod_(eod), id_(std::move(id)), created_(created),
      offsets_(call.requests.size(), 0) {
  // The text as the generator writes it (GenerationResult::text): the generated tokens decoded
  // alone, cut at the first stop string.
  for (const GenerationRequest& r : call.requests)
    texts_.emplace_back(
        [&tokenizer](const std::vector<int32_t>& ids) { return tokenizer.decode(ids); }, r.stop);
}

std::string CompletionStream::token(size_t index, int32_t token, float logprob) {
  const GenerationRequest& req = call_.requests.at(index);
  if (texts_[index].stopped() || (req.stop_at_eod && token == eod_)) return {};
  const std::string text = texts_[index].push(token);
  if (call_.logprobs < 0)
    return text.empty() ? std::string() : event(index, text, nullptr, 0, nullptr);
  const std::string piece = tokenizer_.decode(std::span<const int32_t>(&token, 1));
  std::string e = event(index, text, &piece, logprob, nullptr);
  offsets_[index] += piece.size();
  return e;
}

std::string CompletionStream::finish(const std::vector<GenerationResult>& results) {
  std::string out;
  for (size_t i = 0; i < results.size() && i < texts_.size(); i++)
    out += event(i, texts_[i].finish(results[i].text), nullptr, 0, finish_reason(results[i]));
  return out + "data: [DONE]\n\n";
}

std::string CompletionStream::error(const std::string& message) {
  return "data: " + openai_error(message) + "\n\ndata: [DONE]\n\n";
}

std::string CompletionStream::event(size_t index, const std::string& text,
                                    const std::string* piece, float logprob,
                                    const char* finish_reason) {
  json choice = {{"text", text}, {"index", index}};
  if (piece)
    choice["logprobs"] = {{"tokens", json::array({*piece})},
                          {"token_logprobs", json::array({logprob})},
                          {"top_logprobs", nullptr},
                          {"text_offset", json::array({offsets_[index]})}};
  else
    choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  const json chunk = {{"id", id_},
                      {"object", "text_completion"},
                      {"created", created_},
                      {"model", call_.model.empty() ? "lattice" : call_.model},
                      {"choices", json::array({choice})}};
  return "data: " + dump(chunk) + "\n\n";
}

}  // namespace lattice::cli
