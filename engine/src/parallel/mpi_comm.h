// MpiComm, the communicator over MPI and CPU buffers (comm.h): the private face of
// mpi_comm.cpp, the one file that includes <mpi.h>, so no MPI type appears here.
// Non-goal: GPU buffers (NcclComm).
#pragma once

#include <cstddef>
#include <memory>

#include "lattice/comm.h"

namespace lattice {

// Initialises MPI (MPI_THREAD_FUNNELED: only the thread that made the communicator calls MPI;
// OpenMP regions do not) unless it already is, and returns a communicator over a duplicate
// of MPI_COMM_WORLD. Collective over every rank of the job.
Result<std::unique_ptr<Comm>> make_mpi_world_comm();

// MPI_Finalize, if make_mpi_world_comm initialised MPI and nobody finalised it yet.
void finalize_mpi();

// Test seam: the most elements one MPI call carries (INT_MAX, MPI's int counts). Larger
// buffers go in pieces of at most this many elements (see "counts above INT_MAX" in
// mpi_comm.cpp); a test lowers it to cross those seams with small buffers. Every rank must
// set the same value, between operations. 0 restores INT_MAX.
void set_mpi_max_count_for_testing(size_t count);

}  // namespace lattice
