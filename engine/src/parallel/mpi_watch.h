// The MPI half of waiting (docs/design-notes.md#collective-timeout): every wait of MpiComm
// goes through watch_wait, which paces itself, answers other ranks' questions about what this
// rank is doing, and ends the job when a peer has died or the timeout has passed, naming the
// ranks it waited for. Private to the MPI communicator (mpi_comm.cpp and mpi_watch.cpp are the
// files that include <mpi.h>). MPI_THREAD_FUNNELED: only the thread that made the world calls
// anything here.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings, no warnings from them
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/comm.h"

namespace lattice {

// A communicator as the watch sees it. `id` is the same on every member and differs between
// communicators that share a member: the world is 1, a split is a hash of its parent's id,
// the parent's split count (the same on every member: splits are collective) and the color.
struct WatchedComm {
  const Comm* owner = nullptr;  // for its name()
  uint64_t id = 0;
  std::vector<int> world_ranks;  // (size) member r's world rank
  uint64_t collectives = 0;      // collectives issued on it so far by this rank
  uint64_t splits = 0;           // splits made of it so far
};

// The operation a wait is for: a collective (peer -1; seq = its index among the collectives
// of `comm`, so a member that has issued more than seq has reached it) or a point-to-point
// message to or from `peer` (a rank of comm).
struct WatchedOp {
  const WatchedComm* comm = nullptr;
  const char* kind = "";  // "all-reduce", "recv", ...
  uint64_t seq = 0;
  int peer = -1;
};

// Makes the watch's own duplicate of MPI_COMM_WORLD, learns every rank's process
// (set_peer_processes) and starts listening for questions. Collective over the world, once,
// right after MPI_Init.
Status start_watch();
// Waits (with the timeout) until every rank has come here, stops listening and frees the
// duplicate. Collective over the world, before MPI_Finalize; nothing once the watch is stopped.
void stop_watch();
void watch_register(WatchedComm* comm);
void watch_unregister(WatchedComm* comm);

// Waits for every request (MPI_Testall, paced) and returns the first MPI error; never returns
// when a peer has ended or the timeout has passed (the job is ended, see the note).
int watch_wait(std::vector<MPI_Request>& requests, const WatchedOp& op);
// One MPI_Testall, answering questions as well.
int watch_test(std::vector<MPI_Request>& requests, int* done);

// Prints "lattice: rank R: <message>", runs the abort hook and ends every rank (MPI_Abort).
[[noreturn]] void abort_job(const std::string& message, int exit_code, int fallback_rank);

}  // namespace lattice
