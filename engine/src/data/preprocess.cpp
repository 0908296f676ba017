#include "data/preprocess.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <ostream>

#include "data/indexed_dataset.h"

namespace lattice {

Result<PreprocessReport> preprocess(const PreprocessOptions& o, std::ostream* log) {
  if (o.inputs.empty()) return Status::invalid_argument("--input is required");
  if (o.output_prefix.empty()) return Status::invalid_argument("--output-prefix is required");
  if (o.workers < 1) return Status::invalid_argument("--workers must be at least 1");
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
  std::vector<Document> batch;
  std::vector<std::vector<std::vector<int32_t>>> ids;  // (documents, keys, tokens)

  for (const std::string& input : o.inputs) {
    Result<DocumentReader> reader = DocumentReader::open(input, o.format, o.json_keys);
    if (!reader) return reader.status();
    if (!keys_fixed) {
      // Text formats have one field, named "text" as Megatron's default key.
      if (reader->format() != InputFormat::kJsonl) keys = {"text"};
      for (const std::string& key : keys) {
        const std::string prefix = o.output_prefix + "_" + key + "_document";
        Result<std::unique_ptr<IndexedDatasetBuilder>> b = IndexedDatasetBuilder::create(prefix, dtype);
        if (!b) return b.status();
        builders.push_back(std::move(*b));
        report.outputs.push_back(prefix);
      }
      keys_fixed = true;
    }
    const size_t bytes_before = report.bytes;
    while (true) {
      batch.clear();
      Result<size_t> n = reader->read(4096, batch);
      if (!n) return n.status();
      if (*n == 0) break;
      for (const Document& d : batch)
        if (d.fields.size() != keys.size())
          return Status::invalid_argument(input + ": documents have " +
                                          std::to_string(d.fields.size()) + " fields, expected " +
                                          std::to_string(keys.size()));
      ids.assign(batch.size(), {});
#pragma omp parallel for schedule(dynamic, 16) num_threads(o.workers)
      for (size_t i = 0; i < batch.size(); i++) {
        ids[i].resize(keys.size());
        for (size_t k = 0; k < keys.size(); k++) {
          ids[i][k] = tokenizer.encode(batch[i].fields[k]);
          // Megatron appends EOD only to non-empty documents.
          if (o.append_eod && !ids[i][k].empty()) ids[i][k].push_back(tokenizer.eod());
        }
      }
      for (size_t i = 0; i < batch.size(); i++) {
        for (size_t k = 0; k < keys.size(); k++) {
          if (!ids[i][k].empty()) {
            for (int32_t id : ids[i][k])
              if (id < 0 || id >= tokenizer.vocab_size())
                return Status::invalid_argument(
                    input + ": document " + std::to_string(report.documents + 1) +
                    " encodes to id " + std::to_string(id) + ", outside " + tokenizer.type() +
                    "'s vocabulary of " + std::to_string(tokenizer.vocab_size()));
            if (Status s = builders[k]->add_sequence(ids[i][k]); !s) return s;
            report.tokens += ids[i][k].size();
          }
          builders[k]->end_document();
        }
        report.documents++;
      }
      report.bytes = bytes_before + reader->bytes_read();
      if (log && report.documents >= next_log) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
