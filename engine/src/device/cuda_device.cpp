// The CUDA backend's device (device.h; docs/one-engine.md 3.2): the kernels' Context (its
// stream is the compute stream, its error the device's), the CachingAllocator over cudaMalloc,
// side streams and events (as gpu_pipeline.cpp make_streams / follow use them), asynchronous
// copies and fills, timing events for marks, the op lists of cuda_ops.cpp over the Context, and
// a synchronize() watched as NcclComm's blocking calls are (nccl_comm.h watched_stream_wait).
// Built only into lattice_engine_gpu; compiled here, never yet run on a GPU (docs/gpu.md).
//
// Events: an Event is (stream, seq); the stream keeps the cudaEvent_t of every record not yet
// known to be complete, oldest first. Records complete in stream order, so the ones at the
// front that cudaEventQuery reports complete go back to a pool; an Event whose record is no
// longer kept has completed. No event is re-recorded while someone may still wait for it, so a
// wait never waits for later work than asked (which could close a cycle between streams).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "core/host_memory.h"
#include "device/caching_allocator.h"
#include "device/device.h"
#include "device/local_rank.h"
#include "device/ops.h"
#include "lattice/cuda_kernels.h"
#include "lattice/plan.h"
#include "parallel/staged_comm.h"
#if LATTICE_HAVE_NCCL
#include "parallel/nccl_comm.h"
#endif

namespace lattice {
namespace {

namespace cu = kernels::cuda;

class CudaStream final : public Stream {
 public:
  // owned: destroyed with this (a side stream); the compute stream belongs to the Context.
  CudaStream(std::string name, cudaStream_t stream, bool owned)
      : Stream(std::move(name)), stream_(stream), owned_(owned) {}
  ~CudaStream() override {
    if (owned_) cudaStreamDestroy(stream_);
  }
  void* native() const override { return stream_; }
  cudaStream_t get() const { return stream_; }

  uint64_t records = 0;                                  // events recorded here so far
  std::deque<std::pair<uint64_t, cudaEvent_t>> pending;  // (seq, event), not known complete

 private:
  cudaStream_t stream_;
  bool owned_;
};

// A mark's value: the generation of reset_marks() in the high half, the timing event's index
// in the low half, so a mark from before a reset reads as NaN instead of another time.
constexpr int kMarkIndexBits = 32;

class CudaDevice final : public Device {
 public:
  CudaDevice(int index, std::string name, std::unique_ptr<cu::Context> ctx)
      : index_(index),
        name_(std::move(name)),
        capabilities_(cuda_capabilities()),
        ctx_(std::move(ctx)),
        memory_(make_cuda_memory_backend()),
        compute_("compute", ctx_->stream(), false),
        ops_float_(make_cuda_ops<float>(*ctx_)),
        ops_bf16_(make_cuda_ops<bf16>(*ctx_)),
        ops_fp16_(make_cuda_ops<fp16>(*ctx_)) {}
  ~CudaDevice() override;

  const Capabilities& capabilities() const override { return capabilities_; }
  std::string describe() const override { return name_ + ", device " + std::to_string(index_); }
  std::string blas_name() const override { return "cuBLASLt"; }
  double peak_flops(DType compute) const override;

  void* allocate(size_t bytes, MemoryCategory category) override {
    return memory_.allocate(bytes, category);
  }
  void free(void* block) override { memory_.free(block); }
  Status out_of_memory(MemoryCategory category, size_t bytes) const override {
    return Status::resource_exhausted("out of device memory: " + std::to_string(bytes) +
                                      " bytes (" + binary_size(static_cast<double>(bytes)) +
                                      ") of " + memory_category_name(category) +
                                      " could not be allocated on " + describe());
  }
  CategoryUsage usage(MemoryCategory category) const override {
    return memory_.stats().of(category);
  }
  MemoryReport memory() const override { return memory_report_of(memory_.stats()); }

  Stream& compute() override { return compute_; }
  Result<Stream*> new_stream(const std::string& name) override;
  Event record(Stream& stream) override;
  bool completed(const Event& event) override;
  void wait(Stream& waiter, const Event& event) override;
  Status synchronize(Stream& stream) override;
  void progress() override {}

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream& stream) override;
  void zero(void* dst, size_t bytes, Stream& stream) override {
    check(cudaMemsetAsync(dst, 0, bytes, cuda(stream).get()), "cudaMemsetAsync");
  }
  Mark mark(Stream& stream) override;
  double seconds(const Mark& from, const Mark& to) override;
  void reset_marks() override {
    marks_used_ = 0;
    mark_generation_++;
  }

  Result<std::unique_ptr<Comm>> make_comm(Comm& group) override;
  Status error() const override {
    return ctx_->error().empty() ? Status::ok() : Status::internal(ctx_->error());
  }
  void record_error(const Status& status) override {
    if (!status.is_ok()) ctx_->record_error(status.message());
  }

 private:
  CudaStream& cuda(Stream& stream) {
    assert((&stream == &compute_ ||
            std::any_of(side_.begin(), side_.end(), [&](auto& s) { return s.get() == &stream; })) &&
           "a stream of another device");
    return static_cast<CudaStream&>(stream);
  }
  // Records "<what>: <CUDA's words>" as the device's error unless rc is cudaSuccess.
  bool check(cudaError_t rc, const char* what) {
    if (rc == cudaSuccess) return true;
    ctx_->record_error(std::string(what) + ": " + cudaGetErrorString(rc));
    return false;
  }
  OpLists op_lists() override {
    return {ops_float_.get(), nullptr, ops_bf16_.get(), ops_fp16_.get()};  // no fp64 kernels
  }
  // The kept record of `event`, or nullopt when it has completed and was retired.
  std::optional<cudaEvent_t> pending_event(const Event& event);
  // Returns the completed records at the front of stream's list to the pool.
  void retire(CudaStream& stream);

  int index_;
  std::string name_;
  Capabilities capabilities_;
  std::unique_ptr<cu::Context> ctx_;  // destroyed last: it owns the compute stream
  CachingAllocator memory_;
  CudaStream compute_;
  std::vector<std::unique_ptr<CudaStream>> side_;
  std::vector<cudaEvent_t> free_events_;  // ordering events (timing off), ready for a record
  std::vector<cudaEvent_t> marks_;        // timing events; the first marks_used_ hold marks
  size_t marks_used_ = 0;
  int64_t mark_generation_ = 0;
  std::unique_ptr<Ops<float>> ops_float_;  // cuda_ops.cpp, over ctx_
  std::unique_ptr<Ops<bf16>> ops_bf16_;
  std::unique_ptr<Ops<fp16>> ops_fp16_;
};

CudaDevice::~CudaDevice() {
  // Nothing queued may still use an event, a stream or a block once they go.
  std::vector<CudaStream*> streams{&compute_};
  for (auto& s : side_) streams.push_back(s.get());
  for (CudaStream* s : streams) {
    cudaStreamSynchronize(s->get());
    for (auto& [seq, e] : s->pending) cudaEventDestroy(e);
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : marks_) cudaEventDestroy(e);
}

double CudaDevice::peak_flops(DType compute) const {
  // The planner's dense figure for the board CUDA names (an H100 PCIe is not an SXM); the
  // 16-bit types (DType names them from step 2 of the plan on) read its bf16 column.
  if (compute == DType::kFloat64 || compute == DType::kInt32 || compute == DType::kInt64 ||
      compute == DType::kUInt8)
    return 0;  // no fp64 compute here (capabilities), and no integer compute
  const std::optional<DeviceSpec> d =
      device_for_gpu_name(name_, compute == DType::kFloat32 ? "fp32" : "bf16");
  return d ? d->peak_flops : 0;
}

Result<Stream*> CudaDevice::new_stream(const std::string& name) {
  cudaStream_t made = nullptr;
  if (cudaError_t rc = cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking); rc != cudaSuccess)
    return Status::internal("cudaStreamCreate for the " + name + " stream on " + describe() + ": " +
                            cudaGetErrorString(rc));
  side_.push_back(std::make_unique<CudaStream>(name, made, true));
  return static_cast<Stream*>(side_.back().get());
}

void CudaDevice::retire(CudaStream& stream) {
  while (!stream.pending.empty() && cudaEventQuery(stream.pending.front().second) == cudaSuccess) {
    free_events_.push_back(stream.pending.front().second);
    stream.pending.pop_front();
  }
}

std::optional<cudaEvent_t> CudaDevice::pending_event(const Event& event) {
  CudaStream& s = cuda(*event.stream);
  assert(event.seq <= s.records && "an event this stream never recorded");
  const auto it = std::lower_bound(s.pending.begin(), s.pending.end(), event.seq,
                                   [](const auto& kept, uint64_t seq) { return kept.first < seq; });
  if (it == s.pending.end() || it->first != event.seq) return std::nullopt;
  return it->second;
}

Event CudaDevice::record(Stream& stream) {
  CudaStream& s = cuda(stream);
  retire(s);
  cudaEvent_t e = nullptr;
  if (!free_events_.empty()) {
    e = free_events_.back();
    free_events_.pop_back();
  } else if (!check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate")) {
    return Event{};  // the error is the device's now; synchronize() returns it
  }
  if (!check(cudaEventRecord(e, s.get()), "cudaEventRecord")) {
    free_events_.push_back(e);
    return Event{};
  }
  s.pending.emplace_back(++s.records, e);
  return Event{&stream, s.records};
}

bool CudaDevice::completed(const Event& event) {
  if (!event.stream) return true;
  const std::optional<cudaEvent_t> e = pending_event(event);
  if (!e) return true;
  const cudaError_t rc = cudaEventQuery(*e);
  if (rc == cudaErrorNotReady) return false;
  check(rc, "cudaEventQuery");
  return true;
}

void CudaDevice::wait(Stream& waiter, const Event& event) {
  CudaStream& w = cuda(waiter);
  if (!event.stream || event.stream == &waiter) return;  // none, or stream order already
  if (const std::optional<cudaEvent_t> e = pending_event(event))
    check(cudaStreamWaitEvent(w.get(), *e, 0), "cudaStreamWaitEvent");
}

Status CudaDevice::synchronize(Stream& stream) {
  CudaStream& s = cuda(stream);
#if LATTICE_HAVE_NCCL
  // Watched first (a hung peer in a stream-ordered NCCL call ends the job); the synchronisation
  // below then returns at once and collects the stream's error as before.
  if (Status w = watched_stream_wait(
          s.get(), "the synchronisation of the " + stream.name() + " stream on " + describe());
      !w)
    record_error(w);
#endif
  if (&stream == &compute_)
    ctx_->synchronize();  // records its own failure
  else
    check(cudaStreamSynchronize(s.get()), "cudaStreamSynchronize");
  retire(s);
  return error();
}

void CudaDevice::copy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream& stream) {
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  check(cudaMemcpyAsync(dst, src, bytes, k, cuda(stream).get()), "cudaMemcpyAsync");
}

Mark CudaDevice::mark(Stream& stream) {
  if (marks_used_ == marks_.size()) {
    cudaEvent_t e = nullptr;
    if (!check(cudaEventCreate(&e), "cudaEventCreate (timing)")) return Mark{&stream, -1};
    marks_.push_back(e);
  }
  const size_t index = marks_used_++;
  check(cudaEventRecord(marks_[index], cuda(stream).get()), "cudaEventRecord (timing)");
  return Mark{&stream, (mark_generation_ << kMarkIndexBits) | static_cast<int64_t>(index)};
}

double CudaDevice::seconds(const Mark& from, const Mark& to) {
  constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  const int64_t low = (int64_t{1} << kMarkIndexBits) - 1;
  auto event_of = [&](const Mark& m) -> cudaEvent_t {
    if (m.value < 0 || (m.value >> kMarkIndexBits) != mark_generation_) return nullptr;
    const size_t index = static_cast<size_t>(m.value & low);
    return index < marks_used_ ? marks_[index] : nullptr;
  };
  cudaEvent_t a = event_of(from), b = event_of(to);
  float ms = 0;
  if (!a || !b || cudaEventElapsedTime(&ms, a, b) != cudaSuccess) return kUnknown;
  return ms * 1e-3;
}

#if LATTICE_HAVE_NCCL
// Which ranks of `group` drive the same GPU as another of them (the same host name and PCI bus
// id), as "world ranks 0 and 1 both on GPU 0000:65:00.0 of gpu-node-3"; "" when each has its
// own. Collective over group.
Result<std::string> shared_gpu(Comm& group, int device_index) {
  constexpr size_t kBytes = 160;
  std::vector<char> mine(kBytes, 0), all(kBytes * group.size(), 0);
  char host[96] = {};
  gethostname(host, sizeof host - 1);
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device_index) != cudaSuccess) {
    cudaGetLastError();
    std::snprintf(bus, sizeof bus, "device %d", device_index);
  }
  std::snprintf(mine.data(), kBytes, "GPU %s of %s", bus, host);
  if (Status s = group.all_gather(mine.data(), all.data(),
                                  std::vector<size_t>(group.size(), kBytes), DType::kUInt8);
      !s)
    return s;
  const std::vector<int>& world = group.world_ranks();
  auto name = [&](int r) { return std::string(all.data() + r * kBytes); };
  auto world_rank = [&](int r) { return r < static_cast<int>(world.size()) ? world[r] : r; };
  for (int a = 0; a < group.size(); a++)
    for (int b = a + 1; b < group.size(); b++)
      if (name(a) == name(b))
        return "world ranks " + std::to_string(world_rank(a)) + " and " +
               std::to_string(world_rank(b)) + " both on " + name(a);
  return std::string();
}
#endif

Result<std::unique_ptr<Comm>> CudaDevice::make_comm(Comm& group) {
  // Note [device collectives through host memory] (parallel/staged_comm.h).
  Result<bool> through_host = device_comm_through_host();
  if (!through_host) return through_host.status();
  if (*through_host) return make_staged_comm(*this, group);
#if LATTICE_HAVE_NCCL
  Result<std::string> shared = shared_gpu(group, index_);
  if (!shared) return shared.status();
  if (!shared->empty())
    return Status::invalid_argument(
        "the " + group.name() + " group has " + *shared +
        ": NCCL needs a GPU of its own for every rank; start one rank per GPU (mpirun "
        "-npernode, srun --ntasks-per-node), or set LATTICE_DEVICE_COMM=host to move device "
        "collectives through host memory (slow; docs/gpu.md)");
  // A split of the group bootstraps the NcclComm, which keeps it (for split() and abort()).
  Result<std::unique_ptr<Comm>> bootstrap = group.split(0, group.rank());
  if (!bootstrap) return bootstrap.status();
  Result<std::unique_ptr<Comm>> nccl = make_nccl_comm(std::move(*bootstrap));
  if (nccl) (*nccl)->set_name(group.name());
  return nccl;
#else
  return Status::invalid_argument("a communicator for the " + group.name() + " group on " +
                                  describe() +
                                  " needs NCCL and MPI in the build, or LATTICE_DEVICE_COMM=host "
                                  "(docs/gpu.md)");
#endif
}

}  // namespace

Result<std::unique_ptr<Device>> make_cuda_device() {
  const int count = cu::device_count();
  if (count == 0) return Status::internal("no CUDA device visible to this process");
  const int index = device_for_local_rank(local_rank_from_environment(), count);
  if (std::string e = cu::set_device(index); !e.empty())
    return Status::internal("device " + std::to_string(index) + ": " + e);
  std::string error;
  std::unique_ptr<cu::Context> ctx = cu::Context::create(&error);
  if (!ctx)
    return Status::internal("CUDA context on device " + std::to_string(index) + ": " + error);
  return std::unique_ptr<Device>(
      std::make_unique<CudaDevice>(index, cu::device_name(index), std::move(ctx)));
}

}  // namespace lattice
