#include "data/preprocess.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <ostream>

#include "data/image_text_dataset.h"
#include "data/indexed_dataset.h"

namespace lattice {

Result<PreprocessReport> preprocess(const PreprocessOptions& o, std::ostream* log) {
  if (o.inputs.empty()) return Status::invalid_argument("--input is required");
  if (o.output_prefix.empty()) return Status::invalid_argument("--output-prefix is required");
  if (o.workers < 1) return Status::invalid_argument("--workers must be at least 1");
  if (o.images && o.sft)
    return Status::invalid_argument(
        "--images and --sft are exclusive: --images reads chat "
        "lines with images itself");
  if (o.images) return preprocess_image_text(o, log);
  if (o.image_size != 224)
    return Status::invalid_argument("--image-size applies only with --images");
  if (o.sft) return preprocess_chat(o, log);
  if (!o.chat_template.empty())
    return Status::invalid_argument("--chat-template applies only with --sft");
  Result<std::unique_ptr<Tokenizer>> made = make_tokenizer(o.tokenizer);
  if (!made) return made.status();
  const Tokenizer& tokenizer = **made;
  const TokenDtype dtype = token_dtype_for_vocab(tokenizer.vocab_size());

  PreprocessReport report;
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  std::vector<std::string> keys = o.json_keys;
  bool keys_fixed = false;
  const auto start = std::chrono::steady_clock::now();
  size_t next_log = o.log_interval;

  // One batch in flight per stage. See the note "preprocess-pipeline" below.
  struct Batch {
    std::vector<Document> docs;
    std::vector<std::vector<std::vector<int32_t>>> ids;  // (documents, keys, tokens)
    std::vector<int32_t> bad_id;  // (documents): an id outside the vocabulary, or 0
    size_t bytes_after = 0;       // reader position once this batch was read
    bool written = true;          // ids written out (or none yet)
  };
  Batch slots[2];
  const int32_t vocab = tokenizer.vocab_size();
  std::vector<int32_t> with_eod;  // the writer's buffer for a document plus its EOD

  for (const std::string& input : o.inputs) {
    Result<DocumentReader> reader = DocumentReader::open(input, o.format, o.json_keys);
    if (!reader) return reader.status();
    if (!keys_fixed) {
      // Text formats have one field, named "text" as Megatron's default key.
      if (reader->format() != InputFormat::kJsonl) keys = {"text"};
      for (const std::string& key : keys) {
        const std::string prefix = o.output_prefix + "_" + key + "_document";
        Result<std::unique_ptr<IndexedDatasetBuilder>> b =
            IndexedDatasetBuilder::create(prefix, dtype);
        if (!b) return b.status();
        builders.push_back(std::move(*b));
        report.outputs.push_back(prefix);
      }
      keys_fixed = true;
    }
    const size_t bytes_before = report.bytes;

    auto read_into = [&](Batch& batch) -> Status {
      Result<size_t> n = reader->read_batch(4096, batch.docs);
      if (!n) return n.status();
      for (const Document& d : batch.docs)
        if (d.fields.size() != keys.size())
          return Status::invalid_argument(input + ": documents have " +
                                          std::to_string(d.fields.size()) + " fields, expected " +
                                          std::to_string(keys.size()));
      batch.bytes_after = reader->bytes_read();
      return Status::ok();
    };
    auto encode_one = [&](Batch& batch, size_t i) {
      batch.ids[i].resize(keys.size());
      batch.bad_id[i] = 0;
      for (size_t k = 0; k < keys.size(); k++) {
        std::vector<int32_t>& ids = batch.ids[i][k];
        ids = tokenize_with_bos(tokenizer, batch.docs[i].fields[k]);  // Megatron's tokenize()
        for (int32_t id : ids)
          if (id < 0 || id >= vocab) batch.bad_id[i] = id == 0 ? -1 : id;
      }
    };
    auto write_out = [&](Batch& batch, size_t bytes_after) -> Status {
      if (batch.written) return Status::ok();
      for (size_t i = 0; i < batch.ids.size(); i++) {
        if (batch.bad_id[i] != 0)
          return Status::invalid_argument(
              input + ": document " + std::to_string(report.documents + 1) + " encodes to id " +
              std::to_string(batch.bad_id[i]) + ", outside " + tokenizer.type() +
              "'s vocabulary of " + std::to_string(vocab));
        for (size_t k = 0; k < keys.size(); k++) {
          const std::vector<int32_t>& ids = batch.ids[i][k];
          if (!ids.empty()) {
            std::span<const int32_t> sequence(ids);
            if (o.append_eod) {  // Megatron appends EOD only to non-empty documents
              with_eod.assign(ids.begin(), ids.end());
              with_eod.push_back(tokenizer.eod());
              sequence = with_eod;
            }
            if (Status s = builders[k]->add_sequence(sequence); !s) return s;
            report.tokens += sequence.size();
          }
          builders[k]->end_document();
        }
        report.documents++;
      }
      report.bytes = bytes_before + bytes_after;
      batch.written = true;
      return Status::ok();
    };

    // Note "preprocess-pipeline": batch k is encoded by every worker while one worker reads
    // batch k+1 and another writes batch k-1, so reading and writing overlap encoding and
    // the output stays in input order. Two slots alternate between the stages.
    if (Status s = read_into(slots[0]); !s) return s;
    for (int cur = 0; !slots[cur].docs.empty() || !slots[cur ^ 1].written; cur ^= 1) {
      Batch& encoding = slots[cur];
      Batch& other = slots[cur ^ 1];  // holds batch k-1's ids; receives batch k+1's docs
      encoding.ids.resize(encoding.docs.size());  // inner vectors keep their storage
      encoding.bad_id.assign(encoding.docs.size(), 0);
      encoding.written = encoding.docs.empty();
      Status read_status, write_status;
      const size_t written_bytes = other.bytes_after;  // read_into replaces it concurrently
#pragma omp parallel num_threads(o.workers)
      {
        // One thread writes then reads (both touch `other`, so in this order) while the
        // rest start encoding; it joins the encoding when done (dynamic schedule).
#pragma omp single nowait
        {
          write_status = write_out(other, written_bytes);
          if (write_status) read_status = read_into(other);
        }
#pragma omp for schedule(dynamic, 16)
        for (size_t i = 0; i < encoding.docs.size(); i++) encode_one(encoding, i);
      }
      if (!write_status) return write_status;
      if (!read_status) return read_status;
      if (log && report.documents >= next_log) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        char line[160];
        std::snprintf(line, sizeof line, "Processed %zu documents (%.1f docs/s, %.2f MB/s).\n",
                      report.documents, report.documents / s, report.bytes / 1e6 / s);
        *log << line << std::flush;
        while (next_log <= report.documents) next_log += o.log_interval;
      }
    }
  }
  for (auto& b : builders)
    if (Status s = b->finish(); !s) return s;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace lattice
