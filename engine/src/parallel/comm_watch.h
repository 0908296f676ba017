// The MPI-free half of waiting (docs/design-notes.md#collective-timeout), shared by MpiComm
// and NcclComm: the timeout and activity settings, the abort hook, how a wait paces itself,
// what this machine can see of the other ranks' processes, and the words of the messages.
// Non-goal: talking to other ranks (mpi_watch.h does that over MPI).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace lattice {

// set_comm_timeout's seconds (0: none) and how messages name it ("--distributed-timeout-minutes
// 10", or "a timeout of 600 s" when no setting was named).
double comm_timeout_seconds();
std::string comm_timeout_setting();
// set_comm_activity's text ("iteration 37"; "" when none).
std::string comm_activity();
// Runs the abort hook (set_abort_hook) the first time it is called in this process; later
// calls, and a hook that calls it again, do nothing.
void run_abort_hook(const std::string& message);

// Note [pacing a wait]. MPI progresses a non-blocking operation only while the process calls
// into MPI, so a wait polls. It spins for its first millisecond (the latency of a short
// operation is then what a blocking call gives), then sleeps 50 µs between polls (a large
// shared-memory transfer moves about 40 kB per poll without single-copy, so longer sleeps
// would slow it), and 1 ms once it has waited 10 s (by then it waits for a peer, not for
// bytes): a hung peer costs its partners about 1 % of a core instead of 100 %.
class WaitPacer {
 public:
  WaitPacer() : start_(std::chrono::steady_clock::now()) {}
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void pause() const;

 private:
  std::chrono::steady_clock::time_point start_;
};

// One world rank's process as the world's creation reported it: its pid and machine. `node`
// is the host name plus the pid namespace, so that pids are compared only where they mean
// the same process.
struct PeerProcess {
  int pid = 0;
  std::string host, node;
};
// Records every world rank's process (world order) and which of them this process can watch
// (same node, /proc readable now). Called once, by the world's creation, before any wait.
void set_peer_processes(const std::vector<PeerProcess>& peers, int my_world_rank);

enum class PeerState { kUnknown, kRunning, kStopped, kEnded };
// What /proc says of a world rank's process now; kUnknown for one on another machine (or
// before set_peer_processes, or for this process itself).
PeerState peer_state(int world_rank);
// The first world rank other than this one whose process has ended, or -1.
int ended_peer();
// Where a world rank's process is: "pid 4242 on this machine", "on host node2" ("" unknown).
std::string describe_peer(int world_rank);

// A wait's message when `peer`'s process has ended: "rank 1 (pid 4242 on this machine) has
// ended (...) while rank 0 waited 3 s in <what> (group: <group>); the job is ended".
std::string peer_ended_message(int peer, int me, double waited, const std::string& what,
                               const std::string& group);
// "; rank 1 is stopped (SIGSTOP or a debugger; pid 4242 on this machine)" for each of
// `world_ranks` whose process this machine sees stopped or ended; "" when none.
std::string stopped_or_ended_notes(const std::vector<int>& world_ranks);

// "rank 3", "ranks 1 and 3", "ranks 1, 3 and 5".
std::string ranks_phrase(const std::vector<int>& ranks);
// "data-parallel [0,2]"; long lists shortened ("world [0,1,2,...,127] (128 ranks)").
std::string group_phrase(const std::string& name, const std::vector<int>& world_ranks);
// "12 s", "0.1 min", "10 min".
std::string duration_phrase(double seconds);
// " of iteration 37" from the activity, or "".
std::string activity_suffix();

}  // namespace lattice
