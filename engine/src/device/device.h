// The device a rank computes on (docs/one-engine.md 3.2, issue 21): memory by category,
// streams and events, copies, time marks, its first error and its capabilities. The model
// (model/gpt.h), the pipeline executor (pipeline/executor.h) and the training loop
// (train/trainer.h) are written once over it. Implementations:
// CpuDevice (cpu_device.h, every build) and the CUDA device (cuda_device.cpp, in lattice_engine_gpu
// only); each hands out its op lists (ops.h, ops<A>()). Communicators made by make_comm queue their
// stream-ordered calls (comm.h) on its streams.
//
// Streams. Work queued on one stream runs in queue order; work on different streams is
// ordered only through events: after wait(waiter, record(s)), what is queued on `waiter`
// starts after what `s` had queued when the event was recorded. The compute stream runs every
// op; side streams (new_stream) carry communication: pipeline channels, data-parallel
// reductions. How the CPU keeps this without a thread: Note [CPU stream order] (cpu_device.h).
//
// Errors. Queueing returns nothing: a failure of queued work (a CUDA call, a failed MPI
// request) is recorded on the device, the first one wins, and synchronize() returns it. A peer
// that hangs or dies during a wait for communication ends the job through the communicator's
// watched wait (comm.h, "Waiting"): on the CPU every wait for a side stream's requests is one;
// on CUDA synchronize() polls the stream and asks every NcclComm of the process for an
// asynchronous error (nccl_comm.h watched_stream_wait), as NcclComm's blocking calls do.
//
// Thread safety: a device, its streams, events and marks are used by one thread, the rank's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "core/memory_category.h"
#include "device/capabilities.h"
#include "lattice/comm.h"
#include "lattice/status.h"
#include "lattice/train.h"

namespace lattice {

class RequestQueue;  // cpu_device.h: a CPU side stream's requests in flight
template <typename A>
class Ops;  // ops.h: the op list of compute type A

// A queue of work on a device, owned by its device.
class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // "compute", or the name new_stream() was given ("pipeline activations"), for messages.
  const std::string& name() const { return name_; }
  // The cudaStream_t this is on CUDA; null on the CPU.
  virtual void* native() const { return nullptr; }
  // A CPU side stream's requests in flight (Note [CPU stream order]); null for the CPU's
  // compute stream, whose operations have run when their call returns, and on CUDA.
  virtual RequestQueue* queue() { return nullptr; }

 protected:
  explicit Stream(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

// "What `stream` had queued when the event was recorded." A value: copy it, keep it, wait for
// it any number of times while its device lives. A default Event (no stream) is complete.
struct Event {
  Stream* stream = nullptr;
  uint64_t seq = 0;  // the stream's record count (CUDA) or queued requests (CPU side stream)
};

// A point in time on a stream, for phase times, timeline boxes and op times.
struct Mark {
  Stream* stream = nullptr;
  int64_t value = 0;  // CPU: steady_clock nanoseconds; CUDA: the device's timing-event number
};

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class Device {
 public:
  virtual ~Device() = default;

  virtual const Capabilities& capabilities() const = 0;
  // One line for the run's description: "2 threads, OpenBLAS SkylakeX", "NVIDIA H200, device 0".
  virtual std::string describe() const = 0;
  // The matrix-multiply library its kernels call, for the run store: OpenBLAS's core
  // ("SkylakeX") on the CPU, "cuBLASLt" on CUDA.
  virtual std::string blas_name() const = 0;
  // Peak FLOP/s in compute type `compute`, the denominator of MFU; 0 where the device has no
  // figure for it. CPU: a measured GEMM rate (cpu_peak_gemm, train.h: SGEMM, or oneDNN's bf16
  // matmul for bf16); CUDA: the planner's table (plan/devices.cpp).
  virtual double peak_flops(DType compute) const = 0;
  // Where compute type `compute`'s peak is a measurement (the CPU's GEMM rate): takes it now
  // with every rank of `ranks` measuring at once (measure_shared_gemm_gflops, train.h), and
  // peak_flops returns it from then on. Collective over `ranks` (every rank passes the same
  // type). Nothing to do where the peak is a table's (CUDA) or the type has none.
  virtual Status measure_peak(Comm& ranks, DType compute) {
    (void)ranks;
    (void)compute;
    return Status::ok();
  }

  // ---- memory -------------------------------------------------------------------------------
  // A block of `bytes` device memory (0 allowed) accounted under `category`, contents
  // undefined (as cudaMalloc). nullptr when the device is out of memory; out_of_memory() then
  // words it. Nothing else changes on a failure.
  virtual void* allocate(size_t bytes, MemoryCategory category) = 0;
  // Returns a block from allocate(); nullptr is ignored. Work queued on other streams than
  // compute that still reads the block must have been synchronised first (the CUDA allocator
  // reuses it in compute order at once).
  virtual void free(void* block) = 0;
  // The sentence for an allocate() that returned nullptr: resource_exhausted, naming the
  // bytes, the category and the device ("out of memory: N bytes (x GiB) of weights ...").
  virtual Status out_of_memory(MemoryCategory category, size_t bytes) const = 0;
  // Bytes of `category` allocated now and at most at once since the device was made (the
  // bytes asked for, not rounded).
  virtual CategoryUsage usage(MemoryCategory category) const = 0;
  // The rank's memory report (train.h): current bytes per category; peak_rss the process's
  // high-water mark (CPU) or the peak reserved device bytes (CUDA); fragmentation as train.h.
  virtual MemoryReport memory() const = 0;

  // ---- streams and events ---------------------------------------------------------------------
  virtual Stream& compute() = 0;
  // A new side stream, owned by the device (lives as long as it). Errors: CUDA could not make it.
  virtual Result<Stream*> new_stream(const std::string& name) = 0;
  virtual Event record(Stream& stream) = 0;
  // Whether the event's work has completed. Never waits (on the CPU it tests the stream's
  // requests, which also moves them on).
  virtual bool completed(const Event& event) = 0;
  // What is queued on `waiter` after this call starts after the event's work. CUDA: the host
  // does not wait. CPU: the host completes the event's requests now (Note [CPU stream order]).
  virtual void wait(Stream& waiter, const Event& event) = 0;
  // The host waits for everything queued on `stream` so far; returns error().
  virtual Status synchronize(Stream& stream) = 0;
  // Moves communication in flight on: the CPU tests every side stream's requests (MPI moves
  // non-blocking operations only inside MPI calls); CUDA does nothing.
  virtual void progress() = 0;

  // ---- copies, fills, time marks ----------------------------------------------------------------
  // dst (bytes) = src (bytes), queued on `stream`; the regions do not overlap.
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream& stream) = 0;
  // dst (bytes) = 0, queued on `stream`.
  virtual void zero(void* dst, size_t bytes, Stream& stream) = 0;
  virtual Mark mark(Stream& stream) = 0;
  // Seconds from `from` to `to` (negative when `to` came first), once both marks' streams have
  // been synchronised; NaN where the device cannot tell (CUDA: not yet synchronised, or made
  // before reset_marks()).
  virtual double seconds(const Mark& from, const Mark& to) = 0;
  // The marks made so far will not be read again: CUDA reuses their timing events. Once per
  // iteration, after its marks are read.
  virtual void reset_marks() = 0;

  // ---- ops
  // ----------------------------------------------------------------------------------------- The
  // op list of compute type A (float, double, bf16, fp16) on the compute stream, owned by the
  // device; null when the device has none for A (CUDA: double). The CPU's 16-bit lists exist for
  // tests, not for runs (capabilities()).
  template <typename A>
  Ops<A>* ops();

  // ---- communicators, errors ------------------------------------------------------------------
  // A communicator of its own over the ranks of `group` (a host communicator split from the
  // world) for this device's buffers, named as `group`: a split of it on the CPU (its own
  // message space, so pipeline channels between one pair of ranks never match each other's
  // messages), an NcclComm over a split of it on CUDA. Collective over `group`.
  virtual Result<std::unique_ptr<Comm>> make_comm(Comm& group) = 0;
  // The first error recorded on this device (ok when none); it stays.
  virtual Status error() const = 0;
  // Keeps `status` as error() unless an error is already there.
  virtual void record_error(const Status& status) = 0;

 protected:
  Device() = default;
  // The device's op lists, one per compute type; null where it has none.
  struct OpLists {
    Ops<float>* for_float = nullptr;
    Ops<double>* for_double = nullptr;
    Ops<bf16>* for_bf16 = nullptr;
    Ops<fp16>* for_fp16 = nullptr;
  };
  virtual OpLists op_lists() = 0;
};

template <typename A>
Ops<A>* Device::ops() {
  const OpLists lists = op_lists();
  if constexpr (std::is_same_v<A, float>) return lists.for_float;
  if constexpr (std::is_same_v<A, double>) return lists.for_double;
  if constexpr (std::is_same_v<A, bf16>) return lists.for_bf16;
  if constexpr (std::is_same_v<A, fp16>) return lists.for_fp16;
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, double> || std::is_same_v<A, bf16> ||
                    std::is_same_v<A, fp16>,
                "op lists exist for float, double, bf16 and fp16");
}

// This rank's CUDA device: local rank % devices (device/local_rank.h), made current, with its
// kernels::cuda::Context and caching allocator. Errors: no device visible to this process,
// cudaSetDevice, the Context. Defined in cuda_device.cpp, so only programs that link
// lattice_engine_gpu may call it.
Result<std::unique_ptr<Device>> make_cuda_device();

}  // namespace lattice
