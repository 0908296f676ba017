// lattice train | demo | eval: the training loop with Megatron's flags.
#include <csignal>
#include <iostream>

#include "commands.h"
#include "lattice/data.h"
#include "lattice/run_record.h"
#include "lattice/train.h"
#include "lattice/train_options.h"

namespace lattice::cli {

namespace {

constexpr const char* kDemoConfig =
#include "demo_config.inc"
    ;

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

void on_signal(int) {
  request_stop();
}

// The model's parameter count as the run record states it (a file tokenizer sets the vocabulary).
int64_t parameter_count(const TrainOptions& o) {
  ModelConfig m = o.model;
  if (o.tokenizer.type != "NullTokenizer")
    if (Result<std::unique_ptr<Tokenizer>> t = make_tokenizer(o.tokenizer); t)
      m.vocab_size = (*t)->vocab_size();
  return m.num_parameters();
}

int run_training(const std::string& command, Result<TrainOptions> options,
                 const std::string& command_line) {
  if (!options) {
    print_error(command, options.status().message());
    return 2;
  }
  const std::string db = options->db.empty() ? default_run_db() : options->db;
  const std::string name = options->run_name.empty() ? default_run_name() : options->run_name;
  Result<std::unique_ptr<RunRecorder>> recorder =
      RunRecorder::open(db, name, options->tags, command_line, train_options_json(*options),
                        parameter_count(*options));
  if (!recorder) {
    print_error(command, recorder.status().message());
    return 2;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  ConsoleSink console(std::cout, options->log_interval, options->profile);
  console.on_message("recording run " + name + " in " + db);
  TeeSink sinks({&console, recorder->get()});
  Result<TrainSummary> result = train(*options, sinks);
  if (!result) {
    if (stop_requested())
      (*recorder)->killed();
    else
      (*recorder)->fail(result.status().message());
    print_error(command, result.status().message());
    return stop_requested() ? 130 : 1;
  }
  if (!(*recorder)->status())
    print_error(command, "the run record is incomplete: " + (*recorder)->status().message());
  return 0;
}

std::string join_command_line(const std::string& command, const std::vector<std::string>& args) {
  std::string line = "lattice " + command;
  for (const std::string& a : args) line += " " + a;
  return line;
}

}  // namespace

void print_error(const std::string& command, const std::string& message) {
  size_t start = 0;
  while (start <= message.size()) {
    size_t end = message.find('\n', start);
    if (end == std::string::npos) end = message.size();
    std::cerr << "lattice " << command << ": " << message.substr(start, end - start) << "\n";
    start = end + 1;
  }
}

int train_command(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << train_options_help();
    return 0;
  }
  return run_training("train", parse_train_options(args), join_command_line("train", args));
}

int demo_command(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << "usage: lattice demo [train flags to override]\n\n"
                 "Builds the demo corpus on first use (`lattice data demo`: the fortunes\n"
                 "package, a SentencePiece tokenizer trained on it) and trains the embedded\n"
                 "configuration on it:\n"
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
  overrides.insert(overrides.end(), args.begin(), args.end());
  return run_training("demo",
                      parse_train_options_json(kDemoConfig, "embedded demo config", overrides),
                      join_command_line("demo", args));
}

int eval_command(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << "usage: lattice eval --data-path PREFIX --seq-length S --eval-iters K "
                 "[--load-hf FILE] [model and tokenizer flags]\n\n"
                 "Scores a model on the first K samples of PREFIX in document order (sample i\n"
                 "is tokens [i*S, i*S+S] of the documents concatenated), and prints the mean\n"
                 "loss and perplexity. Takes `lattice train`'s model and tokenizer flags.\n";
    return 0;
  }
  Result<TrainOptions> options = parse_train_options(args);
  if (!options) {
    print_error("eval", options.status().message());
    return 2;
  }
  Result<EvalResult> r = evaluate_sequential(*options, options->eval_iters);
  if (!r) {
    print_error("eval", r.status().message());
    return 1;
  }
  std::printf("evaluated %lld samples (%lld tokens) of %s | lm loss: %.6E | lm loss PPL: %.6E |\n",
              static_cast<long long>(r->samples), static_cast<long long>(r->tokens),
              options->data_path[0].c_str(), r->lm_loss, r->perplexity);
  return 0;
}

}  // namespace lattice::cli
