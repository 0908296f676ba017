// NcclComm: comm.h over NCCL for device buffers, and the only file that includes <nccl.h>.
// The ncclUniqueId travels over the bootstrap CPU communicator (MPI), so a sub-communicator
// is a split of the bootstrap followed by a new NCCL communicator over the split. Unequal
// reduce_scatter / all_gather counts become grouped ncclReduce / ncclBroadcast calls, one
// per rank's block. Compiled only when CUDA, MPI and NCCL are all present.
#include "parallel/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device/device.h"
#include "device/local_rank.h"
#include "parallel/comm_watch.h"

namespace lattice {
namespace {

ncclDataType_t nccl_type(DType type) {
  switch (type) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kUInt8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::kSum ? ncclSum : ncclMax;
}

char* at(void* data, size_t offset, DType type) {
  return static_cast<char*>(data) + offset * dtype_size(type);
}
const char* at(const void* data, size_t offset, DType type) {
  return static_cast<const char*>(data) + offset * dtype_size(type);
}

bool all_equal(const std::vector<size_t>& counts) {
  for (size_t c : counts)
    if (c != counts[0]) return false;
  return true;
}

class NcclComm;

// Every NcclComm alive in this process, oldest first, for watched_stream_wait (a process
// drives one device, so these are its device's communicators). Guarded: the gradient reducer's
// thread may make or drop none, but a wait may run while another thread uses a communicator.
std::mutex g_live_mutex;
std::vector<NcclComm*> g_live;

// Completes when the event recorded after the operation has passed on the stream.
class NcclRequest final : public CommRequest {
 public:
  NcclRequest(NcclComm& comm, std::string what, cudaEvent_t event, Status status)
      : comm_(comm), what_(std::move(what)), event_(event), status_(std::move(status)) {}
  ~NcclRequest() override {
    if (!done_) wait();
    if (event_) cudaEventDestroy(event_);
  }
  Status wait() override;
  bool test() override {
    if (done_ || !event_) return finish(cudaSuccess), true;
    const cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    finish(rc);
    return true;
  }

 private:
  Status finish(cudaError_t rc) {
    done_ = true;
    if (rc != cudaSuccess && status_.is_ok())
      status_ = Status::internal(std::string("NcclComm request: ") + cudaGetErrorString(rc));
    return status_;
  }
  NcclComm& comm_;
  std::string what_;  // "all-reduce", "recv from rank 3": what a wait for it is, in messages
  cudaEvent_t event_;
  Status status_;
  bool done_ = false;
};

class NcclComm final : public Comm {
 public:
  NcclComm(std::unique_ptr<Comm> bootstrap, ncclComm_t comm, cudaStream_t stream, int* scratch)
      : bootstrap_(std::move(bootstrap)), comm_(comm), stream_(stream), scratch_(scratch) {
    name_ = bootstrap_->name();
    world_ranks_ = bootstrap_->world_ranks();
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live.push_back(this);
  }
  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(g_live_mutex);
      g_live.erase(std::find(g_live.begin(), g_live.end(), this));
    }
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  int node_local_size() const override { return bootstrap_->node_local_size(); }

  Status all_reduce(void* data, size_t count, DType type, ReduceOp op) override {
    return blocking("all-reduce", all_reduce_enqueue(data, count, type, op));
  }
  Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                        DType type) override {
    return blocking("reduce-scatter", reduce_scatter_enqueue(send, recv, counts, type));
  }
  Status all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                    DType type) override {
    return blocking("all-gather", all_gather_enqueue(send, recv, counts, type));
  }
  Status broadcast(void* data, size_t count, DType type, int root) override {
    if (Status s = check_rank("broadcast", "root", root); !s) return s;
    note(stats_.broadcast_bytes, count, type);
    return blocking("broadcast",
                    check("ncclBroadcast",
                          ncclBroadcast(data, data, count, nccl_type(type), root, comm_, stream_)));
  }
  Status gather(const void* send, void* recv, size_t count, DType type, int root) override {
    if (Status s = check_rank("gather", "root", root); !s) return s;
    note(stats_.gather_bytes, count, type);
    ncclResult_t rc = ncclGroupStart();
    if (rank() == root) {
      for (int r = 0; r < size() && rc == ncclSuccess; r++) {
        if (r == root) {
          cudaMemcpyAsync(at(recv, r * count, type), send, count * dtype_size(type),
                          cudaMemcpyDeviceToDevice, stream_);
        } else {
          rc = ncclRecv(at(recv, r * count, type), count, nccl_type(type), r, comm_, stream_);
        }
      }
    } else {
      rc = ncclSend(send, count, nccl_type(type), root, comm_, stream_);
    }
    const ncclResult_t end = ncclGroupEnd();
    return blocking("gather", check("gather (ncclSend / ncclRecv)", rc != ncclSuccess ? rc : end));
  }
  Status send(const void* data, size_t count, DType type, int peer, int /*tag*/) override {
    return blocking(peer_op("send to", peer), send_enqueue(data, count, type, peer));
  }
  Status recv(void* data, size_t count, DType type, int peer, int /*tag*/) override {
    return blocking(peer_op("recv from", peer), recv_enqueue(data, count, type, peer));
  }
  Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType type) override {
    return blocking("all-to-all", all_to_all_enqueue(send, send_counts, recv, recv_counts, type));
  }
  // ---- stream-ordered (comm.h): the NCCL call on the stream's cudaStream_t, not waited for.
  // Errors of the operation surface when that stream is synchronised.
  Status all_reduce(void* data, size_t count, DType type, ReduceOp op, Stream& stream) override {
    cudaStream_t s = nullptr;
    if (Status st = cuda_stream("all_reduce", stream, &s); !st) return st;
    note(stats_.all_reduce_bytes, count, type);
    return check("ncclAllReduce (on a stream)",
                 ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), comm_, s));
  }
  Status all_gather(const void* send, void* recv, size_t count, DType type,
                    Stream& stream) override {
    cudaStream_t s = nullptr;
    if (Status st = cuda_stream("all_gather", stream, &s); !st) return st;
    note(stats_.all_gather_bytes, count * size(), type);
    return check("ncclAllGather (on a stream)",
                 ncclAllGather(send, recv, count, nccl_type(type), comm_, s));
  }
  Status reduce_scatter(const void* send, void* recv, size_t count, DType type,
                        Stream& stream) override {
    cudaStream_t s = nullptr;
    if (Status st = cuda_stream("reduce_scatter", stream, &s); !st) return st;
    note(stats_.reduce_scatter_bytes, count * size(), type);
    return check("ncclReduceScatter (on a stream)",
                 ncclReduceScatter(send, recv, count, nccl_type(type), ncclSum, comm_, s));
  }
  Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                        DType type, Stream& stream) override {
    cudaStream_t s = nullptr;
    if (Status st = cuda_stream("reduce_scatter", stream, &s); !st) return st;
    return reduce_scatter_enqueue(send, recv, counts, type, s);
  }
  Status all_gather(const void* send, void* recv, const std::vector<size_t>& counts, DType type,
                    Stream& stream) override {
    cudaStream_t s = nullptr;
    if (Status st = cuda_stream("all_gather", stream, &s); !st) return st;
    return all_gather_enqueue(send, recv, counts, type, s);
  }
  Status send(const void* data, size_t count, DType type, int peer, Stream& stream) override {
    cudaStream_t s = nullptr;
    if (Status st = cuda_stream("send", stream, &s); !st) return st;
    if (Status st = check_rank("send", "peer", peer); !st) return st;
    note(stats_.send_bytes, count, type);
    return check("ncclSend (on a stream)", ncclSend(data, count, nccl_type(type), peer, comm_, s));
  }
  Status recv(void* data, size_t count, DType type, int peer, Stream& stream) override {
    cudaStream_t s = nullptr;
    if (Status st = cuda_stream("recv", stream, &s); !st) return st;
    if (Status st = check_rank("recv", "peer", peer); !st) return st;
    note(stats_.recv_bytes, count, type);
    return check("ncclRecv (on a stream)", ncclRecv(data, count, nccl_type(type), peer, comm_, s));
  }
  Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType type, Stream& stream) override {
    cudaStream_t s = nullptr;
    if (Status st = cuda_stream("all_to_all", stream, &s); !st) return st;
    return all_to_all_enqueue(send, send_counts, recv, recv_counts, type, s);
  }

  Status barrier() override {
    stats_.calls++;
    return blocking(
        "barrier", check("barrier (ncclAllReduce)",
                         ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_)));
  }

  std::unique_ptr<CommRequest> all_reduce_async(void* data, size_t count, DType type,
                                                ReduceOp op) override {
    return request("all-reduce", all_reduce_enqueue(data, count, type, op));
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const void* send, void* recv,
                                                    const std::vector<size_t>& counts,
                                                    DType type) override {
    return request("reduce-scatter", reduce_scatter_enqueue(send, recv, counts, type));
  }
  std::unique_ptr<CommRequest> all_gather_async(const void* send, void* recv,
                                                const std::vector<size_t>& counts,
                                                DType type) override {
    return request("all-gather", all_gather_enqueue(send, recv, counts, type));
  }
  std::unique_ptr<CommRequest> isend(const void* data, size_t count, DType type, int peer,
                                     int /*tag*/) override {
    return request(peer_op("send to", peer), send_enqueue(data, count, type, peer));
  }
  std::unique_ptr<CommRequest> irecv(void* data, size_t count, DType type, int peer,
                                     int /*tag*/) override {
    return request(peer_op("recv from", peer), recv_enqueue(data, count, type, peer));
  }

  Result<std::unique_ptr<Comm>> split(int color, int key) override {
    auto part = bootstrap_->split(color, key);
    if (!part) return part.status();
    return make_nccl_comm(std::move(part.value()));
  }

  // Note [collective timeout] on the GPU (docs/gpu.md#a-hung-or-dead-rank): polls `query` (a
  // stream or event query, paced as MPI waits are) until it is no longer cudaErrorNotReady, and
  // returns its result. Every 100 ms it asks NCCL for an asynchronous error and /proc for a
  // dead peer; either, or waiting past the timeout, ends the job (ncclCommAbort, then the
  // bootstrap's abort). NCCL cannot say which rank has not arrived: the message names the
  // group, and the members this machine sees stopped or gone. Also called on the gradient
  // reducer's thread, which then ends the job itself.
  template <typename Query>
  cudaError_t watch(const std::string& what, Query query) {
    const WaitPacer clock;
    double next_look = 0.1;
    for (;;) {
      const cudaError_t rc = query();
      if (rc != cudaErrorNotReady) {
        stats_.wait_seconds += clock.elapsed();
        return rc;
      }
      const double t = clock.elapsed();
      if (t >= next_look) {
        next_look = t + 0.1;
        const int me = world_ranks_.empty() ? rank() : world_ranks_[rank()];
        const std::string op = "the " + (name_.empty() ? std::string() : name_ + " ") + what +
                               " (NCCL)" + activity_suffix();
        const std::string group = group_phrase(name_, world_ranks_);
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress)
          abort("NCCL reported an error (" + std::string(ncclGetErrorString(async)) + ") in " + op +
                    " (group: " + group + "); the job is ended",
                1);
        if (const int peer = ended_peer(); peer >= 0)
          abort(peer_ended_message(peer, me, t, op, group), 1);
        const double timeout = comm_timeout_seconds();
        if (timeout > 0 && t >= timeout)
          abort("rank " + std::to_string(me) + " waited " + duration_phrase(timeout) + " (" +
                    comm_timeout_setting() + ") in " + op + " for the other ranks of its group (" +
                    group + "); NCCL cannot tell which of them has not arrived" +
                    stopped_or_ended_notes(world_ranks_) + "; the job is ended",
                1);
      }
      clock.pause();
    }
  }

  // NCCL's asynchronous error on this communicator, or "" (none, or still in progress).
  std::string async_error() const {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress)
      return ncclGetErrorString(async);
    return "";
  }
  // This rank's world rank and its group in messages ("tensor-parallel [0,1]").
  int world_rank() const { return world_ranks_.empty() ? rank() : world_ranks_[rank()]; }
  std::string group() const { return group_phrase(name_, world_ranks_); }
  const std::vector<int>& members() const { return world_ranks_; }

  [[noreturn]] void abort(const std::string& message, int exit_code) override {
    ncclCommAbort(comm_);  // unblocks kernels waiting for a peer that will never come
    bootstrap_->abort(message, exit_code);
    std::_Exit(exit_code);  // not reached: Comm::abort never returns
  }

 private:
  Status check(const char* call, ncclResult_t rc) const {
    if (rc == ncclSuccess) return Status::ok();
    std::string detail = ncclGetErrorString(rc);
    if (const char* last = ncclGetLastError(comm_); last && *last)
      detail += std::string(": ") + last;
    return Status::internal(std::string(call) + " failed on rank " + std::to_string(rank()) +
                            " of " + std::to_string(size()) + ": " + detail);
  }
  // The cudaStream_t of `stream`, a stream of the CUDA device (Device::make_comm). A CPU device
  // stream has none (native() null; a device's streams are never CUDA's legacy default stream).
  Status cuda_stream(const char* op, Stream& stream, cudaStream_t* out) const {
    *out = static_cast<cudaStream_t>(stream.native());
    if (*out) return Status::ok();
    return Status::invalid_argument(std::string("NcclComm::") + op + " on the stream '" +
                                    stream.name() + "', which is not a CUDA stream (on rank " +
                                    std::to_string(rank()) +
                                    "): NcclComm queues on streams of the CUDA device that made "
                                    "it (Device::make_comm)");
  }
  Status check_rank(const char* op, const char* role, int r) const {
    if (r >= 0 && r < size()) return Status::ok();
    return Status::invalid_argument(std::string("NcclComm::") + op + ": " + role + " " +
                                    std::to_string(r) + " is not a rank of this communicator of " +
                                    std::to_string(size()));
  }
  Status check_counts(const char* op, const std::vector<size_t>& counts) const {
    if (counts.size() == static_cast<size_t>(size())) return Status::ok();
    return Status::invalid_argument(
        std::string("NcclComm::") + op + ": " + std::to_string(counts.size()) +
        " counts given for a communicator of " + std::to_string(size()) + " ranks");
  }
  void note(uint64_t& bytes, size_t count, DType type) {
    stats_.calls++;
    bytes += count * dtype_size(type);
  }

  Status all_reduce_enqueue(void* data, size_t count, DType type, ReduceOp op) {
    note(stats_.all_reduce_bytes, count, type);
    return check("ncclAllReduce",
                 ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), comm_, stream_));
  }
  Status reduce_scatter_enqueue(const void* send, void* recv, const std::vector<size_t>& counts,
                                DType type, cudaStream_t on = nullptr) {
    cudaStream_t stream = on ? on : stream_;
    if (Status s = check_counts("reduce_scatter", counts); !s) return s;
    size_t total = 0;
    for (size_t c : counts) total += c;
    note(stats_.reduce_scatter_bytes, total, type);
    if (all_equal(counts))
      return check("ncclReduceScatter", ncclReduceScatter(send, recv, counts[0], nccl_type(type),
                                                          ncclSum, comm_, stream));
    ncclResult_t rc = ncclGroupStart();
    size_t offset = 0;
    for (int r = 0; r < size() && rc == ncclSuccess; offset += counts[r], r++)
      rc = ncclReduce(at(send, offset, type), r == rank() ? recv : nullptr, counts[r],
                      nccl_type(type), ncclSum, r, comm_, stream);
    const ncclResult_t end = ncclGroupEnd();
    return check("reduce_scatter (ncclReduce)", rc != ncclSuccess ? rc : end);
  }
  Status all_gather_enqueue(const void* send, void* recv, const std::vector<size_t>& counts,
                            DType type, cudaStream_t on = nullptr) {
    cudaStream_t stream = on ? on : stream_;
    if (Status s = check_counts("all_gather", counts); !s) return s;
    size_t total = 0;
    for (size_t c : counts) total += c;
    note(stats_.all_gather_bytes, total, type);
    if (all_equal(counts))  // in place when send is this rank's block of recv
      return check("ncclAllGather",
                   ncclAllGather(send, recv, counts[0], nccl_type(type), comm_, stream));
    ncclResult_t rc = ncclGroupStart();
    size_t offset = 0;
    for (int r = 0; r < size() && rc == ncclSuccess; offset += counts[r], r++)
      rc = ncclBroadcast(r == rank() ? send : at(recv, offset, type), at(recv, offset, type),
                         counts[r], nccl_type(type), r, comm_, stream);
    const ncclResult_t end = ncclGroupEnd();
    return check("all_gather (ncclBroadcast)", rc != ncclSuccess ? rc : end);
  }
  // NCCL has no all-to-all-v: one ncclSend and one ncclRecv per peer in a group (NCCL pairs
  // them, zero counts included, and runs them at once); this rank's own block is a copy.
  Status all_to_all_enqueue(const void* send, const std::vector<size_t>& send_counts, void* recv,
                            const std::vector<size_t>& recv_counts, DType type,
                            cudaStream_t on = nullptr) {
    cudaStream_t stream = on ? on : stream_;
    if (Status s = check_counts("all_to_all (send counts)", send_counts); !s) return s;
    if (Status s = check_counts("all_to_all (receive counts)", recv_counts); !s) return s;
    const int me = rank();
    if (send_counts[me] != recv_counts[me])
      return Status::invalid_argument("NcclComm::all_to_all: rank " + std::to_string(me) +
                                      " sends itself " + std::to_string(send_counts[me]) +
                                      " elements but expects " + std::to_string(recv_counts[me]));
    size_t total = 0, send_offset = 0, recv_offset = 0;
    for (size_t c : send_counts) total += c;
    note(stats_.all_to_all_bytes, total, type);
    ncclResult_t rc = ncclGroupStart();
    for (int p = 0; p < size() && rc == ncclSuccess; p++) {
      if (p == me) {
        if (send_counts[p] > 0 &&
            cudaMemcpyAsync(at(recv, recv_offset, type), at(send, send_offset, type),
                            send_counts[p] * dtype_size(type), cudaMemcpyDeviceToDevice,
                            stream) != cudaSuccess)
          rc = ncclUnhandledCudaError;
      } else {
        rc = ncclSend(at(send, send_offset, type), send_counts[p], nccl_type(type), p, comm_,
                      stream);
        if (rc == ncclSuccess)
          rc = ncclRecv(at(recv, recv_offset, type), recv_counts[p], nccl_type(type), p, comm_,
                        stream);
      }
      send_offset += send_counts[p];
      recv_offset += recv_counts[p];
    }
    const ncclResult_t end = ncclGroupEnd();
    return check("all_to_all (ncclSend / ncclRecv)", rc != ncclSuccess ? rc : end);
  }
  Status send_enqueue(const void* data, size_t count, DType type, int peer) {
    if (Status s = check_rank("send", "peer", peer); !s) return s;
    note(stats_.send_bytes, count, type);
    return check("ncclSend", ncclSend(data, count, nccl_type(type), peer, comm_, stream_));
  }
  Status recv_enqueue(void* data, size_t count, DType type, int peer) {
    if (Status s = check_rank("recv", "peer", peer); !s) return s;
    note(stats_.recv_bytes, count, type);
    return check("ncclRecv", ncclRecv(data, count, nccl_type(type), peer, comm_, stream_));
  }

  // Waits for the stream after an enqueued operation.
  Status blocking(const std::string& what, Status enqueued) {
    if (!enqueued) return enqueued;
    const cudaError_t rc = watch(what, [&] { return cudaStreamQuery(stream_); });
    if (rc != cudaSuccess)
      return Status::internal("NcclComm: the " + what + " on rank " + std::to_string(rank()) +
                              " failed: " + cudaGetErrorString(rc));
    return Status::ok();
  }
  std::unique_ptr<CommRequest> request(std::string what, Status enqueued) {
    cudaEvent_t event = nullptr;
    if (enqueued) {
      if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess)
        cudaEventRecord(event, stream_);
      else
        enqueued = Status::internal("NcclComm: cudaEventCreate failed");
    }
    return std::make_unique<NcclRequest>(*this, std::move(what), event, std::move(enqueued));
  }
  // "recv from rank 3", the peer as a world rank.
  std::string peer_op(const char* verb, int peer) const {
    const bool known = peer >= 0 && peer < static_cast<int>(world_ranks_.size());
    return std::string(verb) + " rank " + std::to_string(known ? world_ranks_[peer] : peer);
  }

  std::unique_ptr<Comm> bootstrap_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  int* scratch_;  // (1) device int for barrier()
};

Status NcclRequest::wait() {
  if (done_ || !event_) return finish(cudaSuccess);
  return finish(comm_.watch(what_, [&] { return cudaEventQuery(event_); }));
}

// watched_stream_wait's look, `waited` seconds into a wait for `what`: NcclComm::watch's checks
// over every live communicator. A stream wait cannot tell which communicator's operation it is
// stuck in, so a timeout names them all.
void end_job_if_hung(const std::string& what, double waited) {
  std::vector<NcclComm*> live;
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    live = g_live;
  }
  if (live.empty()) return;  // no communicator: nothing on the stream waits for a peer
  const std::string op = what + activity_suffix();
  std::string groups;
  std::vector<int> members;
  for (NcclComm* c : live) {
    groups += (groups.empty() ? "" : "; ") + c->group();
    members.insert(members.end(), c->members().begin(), c->members().end());
  }
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  for (NcclComm* c : live)
    if (const std::string e = c->async_error(); !e.empty())
      c->abort("NCCL reported an error (" + e + ") on the " + c->group() + " group during " + op +
                   "; the job is ended",
               1);
  const int me = live.front()->world_rank();
  if (const int peer = ended_peer(); peer >= 0)
    live.front()->abort(peer_ended_message(peer, me, waited, op, groups), 1);
  const double timeout = comm_timeout_seconds();
  if (timeout > 0 && waited >= timeout)
    live.front()->abort("rank " + std::to_string(me) + " waited " + duration_phrase(timeout) +
                            " (" + comm_timeout_setting() + ") in " + op +
                            ", which holds stream-ordered NCCL operations of its groups (" +
                            groups + "); NCCL cannot tell which rank has not arrived" +
                            stopped_or_ended_notes(members) + "; the job is ended",
                        1);
}

}  // namespace

Result<std::unique_ptr<Comm>> make_nccl_comm(std::unique_ptr<Comm> bootstrap) {
  const std::string where =
      " on rank " + std::to_string(bootstrap->rank()) + " of " + std::to_string(bootstrap->size());
  // Every step before ncclCommInitRank can fail on one rank alone (no id on rank 0, a device
  // out of memory), while the others would wait for it forever in the broadcast or in
  // ncclCommInitRank. So the ranks agree first: a failure anywhere makes every rank return an
  // error, its own or one naming the rank that failed.
  Status local = Status::ok();
  ncclUniqueId id{};
  if (bootstrap->rank() == 0)
    if (ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess)
      local = Status::internal(std::string("ncclGetUniqueId failed on rank 0: ") +
                               ncclGetErrorString(rc));
  if (Status s = bootstrap->broadcast(&id, sizeof id, DType::kUInt8, 0); !s) return s;
  cudaStream_t stream = nullptr;
  int* scratch = nullptr;
  if (local.is_ok()) {
    if (cudaError_t rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        rc != cudaSuccess)
      local = Status::internal("NcclComm: cudaStreamCreate failed" + where + ": " +
                               cudaGetErrorString(rc));
  }
  if (local.is_ok()) {
    if (cudaError_t rc = cudaMalloc(&scratch, sizeof(int)); rc != cudaSuccess)
      local =
          Status::internal("NcclComm: cudaMalloc failed" + where + ": " + cudaGetErrorString(rc));
    else
      cudaMemset(scratch, 0, sizeof(int));
  }
  double failed = local.is_ok() ? 0 : bootstrap->rank() + 1;  // the highest failing rank + 1
  if (Status s = bootstrap->all_reduce(&failed, 1, DType::kFloat64, ReduceOp::kMax); !s) local = s;
  if (!local.is_ok() || failed > 0) {
    if (scratch) cudaFree(scratch);
    if (stream) cudaStreamDestroy(stream);
    if (!local.is_ok()) return local;
    return Status::internal("NCCL setup failed on rank " + std::to_string(int(failed) - 1) +
                            " of " + std::to_string(bootstrap->size()) +
                            " (its message says why), so rank " +
                            std::to_string(bootstrap->rank()) + " stops too");
  }
  // ncclCommInitRank returns on a rank only once every rank has joined, so a rank that fails
  // inside it would leave the others waiting: the failure ends the job with its message.
  ncclComm_t comm = nullptr;
  if (ncclResult_t rc = ncclCommInitRank(&comm, bootstrap->size(), id, bootstrap->rank());
      rc != ncclSuccess) {
    cudaFree(scratch);
    cudaStreamDestroy(stream);
    const std::string message = "ncclCommInitRank failed" + where + ": " + ncclGetErrorString(rc) +
                                " (is every rank on its own GPU? see select_device_for_rank)";
    if (bootstrap->size() > 1) bootstrap->abort(message, 1);
    return Status::internal(message);
  }
  return std::unique_ptr<Comm>(new NcclComm(std::move(bootstrap), comm, stream, scratch));
}

Status watched_stream_wait(CUstream_st* stream, const std::string& what) {
  const WaitPacer clock;
  double next_look = 0.1;
  for (;;) {
    const cudaError_t rc = cudaStreamQuery(stream);
    if (rc == cudaSuccess) return Status::ok();
    if (rc != cudaErrorNotReady) return Status::internal(what + ": " + cudaGetErrorString(rc));
    const double t = clock.elapsed();
    if (t >= next_look) {
      next_look = t + 0.1;
      end_job_if_hung(what, t);
    }
    clock.pause();
  }
}

Result<int> select_device_for_rank() {
  int devices = 0;
  if (cudaError_t rc = cudaGetDeviceCount(&devices); rc != cudaSuccess || devices == 0)
    return Status::internal(std::string("no CUDA device visible to this process (") +
                            (rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices") +
                            "); check CUDA_VISIBLE_DEVICES");
  const int local_rank = local_rank_from_environment();
  const int device = device_for_local_rank(local_rank, devices);
  if (cudaError_t rc = cudaSetDevice(device); rc != cudaSuccess)
    return Status::internal("cudaSetDevice(" + std::to_string(device) + ") for local rank " +
                            std::to_string(local_rank) + " of " + std::to_string(devices) +
                            " devices: " + cudaGetErrorString(rc));
  return device;
}

}  // namespace lattice
