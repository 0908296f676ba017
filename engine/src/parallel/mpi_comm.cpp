// MpiComm: comm.h over MPI for CPU buffers. Every MPI call returns its error
// (MPI_ERRORS_RETURN) and a failure becomes a Status naming the call and the rank. Every
// operation is non-blocking underneath and waits in watch_wait (mpi_watch.h, Note [collective
// timeout]), which paces the wait and ends the job when a peer dies or the timeout passes.
// The stream-ordered calls keep Note [CPU stream order] (device/cpu_device.h): blocking on the
// compute stream, started and queued on a side stream's RequestQueue.
// Non-goals: GPU buffers, MPI_THREAD_MULTIPLE, one-sided communication.
#include "parallel/mpi_comm.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "device/cpu_device.h"
#include "parallel/mpi_watch.h"

namespace lattice {
namespace {

// Whether [a, a + a_count) and [b, b + b_count) elements of `type` share a byte.
bool overlaps(const void* a, size_t a_count, const void* b, size_t b_count, DType type) {
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  const size_t bytes = dtype_size(type);
  return a_count > 0 && b_count > 0 && a0 < b0 + b_count * bytes && b0 < a0 + a_count * bytes;
}

// Note "counts above INT_MAX": MPI counts and displacements are int (Open MPI 4 has no MPI-4
// large-count calls). all_reduce, broadcast and point-to-point therefore go in pieces of at
// most g_max_count elements: the pieces of one message stay in order because MPI never lets
// a message overtake an earlier one with the same (source, tag, communicator), and
// collectives match in the order they are issued. reduce_scatter and all_gather whose total
// (hence a displacement) exceeds the limit become one MPI_Reduce / MPI_Bcast per rank's block
// and piece, and a gather whose result exceeds it one MPI_Gather per piece through a staging
// buffer: slower, but correct, and only for buffers of more than 2^31 elements. all_to_all is
// point-to-point pieces between each pair of ranks (see start_all_to_all).
size_t g_max_count = INT_MAX;
// Reserved for all_to_all's messages: no other message on a communicator may use it (MPI
// guarantees tags up to 32767).
constexpr int kAllToAllTag = 32767;
bool g_we_initialised = false;

MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    // 16-bit floats move as their bits; reductions widen them first (Note [16-bit reductions
    // on MPI]).
    case DType::kBFloat16:
    case DType::kFloat16:
      return MPI_UINT16_T;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kUInt8:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

// An integer sum that overflows has no defined result: Open MPI 4.1's AVX reductions saturate
// where the CPU would wrap (open-mpi/ompi#8045, "wontfix").
MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
}

// Note [16-bit reductions on MPI]: MPI has no bf16 or fp16 arithmetic (summing their bits as
// MPI_UINT16_T integers would be garbage), so a sum or maximum of 16-bit elements runs on fp32
// copies that its request owns: the inputs widened exactly when the operation starts, the
// result rounded to nearest even once, into the caller's buffer, when it completes (not when
// it fails). The operations that only move data (all-gather, broadcast, gather, send, recv)
// carry 16-bit elements as MPI_UINT16_T, every bit unchanged. NCCL instead adds in the 16-bit
// type; the 16-bit tests' tolerances cover the difference. The copies also make an in-place
// 16-bit reduce-scatter safe (NcclComm's rule, which MPI_Ireduce_scatter does not allow).
bool is_16bit(DType type) {
  return type == DType::kBFloat16 || type == DType::kFloat16;
}
void widen(const void* src, size_t n, DType type, float* dst) {
  if (type == DType::kBFloat16) {
    for (size_t i = 0; i < n; i++) dst[i] = from_bf16(static_cast<const bf16*>(src)[i]);
  } else {
    for (size_t i = 0; i < n; i++) dst[i] = from_fp16(static_cast<const fp16*>(src)[i]);
  }
}
void narrow(const float* src, size_t n, DType type, void* dst) {
  if (type == DType::kBFloat16) {
    for (size_t i = 0; i < n; i++) static_cast<bf16*>(dst)[i] = to_bf16(src[i]);
  } else {
    for (size_t i = 0; i < n; i++) static_cast<fp16*>(dst)[i] = to_fp16(src[i]);
  }
}

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(length));
}

Status mpi_failure(const char* call, int rc, int rank, int size) {
  return Status::internal(std::string(call) + " failed on rank " + std::to_string(rank) + " of " +
                          std::to_string(size) + ": " + mpi_error_string(rc));
}

// Element `offset` of a buffer of `type`.
char* at(void* data, size_t offset, DType type) {
  return static_cast<char*>(data) + offset * dtype_size(type);
}
const char* at(const void* data, size_t offset, DType type) {
  return static_cast<const char*>(data) + offset * dtype_size(type);
}

// Calls piece(offset, n) for consecutive pieces of at most g_max_count elements covering
// [0, count), once with n = 0 when count is 0 (a message still goes, so sends and receives
// pair up one to one); stops at the first MPI error and returns it.
template <typename Piece>
int for_each_piece(size_t count, Piece piece) {
  const size_t max = g_max_count;
  size_t offset = 0;
  do {
    const int rc = piece(offset, static_cast<int>(std::min(max, count - offset)));
    if (rc != MPI_SUCCESS) return rc;
    offset += max;
  } while (offset < count);
  return MPI_SUCCESS;
}

size_t total_of(const std::vector<size_t>& counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

std::vector<size_t> displacements_of(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); r++) displs[r] = displs[r - 1] + counts[r - 1];
  return displs;
}

std::vector<int> ints_of(const std::vector<size_t>& values) {
  return std::vector<int>(values.begin(), values.end());
}

// Adds the time the caller spends blocked to CommStats::wait_seconds.
class BlockedTimer {
 public:
  explicit BlockedTimer(CommStats& stats)
      : stats_(stats), start_(std::chrono::steady_clock::now()) {}
  ~BlockedTimer() {
    stats_.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  BlockedTimer(const BlockedTimer&) = delete;
  BlockedTimer& operator=(const BlockedTimer&) = delete;

 private:
  CommStats& stats_;
  std::chrono::steady_clock::time_point start_;
};

// One async operation: the MPI requests of its pieces, the int arrays the MPI_I*v calls read
// until they complete, and the first error met while issuing them. It updates the stats of
// the communicator that made it, so it must not outlive that communicator.
class MpiRequest final : public CommRequest {
 public:
  MpiRequest(CommStats& stats, int rank, int size, WatchedOp op)
      : stats_(stats), rank_(rank), size_(size), op_(op) {}
  ~MpiRequest() override {
    if (!done_) wait();
  }

  // A slot for the next piece's MPI_Request.
  MPI_Request* slot() {
    requests_.push_back(MPI_REQUEST_NULL);
    return &requests_.back();
  }
  void issued(const char* call, int rc) {
    if (rc != MPI_SUCCESS && status_.is_ok()) status_ = mpi_failure(call, rc, rank_, size_);
  }
  void fail(Status status) { status_ = std::move(status); }
  // Note [16-bit reductions on MPI]: an fp32 copy (n) of the 16-bit input `src` (n, type),
  // kept until the operation completes.
  const float* widened_input(const void* src, size_t n, DType type) {
    wide_input_.resize(n);
    widen(src, n, type, wide_input_.data());
    return wide_input_.data();
  }
  // A copy of `src` (bytes) kept until the operation completes: the send buffer of an in-place
  // reduce-scatter, which MPI_Ireduce_scatter may not alias with the receive buffer.
  const void* staged_input(const void* src, size_t bytes) {
    staged_.assign(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    return staged_.data();
  }
  // The fp32 buffer (n) the operation writes instead of `result` (n, type), holding result's
  // values when `load` (in place); rounded into `result` when the operation completes.
  float* widened_result(void* result, size_t n, DType type, bool load) {
    wide_result_.resize(n);
    if (load) widen(result, n, type, wide_result_.data());
    result_ = result;
    result_type_ = type;
    return wide_result_.data();
  }
  bool failed() const { return !status_.is_ok(); }
  std::vector<int>& counts() { return counts_; }
  std::vector<int>& displs() { return displs_; }

  Status wait() override {
    if (done_) return status_;
    BlockedTimer timer(stats_);
    finish(watch_wait(requests_, op_));
    return status_;
  }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    const int rc = watch_test(requests_, &flag);
    if (rc != MPI_SUCCESS || flag) finish(rc);
    return done_;
  }

 private:
  void finish(int rc) {
    done_ = true;
    if (rc != MPI_SUCCESS && status_.is_ok())
      status_ = mpi_failure("MPI_Waitall", rc, rank_, size_);
    if (result_ && status_.is_ok())
      narrow(wide_result_.data(), wide_result_.size(), result_type_, result_);
  }

  CommStats& stats_;
  int rank_, size_;
  WatchedOp op_;  // what a wait for it is, in messages
  std::vector<MPI_Request> requests_;
  std::vector<int> counts_, displs_;  // (size) for MPI_Ireduce_scatter / MPI_Iallgatherv
  // A widened 16-bit reduction's fp32 input and result, and where the result is rounded to.
  std::vector<float> wide_input_, wide_result_;
  std::vector<char> staged_;  // an in-place reduce-scatter's send buffer
  void* result_ = nullptr;
  DType result_type_ = DType::kFloat32;
  Status status_;
  bool done_ = false;
};

class MpiComm final : public Comm {
 public:
  // Takes ownership of comm. Collective over comm. id: its WatchedComm id (mpi_watch.h).
  static Result<std::unique_ptr<Comm>> create(MPI_Comm comm, uint64_t id);
  ~MpiComm() override {
    watch_unregister(&watch_);
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Comm_free(&comm_);
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_local_size() const override { return node_local_size_; }

  // The blocking operations are their async forms waited for (watch_wait).
  Status all_reduce(void* data, size_t count, DType type, ReduceOp op) override {
    return all_reduce_async(data, count, type, op)->wait();
  }
  Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                        DType type) override {
    return reduce_scatter_async(send, recv, counts, type)->wait();
  }
  Status all_gather(const void* send, void* recv, const std::vector<size_t>& counts,
                    DType type) override {
    return all_gather_async(send, recv, counts, type)->wait();
  }
  Status send(const void* data, size_t count, DType type, int peer, int tag) override {
    return isend(data, count, type, peer, tag)->wait();
  }
  Status recv(void* data, size_t count, DType type, int peer, int tag) override {
    return irecv(data, count, type, peer, tag)->wait();
  }
  Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType type) override {
    return start_all_to_all(send, send_counts, recv, recv_counts, type)->wait();
  }

  Status broadcast(void* data, size_t count, DType type, int root) override {
    if (Status s = check_rank("broadcast", "root", root); !s) return s;
    note(stats_.broadcast_bytes, count, type);
    auto request = make_request(collective("broadcast"));
    request->issued("MPI_Ibcast", for_each_piece(count, [&](size_t offset, int n) {
                      return MPI_Ibcast(at(data, offset, type), n, mpi_type(type), root, comm_,
                                        request->slot());
                    }));
    return request->wait();
  }

  Status gather(const void* send, void* recv, size_t count, DType type, int root) override {
    if (Status s = check_rank("gather", "root", root); !s) return s;
    note(stats_.gather_bytes, count, type);
    if (count <= g_max_count / static_cast<size_t>(size_)) {
      const int n = static_cast<int>(count);
      auto request = make_request(collective("gather"));
      request->issued("MPI_Igather", MPI_Igather(send, n, mpi_type(type), recv, n, mpi_type(type),
                                                 root, comm_, request->slot()));
      return request->wait();
    }
    const size_t piece = std::max<size_t>(1, g_max_count / static_cast<size_t>(size_));
    const size_t bytes = dtype_size(type);
    std::vector<char> staging(rank_ == root ? static_cast<size_t>(size_) * piece * bytes : 0);
    for (size_t offset = 0; offset < count; offset += piece) {
      const size_t n = std::min(piece, count - offset);
      auto request = make_request(collective("gather"));
      request->issued(
          "MPI_Igather",
          MPI_Igather(at(send, offset, type), static_cast<int>(n), mpi_type(type), staging.data(),
                      static_cast<int>(n), mpi_type(type), root, comm_, request->slot()));
      if (Status s = request->wait(); !s) return s;
      if (rank_ != root) continue;
      for (int r = 0; r < size_; r++)
        std::memcpy(at(recv, r * count + offset, type), staging.data() + r * n * bytes, n * bytes);
    }
    return Status::ok();
  }

  Status barrier() override {
    stats_.calls++;
    auto request = make_request(collective("barrier"));
    request->issued("MPI_Ibarrier", MPI_Ibarrier(comm_, request->slot()));
    return request->wait();
  }

  std::unique_ptr<CommRequest> all_reduce_async(void* data, size_t count, DType type,
                                                ReduceOp op) override {
    return start_all_reduce(data, count, type, op);
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const void* send, void* recv,
                                                    const std::vector<size_t>& counts,
                                                    DType type) override {
    return start_reduce_scatter(send, recv, counts, type);
  }
  std::unique_ptr<CommRequest> all_gather_async(const void* send, void* recv,
                                                const std::vector<size_t>& counts,
                                                DType type) override {
    return start_all_gather(send, recv, counts, type);
  }
  std::unique_ptr<CommRequest> isend(const void* data, size_t count, DType type, int peer,
                                     int tag) override {
    return start_send(data, count, type, peer, tag);
  }
  std::unique_ptr<CommRequest> irecv(void* data, size_t count, DType type, int peer,
                                     int tag) override {
    return start_recv(data, count, type, peer, tag);
  }

  // ---- stream-ordered: Note [CPU stream order] (device/cpu_device.h) -----------------------
  // On the compute stream (no queue) the blocking operation, watched; on a side stream the
  // operation started now and its request appended to the stream's RequestQueue.
  Status all_reduce(void* data, size_t count, DType type, ReduceOp op, Stream& stream) override {
    if (Status s = check_stream("all_reduce", stream); !s) return s;
    return queue_on(stream, start_all_reduce(data, count, type, op));
  }
  Status all_gather(const void* send, void* recv, size_t count, DType type,
                    Stream& stream) override {
    if (Status s = check_stream("all_gather", stream); !s) return s;
    return queue_on(stream, start_all_gather(send, recv, equal_counts(count), type));
  }
  Status reduce_scatter(const void* send, void* recv, size_t count, DType type,
                        Stream& stream) override {
    if (Status s = check_stream("reduce_scatter", stream); !s) return s;
    return queue_on(stream, start_reduce_scatter(send, recv, equal_counts(count), type));
  }
  Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                        DType type, Stream& stream) override {
    if (Status s = check_stream("reduce_scatter", stream); !s) return s;
    return queue_on(stream, start_reduce_scatter(send, recv, counts, type));
  }
  Status all_gather(const void* send, void* recv, const std::vector<size_t>& counts, DType type,
                    Stream& stream) override {
    if (Status s = check_stream("all_gather", stream); !s) return s;
    return queue_on(stream, start_all_gather(send, recv, counts, type));
  }
  Status send(const void* data, size_t count, DType type, int peer, Stream& stream) override {
    if (Status s = check_stream("send", stream); !s) return s;
    return queue_on(stream, start_send(data, count, type, peer, 0));
  }
  Status recv(void* data, size_t count, DType type, int peer, Stream& stream) override {
    if (Status s = check_stream("recv", stream); !s) return s;
    return queue_on(stream, start_recv(data, count, type, peer, 0));
  }
  Status all_to_all(const void* send, const std::vector<size_t>& send_counts, void* recv,
                    const std::vector<size_t>& recv_counts, DType type, Stream& stream) override {
    if (Status s = check_stream("all_to_all", stream); !s) return s;
    return queue_on(stream, start_all_to_all(send, send_counts, recv, recv_counts, type));
  }

  Result<std::unique_ptr<Comm>> split(int color, int key) override {
    if (color < 0) {
      return Status::invalid_argument("split: color " + std::to_string(color) + " on rank " +
                                      std::to_string(rank_) + " is negative; colors are >= 0");
    }
    stats_.calls++;
    MPI_Comm part = MPI_COMM_NULL;
    {
      BlockedTimer timer(stats_);
      // MPI_Comm_split has no non-blocking form: a watched barrier first, so that a rank that
      // never comes is named (Note [collective timeout]) instead of waited for in the split.
      auto arrived = make_request(collective("split"));
      arrived->issued("MPI_Ibarrier", MPI_Ibarrier(comm_, arrived->slot()));
      if (Status s = arrived->wait(); !s) return s;
      if (int rc = MPI_Comm_split(comm_, color, key, &part); rc != MPI_SUCCESS)
        return failure("MPI_Comm_split", rc);
    }
    // The same on every member of the part: the parent, its split count and the color.
    const uint64_t id = (watch_.id * 0x9E3779B97F4A7C15ull) ^
                        (watch_.splits++ * 0xC2B2AE3D27D4EB4Full) ^
                        (static_cast<uint64_t>(color) + 0x165667B19E3779F9ull);
    return create(part, id);
  }

  [[noreturn]] void abort(const std::string& message, int exit_code) override {
    abort_job(message, exit_code, rank_);
  }

 private:
  MpiComm(MPI_Comm comm, int rank, int size, int node_local_size, uint64_t id,
          std::vector<int> world_ranks)
      : comm_(comm), rank_(rank), size_(size), node_local_size_(node_local_size) {
    watch_.owner = this;
    watch_.id = id;
    world_ranks_ = world_ranks;
    watch_.world_ranks = std::move(world_ranks);
    watch_register(&watch_);
  }

  Status failure(const char* call, int rc) const { return mpi_failure(call, rc, rank_, size_); }
  Status check_rank(const char* op, const char* role, int rank) const {
    if (rank >= 0 && rank < size_) return Status::ok();
    return Status::invalid_argument(std::string(op) + ": " + role + " " + std::to_string(rank) +
                                    " is not a rank of this communicator of " +
                                    std::to_string(size_) + " (on rank " + std::to_string(rank_) +
                                    ")");
  }
  // Note [CPU stream order] streams only: a CUDA stream here is a programmer's mix-up.
  Status check_stream(const char* op, const Stream& stream) const {
    if (!stream.native()) return Status::ok();
    return Status::invalid_argument(std::string("MpiComm::") + op + " on the stream '" +
                                    stream.name() + "' of a CUDA device (on rank " +
                                    std::to_string(rank_) +
                                    "): MpiComm queues on CPU device streams; a CUDA device's "
                                    "communicator is an NcclComm (Device::make_comm)");
  }
  // A started operation queued on `stream`: on the compute stream (no RequestQueue) it is
  // waited for now, watched; on a side stream its request joins the stream's queue. One that
  // failed while being issued is waited for (the pieces already issued complete) and its
  // error returned here.
  Status queue_on(Stream& stream, std::unique_ptr<MpiRequest> request) {
    RequestQueue* queue = stream.queue();
    if (!queue || request->failed()) return request->wait();
    queue->push(std::move(request));
    return Status::ok();
  }
  std::vector<size_t> equal_counts(size_t count) const {
    return std::vector<size_t>(static_cast<size_t>(size_), count);
  }
  Status check_counts(const char* op, const std::vector<size_t>& counts) const {
    if (counts.size() == static_cast<size_t>(size_)) return Status::ok();
    return Status::invalid_argument(std::string(op) + ": " + std::to_string(counts.size()) +
                                    " counts given for a communicator of " + std::to_string(size_) +
                                    " ranks (on rank " + std::to_string(rank_) + ")");
  }
  // CommStats bytes: the caller's larger buffer (reduce_scatter's send, all_gather's recv),
  // gather's send, and the buffer itself for the rest.
  void note(uint64_t& bytes, size_t count, DType type) {
    stats_.calls++;
    bytes += count * dtype_size(type);
  }
  // The next collective on this communicator, as the watch counts them (every member issues
  // the same ones in the same order, also when one fails its argument checks).
  WatchedOp collective(const char* kind) { return {&watch_, kind, watch_.collectives++, -1}; }
  std::unique_ptr<MpiRequest> make_request(WatchedOp op) {
    return std::make_unique<MpiRequest>(stats_, rank_, size_, op);
  }

  // The async operations' bodies (the public async calls and the stream-ordered ones).
  std::unique_ptr<MpiRequest> start_all_reduce(void* data, size_t count, DType type, ReduceOp op) {
    auto request = make_request(collective("all-reduce"));
    note(stats_.all_reduce_bytes, count, type);
    if (is_16bit(type)) {
      data = request->widened_result(data, count, type, true);
      type = DType::kFloat32;
    }
    request->issued("MPI_Iallreduce", for_each_piece(count, [&](size_t offset, int n) {
                      return MPI_Iallreduce(MPI_IN_PLACE, at(data, offset, type), n, mpi_type(type),
                                            mpi_op(op), comm_, request->slot());
                    }));
    return request;
  }

  std::unique_ptr<MpiRequest> start_reduce_scatter(const void* send, void* recv,
                                                   const std::vector<size_t>& counts, DType type) {
    auto request = make_request(collective("reduce-scatter"));
    if (Status s = check_counts("reduce_scatter", counts); !s) {
      request->fail(std::move(s));
      return request;
    }
    const size_t total = total_of(counts);
    note(stats_.reduce_scatter_bytes, total, type);
    if (is_16bit(type)) {
      send = request->widened_input(send, total, type);
      recv = request->widened_result(recv, counts[rank_], type, false);
      type = DType::kFloat32;
    } else if (overlaps(send, total, recv, counts[rank_], type)) {  // in place: staged
      send = request->staged_input(send, total * dtype_size(type));
    }
    if (total <= g_max_count) {
      request->counts() = ints_of(counts);
      request->issued("MPI_Ireduce_scatter",
                      MPI_Ireduce_scatter(send, recv, request->counts().data(), mpi_type(type),
                                          MPI_SUM, comm_, request->slot()));
      return request;
    }
    const std::vector<size_t> displs = displacements_of(counts);
    for (int r = 0; r < size_ && !request->failed(); r++) {
      request->issued("MPI_Ireduce", for_each_piece(counts[r], [&](size_t offset, int n) {
                        return MPI_Ireduce(at(send, displs[r] + offset, type),
                                           r == rank_ ? at(recv, offset, type) : nullptr, n,
                                           mpi_type(type), MPI_SUM, r, comm_, request->slot());
                      }));
    }
    return request;
  }

  std::unique_ptr<MpiRequest> start_all_gather(const void* send, void* recv,
                                               const std::vector<size_t>& counts, DType type) {
    auto request = make_request(collective("all-gather"));
    if (Status s = check_counts("all_gather", counts); !s) {
      request->fail(std::move(s));
      return request;
    }
    const size_t total = total_of(counts);
    const std::vector<size_t> displs = displacements_of(counts);
    char* own = at(recv, displs[rank_], type);
    note(stats_.all_gather_bytes, total, type);
    if (total <= g_max_count) {
      request->counts() = ints_of(counts);
      request->displs() = ints_of(displs);
      request->issued(
          "MPI_Iallgatherv",
          MPI_Iallgatherv(send == own ? MPI_IN_PLACE : send, request->counts()[rank_],
                          mpi_type(type), recv, request->counts().data(), request->displs().data(),
                          mpi_type(type), comm_, request->slot()));
      return request;
    }
    if (send != own && counts[rank_] > 0) std::memcpy(own, send, counts[rank_] * dtype_size(type));
    for (int r = 0; r < size_ && !request->failed(); r++) {
      request->issued("MPI_Ibcast", for_each_piece(counts[r], [&](size_t offset, int n) {
                        return MPI_Ibcast(at(recv, displs[r] + offset, type), n, mpi_type(type), r,
                                          comm_, request->slot());
                      }));
    }
    return request;
  }

  // This rank's own block is copied; every other pair of ranks exchanges its blocks as
  // MPI_Isend / MPI_Irecv pieces of at most g_max_count elements on kAllToAllTag (Note "counts
  // above INT_MAX"). Not MPI_Ialltoallv: its int displacements would need a fallback above
  // INT_MAX, and every rank would have to know every rank's totals to agree on taking it; the
  // two ranks of a pair both know their block's count, hence its pieces. The pieces from one
  // peer match in order (same source, tag and communicator), and so do consecutive
  // all_to_alls, issued in the same order on every rank (the ordering contract).
  std::unique_ptr<MpiRequest> start_all_to_all(const void* send,
                                               const std::vector<size_t>& send_counts, void* recv,
                                               const std::vector<size_t>& recv_counts,
                                               DType type) {
    auto request = make_request(collective("all-to-all"));
    if (Status s = check_counts("all_to_all (send counts)", send_counts); !s) {
      request->fail(std::move(s));
      return request;
    }
    if (Status s = check_counts("all_to_all (receive counts)", recv_counts); !s) {
      request->fail(std::move(s));
      return request;
    }
    note(stats_.all_to_all_bytes, total_of(send_counts), type);
    const std::vector<size_t> send_displs = displacements_of(send_counts);
    const std::vector<size_t> recv_displs = displacements_of(recv_counts);
    if (send_counts[rank_] != recv_counts[rank_]) {
      request->fail(Status::invalid_argument(
          "all_to_all: rank " + std::to_string(rank_) + " sends itself " +
          std::to_string(send_counts[rank_]) + " elements but expects " +
          std::to_string(recv_counts[rank_])));
      return request;
    }
    if (send_counts[rank_] > 0)
      std::memcpy(at(recv, recv_displs[rank_], type), at(send, send_displs[rank_], type),
                  send_counts[rank_] * dtype_size(type));
    for (int p = 0; p < size_ && !request->failed(); p++) {
      if (p == rank_) continue;
      request->issued("MPI_Irecv", for_each_piece(recv_counts[p], [&](size_t offset, int n) {
                        return MPI_Irecv(at(recv, recv_displs[p] + offset, type), n,
                                         mpi_type(type), p, kAllToAllTag, comm_, request->slot());
                      }));
      if (request->failed()) break;
      request->issued("MPI_Isend", for_each_piece(send_counts[p], [&](size_t offset, int n) {
                        return MPI_Isend(at(send, send_displs[p] + offset, type), n,
                                         mpi_type(type), p, kAllToAllTag, comm_, request->slot());
                      }));
    }
    return request;
  }

  std::unique_ptr<MpiRequest> start_send(const void* data, size_t count, DType type, int peer,
                                         int tag) {
    auto request = make_request({&watch_, "send", 0, peer});
    if (Status s = check_rank("send", "peer", peer); !s) {
      request->fail(std::move(s));
      return request;
    }
    note(stats_.send_bytes, count, type);
    request->issued("MPI_Isend", for_each_piece(count, [&](size_t offset, int n) {
                      return MPI_Isend(at(data, offset, type), n, mpi_type(type), peer, tag, comm_,
                                       request->slot());
                    }));
    return request;
  }

  std::unique_ptr<MpiRequest> start_recv(void* data, size_t count, DType type, int peer, int tag) {
    auto request = make_request({&watch_, "recv", 0, peer});
    if (Status s = check_rank("recv", "peer", peer); !s) {
      request->fail(std::move(s));
      return request;
    }
    note(stats_.recv_bytes, count, type);
    request->issued("MPI_Irecv", for_each_piece(count, [&](size_t offset, int n) {
                      return MPI_Irecv(at(data, offset, type), n, mpi_type(type), peer, tag, comm_,
                                       request->slot());
                    }));
    return request;
  }

  MPI_Comm comm_;
  int rank_, size_;
  int node_local_size_;  // ranks of comm_ sharing this machine's memory
  WatchedComm watch_;
};

Result<std::unique_ptr<Comm>> MpiComm::create(MPI_Comm comm, uint64_t id) {
  int rank = 0, size = 0, local_size = 0;
  MPI_Comm local = MPI_COMM_NULL;
  int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm, &rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm, &size);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(local, &local_size);
  if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
  // Every member's world rank, for messages that name ranks.
  std::vector<int> mine(static_cast<size_t>(size)), world(static_cast<size_t>(size));
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(comm, &group);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  for (int r = 0; r < size; r++) mine[r] = r;
  if (rc == MPI_SUCCESS)
    rc = MPI_Group_translate_ranks(group, size, mine.data(), world_group, world.data());
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  if (world_group != MPI_GROUP_NULL) MPI_Group_free(&world_group);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    return mpi_failure("MPI_Comm_split_type", rc, rank, size);
  }
  return std::unique_ptr<Comm>(new MpiComm(comm, rank, size, local_size, id, std::move(world)));
}

}  // namespace

Result<std::unique_ptr<Comm>> make_mpi_world_comm() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised) {
    return Status::internal(
        "make_world_comm: MPI was already finalised (finalize_comm) in this process and cannot "
        "start again");
  }
  if (!initialised) {
    int provided = 0;
    if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
        rc != MPI_SUCCESS)
      return Status::internal("MPI_Init_thread failed: " + mpi_error_string(rc));
    g_we_initialised = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  // A duplicate keeps Lattice's messages apart from any other library's on MPI_COMM_WORLD.
  MPI_Comm world = MPI_COMM_NULL;
  if (int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world); rc != MPI_SUCCESS) {
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return mpi_failure("MPI_Comm_dup", rc, rank, size);
  }
  if (Status s = start_watch(); !s) {
    MPI_Comm_free(&world);
    return s;
  }
  Result<std::unique_ptr<Comm>> comm = MpiComm::create(world, 1);
  if (comm) (*comm)->set_name("world");
  return comm;
}

void finalize_mpi() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!g_we_initialised || finalised) return;
  stop_watch();
  MPI_Finalize();
}

void set_mpi_max_count_for_testing(size_t count) {
  g_max_count = count == 0 ? INT_MAX : count;
}

}  // namespace lattice
