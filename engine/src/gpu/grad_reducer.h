// Data-parallel gradient reduction overlapped with backward, for the GPU trainer.
//
// Note [gradient reduction overlap]. Backward of the last micro-batch finishes the gradients
// of one layer after another (GpuGpt::set_grads_ready). For each such range the compute
// thread records a CUDA event on the compute stream and queues (event, range); this reducer's
// own thread waits for the event (the range's gradients are then complete on the device) and
// all-reduces the range over the data-parallel NcclComm, which runs on NCCL's stream. So layer
// l's reduction runs while layers l-1 ... 0 are still in backward on the compute stream; the
// compute thread never blocks until finish(), before the optimizer. Sums, not means: the loss
// gradient already carries 1 / (tokens of the global batch).
// Thread safety: ready() and finish() from the compute thread only; the Comm is used by the
// reducer's thread alone between the first ready() and finish().
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "lattice/comm.h"
#include "lattice/cuda_kernels.h"
#include "model/param_layout.h"

namespace lattice::gpu {

class GradReducer {
 public:
  // grads: the fp32 gradient arena of `layout` on `device`; dp: the NcclComm of the
  // data-parallel group (size > 1).
  GradReducer(Comm& dp, kernels::cuda::Context& ctx, int device, float* grads,
              const ParamLayout& layout);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Tensors [first, last) of layout are complete once the work queued on ctx so far has run.
  void ready(int first, int last) { ready(layout_, grads_, first, last); }
  // The same for another arena on the same device (another model chunk of an interleaved
  // pipeline rank): one reducer, one thread and one communicator for every chunk, so every
  // data-parallel rank reduces the ranges in the order its schedule finishes them.
  void ready(const ParamLayout& layout, float* grads, int first, int last);
  // Waits until every queued range is reduced; the first failure, if any. Resets for the next
  // iteration.
  Status finish();
  double seconds_waiting() const { return waited_; }  // compute thread blocked in finish()

 private:
  struct Item {
    void* event;  // cudaEvent_t
    float* data;  // the range's first gradient
    size_t count;
  };
  void run();

  Comm& dp_;
  kernels::cuda::Context& ctx_;
  int device_;
  float* grads_;
  const ParamLayout& layout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  int in_flight_ = 0;  // queued + being reduced
  bool stop_ = false;
  Status error_ = Status::ok();
  double waited_ = 0;
  std::thread thread_;
};

}  // namespace lattice::gpu
