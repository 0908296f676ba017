// HuggingFaceTokenizer (Megatron's --tokenizer-type HuggingFaceTokenizer): byte-level BPE read
// from a Hugging Face tokenizer.json, giving the ids of Hugging Face's own tokenizers
// (encode(text, add_special_tokens=False)). What a text goes through, as there:
//   1. added tokens written in the text (special or not) are cut out, leftmost and longest
//      first, with their single_word / lstrip / rstrip flags; those marked "normalized" are
//      looked for after step 2 instead;
//   2. the normalizer (none, or NFC as Qwen's) on each stretch between them;
//   3. the pre-tokenizer: Split steps on a regex (hf_regex.h), then ByteLevel (a prefix
//      space if asked, GPT-2's regex if use_regex);
//   4. BPE on each piece's bytes, with ignore_merges (Llama 3: a piece that is a token is
//      that token) where the file says so.
// Supported, and refused otherwise with the file and the construct named: model BPE without
// byte_fallback, dropout, or subword prefix / suffix; normalizer null / NFC (or a Sequence of
// them); pre_tokenizer Split (Isolated, not inverted) and ByteLevel (last); post_processor
// null / ByteLevel / TemplateProcessing (one special token before the text); decoder null /
// ByteLevel. Bytes that are not UTF-8 (which Hugging Face never sees) are one character each
// of no class, so that any byte string round-trips through decode(). Immutable once loaded;
// encode() may run on several threads at once (word caches and buffers are per thread).
// See design-notes.md, "hf-tokenizer".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_core.h"
#include "data/hf_regex.h"
#include "lattice/status.h"
#include "lattice/tokenizer.h"

namespace lattice {

class HuggingFaceTokenizer final : public Tokenizer {
 public:
  // `path` is a tokenizer.json or a directory holding one. The end-of-document token is the
  // eos_token of tokenizer_config.json (or special_tokens_map.json) beside it, as Megatron's
  // eod is transformers' eos_token_id; without one, the first of <|endoftext|>,
  // <|end_of_text|>, </s> that is a token. Errors name the file and what is wrong in it.
  static Result<std::unique_ptr<HuggingFaceTokenizer>> load(const std::string& path);
  ~HuggingFaceTokenizer() override;

  // Ids without the template's special tokens (Hugging Face's add_special_tokens=False).
  std::vector<int32_t> encode(std::string_view text) const override;
  // The bytes of each id's token (an added token's text as written), concatenated: what
  // Hugging Face's decode(ids, skip_special_tokens=False) gives, except that bytes which are
  // not UTF-8 stay as they are. Ids outside [0, vocab_size()) are skipped.
  std::string decode(std::span<const int32_t> ids) const override;
  // The largest id of the vocabulary and the added tokens, plus one.
  int vocab_size() const override { return core_.token_count(); }
  int32_t eod() const override { return eod_; }
  std::optional<int32_t> bos() const override { return bos_; }
  std::string type() const override { return "HuggingFaceTokenizer"; }

  // The id of the vocabulary or added token whose text is `content`, if any (for tests).
  std::optional<int32_t> token_id(std::string_view content) const;

 private:
  struct AddedToken {
    std::string content;  // as matched: the normalized content when `normalized`
    int32_t id = 0;
    bool single_word = false, lstrip = false, rstrip = false, normalized = false;
  };
  // Added tokens matched leftmost-longest, through a byte trie.
  struct AddedTokenMatcher {
    struct Node {
      int32_t token = -1;                                   // index into tokens, or -1
      std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
    };
    std::vector<AddedToken> tokens;
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void add(AddedToken token);
    bool empty() const { return tokens.empty(); }
    // The longest token at `at`, or -1.
    int32_t longest_at(std::string_view text, size_t at) const;
  };
  // One pre-tokenizer step.
  struct PreTokenizeStep {
    bool byte_level = false;         // else Split on `regex`
    bool add_prefix_space = false;   // ByteLevel
    std::optional<hf::Regex> regex;  // Split's pattern, or ByteLevel's GPT-2 regex if use_regex
  };
  struct Scratch;  // per-thread buffers of encode()

  HuggingFaceTokenizer() = default;
  // Loading, section by section (hf_tokenizer_json.cpp); `where` names the file in errors.
  Status read_normalizer(const nlohmann::json& normalizer, const std::string& where);
  Status read_model(const nlohmann::json& file, const std::string& where);
  Status read_pre_tokenizer(const nlohmann::json& pre_tokenizer, const std::string& where);
  Status read_post_processor(const nlohmann::json& file, const std::string& where);
  Status read_eod(const std::string& directory, const std::string& where);
  // Cuts `text` at the tokens of `matcher`; calls on_text(piece) and on_token(id) in order.
  template <class OnText, class OnToken>
  static void split_added(const AddedTokenMatcher& matcher, std::string_view text, OnText&& on_text,
                          OnToken&& on_token);
  // Steps 2 to 4 on a stretch between raw added tokens.
  void encode_stretch(std::string_view text, Scratch& scratch, std::vector<int32_t>& ids) const;
  // Steps 3 and 4 on normalized text.
  void encode_normalized(std::string_view text, Scratch& scratch, std::vector<int32_t>& ids) const;

  bpe::BpeCore core_;           // tokens' bytes (vocabulary and added tokens), merges, cache
  bpe::Vocabulary vocabulary_;  // bytes -> id of the model's tokens (ignore_merges)
  AddedTokenMatcher raw_added_, normalized_added_;
  bool nfc_ = false;
  std::vector<PreTokenizeStep> steps_;
  std::optional<int32_t> bos_;
  int32_t eod_ = 0;
};

}  // namespace lattice
