// The two HTTP APIs of `lattice serve`, as pure functions from a request body to generation
// requests and from results to a response body, so that they can be tested without a socket:
// Megatron-LM's text generation server (PUT /api) and OpenAI's completions (POST
// /v1/completions). Field rules follow Megatron's text_generation_server.py and the OpenAI
// reference; docs/inference.md lists them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lattice/infer.h"
#include "lattice/tokenizer.h"
#include "serve_fields.h"
#include "text_stream.h"

namespace lattice::cli {

inline constexpr size_t kMaxPrompts = 128;

// A parsed API call: what to generate, and what the answer needs to be written.
struct ApiCall {
  std::vector<GenerationRequest> requests;
  std::string model;    // OpenAI: echoed back
  int logprobs = -1;    // OpenAI: -1 none, else the number asked for; /api: 0 or 1
  bool stream = false;  // OpenAI: server-sent events (CompletionStream)
  bool echo = false;    // completions: the prompt before the text (and its tokens' logprobs)
  std::vector<std::string> prompts;  // completions: the prompts as sent (echo)
  bool include_usage = false;        // chat, stream: a last chunk with the usage
  bool ok = false;
  ApiError error;  // when !ok: the 400 answer, naming the field at fault
};

// `random_seed` is used when the body names none. `generator` checks prompts (context).
ApiCall parse_megatron_api(const std::string& body, const Tokenizer& tokenizer,
                           const Generator& generator, uint64_t random_seed);
ApiCall parse_completions(const std::string& body, const Tokenizer& tokenizer,
                          const Generator& generator, uint64_t random_seed);

// The sampling fields that completions and chat completions share (max tokens under
// `max_tokens_field`; base.tokens_to_generate is its default): temperature, top_p, top_k, n,
// stop, seed and the penalties.
void read_openai_sampling(RequestFields& fields, GenerationRequest& base, uint64_t random_seed,
                          const char* max_tokens_field);
// "stop" for EOD or a stop string, else "length".
const char* finish_reason(const GenerationResult& result);
// usage: {prompt_tokens, completion_tokens, total_tokens} over the call's sequences.
nlohmann::json usage_json(const ApiCall& call, const std::vector<GenerationResult>& results);
// The k most likely tokens with the chosen one (vLLM's top_logprobs entry), keyed by text.
nlohmann::json top_logprobs_entry(const std::vector<TokenLogprob>* top, int32_t chosen,
                                  float logprob, const Tokenizer& tokenizer);
// j.dump() with invalid UTF-8 (a piece of a character) replaced rather than thrown on.
std::string dump_json(const nlohmann::json& j);

// {"text": [...], "segments": [[...]], "logprobs": [[...]] | null}
std::string megatron_response(const ApiCall& call, const std::vector<GenerationResult>& results,
                              const Tokenizer& tokenizer);
// OpenAI's text_completion object; `id` and `created` (Unix seconds) from the caller.
std::string completions_response(const ApiCall& call, const std::vector<GenerationResult>& results,
                                 const Tokenizer& tokenizer, const std::string& id,
                                 int64_t created);

// OpenAI's stream=true: the answer as server-sent events. Each piece of a choice's text is one
// `data: {chunk}` event (with logprobs: one event per token, its text possibly empty while a
// tail is held back); each choice's last chunk carries its finish_reason; `data: [DONE]` ends
// the stream. The pieces of a choice add up to the text stream=false answers. token() runs on
// the generation thread, finish() after the results are in.
// The events of a streamed answer (completions or chat), made as tokens come.
class EventStream {
 public:
  virtual ~EventStream() = default;
  // The event for token `token` of choice `index`, or "" when there is nothing to send yet.
  virtual std::string token(size_t index, int32_t token, float logprob) = 0;
  // The rest of every choice's text with its finish_reason, then [DONE].
  virtual std::string finish(const std::vector<GenerationResult>& results) = 0;
};

class CompletionStream : public EventStream {
 public:
  CompletionStream(const ApiCall& call, const Tokenizer& tokenizer, int32_t eod, std::string id,
                   int64_t created);
  std::string token(size_t index, int32_t token, float logprob) override;
  std::string finish(const std::vector<GenerationResult>& results) override;
  // A failure after the stream began: an error event, then [DONE].
  static std::string error(const ApiError& error);

 private:
  std::string event(size_t index, const std::string& text, const std::string* piece, float logprob,
                    const char* finish_reason);

  ApiCall call_;
  const Tokenizer& tokenizer_;
  int32_t eod_;
  std::string id_;
  int64_t created_;
  std::vector<TextStream> texts_;
  std::vector<size_t> offsets_;  // per choice: bytes of token text so far (text_offset)
};

// The one error body of both APIs and of every error the server answers: OpenAI's
// {"error": {"message", "type", "param", "code"}} plus a top-level "message" (what
// Megatron's client reads).
std::string error_body(const ApiError& error);

// GET /health: {"status": "ok" or "stopping", "queued_prompts": waiting for the model,
// "generating_prompts": in the batch being decoded, "connections": being served}.
std::string health_body(bool stopping, size_t queued_prompts, size_t generating_prompts,
                        int connections);

// GET /v1/models: OpenAI's list holding the one model served, "lattice" (the name the
// completions answer with when a request names none), with its context length.
std::string models_body(int64_t created, int max_model_len);

}  // namespace lattice::cli
