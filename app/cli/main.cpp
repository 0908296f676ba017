// `lattice`: the command-line face of the engine. Subcommands: train, demo, version.
// Data, plan, runs, ckpt, generate and serve arrive with their issues.
#include <iostream>
#include <string>
#include <vector>

#include "lattice/kernels.h"
#include "lattice/train.h"
#include "lattice/train_options.h"

namespace {

constexpr const char* kDemoConfig =
#include "demo_config.inc"
    ;

void print_usage(std::ostream& out) {
  out << "usage: lattice <command> [flags]\n\n"
         "commands:\n"
         "  train     train a GPT model (Megatron-LM flag names; `lattice train --help`)\n"
         "  demo      train the embedded demo model on this machine's CPU\n"
         "  version   print the version and the BLAS kernel in use\n";
}

int run_training(lattice::Result<lattice::TrainOptions> options) {
  if (!options) {
    std::cerr << "lattice train: " << options.status().message() << "\n";
    return 2;
  }
  lattice::ConsoleSink console(std::cout, options->log_interval, options->profile);
  lattice::Result<lattice::TrainSummary> result = lattice::train(*options, console);
  if (!result) {
    std::cerr << "lattice train: " << result.status().message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage(args.empty() ? std::cerr : std::cout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  const bool help = !args.empty() && (args[0] == "--help" || args[0] == "-h");
  if (command == "train") {
    if (help) {
      std::cout << lattice::train_options_help();
      return 0;
    }
    return run_training(lattice::parse_train_options(args));
  }
  if (command == "demo") {
    if (help) {
      std::cout << "usage: lattice demo [train flags to override]\n\nTrains the embedded demo "
                   "configuration:\n"
                << kDemoConfig;
      return 0;
    }
    return run_training(
        lattice::parse_train_options_json(kDemoConfig, "embedded demo config", args));
  }
  if (command == "version") {
    std::cout << "lattice " << LATTICE_VERSION << " (OpenBLAS kernel "
              << lattice::kernels::blas_core_name() << ")\n";
    return 0;
  }
  std::cerr << "lattice: unknown command '" << command << "'\n";
  print_usage(std::cerr);
  return 2;
}
