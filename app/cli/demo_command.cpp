// lattice demo: the embedded default run. Builds the demo corpus on first use, trains the
// embedded configuration on it, saves the model in a directory of its own under
// $LATTICE_DATA_DIR/demo/, prints a few lines generated from that checkpoint and names the
// commands that use it next. Each run keeps its own directory, so a second demo never
// overwrites the first one's model.
#include <unistd.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "lattice/data.h"
#include "lattice/infer.h"
#include "lattice/run_record.h"

namespace lattice::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kDemoConfig =
#include "demo_config.inc"
    ;

// The samples printed after training: the corpus is fortunes, so openings of the kind it holds.
constexpr const char* kSamplePrompts[] = {"The best way to", "Q: What is", "Never"};
constexpr int kSampleTokens = 40;

// The value of `--name V` or `--name=V` among `args`, or "".
std::string flag_value(const std::vector<std::string>& args, const std::string& name) {
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i] == "--" + name && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind("--" + name + "=", 0) == 0) return args[i].substr(name.size() + 3);
  }
  return {};
}

// How to name a program of this build in the printed commands: its bare name when PATH finds
// this very file, else its full path.
std::string program(const std::string& name) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path here = ec ? fs::path(name) : self.parent_path() / name;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');)
      if (!dir.empty() && fs::equivalent(fs::path(dir) / name, here, ec)) return name;
  }
  return here.string();
}

// Points $LATTICE_DATA_DIR/demo/latest at the newest run's directory (replaced atomically).
void point_latest_at(const fs::path& run_dir) {
  const fs::path latest = run_dir.parent_path() / "latest";
  const fs::path tmp = run_dir.parent_path() / ".latest.tmp";
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_directory_symlink(run_dir.filename(), tmp, ec);
  if (!ec) fs::rename(tmp, latest, ec);
}

// A few lines of text from the saved model, sampled as `lattice generate --top-p 0.9` would.
void print_samples(const std::string& checkpoint) {
  InferenceOptions io;
  io.load = checkpoint;
  Result<TokenizerOptions> tokenizer_options = checkpoint_tokenizer(checkpoint, 0);
  Result<std::unique_ptr<Tokenizer>> tokenizer =
      tokenizer_options ? make_tokenizer(*tokenizer_options)
                        : Result<std::unique_ptr<Tokenizer>>(tokenizer_options.status());
  Result<std::unique_ptr<Generator>> generator =
      tokenizer ? Generator::load(io, nullptr)
                : Result<std::unique_ptr<Generator>>(tokenizer.status());
  if (!generator) {
    print_error("demo", "could not generate from the saved model: " + generator.status().message());
    return;
  }
  (*generator)->set_tokenizer(tokenizer->get());
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < std::size(kSamplePrompts); i++) {
    GenerationRequest r;
    r.prompt = (*tokenizer)->encode(kSamplePrompts[i]);
    r.tokens_to_generate = kSampleTokens;
    r.sampling.temperature = 0.8f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = i + 1;
    r.logprobs = false;
    requests.push_back(std::move(r));
  }
  Result<std::vector<GenerationResult>> results = (*generator)->generate(requests);
  if (!results) {
    print_error("demo", "could not generate from the saved model: " + results.status().message());
    return;
  }
  std::cout << "> samples from the model (temperature 0.8, top-p 0.9, " << kSampleTokens
            << " tokens at most):\n";
  for (size_t i = 0; i < results->size(); i++) {
    // Prompt and continuation decoded together: a SentencePiece continuation decoded alone
    // loses the space it starts with.
    std::vector<int32_t> ids = requests[i].prompt;
    for (const int32_t id : (*results)[i].tokens)
      if (id != (*generator)->eod()) ids.push_back(id);
    std::string text = (*tokenizer)->decode(ids);
    for (char& c : text)
      if (c == '\n' || c == '\t') c = ' ';
    std::cout << "  " << i + 1 << ". " << text << "\n";
  }
}

void print_next_steps(const std::string& checkpoint, const std::string& run_name,
                      const std::string& db) {
  const std::string lattice = program("lattice"), studio = program("lattice-studio");
  const std::string db_flag = db.empty() ? "" : " --db " + db;
  std::cout << "> the model is saved in " << checkpoint << "\n"
            << "  (" << fs::path(checkpoint).parent_path().string()
            << "/latest points at the newest demo; each demo run keeps its own directory)\n"
            << "> next:\n"
            << "  " << lattice << " generate --load " << checkpoint
            << " --prompt \"Your text\" --top-p 0.9 --stream\n"
            << "  " << lattice << " serve --load " << checkpoint
            << " --port 5000    # OpenAI's /v1/completions and Megatron's PUT /api\n"
            << "  " << lattice << " runs show " << run_name << db_flag
            << "    # the run's settings, losses and checkpoint\n"
            << "  " << studio << db_flag << "    # History: run " << run_name
            << "; Playground: its checkpoint\n";
}

}  // namespace

int demo_command(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << "usage: lattice demo [train flags to override]\n\n"
                 "Builds the demo corpus on first use (`lattice data demo`: the fortunes\n"
                 "package, a SentencePiece tokenizer trained on it), trains the embedded\n"
                 "configuration on it and saves the model in a new directory per run,\n"
                 "$LATTICE_DATA_DIR/demo/<run name> (--save DIR to choose another; demo/latest\n"
                 "points at the newest). At the end it prints a few generated lines and the\n"
                 "commands that use the model. The configuration:\n"
              << kDemoConfig;
    return 0;
  }
  Result<DemoCorpus> corpus = build_demo_corpus(default_data_dir(), 4096, false, std::cout);
  if (!corpus) {
    print_error("demo", corpus.status().message());
    return 1;
  }
  std::cout << "> demo corpus: " << corpus->documents << " fortunes, " << corpus->tokens
            << " tokens; unigram entropy " << corpus->unigram_entropy
            << " nats/token (the loss of a model that knows only token frequencies)\n";
  std::vector<std::string> overrides = {"--data-path",       corpus->data_prefix,
                                        "--tokenizer-type",  "GPTSentencePieceTokenizer",
                                        "--tokenizer-model", corpus->tokenizer_model};
  std::string run_name = flag_value(args, "run-name");
  if (run_name.empty()) {
    run_name = default_run_name();
    overrides.insert(overrides.end(), {"--run-name", run_name});
  }
  std::string save = flag_value(args, "save");
  const bool own_directory = save.empty();
  if (own_directory) {
    save = (fs::path(default_data_dir()) / "demo" / run_name).string();
    overrides.insert(overrides.end(), {"--save", save});
  }
  overrides.insert(overrides.end(), args.begin(), args.end());
  auto after = [&] {
    std::error_code ec;
    const std::string checkpoint = fs::absolute(save, ec).lexically_normal().string();
    if (own_directory) point_latest_at(checkpoint);
    print_samples(checkpoint);
    print_next_steps(checkpoint, run_name, flag_value(args, "db"));
  };
  return run_training("demo",
                      parse_train_options_json(kDemoConfig, "embedded demo config", overrides),
                      join_command_line("demo", args), after);
}

}  // namespace lattice::cli
