// The communicator (ARCHITECTURE.md "Communicator"): the one narrow interface through which
// tensor, pipeline and data parallelism move bytes. LocalComm is a world of one (no MPI);
// MpiComm wraps an MPI communicator over CPU buffers; NcclComm (parallel/nccl_comm.h) one over
// device buffers.
//
// Element types (lattice/dtype.h): every Comm takes every DType. Sums and maxima of bf16 and
// fp16 are computed in fp32 and rounded once by MpiComm (MPI has no 16-bit arithmetic; Note
// [16-bit reductions on MPI] in mpi_comm.cpp), in the 16-bit type by NcclComm; the operations
// that only move data (all_gather, all_to_all, broadcast, gather, send, recv) carry every bit
// unchanged.
//
// Ordering contract: collectives (blocking or async) are called in the same order on every
// rank of a communicator, with the same counts and types. Point-to-point messages match by
// (peer, tag). Buffers handed to an async call must stay alive and untouched until its
// request completes; a request must not outlive its Comm. A Comm is used by one thread at a
// time.
//
// Errors: every call returns a Status; a failing MPI call becomes a Status naming the
// operation and the rank. A rank that cannot go on calls abort(), which ends the whole job
// (every rank, no hang) after printing its message.
//
// Stream-ordered calls (docs/one-engine.md 3.4): all_reduce, all_gather, reduce_scatter,
// all_to_all, send and recv with a Stream& (device/device.h) are queued on a stream of the
// device that made the communicator (Device::make_comm): they start after the work queued there
// before them, work queued after them sees their result, and the host does not wait for them.
// How each Comm keeps that: MpiComm by Note [CPU stream order] (device/cpu_device.h), NcclComm
// on the stream's cudaStream_t, LocalComm by copying or doing nothing.
//
// Waiting (docs/design-notes.md#collective-timeout): a rank that waits in an operation for a
// peer that has died, or longer than set_comm_timeout() allows, ends the job itself with a
// message naming the operation, its group and the ranks it waited for; it never returns an
// error for that. Waits spin for a moment, then sleep in short steps (no 100 % CPU while a
// peer is hung).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lattice/dtype.h"
#include "lattice/status.h"

namespace lattice {

class Stream;  // device/device.h: a queue of work on a device

// Integer sums must not overflow: Open MPI 4.1 saturates where the CPU would wrap.
enum class ReduceOp { kSum, kMax };

// What this communicator was asked to move, in bytes of the caller's buffers (the logical
// payload: for all_reduce the buffer once; a benchmark converts to wire bytes), and how long
// the caller spent blocked inside it.
struct CommStats {
  uint64_t all_reduce_bytes = 0, reduce_scatter_bytes = 0, all_gather_bytes = 0;
  uint64_t broadcast_bytes = 0, gather_bytes = 0, send_bytes = 0, recv_bytes = 0;
  uint64_t all_to_all_bytes = 0;  // what this rank sent (the send counts' total)
  uint64_t calls = 0;
  double wait_seconds = 0;  // blocking calls and wait() together
};

// An operation in flight. test() makes progress and says whether it has completed; wait()
// blocks until it has. Destroying an unfinished request waits for it.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual Status wait() = 0;
  virtual bool test() = 0;
};

// A request that completed when it was made: wait() returns `status` (a Comm whose async call
// ran to the end at once: LocalComm, StagedComm's collectives).
std::unique_ptr<CommRequest> completed_request(Status status);

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks of this communicator on this machine (1 for LocalComm): the thread budget divides
  // the cores among them.
  virtual int node_local_size() const = 0;

  // data (count) is reduced in place over all ranks.
  virtual Status all_reduce(void* data, size_t count, DType type, ReduceOp op) = 0;
  // send (sum of counts) summed over ranks; rank r receives block r (counts[r]) into recv.
  virtual Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                                DType type) = 0;
  // recv (sum of counts) = every rank's send (counts[r]) concatenated in rank order.
  // send may point into recv at this rank's block (in place).
  virtual Status all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                            DType type) = 0;
  virtual Status broadcast(void* data, size_t count, DType type, int root) = 0;
  // recv (size() * count, root only) = every rank's send (count) in rank order.
  virtual Status gather(const void* send, void* recv, size_t count, DType type, int root) = 0;
  virtual Status send(const void* data, size_t count, DType type, int peer, int tag) = 0;
  virtual Status recv(void* data, size_t count, DType type, int peer, int tag) = 0;
  virtual Status barrier() = 0;
  // Every rank sends block p of send (send_counts[p] elements; blocks in rank order) to rank p
  // and receives rank p's block for it as block p of recv (recv_counts[p]); send_counts[p] on
  // rank r equals recv_counts[r] on rank p (a zero count sends nothing). send and recv do not
  // overlap. Only moves data: every bit arrives unchanged. Expert parallelism's token dispatch.
  // MpiComm sends it as point-to-point messages on tag 32767: keep that tag off other messages.
  virtual Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                            const std::vector<size_t>& recv_counts, DType type) = 0;

  virtual std::unique_ptr<CommRequest> all_reduce_async(void* data, size_t count, DType type,
                                                        ReduceOp op) = 0;
  virtual std::unique_ptr<CommRequest> reduce_scatter_async(const void* send, void* recv,
                                                            const std::vector<size_t>& counts,
                                                            DType type) = 0;
  virtual std::unique_ptr<CommRequest> all_gather_async(const void* send, void* recv,
                                                        const std::vector<size_t>& counts,
                                                        DType type) = 0;
  virtual std::unique_ptr<CommRequest> isend(const void* data, size_t count, DType type, int peer,
                                             int tag) = 0;
  virtual std::unique_ptr<CommRequest> irecv(void* data, size_t count, DType type, int peer,
                                             int tag) = 0;

  // ---- stream-ordered (see "Stream-ordered calls" above) --------------------------------------
  // Queued on `stream`, a stream of the device that made this communicator; a stream of another
  // kind (a CUDA stream handed to MpiComm, a CPU stream to NcclComm) is refused with
  // invalid_argument. Errors found while queueing (arguments, a failed MPI or NCCL call) come
  // back here; errors of the operation itself at the stream's synchronisation
  // (Device::synchronize, Device::error). Ordering contract as the blocking calls: collectives
  // in the same order on every rank; point-to-point messages between a pair of ranks match in
  // issue order (they carry tag 0, so on MPI they also match blocking or async calls with tag
  // 0: keep such calls off a communicator that carries stream-ordered messages). Buffers stay
  // alive and untouched until the stream has passed the operation.
  //
  // data (count) is reduced in place over all ranks.
  virtual Status all_reduce(void* data, size_t count, DType type, ReduceOp op, Stream& stream) = 0;
  // recv (count * size()) = every rank's send (count) in rank order; send may be this rank's
  // block of recv (in place).
  virtual Status all_gather(const void* send, void* recv, size_t count, DType type,
                            Stream& stream) = 0;
  // recv (count) = this rank's block of the sum over ranks of send (count * size()); recv may be
  // this rank's block of send (in place, as NCCL allows).
  virtual Status reduce_scatter(const void* send, void* recv, size_t count, DType type,
                                Stream& stream) = 0;
  virtual Status send(const void* data, size_t count, DType type, int peer, Stream& stream) = 0;
  virtual Status recv(void* data, size_t count, DType type, int peer, Stream& stream) = 0;
  // all_to_all above, queued on the stream.
  virtual Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                            const std::vector<size_t>& recv_counts, DType type,
                            Stream& stream) = 0;
  // The two above with a count per rank (the data-parallel buckets' shards, shard_counts in
  // optim/grad_buckets.h: equal shares, the first ranks one more): recv (counts[rank()]) = this
  // rank's block of the sum of send (the counts' total); recv (the total) = every rank's send
  // (counts[r]) in rank order. In place as above. MpiComm and NcclComm take unequal counts
  // (NCCL as grouped ncclReduce / ncclBroadcast); this default forwards equal ones.
  virtual Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                                DType type, Stream& stream) {
    if (Status s = equal_counts("reduce_scatter", counts); !s) return s;
    return reduce_scatter(send, recv, counts.empty() ? 0 : counts[0], type, stream);
  }
  virtual Status all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                            DType type, Stream& stream) {
    if (Status s = equal_counts("all_gather", counts); !s) return s;
    return all_gather(send, recv, counts.empty() ? 0 : counts[0], type, stream);
  }

  // Collective over this communicator: the ranks passing the same color (>= 0) form a new
  // communicator, ordered by key (then by rank here). MPI_Comm_split underneath.
  virtual Result<std::unique_ptr<Comm>> split(int color, int key) = 0;

  // Ends the whole job: prints "lattice: rank R: <message>" to stderr and terminates every
  // rank (MPI_Abort). Never returns.
  [[noreturn]] virtual void abort(const std::string& message, int exit_code) = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

  // What this communicator is for, as messages name it ("data-parallel"); "world" for the
  // world, "" (an unnamed group) for a split until its maker names it.
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // Each member's rank in the world (size() of them), for messages that name ranks.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

 protected:
  CommStats stats_;
  std::string name_;
  std::vector<int> world_ranks_;

 private:
  Status equal_counts(const char* op, const std::vector<size_t>& counts) const {
    for (size_t c : counts)
      if (c != counts[0])
        return Status::invalid_argument(std::string(op) +
                                        " on a stream: this communicator takes equal counts only");
    if (counts.size() == static_cast<size_t>(size())) return Status::ok();
    return Status::invalid_argument(std::string(op) + ": " + std::to_string(counts.size()) +
                                    " counts given for a communicator of " +
                                    std::to_string(size()) + " ranks");
  }
};

// How long a rank may wait in one operation for the other ranks before it ends the job
// (0, the default: for ever; a dead peer ends the job either way). `setting` names where the
// value came from in messages ("--distributed-timeout-minutes 10"). Process-wide: every
// communicator, MPI and NCCL; set it before the operations it should cover.
void set_comm_timeout(double seconds, const std::string& setting = "");
// What the job is doing, for messages about a wait ("iteration 37"); "" for nothing.
// Thread-safe.
void set_comm_activity(const std::string& activity);
// Called with the message when this rank ends the job (Comm::abort, or a wait that timed out
// or lost a peer), after the message is printed and before the job ends; once, on the thread
// that ends it. Rank 0 records the run as failed here. An empty function removes it.
void set_abort_hook(std::function<void(const std::string& message)> hook);

// A world of one process: collectives copy or do nothing, point-to-point is an error.
std::unique_ptr<Comm> make_local_comm();

// True when this process was started by mpirun / srun (their environment variables are set).
bool launched_by_mpi_launcher();
// The world: MpiComm when started by a launcher and MPI is built in (initialises MPI on the
// first call), LocalComm otherwise. Fails with a clear message when launched by mpirun but
// this build has no MPI.
Result<std::unique_ptr<Comm>> make_world_comm();
// Finalises MPI if make_world_comm initialised it; call once before main returns.
void finalize_comm();

}  // namespace lattice
