// `lattice`: the command-line face of the engine. Subcommands: train, demo, eval, data,
// plan, runs, ckpt, generate, serve, launch, version.
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "lattice/cpu_gemm.h"
#include "lattice/cpu_isa.h"
#include "lattice/data.h"
#include "lattice/kernels.h"

namespace {

void print_usage(std::ostream& out) {
  out << "usage: lattice <command> [flags]\n\n"
         "commands:\n"
         "  train     train a GPT model (Megatron-LM flag names; `lattice train --help`)\n"
         "  demo      train the demo model on the fortunes corpus (built on first use)\n"
         "  eval      score a model on a dataset in document order, or on multiple-choice tasks\n"
         "  data      tokenizers and datasets: preprocess, inspect, train-tokenizer, demo, shapes\n"
         "  plan      check a parallel layout and estimate its memory per pipeline stage\n"
         "  runs      the run database: list, show, export, compare, tag, rename, delete\n"
         "  ckpt      checkpoints: inspect, export-hf, import-hf, reshard, merge-lora\n"
         "  generate  continue prompts with a trained model (sampling, streaming, log-probs)\n"
         "  serve     the model over HTTP: Megatron's PUT /api and OpenAI's /v1/completions\n"
         "  launch    start training on this machine, a hostfile's hosts or a Slurm cluster\n"
         "  version   print the version and the BLAS kernel in use\n";
}

// The way LATTICE_CPU_GEMM asks for, or what auto chooses among (Note [fp32 GEMM choice],
// kernels/cpu/README.md).
std::string fp32_gemm_label() {
  using lattice::kernels::CpuGemm;
  switch (lattice::kernels::cpu_gemm()) {
    case CpuGemm::openblas:
      return "OpenBLAS";
    case CpuGemm::onednn:
      return "oneDNN";
    case CpuGemm::openblas_split:
      return "OpenBLAS split over the threads";
    case CpuGemm::onednn_split:
      return "oneDNN split over the threads";
    case CpuGemm::automatic:
      break;
  }
  const bool onednn = lattice::kernels::onednn_sgemm_missing().empty();
  return std::string(onednn ? "OpenBLAS or oneDNN" : "OpenBLAS") +
         ", whole or split over the threads, per shape, measured on this machine: " +
         lattice::kernels::cpu_gemm_choices_file();
}

}  // namespace

int main(int argc, char** argv) {
  lattice::kernels::apply_process_settings(argv);  // kernels.h
  // Note [GEMM choices file]: a shape's library measured once per machine, kept for every run.
  lattice::kernels::set_cpu_gemm_choices_dir(lattice::default_data_dir());
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage(args.empty() ? std::cerr : std::cout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "train") return lattice::cli::train_command(args);
  if (command == "demo") return lattice::cli::demo_command(args);
  if (command == "eval") {
    for (const std::string& a : args)
      if (a == "--task" || a.rfind("--task=", 0) == 0) return lattice::cli::eval_task_command(args);
    return lattice::cli::eval_command(args);
  }
  if (command == "data") return lattice::cli::data_command(args);
  if (command == "plan") return lattice::cli::plan_command(args);
  if (command == "ckpt") return lattice::cli::ckpt_command(args);
  if (command == "runs") return lattice::cli::runs_command(args);
  if (command == "generate") return lattice::cli::generate_command(args);
  if (command == "serve") return lattice::cli::serve_command(args);
  if (command == "launch") return lattice::cli::launch_command(args);
  if (command == "version") {
    std::cout << "lattice " << LATTICE_VERSION << " (OpenBLAS kernel "
              << lattice::kernels::blas_core_name() << ", CPU kernels "
              << lattice::kernels::cpu_isa_label(lattice::kernels::cpu_isa()) << ", fp32 GEMMs "
              << fp32_gemm_label() << ")\n";
    return 0;
  }
  std::cerr << "lattice: unknown command '" << command << "'\n";
  print_usage(std::cerr);
  return 2;
}
