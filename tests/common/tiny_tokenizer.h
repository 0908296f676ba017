// A small byte-level Hugging Face tokenizer.json written by the test itself (no installed files):
// for HuggingFaceTokenizer's own tests and for tests that need a tokenizer with a BOS.
// Header-only.
#pragma once

#include <QString>
#include <QTemporaryDir>

#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "data/bpe_core.h"

namespace lattice::testing {

// Writes DIR/NAME/tokenizer.json and returns its path: the 256 byte tokens, "ab" (256), "abc"
// (257), "ca" (258, made by no merge), the added special token "<|endoftext|>" (259), ByteLevel
// with GPT-2's regex, merges "a b" and "ab c"; `edit` changes it before it is written.
inline std::string tiny_tokenizer(const QTemporaryDir& dir, const std::string& name,
                                  const std::function<void(nlohmann::json&)>& edit = {}) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; b++) vocab[bpe::spell(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab["ca"] = 258;
  json j = {
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 259},
                                     {"content", "<|endoftext|>"},
                                     {"special", true},
                                     {"normalized", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"single_word", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", json::array({"a b", "ab c"})},
        {"ignore_merges", false},
        {"byte_fallback", false}}}};
  if (edit) edit(j);
  const std::string sub = dir.filePath(QString::fromStdString(name)).toStdString();
  std::filesystem::create_directories(sub);
  spit(sub + "/tokenizer.json", j.dump());
  return sub + "/tokenizer.json";
}

// An `edit` for tiny_tokenizer: a TemplateProcessing post-processor that puts "<|endoftext|>"
// (259) before the text, so that the tokenizer has a BOS (as Llama 2's `<s>`).
inline void with_bos_template(nlohmann::json& j) {
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|endoftext|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
      {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {259}}}}}}};
}

}  // namespace lattice::testing
