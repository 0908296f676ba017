// `lattice-gpu`: `lattice train` with the GPU trainer linked in (engine/src/gpu/). The CPU
// `lattice` links no CUDA library (the .deb does not depend on CUDA); `lattice train --device
// cuda|auto` execs this program, beside it, with the same arguments (train_command.cpp), and
// this program registers the GPU trainer that train() hands such runs to. One mechanism, no
// plugin ABI: the two programs are built from one tree. docs/gpu.md.
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "gpu/gpu_trainer.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  lattice::gpu::register_gpu_trainer();
  if (!args.empty() && args[0] == "train") {
    args.erase(args.begin());
    return lattice::cli::train_command(args);
  }
  std::cerr << "usage: lattice-gpu train [lattice train flags] --device cuda\n"
               "(normally started by `lattice train --device cuda`)\n";
  return 2;
}
