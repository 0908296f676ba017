#include "text_stream.h"

#include <algorithm>

namespace lattice::cli {

namespace {

// Bytes at the end of `text` that begin a UTF-8 character not yet complete.
size_t incomplete_utf8_tail(const std::string& text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); back++) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

}  // namespace

size_t shown_length(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops)
    for (size_t n = std::min(stop.size() - (stop.empty() ? 0 : 1), text.size()); n > hold; n--)
      if (text.compare(text.size() - n, n, stop, 0, n) == 0) {
        hold = n;
        break;
      }
  return std::min(text.size() - hold, text.size() - incomplete_utf8_tail(text));
}

TextStream::TextStream(TextOf text_of, std::vector<std::string> stops)
    : text_of_(std::move(text_of)), stops_(std::move(stops)) {}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  generated_.push_back(token);
  std::string text = text_of_(generated_);
  size_t cut = std::string::npos;
  for (const std::string& stop : stops_)
    if (!stop.empty()) cut = std::min(cut, text.find(stop));
  if (cut != std::string::npos) {
    stopped_ = true;
    text.resize(cut);
  } else {
    text.resize(shown_length(text, stops_));
  }
  return advance(text);
}

std::string TextStream::finish(const std::string& final_text) {
  return advance(final_text);
}

// Shows `text` when it extends what is shown (a tokenizer may still revise a tail, e.g. the
// spacing before a word; such a text waits until a later one extends the shown text again).
std::string TextStream::advance(const std::string& text) {
  if (text.size() <= shown_.size() || text.compare(0, shown_.size(), shown_) != 0) return {};
  std::string piece = text.substr(shown_.size());
  shown_ = text;
  return piece;
}

}  // namespace lattice::cli
