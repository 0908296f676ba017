// The end of a test program's MPI worker mode (the program reruns itself under mpirun): the
// error, if any, on stderr with the rank; the communicator released before MPI is finalized.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "lattice/comm.h"

namespace lattice::testing {

// Returns the worker's exit code: 0 when error is empty.
inline int end_worker(std::unique_ptr<Comm>& world, const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "rank %d: %s\n", world->rank(), error.c_str());
  world.reset();
  finalize_comm();
  return error.empty() ? 0 : 1;
}

}  // namespace lattice::testing
