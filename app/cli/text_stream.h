// A continuation's text shown while it is generated (`lattice generate --stream`, OpenAI's
// stream=true in `lattice serve`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lattice::cli {

// How much of `text` (a continuation not yet stopped) may be shown: all but a tail that could
// still grow into one of `stops`, or that ends inside a UTF-8 character.
size_t shown_length(const std::string& text, const std::vector<std::string>& stops);

// The text of a continuation as it grows token by token, in pieces that are safe to show (see
// shown_length) and that add up to exactly the final text. `text_of` gives the text of the
// tokens generated so far (how it is decoded is the caller's: alone, or after the prompt).
class TextStream {
 public:
  using TextOf = std::function<std::string(const std::vector<int32_t>& generated)>;
  TextStream(TextOf text_of, std::vector<std::string> stops);

  // The new piece once `token` is generated ("" while the tail is held back, and after a stop
  // string appeared).
  std::string push(int32_t token);
  // What remains to show of the continuation's final text (the generator's, cut at a stop).
  std::string finish(const std::string& final_text);
  bool stopped() const { return stopped_; }

 private:
  std::string advance(const std::string& text);

  TextOf text_of_;
  std::vector<std::string> stops_;
  std::vector<int32_t> generated_;
  std::string shown_;
  bool stopped_ = false;
};

}  // namespace lattice::cli
