// The data commands' engine side: where Lattice keeps its data, and the demo corpus.
#pragma once

#include <iosfwd>
#include <string>

#include "lattice/status.h"

namespace lattice {

// $LATTICE_DATA_DIR, else $XDG_DATA_HOME/lattice, else $HOME/.local/share/lattice.
std::string default_data_dir();

struct DemoCorpus {
  std::string data_prefix;      // {dir}/demo/fortunes_text_document (.bin/.idx)
  std::string tokenizer_model;  // {dir}/demo/fortunes.model (GPTSentencePieceTokenizer)
  size_t documents = 0, tokens = 0;
  int vocab_size = 0;
  double unigram_entropy = 0;   // nats per token of the corpus's own token frequencies
};

// Paths of the demo corpus under `data_dir` (nothing is built).
DemoCorpus demo_corpus_paths(const std::string& data_dir);

// Builds the demo corpus from Debian's `fortunes` package: one fortune per document, a
// SentencePiece BPE tokenizer of `vocab_size` trained on it, and the indexed dataset with
// EOD appended. Reuses what exists unless `rebuild`. Progress goes to `log`.
Result<DemoCorpus> build_demo_corpus(const std::string& data_dir, int vocab_size, bool rebuild,
                                     std::ostream& log);

}  // namespace lattice
