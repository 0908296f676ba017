// `lattice data preprocess --sft`: conversations -> chat template -> tokens + loss mask, as two
// indexed datasets with identical document lengths (one document per conversation, no EOD
// beyond what the template writes). Batches of lines are rendered by --workers threads and
// written in input order.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <ostream>

#include "data/chat_data.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"
#include "data/preprocess.h"

namespace lattice {

Result<PreprocessReport> preprocess_chat(const PreprocessOptions& o, std::ostream* log) {
  if (o.append_eod)
    return Status::invalid_argument(
        "--append-eod does not apply with --sft: the chat template writes the end of each turn");
  if (o.json_keys != std::vector<std::string>{"text"})
    return Status::invalid_argument(
        "--json-keys does not apply with --sft: conversations are read from \"messages\" or "
        "\"prompt\" and \"response\"");
  if (o.format != InputFormat::kAuto && o.format != InputFormat::kJsonl)
    return Status::invalid_argument("--sft reads JSONL; --input-format must be jsonl or auto");
  Result<std::unique_ptr<Tokenizer>> made = make_tokenizer(o.tokenizer);
  if (!made) return made.status();
  const Tokenizer& tokenizer = **made;
  Result<ChatTemplate> chat = chat_template_for(o.tokenizer, o.chat_template);
  if (!chat) return chat.status();
  const int32_t vocab = tokenizer.vocab_size();

  PreprocessReport report;
  const std::string prefix = o.output_prefix + "_text_document";
  const std::string mask_prefix = prefix + kLossMaskSuffix;
  Result<std::unique_ptr<IndexedDatasetBuilder>> tokens_out =
      IndexedDatasetBuilder::create(prefix, token_dtype_for_vocab(vocab));
  if (!tokens_out) return tokens_out.status();
  Result<std::unique_ptr<IndexedDatasetBuilder>> mask_out =
      IndexedDatasetBuilder::create(mask_prefix, TokenDtype::kU8);
  if (!mask_out) return mask_out.status();
  report.outputs = {prefix, mask_prefix};

  const auto start = std::chrono::steady_clock::now();
  size_t next_log = o.log_interval;
  constexpr size_t kBatch = 1024;
  JsonlBatch batch;
  std::vector<Result<RenderedConversation>> rendered;
  std::vector<int32_t> mask_ids;
  for (const std::string& input : o.inputs) {
    std::ifstream in(input, std::ios::binary);
    if (!in) return Status::io_error("cannot open --input '" + input + "'");
    size_t number = 0;
    bool more = true;
    while (more) {
      more = read_jsonl_batch(in, kBatch, number, report.bytes, batch);
      const std::vector<std::string>& lines = batch.lines;
      rendered.assign(lines.size(), Status::internal("not rendered"));
#pragma omp parallel for schedule(dynamic, 8) num_threads(o.workers)
      for (size_t k = 0; k < lines.size(); k++) {
        Result<Conversation> c = parse_chat_line(lines[k]);
        rendered[k] = c ? render_for_training(*chat, tokenizer, *c)
                        : Result<RenderedConversation>(c.status());
      }
      for (size_t k = 0; k < lines.size(); k++) {
        const std::string where = input + " line " + std::to_string(batch.numbers[k]) + ": ";
        if (!rendered[k]) return Status::invalid_argument(where + rendered[k].status().message());
        const RenderedConversation& r = *rendered[k];
        for (int32_t id : r.tokens)
          if (id < 0 || id >= vocab)
            return Status::invalid_argument(where + "encodes to id " + std::to_string(id) +
                                            ", outside " + tokenizer.type() + "'s vocabulary of " +
                                            std::to_string(vocab));
        mask_ids.assign(r.loss_mask.begin(), r.loss_mask.end());
        if (Status s = (*tokens_out)->add_sequence(r.tokens); !s) return s;
        if (Status s = (*mask_out)->add_sequence(mask_ids); !s) return s;
        (*tokens_out)->end_document();
        (*mask_out)->end_document();
        report.documents++;
        report.tokens += r.tokens.size();
      }
      if (log && report.documents >= next_log) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        char text[160];
        std::snprintf(text, sizeof text, "Processed %zu conversations (%.1f docs/s, %.2f MB/s).\n",
                      report.documents, report.documents / s, report.bytes / 1e6 / s);
        *log << text << std::flush;
        while (next_log <= report.documents) next_log += o.log_interval;
      }
    }
  }
  if (report.documents == 0) return Status::invalid_argument("--input holds no conversations");
  if (Status s = (*tokens_out)->finish(); !s) return s;
  if (Status s = (*mask_out)->finish(); !s) return s;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace lattice
