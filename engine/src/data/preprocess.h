// `lattice data preprocess`: documents -> token ids -> Megatron's indexed dataset, one output
// pair per JSON key (`{prefix}_{key}_document.bin/.idx`), in input order, with --workers
// threads encoding batches of documents in parallel.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "data/documents.h"
#include "lattice/tokenizer.h"

namespace lattice {

struct PreprocessOptions {
  std::vector<std::string> inputs;                // --input (several files are concatenated)
  InputFormat format = InputFormat::kAuto;        // --input-format
  std::vector<std::string> json_keys = {"text"};  // --json-keys
  std::string output_prefix;                      // --output-prefix
  TokenizerOptions tokenizer;                     // --tokenizer-type and its files
  bool append_eod = false;                        // --append-eod
  int workers = 1;                                // --workers
  int log_interval = 10000;                       // --log-interval (documents)
};

struct PreprocessReport {
  size_t documents = 0, tokens = 0, bytes = 0;
  double seconds = 0;
  std::vector<std::string> outputs;  // the prefixes written, one per key
};

// Writes progress lines ("Processed N documents (X docs/s, Y MB/s).") to `log` when set.
Result<PreprocessReport> preprocess(const PreprocessOptions& options, std::ostream* log);

}  // namespace lattice
