// make_tokenizer, NullTokenizer, and the SentencePiece wrappers (Megatron's semantics, see
// sentencepiece_tokenizer.h). GPT2BPETokenizer lives in gpt2_bpe.cpp, HuggingFaceTokenizer in
// hf_tokenizer.cpp.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <charconv>
#include <cstdlib>
#include <map>
#include <thread>

#include "data/gpt2_bpe.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "lattice/data.h"

namespace lattice {

namespace {

// Megatron's _NullTokenizer: the text is the ids, space separated; EOD = --vocab-size, so
// the tokenizer's vocabulary is --vocab-size + 1 (design-notes.md, "null-tokenizer").
class NullTokenizer : public Tokenizer {
 public:
  explicit NullTokenizer(int vocab_size) : vocab_size_(vocab_size) {}
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    if (text.empty()) return ids;  // Megatron's int('') would raise; no ids is the useful answer
    size_t i = 0;
    while (i <= text.size()) {
      size_t j = text.find(' ', i);
      if (j == std::string_view::npos) j = text.size();
      int32_t v = 0;
      auto [p, ec] = std::from_chars(text.data() + i, text.data() + j, v);
      ids.push_back(ec == std::errc() && p == text.data() + j ? v : -1);
      i = j + 1;
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); i++) {
      if (i) out += ' ';
      out += std::to_string(ids[i]);
    }
    return out;
  }
  int vocab_size() const override { return vocab_size_ + 1; }
  int32_t eod() const override { return vocab_size_; }
  std::string type() const override { return "NullTokenizer"; }

 private:
  int vocab_size_;
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, bool gpt)
      : sp_(std::move(sp)), gpt_(gpt) {
    vocab_size_ = sp_->GetPieceSize();
    if (gpt_) {
      eod_ = sp_->eos_id();
      return;
    }
    // Megatron's _SentencePieceTokenizer._initalize: specials appended when not pieces.
    auto add = [&](const std::string& piece) {
      int id = sp_->PieceToId(piece);
      if (id == sp_->unk_id() && piece != sp_->IdToPiece(sp_->unk_id())) {
        auto it = extra_.find(piece);
        id = it != extra_.end() ? it->second : vocab_size_++;
        extra_[piece] = id;
      }
      specials_[piece] = id;
      return id;
    };
    add("<CLS>");
    add("<SEP>");
    eod_ = add("<EOD>");
    add("<MASK>");
    auto piece_or = [&](int id, const char* fallback) {
      return id >= 0 && id < sp_->GetPieceSize() ? sp_->IdToPiece(id) : std::string(fallback);
    };
    add(piece_or(sp_->pad_id(), "<PAD>"));
    add(piece_or(sp_->bos_id(), "<BOS>"));
    add(piece_or(sp_->eos_id(), "<EOS>"));
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    auto encode_plain = [&](std::string_view part) {
      std::vector<int> piece_ids;
      sp_->Encode(part, &piece_ids).IgnoreError();
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    };
    if (gpt_) {
      encode_plain(text);
      return ids;
    }
    // Special tokens written in the text stay whole (NeMo's rule, used by Megatron).
    size_t at = 0;
    while (true) {
      size_t best = std::string_view::npos;
      const std::pair<const std::string, int>* which = nullptr;
      for (const auto& s : specials_) {
        const size_t found = text.find(s.first, at);
        if (found < best) best = found, which = &s;
      }
      if (!which) break;
      encode_plain(text.substr(at, best - at));
      ids.push_back(which->second);
      at = best + which->first.size();
    }
    encode_plain(text.substr(at));
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out, part;
    std::vector<int> run;
    auto flush = [&] {
      sp_->Decode(run, &part).IgnoreError();
      out += part;
      run.clear();
    };
    for (int32_t id : ids) {
      const std::string* special = gpt_ ? nullptr : special_piece(id);
      if (special) {
        flush();
        out += " " + *special + " ";  // Megatron's detokenize spacing
      } else if (id >= 0 && id < sp_->GetPieceSize()) {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

  int vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return eod_; }
  std::string type() const override {
    return gpt_ ? "GPTSentencePieceTokenizer" : "SentencePieceTokenizer";
  }

 private:
  const std::string* special_piece(int32_t id) const {
    for (const auto& s : specials_)
      if (s.second == id) return &s.first;
    return nullptr;
  }
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  bool gpt_;
  int vocab_size_ = 0;
  int32_t eod_ = 0;
  std::map<std::string, int> specials_, extra_;
};

// Feeds texts to the SentencePiece trainer line by line.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& texts) : texts_(texts) { advance(); }
  bool done() const override { return text_ >= texts_.size(); }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (text_ < texts_.size()) {
      const std::string& t = texts_[text_];
      if (pos_ > t.size()) {
        text_++, pos_ = 0;
        continue;
      }
      size_t end = t.find('\n', pos_);
      if (end == std::string::npos) end = t.size();
      line_ = t.substr(pos_, end - pos_);
      pos_ = end + 1;
      if (!line_.empty()) return;
    }
  }
  const std::vector<std::string>& texts_;
  size_t text_ = 0, pos_ = 0;
  std::string line_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& model_file,
                                                      bool gpt_variant) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(model_file);
  if (!status.ok())
    return Status::io_error("--tokenizer-model " + model_file + ": " + status.ToString());
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(std::move(sp), gpt_variant));
}

Status train_sentencepiece(const std::vector<std::string>& texts,
                           const SentencePieceTrainOptions& o) {
  if (o.model_type != "bpe" && o.model_type != "unigram")
    return Status::invalid_argument("--model-type '" + o.model_type + "' is not bpe or unigram");
  const int threads =
      o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  const std::unordered_map<std::string, std::string> args = {
      {"model_prefix", o.model_prefix},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(threads)},
      {"byte_fallback", "true"},  // any byte can be encoded: no <unk> on unseen characters
      {"pad_id", "3"},            // <pad> exists, so Megatron adds no <PAD> of its own
      {"minloglevel", "1"},
  };
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(o.seed));  // sampling and shuffling
  LineIterator lines(texts);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines);
  if (!status.ok())
    return Status::invalid_argument("training the SentencePiece model " + o.model_prefix +
                                    ".model failed: " + status.ToString());
  return Status::ok();
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const TokenizerOptions& o) {
  if (o.type == "NullTokenizer") {
    if (o.vocab_size <= 0)
      return Status::invalid_argument("--tokenizer-type NullTokenizer needs --vocab-size");
    return std::unique_ptr<Tokenizer>(new NullTokenizer(o.vocab_size));
  }
  if (o.type == "GPT2BPETokenizer") {
    if (o.vocab_file.empty() || o.merge_file.empty())
      return Status::invalid_argument(
          "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
    auto t = Gpt2BpeTokenizer::load(o.vocab_file, o.merge_file);
    if (!t) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(*t));
  }
  if (o.type == "HuggingFaceTokenizer") {
    if (o.model_file.empty())
      return Status::invalid_argument(
          "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model (a tokenizer.json or "
          "the directory holding it)");
    auto t = HuggingFaceTokenizer::load(o.model_file);
    if (!t) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(*t));
  }
  if (o.type == "SentencePieceTokenizer" || o.type == "GPTSentencePieceTokenizer") {
    if (o.model_file.empty())
      return Status::invalid_argument("--tokenizer-type " + o.type + " needs --tokenizer-model");
    return load_sentencepiece(o.model_file, o.type == "GPTSentencePieceTokenizer");
  }
  return Status::invalid_argument("--tokenizer-type '" + o.type +
                                  "' is not one of NullTokenizer, GPT2BPETokenizer, "
                                  "SentencePieceTokenizer, GPTSentencePieceTokenizer, "
                                  "HuggingFaceTokenizer");
}

std::string gpt2_vocab_dir() {
  return default_data_dir() + "/gpt2";
}

std::string hf_tokenizers_dir() {
  return default_data_dir() + "/hf-tokenizers";
}

std::vector<int32_t> tokenize_with_bos(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> ids = tokenizer.encode(text);
  if (const std::optional<int32_t> bos = tokenizer.bos()) ids.insert(ids.begin(), *bos);
  return ids;
}

}  // namespace lattice
