// StagedComm: Note [device collectives through host memory] (staged_comm.h).
#include "parallel/staged_comm.h"

#include <cstddef>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "device/device.h"

namespace lattice {
namespace {

using Bytes = std::vector<std::byte>;

size_t total(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

// An isend's copy of the data, kept until the host send completes.
class StagedSend final : public CommRequest {
 public:
  Bytes data;
  std::unique_ptr<CommRequest> host;
  Status wait() override { return host->wait(); }
  bool test() override { return host->test(); }
};

// An irecv: the host receives into `data`; the first wait() or test() that sees it arrive
// copies it to the device (deliver).
class StagedReceive final : public CommRequest {
 public:
  Bytes data;
  std::unique_ptr<CommRequest> host;
  std::function<Status()> deliver;
  Status wait() override {
    if (!delivered_) {
      if (Status s = host->wait(); !s) return s;
      finish();
    }
    return status_;
  }
  bool test() override {
    if (!delivered_ && host->test()) finish();
    return delivered_;
  }
  ~StagedReceive() override {
    if (!delivered_) (void)wait();
  }

 private:
  void finish() {
    delivered_ = true;
    status_ = deliver();
  }
  bool delivered_ = false;
  Status status_;
};

class StagedComm final : public Comm {
 public:
  StagedComm(Device& device, Stream& copies, std::unique_ptr<Comm> host)
      : device_(device), copies_(copies), host_(std::move(host)) {
    name_ = host_->name();
    world_ranks_ = host_->world_ranks();
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int node_local_size() const override { return host_->node_local_size(); }

  // ---- blocking: the caller has made the buffers ready (comm.h); copies on copies_ ---------
  Status all_reduce(void* data, size_t count, DType type, ReduceOp op) override {
    return all_reduce(data, count, type, op, copies_);
  }
  Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                        DType type) override {
    return reduce_scatter(send, recv, counts, type, copies_);
  }
  Status all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                    DType type) override {
    return all_gather(send, recv, counts, type, copies_);
  }
  Status broadcast(void* data, size_t count, DType type, int root) override {
    const size_t bytes = count * dtype_size(type);
    if (Status s = to_host(a_, data, bytes, copies_); !s) return s;
    if (Status s = counted(host_->broadcast(a_.data(), count, type, root)); !s) return s;
    return to_device(data, a_, bytes, copies_);
  }
  Status gather(const void* send, void* recv, size_t count, DType type, int root) override {
    const size_t bytes = count * dtype_size(type);
    if (Status s = to_host(a_, send, bytes, copies_); !s) return s;
    b_.resize(rank() == root ? bytes * size() : 0);
    if (Status s = counted(host_->gather(a_.data(), b_.data(), count, type, root)); !s) return s;
    return rank() == root ? to_device(recv, b_, b_.size(), copies_) : Status::ok();
  }
  Status send(const void* data, size_t count, DType type, int peer, int tag) override {
    if (Status s = to_host(a_, data, count * dtype_size(type), copies_); !s) return s;
    return counted(host_->send(a_.data(), count, type, peer, tag));
  }
  Status recv(void* data, size_t count, DType type, int peer, int tag) override {
    a_.resize(count * dtype_size(type));
    if (Status s = counted(host_->recv(a_.data(), count, type, peer, tag)); !s) return s;
    return to_device(data, a_, a_.size(), copies_);
  }
  Status barrier() override { return counted(host_->barrier()); }
  Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType type) override {
    return all_to_all(send, send_counts, recv, recv_counts, type, copies_);
  }

  // ---- async: the collectives complete here; isend and irecv stay in flight ---------------
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
  std::unique_ptr<CommRequest> isend(const void* data, size_t count, DType type, int peer,
                                     int tag) override {
    return isend(data, count, type, peer, tag, copies_);
  }
  std::unique_ptr<CommRequest> irecv(void* data, size_t count, DType type, int peer,
                                     int tag) override;

  // ---- stream-ordered: after the stream's earlier work, before its later work -------------
  Status all_reduce(void* data, size_t count, DType type, ReduceOp op, Stream& stream) override {
    const size_t bytes = count * dtype_size(type);
    if (Status s = to_host(a_, data, bytes, stream); !s) return s;
    if (Status s = counted(host_->all_reduce(a_.data(), count, type, op)); !s) return s;
    return to_device(data, a_, bytes, stream);
  }
  Status all_gather(const void* send, void* recv, size_t count, DType type,
                    Stream& stream) override {
    return all_gather(send, recv, std::vector<size_t>(size(), count), type, stream);
  }
  Status reduce_scatter(const void* send, void* recv, size_t count, DType type,
                        Stream& stream) override {
    return reduce_scatter(send, recv, std::vector<size_t>(size(), count), type, stream);
  }
  Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType type,
                        Stream& stream) override {
    if (Status s = rank_counts("reduce_scatter", counts); !s) return s;
    const size_t element = dtype_size(type);
    if (Status s = to_host(a_, send, total(counts) * element, stream); !s) return s;
    b_.resize(counts[rank()] * element);
    if (Status s = counted(host_->reduce_scatter(a_.data(), b_.data(), counts, type)); !s) return s;
    return to_device(recv, b_, b_.size(), stream);
  }
  Status all_gather(const void* send, void* recv, const std::vector<size_t>& counts, DType type,
                    Stream& stream) override {
    if (Status s = rank_counts("all_gather", counts); !s) return s;
    const size_t element = dtype_size(type);
    if (Status s = to_host(a_, send, counts[rank()] * element, stream); !s) return s;
    b_.resize(total(counts) * element);
    if (Status s = counted(host_->all_gather(a_.data(), b_.data(), counts, type)); !s) return s;
    return to_device(recv, b_, b_.size(), stream);
  }
  // A send in flight on the host, from a copy of its own: the stream may go on at once (a
  // blocking send could wait for a peer that is itself sending, where the device's streams
  // would both have gone on); finished sends are dropped at the next one, the rest waited for
  // when the communicator goes.
  Status send(const void* data, size_t count, DType type, int peer, Stream& stream) override {
    std::erase_if(sends_, [](const std::unique_ptr<CommRequest>& r) { return r->test(); });
    std::unique_ptr<CommRequest> request = isend(data, count, type, peer, 0, stream);
    if (request->test()) return request->wait();  // done, or failed before it started
    sends_.push_back(std::move(request));
    return Status::ok();
  }
  Status recv(void* data, size_t count, DType type, int peer, Stream& stream) override {
    if (Status s = device_.synchronize(stream); !s) return s;  // the stream's earlier work
    a_.resize(count * dtype_size(type));
    if (Status s = counted(host_->recv(a_.data(), count, type, peer, 0)); !s) return s;
    return to_device(data, a_, a_.size(), stream);
  }
  Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType type, Stream& stream) override {
    const size_t element = dtype_size(type);
    if (Status s = to_host(a_, send, total(send_counts) * element, stream); !s) return s;
    b_.resize(total(recv_counts) * element);
    if (Status s = counted(host_->all_to_all(a_.data(), send_counts, b_.data(), recv_counts, type));
        !s)
      return s;
    return to_device(recv, b_, b_.size(), stream);
  }

  ~StagedComm() override {
    for (std::unique_ptr<CommRequest>& r : sends_) (void)r->wait();
  }

  Result<std::unique_ptr<Comm>> split(int color, int key) override {
    Result<std::unique_ptr<Comm>> part = host_->split(color, key);
    if (!part || !*part) return part;
    return std::unique_ptr<Comm>(new StagedComm(device_, copies_, std::move(*part)));
  }
  [[noreturn]] void abort(const std::string& message, int exit_code) override {
    host_->abort(message, exit_code);
    std::_Exit(exit_code);  // not reached: Comm::abort never returns
  }

  // host (bytes) = device `data` after the work queued on `stream` so far. Waits.
  Status to_host(Bytes& host, const void* data, size_t bytes, Stream& stream) {
    host.resize(bytes);
    if (Status s = device_.synchronize(stream); !s) return s;  // the stream's earlier work
    if (bytes > 0) device_.copy(host.data(), data, bytes, CopyKind::kDeviceToHost, stream);
    return device_.synchronize(stream);
  }
  // Device `data` = host (bytes), queued on `stream` and waited for: host is reused at once.
  Status to_device(void* data, const Bytes& host, size_t bytes, Stream& stream) {
    if (bytes > 0) device_.copy(data, host.data(), bytes, CopyKind::kHostToDevice, stream);
    return device_.synchronize(stream);
  }
  // One count per rank, as the host communicator would say.
  Status rank_counts(const char* op, const std::vector<size_t>& counts) const {
    if (counts.size() == static_cast<size_t>(size())) return Status::ok();
    return Status::invalid_argument(std::string(op) + ": " + std::to_string(counts.size()) +
                                    " counts given for a communicator of " +
                                    std::to_string(size()) + " ranks");
  }
  // isend after the work queued on `stream`.
  std::unique_ptr<CommRequest> isend(const void* data, size_t count, DType type, int peer, int tag,
                                     Stream& stream);
  // The host communicator's figures since the last call are this one's: the same calls and
  // bytes (moved, so that reset_stats() here restarts them).
  Status counted(Status status) {
    const CommStats& h = host_->stats();
    for (auto field : {&CommStats::all_reduce_bytes, &CommStats::reduce_scatter_bytes,
                       &CommStats::all_gather_bytes, &CommStats::broadcast_bytes,
                       &CommStats::gather_bytes, &CommStats::send_bytes, &CommStats::recv_bytes,
                       &CommStats::all_to_all_bytes, &CommStats::calls})
      stats_.*field += h.*field;
    stats_.wait_seconds += h.wait_seconds;
    host_->reset_stats();
    return status;
  }

 private:
  Device& device_;
  Stream& copies_;  // the blocking and async calls' copies
  std::unique_ptr<Comm> host_;
  Bytes a_, b_;  // the current call's host buffers (a Comm is used by one thread at a time)
  std::vector<std::unique_ptr<CommRequest>> sends_;  // stream-ordered sends still in flight
};

std::unique_ptr<CommRequest> StagedComm::isend(const void* data, size_t count, DType type, int peer,
                                               int tag, Stream& stream) {
  auto request = std::make_unique<StagedSend>();
  if (Status s = to_host(request->data, data, count * dtype_size(type), stream); !s)
    return completed_request(s);
  request->host = host_->isend(request->data.data(), count, type, peer, tag);
  (void)counted(Status::ok());
  return request;
}

std::unique_ptr<CommRequest> StagedComm::irecv(void* data, size_t count, DType type, int peer,
                                               int tag) {
  auto request = std::make_unique<StagedReceive>();
  request->data.resize(count * dtype_size(type));
  request->host = host_->irecv(request->data.data(), count, type, peer, tag);
  (void)counted(Status::ok());
  request->deliver = [this, data, buffer = &request->data] {
    return to_device(data, *buffer, buffer->size(), copies_);
  };
  return request;
}

}  // namespace

Result<std::unique_ptr<Comm>> make_staged_comm(Device& device, Comm& group) {
  Result<Stream*> copies = device.new_stream("host-staged communication");
  if (!copies) return copies.status();
  Result<std::unique_ptr<Comm>> part = group.split(0, group.rank());
  if (!part) return part.status();
  std::unique_ptr<Comm> comm(new StagedComm(device, **copies, std::move(*part)));
  comm->set_name(group.name());
  return comm;
}

Result<bool> device_comm_through_host() {
  const char* v = std::getenv("LATTICE_DEVICE_COMM");
  const std::string value = v ? v : "";
  if (value.empty() || value == "auto") return false;
  if (value == "host") return true;
  return Status::invalid_argument("LATTICE_DEVICE_COMM=" + value +
                                  ": expected host (device collectives through host memory and "
                                  "MPI) or auto (the device's own communicator)");
}

}  // namespace lattice
