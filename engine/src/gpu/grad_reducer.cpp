// GradReducer (grad_reducer.h, note "gradient reduction overlap").
#include "gpu/grad_reducer.h"

#include <cuda_runtime_api.h>

#include <chrono>

namespace lattice::gpu {

GradReducer::GradReducer(Comm& dp, kernels::cuda::Context& ctx, int device, float* grads,
                         const ParamLayout& layout)
    : dp_(dp), ctx_(ctx), device_(device), grads_(grads), layout_(layout) {
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

void GradReducer::ready(const ParamLayout& layout, float* grads, int first, int last) {
  if (first >= last) return;
  const auto& t = layout.tensors();
  // Tensors of a range are contiguous in the arena (layer-major order).
  const size_t offset = t[first].offset;
  const size_t count = t[last - 1].offset + t[last - 1].numel - offset;
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(event, ctx_.stream()) != cudaSuccess) {
    ctx_.record_error("GradReducer: could not record a CUDA event");
    if (event) cudaEventDestroy(event);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({event, grads + offset, count});
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
    if (s) s = dp_.all_reduce(item.data, item.count, DType::kFloat32, ReduceOp::kSum);
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
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return in_flight_ == 0; });
  waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Status s = error_;
  error_ = Status::ok();
  return s;
}

}  // namespace lattice::gpu
