// GPT-2's byte-level BPE (see gpt2_bpe.h): loading vocab.json and merges.txt; merging and
// the word cache are bpe_core's.
#include "data/gpt2_bpe.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "data/gpt2_pretokenize.h"

namespace lattice {

namespace {

using bpe::spell;
using bpe::unspell;

}  // namespace

Gpt2BpeTokenizer::Gpt2BpeTokenizer() = default;
Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

Result<std::unique_ptr<Gpt2BpeTokenizer>> Gpt2BpeTokenizer::load(const std::string& vocab_json,
                                                                 const std::string& merges_txt) {
  Result<std::string> vocab_text = bpe::read_file(vocab_json, "vocab file");
  if (!vocab_text) return vocab_text.status();
  Result<std::string> merges_text = bpe::read_file(merges_txt, "merge file");
  if (!merges_text) return merges_text.status();
  const std::string vocab_where = "vocab file '" + vocab_json + "'";
  const std::string merges_where = "merge file '" + merges_txt + "'";

  // vocab.json: token spelling -> id
  Result<nlohmann::json> parsed = bpe::parse_json(*vocab_text, vocab_where);
  if (!parsed) return parsed.status();
  const nlohmann::json& vocab = *parsed;
  if (!vocab.is_object() || vocab.empty()) {
    return Status::corrupt(vocab_where + " must hold a non-empty JSON object of token -> id");
  }
  std::vector<std::string> tokens(vocab.size());  // (V) bytes of each id
  std::vector<bool> seen(vocab.size(), false);
  std::unordered_map<std::string, int32_t> id_of;  // bytes -> id
  id_of.reserve(vocab.size());
  std::string bytes;
  for (const auto& [spelling, id_json] : vocab.items()) {
    const int64_t id = id_json.is_number_integer() ? id_json.get<int64_t>() : -1;
    if (id < 0 || id >= static_cast<int64_t>(tokens.size()) || seen[id]) {
      return Status::corrupt(vocab_where + ": token \"" + spelling + "\" has id " + id_json.dump() +
                             "; ids must be 0.." + std::to_string(tokens.size() - 1) +
                             ", each used once");
    }
    if (!unspell(spelling, bytes)) {
      return Status::corrupt(vocab_where + ": token \"" + spelling + "\" (id " +
                             std::to_string(id) +
                             ") has a character outside GPT-2's byte alphabet");
    }
    seen[id] = true;
    tokens[id] = bytes;
    id_of.emplace(bytes, static_cast<int32_t>(id));
  }

  std::unique_ptr<Gpt2BpeTokenizer> t(new Gpt2BpeTokenizer());
  t->core_.set_tokens(tokens);
  int32_t byte_ids[256];
  for (int b = 0; b < 256; b++) {
    const auto it = id_of.find(std::string(1, static_cast<char>(b)));
    if (it == id_of.end()) {
      return Status::corrupt(vocab_where + " lacks the token of byte " + std::to_string(b) +
                             " (\"" + spell(std::string(1, static_cast<char>(b))) + "\")");
    }
    byte_ids[b] = it->second;
  }
  t->core_.set_byte_ids(byte_ids);
  const auto eod = id_of.find("<|endoftext|>");
  if (eod == id_of.end()) return Status::corrupt(vocab_where + " lacks \"<|endoftext|>\"");
  t->eod_ = eod->second;

  // merges.txt: "#version: 0.2", then "left right" per line, rank = order
  struct Merge {
    int32_t left, right, merged;
    size_t line;  // in merges_txt, from 1
  };
  std::vector<Merge> merges;
  std::string left, right;
  size_t line_number = 0;
  for (size_t begin = 0; begin < merges_text->size();) {
    size_t end = merges_text->find('\n', begin);
    if (end == std::string::npos) end = merges_text->size();
    const std::string_view line(merges_text->data() + begin, end - begin);
    begin = end + 1;
    line_number++;
    if (line_number == 1 && line.starts_with("#version")) continue;
    std::vector<std::string_view> parts;  // split on spaces, tabs and a Windows '\r'
    for (size_t i = 0; i < line.size();) {
      const size_t j = line.find_first_not_of(" \t\r", i);
      if (j == std::string_view::npos) break;
      const size_t k = std::min(line.find_first_of(" \t\r", j), line.size());
      parts.push_back(line.substr(j, k - j));
      i = k;
    }
    if (parts.empty()) continue;
    const std::string where = merges_where + " line " + std::to_string(line_number);
    if (parts.size() != 2) {
      return Status::corrupt(where + ": expected two tokens separated by a space, got \"" +
                             std::string(line) + "\"");
    }
    if (!unspell(parts[0], left) || !unspell(parts[1], right)) {
      return Status::corrupt(where + ": \"" + std::string(line) +
                             "\" has a character outside GPT-2's byte alphabet");
    }
    const auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    if (l == id_of.end() || r == id_of.end() || m == id_of.end()) {
      const std::string_view missing = l == id_of.end()   ? parts[0]
                                       : r == id_of.end() ? parts[1]
                                                          : std::string_view("their merge");
      return Status::corrupt(where + ": \"" + std::string(line) + "\": " + std::string(missing) +
                             " is not in " + vocab_where);
    }
    merges.push_back({l->second, r->second, m->second, line_number});
  }

  // See Note [merge order] (bpe_core.cpp): a token may only be merged after the merge that makes
  // it.
  std::vector<int64_t> made_at(tokens.size(), -1);  // (V) rank of the merge making each id
  for (size_t rank = 0; rank < merges.size(); rank++) made_at[merges[rank].merged] = rank;
  for (size_t rank = 0; rank < merges.size(); rank++) {
    const Merge& m = merges[rank];
    for (const int32_t part : {m.left, m.right}) {
      if (made_at[part] >= static_cast<int64_t>(rank)) {
        return Status::corrupt(merges_where + " line " + std::to_string(m.line) + ": \"" +
                               spell(tokens[part]) + "\" is used before line " +
                               std::to_string(merges[made_at[part]].line) + " makes it");
      }
    }
  }

  t->core_.reserve_merges(merges.size());
  for (size_t rank = 0; rank < merges.size(); rank++) {
    const Merge& m = merges[rank];
    t->core_.add_merge(m.left, m.right, static_cast<uint32_t>(rank), m.merged);
  }
  return t;
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  gpt2::WordSplitter splitter(text);
  core_.encode_words([&] { return splitter.next(); }, ids);
  return ids;
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  const auto valid = [&](int32_t id) { return id >= 0 && id < vocab_size(); };
  size_t length = 0;
  for (const int32_t id : ids) {
    assert(valid(id) && "decode: id outside the vocabulary");
    if (valid(id)) length += core_.token(id).size();
  }
  std::string text;
  text.reserve(length);
  for (const int32_t id : ids) {
    if (valid(id)) {
      text.append(core_.token(id));
    }
  }
  return text;
}

}  // namespace lattice
