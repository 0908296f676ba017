// `lattice-gpu`: `lattice train` with the CUDA backend linked in (engine/src/device/cuda_*).
// The CPU `lattice` links no CUDA library (the .deb does not depend on CUDA); `lattice train
// --device cuda|auto` execs this program, beside it, with the same arguments
// (train_command.cpp), and this program registers the CUDA backend (device/backends.h) that
// train() runs such runs on. One mechanism, no plugin ABI: the two programs are built from one
// tree. docs/gpu.md.
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "device/backends.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  lattice::register_cuda_backend();
  if (!args.empty() && args[0] == "train") {
    args.erase(args.begin());
    return lattice::cli::train_command(args);
  }
  std::cerr << "usage: lattice-gpu train [lattice train flags] --device cuda\n"
               "(normally started by `lattice train --device cuda`)\n";
  return 2;
}
