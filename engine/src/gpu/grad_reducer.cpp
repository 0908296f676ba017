// GradReducer (grad_reducer.h, note "gradient reduction overlap").
#include "gpu/grad_reducer.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace lattice::gpu {

GradReducer::GradReducer(Comm& dp, kernels::cuda::Context& ctx, int device,
                         std::vector<ReducedArena> arenas)
    : dp_(dp), ctx_(ctx), device_(device) {
  for (const ReducedArena& in : arenas) {
    Arena a{in.grads, in.layout, in.shard && in.shard->distributed ? in.shard : nullptr, {}, {}};
    if (a.shard) {
      a.bucket_of_tensor.assign(a.layout->tensors().size(), -1);
      for (size_t b = 0; b < a.shard->buckets.size(); b++) {
        const ShardBucket& bucket = a.shard->buckets[b];
        for (int i = bucket.first_tensor; i < bucket.last_tensor; i++)
          a.bucket_of_tensor[i] = static_cast<int>(b);
        a.pending.push_back(bucket.last_tensor - bucket.first_tensor);
      }
    }
    arenas_.push_back(std::move(a));
  }
  thread_ = std::thread([this] { run(); });
}

GradReducer::~GradReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (Item& item : queue_) cudaEventDestroy(static_cast<cudaEvent_t>(item.event));
}

void GradReducer::ready(int arena, int first, int last) {
  if (first >= last) return;
  Arena& a = arenas_[arena];
  if (a.shard) {  // a bucket goes once all of its tensors are ready
    for (int i = first; i < last; i++) {
      const int b = a.bucket_of_tensor[i];
      if (a.pending[b] > 0 && --a.pending[b] == 0) enqueue(arena, 0, 0, b);
    }
    return;
  }
  const auto& t = a.layout->tensors();
  // Tensors of a range are contiguous in the arena (layer-major order).
  const size_t offset = t[first].offset;
  const size_t count = t[last - 1].offset + t[last - 1].numel - offset;
  enqueue(arena, offset, count, -1);
}

void GradReducer::enqueue(int arena, size_t offset, size_t count, int bucket) {
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(event, ctx_.stream()) != cudaSuccess) {
    ctx_.record_error("GradReducer: could not record a CUDA event");
    if (event) cudaEventDestroy(event);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({event, arena, offset, count, bucket});
    in_flight_++;
  }
  cv_.notify_all();
}

void GradReducer::run() {
  kernels::cuda::set_device(device_);  // the current device is per thread
  for (;;) {
    Item item{};
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_
      item = queue_.front();
      queue_.pop_front();
    }
    Status s = Status::ok();
    cudaEvent_t event = static_cast<cudaEvent_t>(item.event);
    if (cudaEventSynchronize(event) != cudaSuccess)
      s = Status::internal("GradReducer: waiting for backward failed");
    cudaEventDestroy(event);
    float* grads = arenas_[item.arena].grads;
    if (s && item.bucket >= 0) {
      // In place: this rank's block of the send buffer is its receive buffer (NcclComm's
      // ncclReduceScatter / grouped ncclReduce accept that).
      const ShardBucket& b = arenas_[item.arena].shard->buckets[item.bucket];
      s = dp_.reduce_scatter(grads + b.begin, grads + b.shard_begin, b.counts, DType::kFloat32);
    } else if (s) {
      s = dp_.all_reduce(grads + item.offset, item.count, DType::kFloat32, ReduceOp::kSum);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!s && error_) error_ = s;
      in_flight_--;
    }
    cv_.notify_all();
  }
}

Status GradReducer::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  // Buckets backward did not complete (none in a normal step): every rank alike.
  for (size_t i = 0; i < arenas_.size(); i++)
    for (size_t b = 0; b < arenas_[i].pending.size(); b++)
      if (arenas_[i].pending[b] > 0) {
        arenas_[i].pending[b] = 0;
        enqueue(static_cast<int>(i), 0, 0, static_cast<int>(b));
      }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return in_flight_ == 0; });
  waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (Arena& a : arenas_)
    for (size_t b = 0; b < a.pending.size(); b++)
      a.pending[b] = a.shard->buckets[b].last_tensor - a.shard->buckets[b].first_tensor;
  Status s = error_;
  error_ = Status::ok();
  return s;
}

Status GradReducer::gather_params(int arena, float* master, kernels::cuda::ComputeCopy copy) {
  const OptimizerShard* shard = arenas_[arena].shard;
  if (!shard) return Status::ok();
  const auto t0 = std::chrono::steady_clock::now();
  // NcclComm's contract: the buffers are ready before a collective (the step ran on ctx).
  if (std::string e = ctx_.synchronize(); !e.empty()) return Status::internal(e);
  std::vector<std::unique_ptr<CommRequest>> requests;
  for (const ShardBucket& b : shard->buckets)
    requests.push_back(
        dp_.all_gather_async(master + b.shard_begin, master + b.begin, b.counts, DType::kFloat32));
  Status s = Status::ok();
  for (auto& r : requests)
    if (Status w = r ? r->wait() : Status::internal("all_gather_async returned nothing"); !w && s)
      s = w;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  waited_ += seconds;
  gathered_ += seconds;
  if (!s) return s;
  // The owners wrote their pieces' 16-bit values in the step; the rest come from the gathered
  // master weights (the same rounding of the same fp32 values).
  namespace cu = kernels::cuda;
  const size_t n = arenas_[arena].layout->total_numel();
  if (copy.type == cu::ComputeCopy::Type::kBf16)
    cu::convert(ctx_, static_cast<bf16*>(copy.data), master, n);
  else if (copy.type == cu::ComputeCopy::Type::kFp16)
    cu::convert(ctx_, static_cast<fp16*>(copy.data), master, n);
  return Status::ok();
}

}  // namespace lattice::gpu
