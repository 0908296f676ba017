// render_for_training (chat_template.h): where each assistant turn lies in the rendered text,
// and which tokens the loss is computed on.
//
// Note "chat-spans": a template is a program, so the text of one message cannot be found by
// looking at the template. The standard way (as trl and Hugging Face's own helpers do) is to
// render prefixes: the assistant message i starts where render(messages[:i],
// add_generation_prompt=True) ends, which must be a prefix of the whole conversation's text.
// Its end is the first end-of-turn text (the eos_token, <|eot_id|>, <|im_end|>, ...) after that
// start and before the next assistant turn starts, inclusive; a template with none ends the
// turn where render(messages[:i+1]) stops agreeing with the whole text. (Rendering
// messages[:i+1] is not used for the end in general: Llama 3's base template always appends
// an assistant header, and Qwen 3 writes an empty <think> block only after the last user
// message, so a prefix rendering differs from the whole text after the turn.)
// The tokens are those of the whole text, encoded once; a token belongs to the turn when it
// overlaps it (a token straddling the start, Qwen's "\n\n" when the content starts with a
// newline, is trained on: the content is never left out of the loss). That needs each token's text,
// which decode gives exactly for byte-level tokenizers (Hugging Face, GPT-2); for the others
// (SentencePiece, whose decode normalises spaces) the text is cut at the turn boundaries and each
// piece encoded on its own. The "default" template's kEodMarker (a tokenizer whose EOD has no text)
// becomes the EOD id.
#include <algorithm>

#include "data/chat_template.h"

namespace lattice {

namespace {

struct Span {
  size_t begin = 0, end = 0;  // byte range of the rendered text
};

std::string message_name(size_t i) {
  return "message " + std::to_string(i + 1);
}

Result<std::vector<Span>> assistant_spans(const ChatTemplate& t,
                                          std::span<const ChatMessage> messages,
                                          const std::string& full) {
  std::vector<size_t> assistants;
  std::vector<Span> spans;
  for (size_t i = 0; i < messages.size(); i++) {
    if (messages[i].role != "assistant") continue;
    Result<std::string> before = t.render(messages.first(i), /*add_generation_prompt=*/true);
    if (!before) return before.status();
    if (full.compare(0, before->size(), *before) != 0)
      return Status::invalid_argument(
          message_name(i) + " (assistant): " + t.name() +
          " renders the conversation before it differently once the conversation goes on, so "
          "the start of the assistant's turn cannot be found");
    if (!spans.empty() && before->size() < spans.back().begin)
      return Status::invalid_argument(message_name(i) + " (assistant): " + t.name() +
                                      " renders turns out of order");
    assistants.push_back(i);
    spans.push_back({before->size(), 0});
  }
  for (size_t k = 0; k < spans.size(); k++) {
    const size_t begin = spans[k].begin;
    const size_t limit = k + 1 < spans.size() ? spans[k + 1].begin : full.size();
    size_t end = std::string::npos;
    for (const std::string& marker : t.end_of_turn()) {
      if (marker.empty()) continue;
      const size_t at = full.find(marker, begin);
      if (at != std::string::npos && at + marker.size() <= limit)
        end = std::min(end, at + marker.size());
    }
    if (end == std::string::npos) {  // no end-of-turn text: where the prefix rendering diverges
      Result<std::string> upto = t.render(messages.first(assistants[k] + 1), false);
      if (!upto) return upto.status();
      size_t common = 0;
      while (common < upto->size() && common < full.size() && (*upto)[common] == full[common])
        common++;
      end = std::clamp(common, begin, limit);
    }
    spans[k].end = end;
  }
  return spans;
}

// Each token's text, if decode gives the exact bytes of every token and they make up `text`.
bool token_offsets(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                   const std::string& text, std::vector<size_t>& starts) {
  starts.clear();
  size_t at = 0;
  for (int32_t id : ids) {
    const std::string piece = tokenizer.decode(std::span<const int32_t>(&id, 1));
    if (text.compare(at, piece.size(), piece) != 0) return false;
    starts.push_back(at);
    at += piece.size();
  }
  return at == text.size();
}

}  // namespace

Result<RenderedConversation> render_for_training(const ChatTemplate& chat_template,
                                                 const Tokenizer& tokenizer,
                                                 std::span<const ChatMessage> messages) {
  const ChatTemplate* t = &chat_template;
  ChatTemplate bound;
  if (chat_template.ends_turns_with_eod() && chat_template.eos_token().empty()) {
    bound = chat_template;
    if (Status s = bound.bind_eod(tokenizer); !s) return s;
    t = &bound;
  }
  for (size_t i = 0; i < messages.size(); i++) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      return Status::invalid_argument(message_name(i) + ": role '" + r +
                                      "' is not one of system, user, assistant");
  }
  if (std::none_of(messages.begin(), messages.end(),
                   [](const ChatMessage& m) { return m.role == "assistant"; }))
    return Status::invalid_argument("the conversation has no assistant message to train on");
  Result<std::string> full = t->render(messages, false);
  if (!full) return full.status();
  Result<std::vector<Span>> spans = assistant_spans(*t, messages, *full);
  if (!spans) return spans.status();

  RenderedConversation out;
  out.tokens = t->encode(tokenizer, *full);
  std::vector<size_t> starts;
  if (token_offsets(tokenizer, out.tokens, *full, starts)) {
    out.loss_mask.assign(out.tokens.size(), 0);
    size_t k = 0;
    for (size_t j = 0; j < starts.size(); j++) {
      const size_t end = j + 1 < starts.size() ? starts[j + 1] : full->size();
      while (k < spans->size() && starts[j] >= (*spans)[k].end) k++;
      if (k < spans->size() && end > (*spans)[k].begin && end > starts[j]) out.loss_mask[j] = 1;
    }
  } else {
    out.tokens.clear();
    size_t at = 0;
    auto add = [&](size_t end, uint8_t mask) {
      if (end <= at) return;
      const std::vector<int32_t> ids =
          t->encode(tokenizer, std::string_view(*full).substr(at, end - at));
      out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
      out.loss_mask.insert(out.loss_mask.end(), ids.size(), mask);
      at = end;
    };
    for (const Span& s : *spans) {
      add(s.begin, 0);
      add(s.end, 1);
    }
    add(full->size(), 0);
  }
  if (std::find(out.loss_mask.begin(), out.loss_mask.end(), 1) == out.loss_mask.end())
    return Status::invalid_argument("the assistant messages encode to no tokens");
  return out;
}

Result<std::vector<std::pair<size_t, size_t>>> assistant_turn_spans(
    const ChatTemplate& chat_template, std::span<const ChatMessage> messages,
    const std::string& full) {
  Result<std::vector<Span>> spans = assistant_spans(chat_template, messages, full);
  if (!spans) return spans.status();
  std::vector<std::pair<size_t, size_t>> out;
  for (const Span& s : *spans) out.emplace_back(s.begin, s.end);
  return out;
}

}  // namespace lattice
