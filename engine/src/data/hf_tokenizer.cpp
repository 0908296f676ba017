// HuggingFaceTokenizer's encode and decode (see hf_tokenizer.h for the steps); loading the
// file is hf_tokenizer_json.cpp.
#include "data/hf_tokenizer.h"

#include <algorithm>
#include <deque>

#include "data/unicode_classes.h"
#include "data/unicode_nfc.h"
#include "data/utf8.h"

namespace lattice {

namespace {

// The character before `end` / at `at`, for the added tokens' flags (kNotUtf8 if none).
uint32_t char_before(std::string_view text, size_t end) {
  if (end == 0) return unicode::kNotUtf8;
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
    start--;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const unicode::Utf8Char c = unicode::decode_utf8(p + start, p + end);
  return start + c.length == end ? c.cp : unicode::kNotUtf8;
}
uint32_t char_at(std::string_view text, size_t at, uint32_t* length) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const unicode::Utf8Char c = unicode::decode_utf8(p + at, p + text.size());
  *length = c.length;
  return c.cp;
}
bool is_space(uint32_t cp) {
  return cp != unicode::kNotUtf8 && unicode::hf_classes().lookup(cp) == unicode::CharClass::kSpace;
}
// Rust regex's \w, which single_word tests (the generated table of Hugging Face's).
bool is_word(uint32_t cp) {
  return cp != unicode::kNotUtf8 && unicode::hf_is_word(cp);
}

}  // namespace

// Buffers that encode() reuses from call to call on a thread.
struct HuggingFaceTokenizer::Scratch {
  std::string normalized;
  std::vector<std::string_view> pieces, next;
  std::deque<std::string> prefixed;  // pieces that gained ByteLevel's prefix space
};

void HuggingFaceTokenizer::AddedTokenMatcher::add(AddedToken token) {
  if (token.content.empty()) return;  // matches nothing
  int32_t node = 0;
  for (const char ch : token.content) {
    const auto b = static_cast<unsigned char>(ch);
    auto& next = nodes[node].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
    if (it == next.end() || it->first != b) {
      it = next.insert(it, {b, static_cast<int32_t>(nodes.size())});
      node = it->second;  // before push_back: `next` may move
      nodes.emplace_back();
    } else {
      node = it->second;
    }
  }
  first_byte[static_cast<unsigned char>(token.content[0])] = true;
  nodes[node].token = static_cast<int32_t>(tokens.size());
  tokens.push_back(std::move(token));
}

int32_t HuggingFaceTokenizer::AddedTokenMatcher::longest_at(std::string_view text,
                                                            size_t at) const {
  int32_t node = 0, found = -1;
  for (size_t i = at; i < text.size(); i++) {
    const auto b = static_cast<unsigned char>(text[i]);
    const auto& next = nodes[node].next;
    const auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
    if (it == next.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].token >= 0) found = nodes[node].token;
  }
  return found;
}

// Hugging Face's AddedVocabulary::find_matches: matches in order, leftmost then longest, not
// overlapping; a single_word token between word characters is dropped (its text stays text),
// lstrip / rstrip take the whitespace before / after it into the token.
template <class OnText, class OnToken>
void HuggingFaceTokenizer::split_added(const AddedTokenMatcher& matcher, std::string_view text,
                                       OnText&& on_text, OnToken&& on_token) {
  size_t done = 0;  // text before this is handed on
  for (size_t at = 0; at < text.size();) {
    if (!matcher.first_byte[static_cast<unsigned char>(text[at])]) {
      at++;
      continue;
    }
    const int32_t which = matcher.longest_at(text, at);
    if (which < 0) {
      at++;
      continue;
    }
    const AddedToken& token = matcher.tokens[which];
    size_t start = at, stop = at + token.content.size();
    at = stop;
    uint32_t length;
    if (token.single_word && (is_word(char_before(text, start)) ||
                              (stop < text.size() && is_word(char_at(text, stop, &length)))))
      continue;
    if (token.lstrip) {
      while (start > done && is_space(char_before(text, start))) {
        size_t back = start - 1;
        while ((static_cast<unsigned char>(text[back]) & 0xC0) == 0x80) back--;
        start = back;
      }
    }
    if (token.rstrip) {
      while (stop < text.size() && is_space(char_at(text, stop, &length))) stop += length;
    }
    if (done < start) on_text(text.substr(done, start - done));
    on_token(token.id);
    done = stop;
  }
  if (done < text.size()) on_text(text.substr(done));
}

HuggingFaceTokenizer::~HuggingFaceTokenizer() = default;

std::vector<int32_t> HuggingFaceTokenizer::encode(std::string_view text) const {
  thread_local Scratch scratch;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  split_added(
      raw_added_, text, [&](std::string_view s) { encode_stretch(s, scratch, ids); },
      [&](int32_t id) { ids.push_back(id); });
  return ids;
}

void HuggingFaceTokenizer::encode_stretch(std::string_view text, Scratch& scratch,
                                          std::vector<int32_t>& ids) const {
  if (nfc_ && unicode::to_nfc(text, scratch.normalized)) text = scratch.normalized;
  if (normalized_added_.empty()) {
    encode_normalized(text, scratch, ids);
    return;
  }
  // The stretches are encoded one after the other, so `text` (which may be
  // scratch.normalized) stays as it is until the last.
  split_added(
      normalized_added_, text, [&](std::string_view s) { encode_normalized(s, scratch, ids); },
      [&](int32_t id) { ids.push_back(id); });
}

void HuggingFaceTokenizer::encode_normalized(std::string_view text, Scratch& scratch,
                                             std::vector<int32_t>& ids) const {
  if (text.empty()) return;  // Hugging Face drops empty pieces before pre-tokenizing
  scratch.pieces.assign(1, text);
  scratch.prefixed.clear();
  for (const PreTokenizeStep& step : steps_) {
    scratch.next.clear();
    for (std::string_view piece : scratch.pieces) {
      if (step.byte_level && step.add_prefix_space && piece.front() != ' ') {
        std::string& prefixed = scratch.prefixed.emplace_back();
        prefixed.reserve(piece.size() + 1);
        prefixed += ' ';
        prefixed += piece;
        piece = prefixed;
      }
      if (step.regex) {
        step.regex->split(piece, scratch.next);
      } else {
        scratch.next.push_back(piece);
      }
    }
    std::swap(scratch.pieces, scratch.next);
  }
  size_t next = 0;
  core_.encode_words(
      [&] { return next < scratch.pieces.size() ? scratch.pieces[next++] : std::string_view(); },
      ids);
}

std::string HuggingFaceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids)
    if (id >= 0 && id < vocab_size()) text.append(core_.token(id));
  return text;
}

std::optional<int32_t> HuggingFaceTokenizer::token_id(std::string_view content) const {
  for (const AddedTokenMatcher* m : {&raw_added_, &normalized_added_})
    for (const AddedToken& t : m->tokens)
      if (t.content == content) return t.id;
  if (const auto it = vocabulary_.find(content); it != vocabulary_.end()) return it->second;
  return std::nullopt;
}

}  // namespace lattice
