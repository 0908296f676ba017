// `lattice data demo`: the fortunes corpus as a ready-to-train dataset.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <vector>

#include "data/documents.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/sentencepiece_tokenizer.h"
#include "lattice/data.h"

namespace lattice {

std::string default_data_dir() {
  if (const char* d = std::getenv("LATTICE_DATA_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/lattice";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/lattice";
}

namespace {
// An exclusive flock on a file, held until destruction: the processes that build the corpus at
// once (every rank of `mpirun -n 2 lattice demo` on a fresh data directory) take turns, and the
// later ones find it built. Without the lock they wrote the same .tmp files and all but the
// first failed to rename theirs.
class BuildLock {
 public:
  explicit BuildLock(const std::string& path) : fd_(::open(path.c_str(), O_CREAT | O_RDWR, 0644)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~BuildLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  BuildLock(const BuildLock&) = delete;
  BuildLock& operator=(const BuildLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};
}  // namespace

DemoCorpus demo_corpus_paths(const std::string& data_dir) {
  DemoCorpus c;
  c.data_prefix = data_dir + "/demo/fortunes_text_document";
  c.tokenizer_model = data_dir + "/demo/fortunes.model";
  return c;
}

Result<DemoCorpus> build_demo_corpus(const std::string& data_dir, int vocab_size, bool rebuild,
                                     std::ostream& log) {
  namespace fs = std::filesystem;
  DemoCorpus c = demo_corpus_paths(data_dir);
  const std::vector<std::string> files = fortune_files();
  if (files.empty())
    return Status::io_error(
        "no fortune files in /usr/share/games/fortunes: install Debian's `fortunes` package "
        "(installers/install-deps.sh does)");
  std::error_code ec;
  fs::create_directories(data_dir + "/demo", ec);
  if (ec) return Status::io_error(data_dir + "/demo: cannot create (" + ec.message() + ")");
  const BuildLock lock(data_dir + "/demo/.build.lock");
  if (!lock.held())
    return Status::io_error(data_dir +
                            "/demo/.build.lock: cannot open the lock that keeps two "
                            "processes from building the corpus at once");

  if (rebuild || !fs::exists(c.tokenizer_model)) {
    Result<std::vector<std::string>> read = read_all_texts(files, InputFormat::kFortune, {});
    if (!read) return read.status();
    const std::vector<std::string>& texts = *read;
    log << "> training a SentencePiece BPE tokenizer (vocabulary " << vocab_size << ") on "
        << texts.size() << " fortunes from " << files.size() << " files\n"
        << std::flush;
    SentencePieceTrainOptions t;
    t.model_prefix = data_dir + "/demo/fortunes";
    t.vocab_size = vocab_size;
    if (Status s = train_sentencepiece(texts, t); !s) return s;
  }
  if (rebuild || !fs::exists(c.data_prefix + ".idx") || !fs::exists(c.data_prefix + ".bin")) {
    PreprocessOptions p;
    p.inputs = files;
    p.format = InputFormat::kFortune;
    p.output_prefix = data_dir + "/demo/fortunes";
    p.tokenizer.type = "GPTSentencePieceTokenizer";
    p.tokenizer.model_file = c.tokenizer_model;
    p.append_eod = true;
    p.workers = 2;
    Result<PreprocessReport> r = preprocess(p, &log);
    if (!r) return r.status();
    log << "> wrote " << c.data_prefix << ".bin/.idx (" << r->documents << " documents, "
        << r->tokens << " tokens)\n";
  }
  Result<std::unique_ptr<IndexedDataset>> data = IndexedDataset::open(c.data_prefix);
  if (!data) return data.status();
  Result<std::unique_ptr<Tokenizer>> tok = load_sentencepiece(c.tokenizer_model, true);
  if (!tok) return tok.status();
  c.vocab_size = (*tok)->vocab_size();
  c.documents = (*data)->num_documents();
  c.tokens = (*data)->num_tokens();
  // Unigram entropy: the loss of a model that knows only token frequencies.
  std::vector<int64_t> counts(static_cast<size_t>(c.vocab_size), 0);
  std::vector<int32_t> buf;
  const auto lengths = (*data)->sequence_lengths();
  for (size_t s = 0; s < lengths.size(); s++) {
    buf.resize(static_cast<size_t>(lengths[s]));
    (*data)->read(s, 0, buf.size(), buf.data());
    for (int32_t id : buf) counts[static_cast<size_t>(id)]++;
  }
  for (int64_t n : counts)
    if (n > 0) {
      const double p = static_cast<double>(n) / static_cast<double>(c.tokens);
      c.unigram_entropy -= p * std::log(p);
    }
  return c;
}

}  // namespace lattice
