// The two HTTP APIs of `lattice serve`, as pure functions from a request body to generation
// requests and from results to a response body, so that they can be tested without a socket:
// Megatron-LM's text generation server (PUT /api) and OpenAI's completions (POST
// /v1/completions). Field rules follow Megatron's text_generation_server.py and the OpenAI
// reference; docs/inference.md lists them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/infer.h"
#include "lattice/tokenizer.h"

namespace lattice::cli {

inline constexpr size_t kMaxPrompts = 128;

// A parsed API call: what to generate, and what the answer needs to be written.
struct ApiCall {
  std::vector<GenerationRequest> requests;
  std::string model;  // OpenAI: echoed back
  int logprobs = -1;  // OpenAI: -1 none, else the number asked for; /api: 0 or 1
  bool ok = false;
  std::string error;  // when !ok: one sentence for the 400 answer
};

// `random_seed` is used when the body names none. `generator` checks prompts (context).
ApiCall parse_megatron_api(const std::string& body, const Tokenizer& tokenizer,
                           const Generator& generator, uint64_t random_seed);
ApiCall parse_completions(const std::string& body, const Tokenizer& tokenizer,
                          const Generator& generator, uint64_t random_seed);

// {"text": [...], "segments": [[...]], "logprobs": [[...]] | null}
std::string megatron_response(const ApiCall& call, const std::vector<GenerationResult>& results,
                              const Tokenizer& tokenizer);
// OpenAI's text_completion object; `id` and `created` (Unix seconds) from the caller.
std::string completions_response(const ApiCall& call, const std::vector<GenerationResult>& results,
                                 const Tokenizer& tokenizer, const std::string& id,
                                 int64_t created);

// Error bodies: {"message": ...} for /api (what Megatron's client reads), OpenAI's
// {"error": {"message", "type", ...}} for /v1.
std::string megatron_error(const std::string& message);
std::string openai_error(const std::string& message);

}  // namespace lattice::cli
