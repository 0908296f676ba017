// lattice data preprocess | inspect | train-tokenizer | demo | shapes.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "data/documents.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/shapes_dataset.h"
#include "lattice/data.h"
#include "lattice/flags.h"

namespace lattice::cli {

namespace {

std::vector<FlagSpec> tokenizer_flags(TokenizerOptions& t) {
  return {
      {"tokenizer-type",
       "NullTokenizer | GPT2BPETokenizer | SentencePieceTokenizer | GPTSentencePieceTokenizer | "
       "HuggingFaceTokenizer",
       &t.type},
      {"vocab-file", "GPT2BPETokenizer vocabulary (vocab.json)", &t.vocab_file},
      {"merge-file", "GPT2BPETokenizer merges (merges.txt)", &t.merge_file},
      {"tokenizer-model",
       "SentencePiece model file; HuggingFaceTokenizer: tokenizer.json or its directory",
       &t.model_file},
      {"vocab-size", "NullTokenizer vocabulary (EOD is this id)", &t.vocab_size}};
}

// Parses flags; prints help or errors. Returns -1 to continue, else the exit code.
int parse_or_report(const std::string& command, const std::string& usage,
                    const std::vector<std::string>& args, const std::vector<FlagSpec>& specs,
                    std::vector<std::string>* positional) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << "usage: lattice data " << usage << "\n\n" << flags_help(specs);
      return 0;
    }
  std::vector<std::string> errors = parse_flags(args, specs, positional, "lattice data " + command);
  for (const std::string& e : errors) print_error("data " + command, e);
  return errors.empty() ? -1 : 2;
}

int preprocess_command(const std::vector<std::string>& args) {
  PreprocessOptions o;
  std::string format = "auto";
  std::vector<FlagSpec> specs = {
      {"input", "input file(s): JSONL, plain text or fortune files", &o.inputs},
      {"input-format", "auto | jsonl | lines | paragraphs | fortune", &format},
      {"json-keys", "JSONL keys to extract, one output per key", &o.json_keys},
      {"output-prefix", "writes {prefix}_{key}_document.bin/.idx (--sft: see --sft)",
       &o.output_prefix},
      {"append-eod", "append the tokenizer's EOD to every document", &o.append_eod},
      {"workers", "encoding threads", &o.workers},
      {"log-interval", "documents between progress lines", &o.log_interval},
      {"sft",
       "inputs are conversations (JSONL {\"messages\": [{\"role\", \"content\"}...]} or "
       "{\"prompt\", \"response\"}): writes the tokens to {prefix}_text_document.bin/.idx and "
       "their loss mask (1 on assistant tokens) to {prefix}_text_document_loss_mask.bin/.idx",
       &o.sft},
      {"chat-template",
       "with --sft: chatml | llama3 | default | a tokenizer_config.json (or its directory) | a "
       ".jinja file; default: the HF tokenizer's own chat_template, else 'default'",
       &o.chat_template},
      {"images",
       "inputs are image-text JSONL ({\"image\", \"text\"}, LLaVA {\"image\", "
       "\"conversations\"} or {\"messages\"} with image parts): also writes the images, "
       "padded and resized, to {prefix}_text_document_images.bin/.idx/.json (docs/data.md)",
       &o.images},
      {"image-size", "with --images: the side of the stored square images", &o.image_size},
      {"image-mean",
       "with --images: the per-channel mean R G B (on pixel / 255) training normalises with and "
       "pads with; default CLIP's",
       &o.image_mean},
      {"image-std", "with --images: the per-channel std R G B; default CLIP's", &o.image_std}};
  for (const FlagSpec& f : tokenizer_flags(o.tokenizer)) specs.push_back(f);
  if (int rc = parse_or_report("preprocess",
                               "preprocess --input FILE --output-prefix PREFIX "
                               "--tokenizer-type T [flags]",
                               args, specs, nullptr);
      rc >= 0)
    return rc;
  Result<InputFormat> f = parse_input_format(format);
  if (!f) {
    print_error("data preprocess", f.status().message());
    return 2;
  }
  o.format = *f;
  Result<PreprocessReport> r = preprocess(o, &std::cerr);
  if (!r) {
    print_error("data preprocess", r.status().message());
    return 1;
  }
  std::printf("processed %zu documents, %zu tokens, %.1f MB in %.2f s (%.1f docs/s, %.2f MB/s)\n",
              r->documents, r->tokens, r->bytes / 1e6, r->seconds, r->documents / r->seconds,
              r->bytes / 1e6 / r->seconds);
  for (const std::string& out : r->outputs)
    std::printf("wrote %s.bin and %s.idx\n", out.c_str(), out.c_str());
  return 0;
}

int inspect_command(const std::vector<std::string>& args) {
  TokenizerOptions t;
  t.type = "";
  int64_t document = -1;
  std::vector<FlagSpec> specs = {
      {"document", "decode (or list the ids of) this document", &document}};
  for (const FlagSpec& f : tokenizer_flags(t)) specs.push_back(f);
  std::vector<std::string> positional;
  if (int rc = parse_or_report("inspect", "inspect PREFIX [--document N] [tokenizer flags]", args,
                               specs, &positional);
      rc >= 0)
    return rc;
  if (positional.size() != 1) {
    print_error("data inspect", "expects one dataset PREFIX (the path without .bin/.idx)");
    return 2;
  }
  Result<std::unique_ptr<IndexedDataset>> data = IndexedDataset::open(positional[0]);
  if (!data) {
    print_error("data inspect", data.status().message());
    return 1;
  }
  const IndexedDataset& d = **data;
  std::printf("%s\n  documents: %zu\n  sequences: %zu\n  tokens:    %zu\n  dtype:     %s\n",
              positional[0].c_str(), d.num_documents(), d.num_sequences(), d.num_tokens(),
              token_dtype_name(d.dtype()));
  if (document < 0) return 0;
  if (static_cast<size_t>(document) >= d.num_documents()) {
    print_error("data inspect", "--document " + std::to_string(document) + " is beyond the " +
                                    std::to_string(d.num_documents()) + " documents");
    return 2;
  }
  std::vector<int32_t> ids;
  const auto index = d.document_index();
  for (int64_t s = index[document]; s < index[document + 1]; s++) {
    const size_t n = static_cast<size_t>(d.sequence_lengths()[s]);
    const size_t at = ids.size();
    ids.resize(at + n);
    d.read(static_cast<size_t>(s), 0, n, ids.data() + at);
  }
  std::printf("document %lld: %zu tokens\n", static_cast<long long>(document), ids.size());
  if (t.type.empty()) {
    for (size_t i = 0; i < ids.size(); i++) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n(pass --tokenizer-type and its files to decode)\n");
    return 0;
  }
  Result<std::unique_ptr<Tokenizer>> tok = make_tokenizer(t);
  if (!tok) {
    print_error("data inspect", tok.status().message());
    return 2;
  }
  std::cout << (*tok)->decode(ids) << "\n";
  return 0;
}

int train_tokenizer_command(const std::vector<std::string>& args) {
  SentencePieceTrainOptions o;
  std::vector<std::string> inputs, keys = {"text"};
  std::string format = "auto";
  const std::vector<FlagSpec> specs = {
      {"input", "training text: JSONL, plain text or fortune files", &inputs},
      {"input-format", "auto | jsonl | lines | paragraphs | fortune", &format},
      {"json-keys", "JSONL keys whose text is used", &keys},
      {"model-prefix", "writes {prefix}.model and {prefix}.vocab", &o.model_prefix},
      {"vocab-size", "pieces in the vocabulary", &o.vocab_size},
      {"model-type", "bpe | unigram", &o.model_type},
      {"character-coverage", "share of characters the vocabulary must cover",
       &o.character_coverage},
      {"seed", "sampling seed", &o.seed}};
  if (int rc = parse_or_report("train-tokenizer",
                               "train-tokenizer --input FILE --model-prefix P "
                               "--vocab-size N [--model-type bpe|unigram]",
                               args, specs, nullptr);
      rc >= 0)
    return rc;
  if (inputs.empty() || o.model_prefix.empty()) {
    print_error("data train-tokenizer", "--input and --model-prefix are required");
    return 2;
  }
  Result<InputFormat> f = parse_input_format(format);
  if (!f) {
    print_error("data train-tokenizer", f.status().message());
    return 2;
  }
  Result<std::vector<std::string>> read = read_all_texts(inputs, *f, keys);
  if (!read) {
    print_error("data train-tokenizer", read.status().message());
    return 1;
  }
  const std::vector<std::string>& texts = *read;
  if (Status s = train_sentencepiece(texts, o); !s) {
    print_error("data train-tokenizer", s.message());
    return 1;
  }
  std::printf("wrote %s.model and %s.vocab (%d pieces, %s) from %zu texts\n",
              o.model_prefix.c_str(), o.model_prefix.c_str(), o.vocab_size, o.model_type.c_str(),
              texts.size());
  return 0;
}

int demo_data_command(const std::vector<std::string>& args) {
  std::string dir = default_data_dir();
  int vocab = 4096;
  bool rebuild = false;
  const std::vector<FlagSpec> specs = {
      {"data-dir", "where the demo corpus goes", &dir},
      {"vocab-size", "SentencePiece vocabulary of the demo tokenizer", &vocab},
      {"rebuild", "rebuild even if the files exist", &rebuild}};
  if (int rc = parse_or_report("demo", "demo [--data-dir DIR] [--vocab-size N] [--rebuild]", args,
                               specs, nullptr);
      rc >= 0)
    return rc;
  Result<DemoCorpus> c = build_demo_corpus(dir, vocab, rebuild, std::cout);
  if (!c) {
    print_error("data demo", c.status().message());
    return 1;
  }
  std::printf(
      "demo corpus: %s (.bin/.idx), tokenizer %s\n  %zu documents, %zu tokens, "
      "vocabulary %d, unigram entropy %.4f nats/token\n",
      c->data_prefix.c_str(), c->tokenizer_model.c_str(), c->documents, c->tokens, c->vocab_size,
      c->unigram_entropy);
  return 0;
}

int shapes_command(const std::vector<std::string>& args) {
  ShapesOptions o;
  const std::vector<FlagSpec> specs = {
      {"output-dir", "where images/ and the JSONL files go", &o.output_dir},
      {"train", "training images", &o.train},
      {"valid", "held-out images", &o.valid},
      {"image-size", "the side of each square image in pixels", &o.image_size},
      {"seed", "the generator's seed", &o.seed}};
  if (int rc = parse_or_report("shapes",
                               "shapes --output-dir DIR [--train N] [--valid N] [--image-size S] "
                               "[--seed N]",
                               args, specs, nullptr);
      rc >= 0)
    return rc;
  Result<ShapesReport> r = generate_shapes(o);
  if (!r) {
    print_error("data shapes", r.status().message());
    return 1;
  }
  std::printf(
      "wrote %d training and %d held-out %dx%d images to %s/images, captions to "
      "{train,valid}.jsonl and questions to {train,valid}_chat.jsonl\n",
      r->train, r->valid, o.image_size, o.image_size, o.output_dir.c_str());
  return 0;
}

}  // namespace

int data_command(const std::vector<std::string>& args) {
  const std::string usage =
      "usage: lattice data <preprocess|inspect|train-tokenizer|demo|shapes> [flags]\n"
      "  preprocess        documents -> Megatron .bin/.idx (Megatron's preprocess_data.py flags)\n"
      "  inspect           counts, dtype, and one document decoded\n"
      "  train-tokenizer   train a SentencePiece BPE or unigram model\n"
      "  demo              build the fortunes demo corpus and its tokenizer\n"
      "  shapes            generate the shapes image-text dataset (PNG + JSONL)\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? std::cerr : std::cout) << usage;
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "preprocess") return preprocess_command(rest);
  if (args[0] == "inspect") return inspect_command(rest);
  if (args[0] == "train-tokenizer") return train_tokenizer_command(rest);
  if (args[0] == "demo") return demo_data_command(rest);
  if (args[0] == "shapes") return shapes_command(rest);
  std::cerr << "lattice data: unknown command '" << args[0] << "'\n" << usage;
  return 2;
}

}  // namespace lattice::cli
