// OpenAI's chat completions (POST /v1/chat/completions) for `lattice serve`: the messages are
// rendered into one prompt by the served tokenizer's chat template and generated from like a
// completion; the answer is the chat.completion object, or with stream=true
// chat.completion.chunk events. Pure functions of the body, as serve_api.h; the fields are
// listed in docs/inference.md.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lattice/status.h"
#include "serve_api.h"

namespace lattice::cli {

// One message as the client sent it (role checked: system, user or assistant).
struct ChatTurn {
  std::string role;
  std::string content;
};

// How conversations become prompts: the served tokenizer's chat template.
struct ChatPrompter {
  // The ids of a conversation rendered with the assistant's generation prompt, or why it
  // cannot be rendered.
  std::function<Result<std::vector<int32_t>>(const std::vector<ChatTurn>&)> encode;
  // Texts that end an assistant turn (the template's end_of_turn()): stop strings of every
  // chat request, for templates whose end of turn is not the tokenizer's EOD.
  std::vector<std::string> end_of_turn;
};

// The prompter of the served tokenizer (chat_template_for, data/chat_template.h: the
// tokenizer_config.json beside a Hugging Face tokenizer, else the built-in "default" bound to
// the EOD; `override_template`, --chat-template, instead when given). `model`, when it has a
// vision tower (kept by reference), expands the rendered text's `<image>` markers to its
// placeholder ids (infer/prompt_images.h).
Result<ChatPrompter> chat_prompter_for(const TokenizerOptions& options, const Tokenizer& tokenizer,
                                       const std::string& override_template,
                                       const ModelConfig* model = nullptr);

// The ApiCall of a chat request: one request; call.logprobs is -1 without "logprobs": true,
// else top_logprobs (0-20).
ApiCall parse_chat_completions(const std::string& body, const Generator& generator,
                               uint64_t random_seed, const ChatPrompter& prompter);

// The chat.completion object.
std::string chat_response(const ApiCall& call, const std::vector<GenerationResult>& results,
                          const Tokenizer& tokenizer, const std::string& id, int64_t created);

// stream=true: the first event of a choice gives delta {"role": "assistant", "content": ""},
// then one event per piece of text (with logprobs: one per token), the last with its
// finish_reason; with stream_options.include_usage a last chunk with the usage and no
// choices; then `data: [DONE]`.
class ChatStream : public EventStream {
 public:
  ChatStream(const ApiCall& call, const Tokenizer& tokenizer, int32_t eod, std::string id,
             int64_t created);
  std::string token(size_t index, int32_t token, float logprob) override;
  std::string finish(const std::vector<GenerationResult>& results) override;

 private:
  std::string chunk(size_t index, const nlohmann::json& delta, const nlohmann::json& logprobs,
                    const char* finish_reason);

  ApiCall call_;
  const Tokenizer& tokenizer_;
  int32_t eod_;
  std::string id_;
  int64_t created_;
  std::vector<TextStream> texts_;
  std::vector<bool> started_;  // per choice: the role chunk was sent
};

}  // namespace lattice::cli
