// LocalComm: the communicator of a job of one process (comm.h). Collectives over one rank
// copy or do nothing; point-to-point has no peer and is an error. No MPI, no threads. The
// stream-ordered calls do the same at once on any CPU device stream: what they read was
// written by compute, which has run (Note [CPU stream order], device/cpu_device.h).
// Non-goal: emulating several ranks inside one process.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "device/device.h"
#include "lattice/comm.h"
#include "parallel/comm_watch.h"

namespace lattice {
namespace {

Status no_peer(const char* op, int peer, int tag) {
  return Status::invalid_argument(std::string("LocalComm::") + op + " to rank " +
                                  std::to_string(peer) + " (tag " + std::to_string(tag) +
                                  "): a job of one process has no peers; start the job with "
                                  "mpirun -n <ranks> to use pipeline parallelism");
}

Status one_block(const char* op, const std::vector<size_t>& counts) {
  if (counts.size() == 1) return Status::ok();
  return Status::invalid_argument(std::string("LocalComm::") + op + ": " +
                                  std::to_string(counts.size()) +
                                  " counts given for a world of 1 rank");
}

Status root_zero(const char* op, int root) {
  if (root == 0) return Status::ok();
  return Status::invalid_argument(std::string("LocalComm::") + op + ": root " +
                                  std::to_string(root) + " is not a rank of a world of 1");
}

// A CUDA stream handed to LocalComm is a programmer's mix-up (comm.h, "stream-ordered").
Status host_stream(const char* op, const Stream& stream) {
  if (!stream.native()) return Status::ok();
  return Status::invalid_argument(std::string("LocalComm::") + op + " on the stream '" +
                                  stream.name() +
                                  "' of a CUDA device: LocalComm moves CPU buffers only");
}

// memmove: send and recv may be the same buffer (in-place all_gather).
void copy(const void* send, void* recv, size_t count, DType type) {
  if (count > 0 && send != recv) std::memmove(recv, send, count * dtype_size(type));
}

class LocalComm final : public Comm {
 public:
  LocalComm() {
    name_ = "world";
    world_ranks_ = {0};
  }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int node_local_size() const override { return 1; }

  Status all_reduce(void*, size_t count, DType type, ReduceOp) override {
    count_call(stats_.all_reduce_bytes, count, type);
    return Status::ok();
  }
  Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                        DType type) override {
    if (Status s = one_block("reduce_scatter", counts); !s) return s;
    count_call(stats_.reduce_scatter_bytes, counts[0], type);
    copy(send, recv, counts[0], type);
    return Status::ok();
  }
  Status all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                    DType type) override {
    if (Status s = one_block("all_gather", counts); !s) return s;
    count_call(stats_.all_gather_bytes, counts[0], type);
    copy(send, recv, counts[0], type);
    return Status::ok();
  }
  Status broadcast(void*, size_t count, DType type, int root) override {
    if (Status s = root_zero("broadcast", root); !s) return s;
    count_call(stats_.broadcast_bytes, count, type);
    return Status::ok();
  }
  Status gather(const void* send, void* recv, size_t count, DType type, int root) override {
    if (Status s = root_zero("gather", root); !s) return s;
    count_call(stats_.gather_bytes, count, type);
    copy(send, recv, count, type);
    return Status::ok();
  }
  Status send(const void*, size_t, DType, int peer, int tag) override {
    return no_peer("send", peer, tag);
  }
  Status recv(void*, size_t, DType, int peer, int tag) override {
    return no_peer("recv", peer, tag);
  }
  Status barrier() override {
    stats_.calls++;
    return Status::ok();
  }
  Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType type) override {
    if (Status s = one_block("all_to_all (send counts)", send_counts); !s) return s;
    if (Status s = one_block("all_to_all (receive counts)", recv_counts); !s) return s;
    if (send_counts[0] != recv_counts[0]) {
      return Status::invalid_argument("LocalComm::all_to_all: sends " +
                                      std::to_string(send_counts[0]) + " elements but expects " +
                                      std::to_string(recv_counts[0]));
    }
    count_call(stats_.all_to_all_bytes, send_counts[0], type);
    copy(send, recv, send_counts[0], type);
    return Status::ok();
  }

  std::unique_ptr<CommRequest> all_reduce_async(void* data, size_t count, DType type,
                                                ReduceOp op) override {
    return completed_request(all_reduce(data, count, type, op));
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const void* send, void* recv,
                                                    const std::vector<size_t>& counts,
                                                    DType type) override {
    return completed_request(reduce_scatter(send, recv, counts, type));
  }
  std::unique_ptr<CommRequest> all_gather_async(const void* send, void* recv,
                                                const std::vector<size_t>& counts,
                                                DType type) override {
    return completed_request(all_gather(send, recv, counts, type));
  }
  std::unique_ptr<CommRequest> isend(const void*, size_t, DType, int peer, int tag) override {
    return completed_request(no_peer("isend", peer, tag));
  }
  std::unique_ptr<CommRequest> irecv(void*, size_t, DType, int peer, int tag) override {
    return completed_request(no_peer("irecv", peer, tag));
  }

  // Stream-ordered: over one rank this rank's block is the whole buffer, so in place is a no-op.
  Status all_reduce(void* data, size_t count, DType type, ReduceOp op, Stream& stream) override {
    if (Status s = host_stream("all_reduce", stream); !s) return s;
    return all_reduce(data, count, type, op);
  }
  Status all_gather(const void* send, void* recv, size_t count, DType type,
                    Stream& stream) override {
    if (Status s = host_stream("all_gather", stream); !s) return s;
    return all_gather(send, recv, {count}, type);
  }
  Status reduce_scatter(const void* send, void* recv, size_t count, DType type,
                        Stream& stream) override {
    if (Status s = host_stream("reduce_scatter", stream); !s) return s;
    return reduce_scatter(send, recv, {count}, type);
  }
  Status send(const void*, size_t, DType, int peer, Stream&) override {
    return no_peer("send", peer, 0);
  }
  Status recv(void*, size_t, DType, int peer, Stream&) override { return no_peer("recv", peer, 0); }
  Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType type, Stream& stream) override {
    if (Status s = host_stream("all_to_all", stream); !s) return s;
    return all_to_all(send, send_counts, recv, recv_counts, type);
  }

  Result<std::unique_ptr<Comm>> split(int color, int) override {
    if (color < 0) {
      return Status::invalid_argument("split: color " + std::to_string(color) +
                                      " is negative; colors are >= 0");
    }
    stats_.calls++;
    return make_local_comm();
  }

  [[noreturn]] void abort(const std::string& message, int exit_code) override {
    std::fprintf(stderr, "lattice: rank 0: %s\n", message.c_str());
    std::fflush(stderr);
    run_abort_hook(message);
    std::_Exit(exit_code);
  }

 private:
  void count_call(uint64_t& bytes, size_t count, DType type) {
    stats_.calls++;
    bytes += count * dtype_size(type);
  }
};

}  // namespace

std::unique_ptr<Comm> make_local_comm() {
  return std::make_unique<LocalComm>();
}

}  // namespace lattice
