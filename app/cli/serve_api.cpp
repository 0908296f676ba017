// Request parsing and response writing for `lattice serve` (serve_api.h).
#include "serve_api.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <span>

namespace lattice::cli {

namespace {

using json = nlohmann::json;

std::string dump(const json& j) {
  // Single tokens of a byte-level BPE can be part of a UTF-8 character: replace, not throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiCall failed(ApiError error) {
  ApiCall c;
  c.error = std::move(error);
  return c;
}

ApiCall failed(const RequestFields& fields) {
  return failed(fields.error());
}

ApiCall not_an_object() {
  return failed(ApiError{400, "the body is not a JSON object", "", "invalid_request_error", ""});
}

// Encodes and checks each prompt; fills call.requests from `base`. `field`: the prompts' name.
bool add_prompts(ApiCall& call, const std::vector<std::string>& prompts,
                 const GenerationRequest& base, const Tokenizer& tokenizer,
                 const Generator& generator, const char* field) {
  for (size_t i = 0; i < prompts.size(); i++) {
    GenerationRequest r = base;
    r.prompt = tokenize_with_bos(tokenizer, prompts[i]);  // as Megatron's tokenize()
    if (Status s = generator.check(r); !s) {
      call.error = ApiError{400, std::string(field) + " " + std::to_string(i) + ": " + s.message(),
                            field, "invalid_request_error", ""};
      return false;
    }
    call.requests.push_back(std::move(r));
  }
  return true;
}

const char* finish_reason(const GenerationResult& res) {
  return res.finish == FinishReason::kLength ? "length" : "stop";
}

constexpr int64_t kIntMax = INT32_MAX;  // counts that become an int
constexpr double kAnyNumber = 1e300;

}  // namespace

ApiCall parse_megatron_api(const std::string& body, const Tokenizer& tokenizer,
                           const Generator& generator, uint64_t random_seed) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return not_an_object();
  // Megatron's text_generation_server.py: null is a wrong type like any other.
  RequestFields f(j, /*null_is_absent=*/false);
  if (!f.has("prompts")) f.fail("prompts", "prompts argument required");
  std::vector<std::string> prompts;
  if (f.ok()) {
    const json& p = j["prompts"];
    if (!p.is_array())
      f.fail("prompts", "prompts is not a list of strings");
    else if (p.empty())
      f.fail("prompts", "prompts is empty");
    else if (p.size() > kMaxPrompts)
      f.fail("prompts", "Maximum number of prompts is " + std::to_string(kMaxPrompts));
    for (size_t i = 0; f.ok() && i < p.size(); i++) {
      if (!p[i].is_string())
        f.fail("prompts", "prompts is not a list of strings");
      else if (p[i].get_ref<const std::string&>().empty())
        f.fail("prompts", "prompts must not be empty (add_BOS is not supported)");
      else
        prompts.push_back(p[i].get<std::string>());
    }
  }
  GenerationRequest base;
  base.tokens_to_generate =
      static_cast<int>(f.integer("tokens_to_generate", 0, kIntMax).value_or(64));
  const bool logprobs = f.boolean("logprobs").value_or(false);
  if (f.ok() && base.tokens_to_generate == 0 && !logprobs)
    f.fail("tokens_to_generate", "tokens_to_generate=0 implies logprobs should be True");
  base.sampling.temperature =
      static_cast<float>(f.number("temperature", {0.0, false}, {100.0, true}).value_or(1.0));
  base.sampling.top_k = static_cast<int>(f.integer("top_k", 0, 1000).value_or(0));
  base.sampling.top_p = static_cast<float>(f.number("top_p", {0.0}, {1.0}).value_or(0.0));
  if (f.ok() && base.sampling.top_p > 0.0f && base.sampling.top_k > 0)
    f.fail("top_p", "cannot set both top-k and top-p samplings.");
  base.sampling.seed = static_cast<uint64_t>(
      f.integer("random_seed", 0, INT64_MAX).value_or(static_cast<int64_t>(random_seed)));
  // Megatron's other fields: those that would change the answer are refused unless off; the
  // rest (no_log; stop_token and length_penalty, which only beam search reads) are checked.
  for (const char* name :
       {"add_BOS", "stop_on_double_eol", "stop_on_eol", "prevent_newline_after_colon", "no_log"})
    (void)f.boolean(name);
  for (const char* name :
       {"add_BOS", "stop_on_double_eol", "stop_on_eol", "prevent_newline_after_colon"})
    f.unsupported_unless(name, false);
  (void)f.number("top_p_decay", {0.0}, {1.0});
  f.unsupported_unless("top_p_decay", 0.0);
  (void)f.number("top_p_bound", {0.0}, {1.0});
  f.unsupported_unless("top_p_bound", 0.0);
  if (f.has("beam_width") && f.integer("beam_width", 1, kIntMax))
    f.fail("beam_width", "beam_width is not supported by lattice serve (no beam search)");
  (void)f.integer("stop_token", 0, kIntMax);
  (void)f.number("length_penalty", {-kAnyNumber}, {kAnyNumber});
  if (!f.ok()) return failed(f);
  base.prompt_logprobs = logprobs;
  base.logprobs = logprobs;
  ApiCall call;
  call.logprobs = logprobs ? 1 : -1;
  if (!add_prompts(call, prompts, base, tokenizer, generator, "prompts")) return call;
  call.ok = true;
  return call;
}

ApiCall parse_completions(const std::string& body, const Tokenizer& tokenizer,
                          const Generator& generator, uint64_t random_seed) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return not_an_object();
  // OpenAI: null means the default.
  RequestFields f(j, /*null_is_absent=*/true);
  ApiCall call;
  call.model = f.string("model").value_or("");
  if (!f.has("prompt")) f.fail("prompt", "prompt is required (a string or a list of strings)");
  const std::vector<std::string> prompts =
      f.strings("prompt", true, 1, kMaxPrompts).value_or(std::vector<std::string>{});
  for (const std::string& s : prompts)
    if (s.empty()) f.fail("prompt", "prompt must not be empty");
  GenerationRequest base;
  base.tokens_to_generate = static_cast<int>(f.integer("max_tokens", 0, kIntMax).value_or(16));
  base.sampling.temperature =
      static_cast<float>(f.number("temperature", {0.0}, {2.0}).value_or(1.0));
  const double top_p = f.number("top_p", {0.0, false}, {1.0}).value_or(1.0);
  base.sampling.top_p = top_p >= 1.0 ? 0.0f : static_cast<float>(top_p);  // 1: off
  base.sampling.top_k = static_cast<int>(f.integer("top_k", 0, kIntMax).value_or(0));
  if (f.integer("n", 1, 128).value_or(1) != 1)
    f.fail("n", "n must be 1 (one completion per prompt: send a prompt again for more)");
  if (f.integer("best_of", 1, 20).value_or(1) != 1)
    f.fail("best_of", "best_of must be 1 (lattice serve returns the one completion it samples)");
  call.stream = f.boolean("stream").value_or(false);
  call.logprobs = static_cast<int>(f.integer("logprobs", 0, 5).value_or(-1));
  base.stop = f.strings("stop", true, 0, 4).value_or(std::vector<std::string>{});
  for (const std::string& s : base.stop)
    if (s.empty()) f.fail("stop", "stop strings must not be empty");
  base.sampling.seed = static_cast<uint64_t>(
      f.integer("seed", INT64_MIN, INT64_MAX).value_or(static_cast<int64_t>(random_seed)));
  // OpenAI's fields that this server does not implement: accepted at their "off" value only.
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    (void)f.number(name, {-2.0}, {2.0});
    f.unsupported_unless(name, 0.0);
  }
  (void)f.boolean("echo");
  f.unsupported_unless("echo", false);
  if (!f.ok()) return failed(f);
  base.logprobs = call.logprobs >= 0;
  if (!add_prompts(call, prompts, base, tokenizer, generator, "prompt")) return call;
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

std::string error_body(const ApiError& error) {
  const json err = {{"message", error.message},
                    {"type", error.type},
                    {"param", error.param.empty() ? json(nullptr) : json(error.param)},
                    {"code", error.code.empty() ? json(nullptr) : json(error.code)}};
  return dump(json{{"error", err}, {"message", error.message}});
}

std::string health_body(bool stopping, size_t queued_prompts, size_t generating_prompts,
                        int connections) {
  return dump(json{{"status", stopping ? "stopping" : "ok"},
                   {"queued_prompts", queued_prompts},
                   {"generating_prompts", generating_prompts},
                   {"connections", connections}});
}

std::string models_body(int64_t created, int max_model_len) {
  const json model = {{"id", "lattice"},
                      {"object", "model"},
                      {"created", created},
                      {"owned_by", "lattice"},
                      {"max_model_len", max_model_len}};
  return dump(json{{"object", "list"}, {"data", json::array({model})}});
}

CompletionStream::CompletionStream(const ApiCall& call, const Tokenizer& tokenizer, int32_t eod,
                                   std::string id, int64_t created)
    : call_(call),
      tokenizer_(tokenizer),
      eod_(eod),
      id_(std::move(id)),
      created_(created),
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

std::string CompletionStream::error(const ApiError& error) {
  return "data: " + error_body(error) + "\n\ndata: [DONE]\n\n";
}

std::string CompletionStream::event(size_t index, const std::string& text, const std::string* piece,
                                    float logprob, const char* finish_reason) {
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
