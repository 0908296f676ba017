// The CPU backend's device (device.h; docs/one-engine.md 3.2): host memory counted by
// category, the calling thread as the compute stream, side streams that are FIFOs of
// communication requests, the steady clock for marks, the CPU op lists (ops.h cpu_ops). Built
// in every configuration.
// Non-goals: size classes or caching (exact allocations keep peak RSS at the arenas' size,
// docs/benchmarks.md "Memory"), threads of its own.
//
// Note [CPU stream order]. The CPU device runs every op on the calling thread, in call order,
// so its compute stream is that thread: whatever was queued on it has run when the call
// returns, and an event recorded on it is complete at once. Communication keeps the stream
// contract (device.h) like this:
// - On the compute stream (tensor and sequence parallelism, the embedding-group sum, the
//   vocabulary-parallel cross-entropy) a communicator runs the blocking operation, through its
//   watched wait: ordered with compute because it is compute's own thread.
// - On a side stream (pipeline channels, the data-parallel stream) it starts the non-blocking
//   operation when it is queued (MPI_Isend, MPI_Iallreduce, ...) and appends the request to
//   the stream's RequestQueue, which numbers it. Starting at once is safe: the buffers it
//   reads were written by compute, which has run; the buffers it writes are read only after an
//   event wait. What this does not keep: two operations on one side stream over one buffer
//   (a receive, then a send of what it received; a reduce-scatter in place, then an all-gather
//   of its result) run at once here, where CUDA runs them in turn; callers put an event wait on
//   compute between them (where the optimizer step sits anyway). record(side) is (side, requests
//   queued so far); wait(any, event) completes that stream's requests up to that number with the
//   watched wait (timeout, dead peers, pacing as every MPI wait); synchronize(side) completes them
//   all. wait(side, record(compute)), a send after the compute that wrote its buffer, costs
//   nothing.
// - Progress: MPI moves non-blocking operations only inside MPI calls, so the engine calls
//   progress() between layers, which tests every side stream's requests.
// - No thread: MPI stays MPI_THREAD_FUNNELED and reductions keep their fixed order
//   (docs/design-notes.md#determinism).
// A copy or fill queued on a side stream first completes that stream's requests (it may read
// what a receive wrote). The FIFO (the host stand-in of the tests before it, deleted in step 8,
// kept one send per stream) lets several data-parallel buckets be in flight (GradReducer).
// MpiComm's stream-ordered calls (comm.h; mpi_comm.cpp queue_on) are the communicator half of
// this note; LocalComm's have completed when they return.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/device.h"

namespace lattice {

// A CPU side stream's operations in flight, in the order they were queued. Request k
// (numbered 1, 2, ... as pushed) has completed once completed() >= k; requests complete in
// number order here even when MPI finishes a later one first.
class RequestQueue {
 public:
  RequestQueue() = default;
  // Completes whatever is still pending (a CommRequest's destructor waits for it): the
  // communicators that made the requests must still exist.
  ~RequestQueue() = default;
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // Appends a started operation; returns its number.
  uint64_t push(std::unique_ptr<CommRequest> request);
  uint64_t queued() const { return queued_; }
  uint64_t completed() const { return completed_; }
  size_t pending() const { return requests_.size(); }
  // Waits for the requests numbered up to `seq`, in order, leaving later ones in flight;
  // returns the first error among them. Watched: a hung or dead peer ends the job (comm.h).
  Status complete_through(uint64_t seq);
  // Tests the requests from the oldest on and retires those that have completed; stops at the
  // first that has not. Never waits. Returns the first error among those retired.
  Status poll();

 private:
  std::deque<std::unique_ptr<CommRequest>> requests_;  // numbered completed_ + 1, ...
  uint64_t queued_ = 0, completed_ = 0;
};

struct CpuDeviceOptions {
  // > 0: kernels::set_num_threads(threads) when the device is made (OpenMP and OpenBLAS);
  // 0: the thread count stays as it is.
  int threads = 0;
  // false: Capabilities::host_addressable off, so that the engine stages through host copies as
  // it does for a GPU (tests of those paths; the memory is host memory all the same).
  bool host_addressable = true;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options = {});
  // Frees the blocks still allocated and completes every side stream's requests (their
  // communicators must still exist).
  ~CpuDevice() override;
  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

  const Capabilities& capabilities() const override { return capabilities_; }
  std::string describe() const override;
  std::string blas_name() const override;
  double peak_flops(DType compute) const override;
  Status measure_peak(Comm& ranks, DType compute) override;

  void* allocate(size_t bytes, MemoryCategory category) override;
  void free(void* block) override;
  Status out_of_memory(MemoryCategory category, size_t bytes) const override;
  CategoryUsage usage(MemoryCategory category) const override;
  MemoryReport memory() const override;

  Stream& compute() override { return compute_; }
  Result<Stream*> new_stream(const std::string& name) override;
  Event record(Stream& stream) override;
  bool completed(const Event& event) override;
  void wait(Stream& waiter, const Event& event) override;
  Status synchronize(Stream& stream) override;
  void progress() override;

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream& stream) override;
  void zero(void* dst, size_t bytes, Stream& stream) override;
  Mark mark(Stream& stream) override;
  double seconds(const Mark& from, const Mark& to) override;
  void reset_marks() override {}

  Result<std::unique_ptr<Comm>> make_comm(Comm& group) override;
  Status error() const override { return error_; }
  void record_error(const Status& status) override;

  // Blocks are aligned for the widest vector loads (AVX-512).
  static constexpr size_t kAlignment = 64;

 private:
  // The compute stream (no queue) or a side stream (its requests in flight).
  class CpuStream final : public Stream {
   public:
    CpuStream(std::string name, bool side)
        : Stream(std::move(name)), queue_(side ? std::make_unique<RequestQueue>() : nullptr) {}
    RequestQueue* queue() override { return queue_.get(); }

   private:
    std::unique_ptr<RequestQueue> queue_;
  };
  struct Block {
    size_t bytes;
    MemoryCategory category;
  };
  // The stream's requests up to `seq` completed (nothing for the compute stream); errors
  // recorded.
  void complete_through(Stream& stream, uint64_t seq);
  bool owns(const Stream& stream) const;
  // ops.h cpu_ops: the process-wide CPU op lists (they hold no state).
  OpLists op_lists() override;

  Capabilities capabilities_;
  CpuStream compute_{"compute", false};
  std::vector<std::unique_ptr<CpuStream>> side_;
  std::unordered_map<void*, Block> blocks_;
  std::array<CategoryUsage, kMemoryCategories> usage_{};
  Status error_;
  // By PeakGemm: measure_peak's rate, else measured on the first peak_flops() (-1: not yet).
  mutable double peak_gflops_[3] = {-1, -1, -1};
};

// This process's CPU device for models made without naming one (GptModel's host constructor,
// model/gpt.h): made on first use with the default options, never destroyed (no side streams,
// so it waits on no communicator at exit). Thread-safe to obtain; not to use from two threads.
CpuDevice& host_device();

}  // namespace lattice
