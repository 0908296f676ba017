// lattice-bench-machine: prints machine_line() for the benchmark scripts' headers, so that the
// scripts and the benchmark programs name the machine the same way (bench_machine.h).
#include <cstdio>

#include "bench_machine.h"

int main() {
  std::printf("%s\n", lattice::bench::machine_line().c_str());
  return 0;
}
