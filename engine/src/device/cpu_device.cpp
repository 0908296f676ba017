// CpuDevice and its RequestQueue (cpu_device.h): host blocks counted by category, streams
// kept in order as Note [CPU stream order] says.
#include "device/cpu_device.h"

#include <sys/resource.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/host_memory.h"
#include "device/ops.h"
#include "lattice/cpu_isa.h"
#include "lattice/kernels.h"
#include "lattice/train.h"
#include "parallel/staged_comm.h"

namespace lattice {

// ---- RequestQueue ------------------------------------------------------------------------------

uint64_t RequestQueue::push(std::unique_ptr<CommRequest> request) {
  requests_.push_back(std::move(request));
  return ++queued_;
}

Status RequestQueue::complete_through(uint64_t seq) {
  Status first;
  while (completed_ < seq && !requests_.empty()) {
    Status s = requests_.front()->wait();
    requests_.pop_front();
    completed_++;
    if (first.is_ok() && !s.is_ok()) first = std::move(s);
  }
  return first;
}

Status RequestQueue::poll() {
  Status first;
  while (!requests_.empty() && requests_.front()->test()) {
    Status s = requests_.front()->wait();  // complete: its status, without waiting
    requests_.pop_front();
    completed_++;
    if (first.is_ok() && !s.is_ok()) first = std::move(s);
  }
  return first;
}

// ---- CpuDevice: construction, description -------------------------------------------------------

CpuDevice::CpuDevice(const CpuDeviceOptions& options) : capabilities_(cpu_capabilities()) {
  if (options.threads > 0) kernels::set_num_threads(options.threads);
  capabilities_.host_addressable = options.host_addressable;
}

CpuDevice::~CpuDevice() {
  for (auto& [block, info] : blocks_) std::free(block);
  // side_ goes after this body: each queue completes its requests as it is destroyed.
}

std::string CpuDevice::describe() const {
  const int threads = kernels::num_threads();
  return std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " per rank, kernels " +
         kernels::cpu_isa_label(kernels::cpu_isa());
}

std::string CpuDevice::blas_name() const {
  return kernels::blas_core_name();
}

// MFU's denominator: the measured rate of the GEMM the compute type multiplies with
// (cpu_peak_gemm: SGEMM for fp32 and fp64, oneDNN's bf16 matmul or the widened SGEMM for bf16).
double CpuDevice::peak_flops(DType compute) const {
  const PeakGemm gemm = cpu_peak_gemm(compute);
  if (gemm == PeakGemm::kNone) return 0;
  double& gflops = peak_gflops_[static_cast<int>(gemm)];
  if (gflops < 0) gflops = measure_gemm_gflops(kernels::num_threads(), gemm);
  return gflops * 1e9;
}

Status CpuDevice::measure_peak(Comm& ranks, DType compute) {
  const PeakGemm gemm = cpu_peak_gemm(compute);
  if (gemm == PeakGemm::kNone) return Status::ok();
  Result<double> gflops = measure_shared_gemm_gflops(kernels::num_threads(), ranks, gemm);
  if (!gflops) return gflops.status();
  peak_gflops_[static_cast<int>(gemm)] = *gflops;
  return Status::ok();
}

// ---- memory -------------------------------------------------------------------------------------

void* CpuDevice::allocate(size_t bytes, MemoryCategory category) {
  // posix_memalign takes the exact size (no rounding to the alignment, no overflow on absurd
  // sizes: it fails instead).
  void* block = nullptr;
  if (posix_memalign(&block, kAlignment, std::max<size_t>(bytes, 1)) != 0) return nullptr;
  try {
    blocks_.emplace(block, Block{bytes, category});
  } catch (const std::bad_alloc&) {  // the bookkeeping itself ran out
    std::free(block);
    return nullptr;
  }
  CategoryUsage& u = usage_[static_cast<int>(category)];
  u.current += bytes;
  u.peak = std::max(u.peak, u.current);
  return block;
}

void CpuDevice::free(void* block) {
  if (!block) return;
  const auto it = blocks_.find(block);
  assert(it != blocks_.end() && "CpuDevice::free of a block it did not allocate");
  if (it == blocks_.end()) return;
  usage_[static_cast<int>(it->second.category)].current -= it->second.bytes;
  blocks_.erase(it);
  std::free(block);
}

Status CpuDevice::out_of_memory(MemoryCategory category, size_t bytes) const {
  // OutOfMemory's sentence, the one the CPU engine's runs end with (test_memory_limits).
  return Status::resource_exhausted(OutOfMemory(category, bytes).what());
}

CategoryUsage CpuDevice::usage(MemoryCategory category) const {
  return usage_[static_cast<int>(category)];
}

MemoryReport CpuDevice::memory() const {
  auto current = [&](MemoryCategory c) { return usage_[static_cast<int>(c)].current; };
  MemoryReport r;
  r.weights = current(MemoryCategory::kWeights);
  r.grads = current(MemoryCategory::kGrads);
  r.optimizer = current(MemoryCategory::kOptimizer);
  r.activations = current(MemoryCategory::kActivations);
  r.workspace = current(MemoryCategory::kWorkspace);
  r.comm_buffers = current(MemoryCategory::kCommBuffers);
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  r.peak_rss = static_cast<size_t>(self.ru_maxrss) * 1024;  // Linux reports KiB
  return r;
}

// ---- streams and events ------------------------------------------------------------------------

bool CpuDevice::owns(const Stream& stream) const {
  if (&stream == &compute_) return true;
  return std::any_of(side_.begin(), side_.end(),
                     [&](const std::unique_ptr<CpuStream>& s) { return s.get() == &stream; });
}

Result<Stream*> CpuDevice::new_stream(const std::string& name) {
  side_.push_back(std::make_unique<CpuStream>(name, true));
  return static_cast<Stream*>(side_.back().get());
}

Event CpuDevice::record(Stream& stream) {
  assert(owns(stream) && "CpuDevice::record on another device's stream");
  RequestQueue* queue = stream.queue();
  return Event{&stream, queue ? queue->queued() : 0};
}

bool CpuDevice::completed(const Event& event) {
  RequestQueue* queue = event.stream ? event.stream->queue() : nullptr;
  if (!queue) return true;  // no stream, or the compute stream: ran when queued
  record_error(queue->poll());
  return queue->completed() >= event.seq;
}

void CpuDevice::complete_through(Stream& stream, uint64_t seq) {
  if (RequestQueue* queue = stream.queue()) record_error(queue->complete_through(seq));
}

void CpuDevice::wait(Stream& waiter, const Event& event) {
  assert(owns(waiter) && "CpuDevice::wait on another device's stream");
  (void)waiter;  // whichever stream waits, the host completes the event's work
  if (event.stream) complete_through(*event.stream, event.seq);
}

Status CpuDevice::synchronize(Stream& stream) {
  assert(owns(stream) && "CpuDevice::synchronize on another device's stream");
  if (RequestQueue* queue = stream.queue()) complete_through(stream, queue->queued());
  return error_;
}

void CpuDevice::progress() {
  for (const std::unique_ptr<CpuStream>& s : side_) record_error(s->queue()->poll());
}

// ---- copies, fills, marks ----------------------------------------------------------------------

void CpuDevice::copy(void* dst, const void* src, size_t bytes, CopyKind /*kind*/, Stream& stream) {
  if (RequestQueue* queue = stream.queue()) complete_through(stream, queue->queued());
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuDevice::zero(void* dst, size_t bytes, Stream& stream) {
  if (RequestQueue* queue = stream.queue()) complete_through(stream, queue->queued());
  if (bytes > 0) std::memset(dst, 0, bytes);
}

Mark CpuDevice::mark(Stream& stream) {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return Mark{&stream, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()};
}

double CpuDevice::seconds(const Mark& from, const Mark& to) {
  return static_cast<double>(to.value - from.value) * 1e-9;
}

// ---- communicators, errors ---------------------------------------------------------------------

Device::OpLists CpuDevice::op_lists() {
  return {&cpu_ops<float>(), &cpu_ops<double>(), &cpu_ops<bf16>(), &cpu_ops<fp16>()};
}

Result<std::unique_ptr<Comm>> CpuDevice::make_comm(Comm& group) {
  Result<bool> through_host = device_comm_through_host();
  if (!through_host) return through_host.status();
  if (*through_host) return make_staged_comm(*this, group);
  Result<std::unique_ptr<Comm>> part = group.split(0, group.rank());
  if (part) (*part)->set_name(group.name());
  return part;
}

void CpuDevice::record_error(const Status& status) {
  if (error_.is_ok() && !status.is_ok()) error_ = status;
}

CpuDevice& host_device() {
  static CpuDevice* device = new CpuDevice();  // never destroyed: models may outlive statics
  return *device;
}

}  // namespace lattice
