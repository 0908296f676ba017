// Request parsing and response writing for `lattice serve` (serve_api.h).
#include "serve_api.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <span>

#include "infer/prompt_images.h"

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
// A vision-language model's prompt with `<image>` is refused: text prompts carry no images
// (OpenAI's completions API has no image parts), and the marker would otherwise be encoded as
// plain text, silently without its image; images go through the chat endpoint.
bool add_prompts(ApiCall& call, const std::vector<std::string>& prompts,
                 const GenerationRequest& base, const Tokenizer& tokenizer,
                 const Generator& generator, const char* field) {
  for (size_t i = 0; i < prompts.size(); i++) {
    if (generator.config().has_vision() && prompts[i].find(kImageMarker) != std::string::npos) {
      call.error = ApiError{400,
                            std::string(field) + " " + std::to_string(i) +
                                " holds <image>, but a text prompt carries no image; send images "
                                "to /v1/chat/completions as image_url content parts",
                            field, "invalid_request_error", ""};
      return false;
    }
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

constexpr int64_t kIntMax = INT32_MAX;  // counts that become an int
constexpr double kAnyNumber = 1e300;

}  // namespace

const char* finish_reason(const GenerationResult& res) {
  return res.finish == FinishReason::kLength ? "length" : "stop";
}

std::string dump_json(const json& j) {
  return dump(j);
}

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

void read_openai_sampling(RequestFields& f, GenerationRequest& base, uint64_t random_seed,
                          const char* max_tokens_field) {
  base.tokens_to_generate =
      static_cast<int>(f.integer(max_tokens_field, 0, kIntMax).value_or(base.tokens_to_generate));
  base.sampling.temperature =
      static_cast<float>(f.number("temperature", {0.0}, {2.0}).value_or(1.0));
  const double top_p = f.number("top_p", {0.0, false}, {1.0}).value_or(1.0);
  base.sampling.top_p = top_p >= 1.0 ? 0.0f : static_cast<float>(top_p);  // 1: off
  base.sampling.top_k = static_cast<int>(f.integer("top_k", 0, kIntMax).value_or(0));
  if (f.integer("n", 1, 128).value_or(1) != 1)
    f.fail("n", "n must be 1 (one completion per prompt: send a prompt again for more)");
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
  call.prompts = f.strings("prompt", true, 1, kMaxPrompts).value_or(std::vector<std::string>{});
  for (const std::string& s : call.prompts)
    if (s.empty()) f.fail("prompt", "prompt must not be empty");
  GenerationRequest base;
  base.tokens_to_generate = 16;
  read_openai_sampling(f, base, random_seed, "max_tokens");
  if (f.integer("best_of", 1, 20).value_or(1) != 1)
    f.fail("best_of", "best_of must be 1 (lattice serve returns the one completion it samples)");
  call.stream = f.boolean("stream").value_or(false);
  call.logprobs = static_cast<int>(f.integer("logprobs", 0, 5).value_or(-1));
  call.echo = f.boolean("echo").value_or(false);
  if (f.ok() && call.stream && call.echo)
    f.fail("echo", "echo is not supported with stream (ask with stream false)");
  if (f.ok() && call.stream && call.logprobs > 0)
    f.fail("logprobs",
           "logprobs above 0 (top_logprobs) are not streamed; ask with stream false, or logprobs "
           "0 for the chosen tokens' log-probabilities");
  if (!f.ok()) return failed(f);
  base.logprobs = call.logprobs >= 0;
  base.prompt_logprobs = call.echo && call.logprobs >= 0;
  base.top_logprobs = std::max(call.logprobs, 0);
  if (!add_prompts(call, call.prompts, base, tokenizer, generator, "prompt")) return call;
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

json top_logprobs_entry(const std::vector<TokenLogprob>* top, int32_t chosen, float logprob,
                        const Tokenizer& tokenizer) {
  // As vLLM: the k most likely tokens, and the chosen one when it is not among them. A
  // dictionary keyed by text: tokens that decode alike keep the more likely one.
  json d = json::object();
  auto add = [&](int32_t id, float lp) {
    const std::string key = tokenizer.decode(std::span<const int32_t>(&id, 1));
    if (!d.contains(key)) d[key] = lp;
  };
  if (top)
    for (const TokenLogprob& t : *top) add(t.token, t.logprob);
  add(chosen, logprob);
  return d;
}

namespace {

// OpenAI's legacy logprobs object of one choice; with echo the prompt's tokens come first,
// the first of them with null (nothing precedes it).
json completion_logprobs(const ApiCall& call, const GenerationRequest& req,
                         const GenerationResult& res, const Tokenizer& tokenizer) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  size_t offset = 0;
  auto add = [&](int32_t id, json logprob, json alternatives) {
    const std::string piece = tokenizer.decode(std::span<const int32_t>(&id, 1));
    tokens.push_back(piece);
    token_logprobs.push_back(std::move(logprob));
    top.push_back(std::move(alternatives));
    offsets.push_back(offset);
    offset += piece.size();
  };
  if (call.echo)
    for (size_t k = 0; k < req.prompt.size(); k++) {
      if (k == 0) {
        add(req.prompt[0], nullptr, nullptr);
        continue;
      }
      const float lp = res.prompt_logprobs.at(k - 1);
      const auto* alternatives =
          res.prompt_top_logprobs.empty() ? nullptr : &res.prompt_top_logprobs[k - 1];
      add(req.prompt[k], lp, top_logprobs_entry(alternatives, req.prompt[k], lp, tokenizer));
    }
  for (size_t k = 0; k < res.tokens.size(); k++) {
    if (res.finish == FinishReason::kEod && k + 1 == res.tokens.size()) break;
    const float lp = res.logprobs.at(k);
    const auto* alternatives = res.top_logprobs.empty() ? nullptr : &res.top_logprobs[k];
    add(res.tokens[k], lp, top_logprobs_entry(alternatives, res.tokens[k], lp, tokenizer));
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

}  // namespace

json usage_json(const ApiCall& call, const std::vector<GenerationResult>& results) {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < results.size(); i++) {
    prompt_tokens += static_cast<int64_t>(call.requests[i].prompt.size());
    completion_tokens += static_cast<int64_t>(results[i].tokens.size());
  }
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::string completions_response(const ApiCall& call, const std::vector<GenerationResult>& results,
                                 const Tokenizer& tokenizer, const std::string& id,
                                 int64_t created) {
  json choices = json::array();
  for (size_t i = 0; i < results.size(); i++) {
    const GenerationResult& res = results[i];
    const std::string text = call.echo ? call.prompts.at(i) + res.text : res.text;
    json choice = {{"text", text}, {"index", i}};
    choice["finish_reason"] = finish_reason(res);
    choice["logprobs"] = call.logprobs >= 0
                             ? completion_logprobs(call, call.requests[i], res, tokenizer)
                             : json(nullptr);
    choices.push_back(std::move(choice));
  }
  const json out = {{"id", id},           {"object", "text_completion"},
                    {"created", created}, {"model", call.model.empty() ? "lattice" : call.model},
                    {"choices", choices}, {"usage", usage_json(call, results)}};
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
