// Chat templates: how a conversation becomes the text (and tokens) a model is trained on and
// prompted with. A Hugging Face tokenizer's own Jinja template (tokenizer_config.json) or a
// built-in one; for training, the tokens plus a loss mask that is 1 only on what the assistant
// says and the token(s) that end its turn (Megatron's SFT convention). See docs/data.md, "SFT
// data", and design-notes.md, "chat-template".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/jinja_template.h"
#include "lattice/status.h"
#include "lattice/tokenizer.h"

namespace lattice {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// Immutable once built (bind_eod aside): render() and encode() may run on several threads.
class ChatTemplate {
 public:
  // The chat_template of a Hugging Face tokenizer_config.json (the file, or a directory holding
  // it), with its bos_token and eos_token. Errors name the file: unreadable, not JSON, no
  // chat_template, or a template outside the Jinja subset (with its line).
  static Result<ChatTemplate> from_tokenizer_config(const std::string& path);
  // A built-in template: "chatml" (<|im_start|>role\n...<|im_end|>\n), "llama3" (Llama 3
  // Instruct's headers and <|eot_id|>), "default" (plain "User: " / "Assistant: " lines, each
  // assistant turn ending with the tokenizer's EOD; its text comes from bind_eod()).
  static Result<ChatTemplate> builtin(const std::string& name);
  // A template from Jinja source (a .jinja file, tests); `name` appears in errors.
  static Result<ChatTemplate> from_source(const std::string& source, const std::string& name,
                                          std::string bos_token, std::string eos_token);

  // The text of `messages` as the template writes it (Hugging Face's apply_chat_template with
  // tokenize=False), with the header of a new assistant turn when add_generation_prompt.
  Result<std::string> render(std::span<const ChatMessage> messages,
                             bool add_generation_prompt) const;

  const std::string& name() const { return name_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // Texts that end an assistant turn, searched for after the turn's start: the eos_token and
  // the usual end-of-turn tokens (<|eot_id|>, <|im_end|>, ...).
  const std::vector<std::string>& end_of_turn() const { return end_of_turn_; }
  // True for "default", whose assistant turns end with the tokenizer's EOD. bind_eod() sets
  // eos_token to the EOD's text when the tokenizer encodes that text back to the EOD id alone
  // (Hugging Face's, SentencePieceTokenizer's <EOD>); otherwise (GPTSentencePieceTokenizer,
  // GPT-2) to kEodMarker, which encode() turns into the EOD id.
  bool ends_turns_with_eod() const { return ends_with_eod_; }
  Status bind_eod(const Tokenizer& tokenizer);
  static constexpr const char* kEodMarker = "\x1e<EOD>\x1e";
  // The ids of text this template rendered: tokenizer.encode(text), with kEodMarker as the
  // EOD id. What serving must use to encode a rendered prompt.
  std::vector<int32_t> encode(const Tokenizer& tokenizer, std::string_view text) const;

 private:
  std::string name_;
  jinja::Template template_;
  std::string bos_token_, eos_token_;
  std::vector<std::string> end_of_turn_;
  bool ends_with_eod_ = false;
  bool eod_marker_ = false;  // eos_token is kEodMarker
};

// The template for `tokenizer`: `override_name_or_path` when given (a built-in name, a
// tokenizer_config.json or its directory, or a .jinja file); else, for HuggingFaceTokenizer,
// the tokenizer_config.json beside its tokenizer.json when that has a chat_template; else the
// built-in "default" bound to the tokenizer's EOD.
Result<ChatTemplate> chat_template_for(const TokenizerOptions& tokenizer,
                                       const std::string& override_name_or_path = "");

struct RenderedConversation {
  std::vector<int32_t> tokens;     // (T) the whole conversation
  std::vector<uint8_t> loss_mask;  // (T) 1 on assistant content and its end-of-turn tokens
};

// Tokens and loss mask of a conversation (which must hold an assistant message). Each
// assistant turn is located by rendering prefixes (note "chat-spans" in chat_template.cpp);
// its content and end-of-turn token(s) get mask 1; system, user, template scaffolding and
// generation-prompt headers get 0. The tokens are those of encoding the rendered text whole
// (no BOS is added: templates that want one write bos_token themselves). Errors name the
// message index.
Result<RenderedConversation> render_for_training(const ChatTemplate& chat_template,
                                                 const Tokenizer& tokenizer,
                                                 std::span<const ChatMessage> messages);

// The byte ranges [begin, end) of the assistant turns (content and end-of-turn text) in `full`,
// the text render(messages, false) gave, found as note "chat-spans" says; for callers that cut
// the text themselves (image-text data splices image placeholders between pieces). The template
// must already be bound to the tokenizer's EOD (chat_template_for binds it).
Result<std::vector<std::pair<size_t, size_t>>> assistant_turn_spans(
    const ChatTemplate& chat_template, std::span<const ChatMessage> messages,
    const std::string& full);

}  // namespace lattice
