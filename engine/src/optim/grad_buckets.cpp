#include "optim/grad_buckets.h"

#include <algorithm>
#include <chrono>

#include "core/host_memory.h"

namespace lattice {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::vector<BucketSpan> split_buckets(const ParamLayout& layout, size_t bucket_elems) {
  const auto& tensors = layout.tensors();
  const int n = static_cast<int>(tensors.size());
  std::vector<BucketSpan> out;
  // From the last tensor down: a bucket closes once it holds bucket_elems.
  int last = n;
  size_t elems = 0;
  for (int i = n - 1; i >= 0; i--) {
    elems += tensors[i].numel;
    if (elems >= bucket_elems || i == 0) {
      // The top bucket ends at the arena's end; lower ones are tiled below.
      out.push_back({tensors[i].offset, layout.total_numel(), i, last});
      last = i;
      elems = 0;
    }
  }
  // Buckets tile [first tensor's offset, total): the gap before a tensor (alignment) belongs
  // to the bucket below it, so ranges meet exactly.
  for (size_t k = 0; k + 1 < out.size(); k++) out[k + 1].end = out[k].begin;
  if (!out.empty()) out.back().begin = 0;
  return out;
}

std::vector<size_t> shard_counts(size_t len, int world) {
  std::vector<size_t> counts(world);
  for (int r = 0; r < world; r++)
    counts[r] = len / world + (static_cast<size_t>(r) < len % world ? 1 : 0);
  return counts;
}

size_t ddp_bucket_elems(const ParallelOptions& options, int dp) {
  return options.ddp_bucket_size > 0
             ? static_cast<size_t>(options.ddp_bucket_size)
             : std::max<size_t>(40000000, 1000000 * static_cast<size_t>(dp));
}

template <typename T>
GradBuckets<T>::GradBuckets(const ParamLayout& layout, Comm* dp, bool distributed,
                            size_t bucket_elems, T* grads, T* params)
    : dp_(dp && dp->size() > 1 ? dp : nullptr),
      distributed_(distributed && dp_ != nullptr),
      grads_(grads),
      params_(params) {
  const auto& tensors = layout.tensors();
  const int n = static_cast<int>(tensors.size());
  bucket_of_tensor_.assign(n, -1);
  ready_.assign(n, 0);
  for (const BucketSpan& span : split_buckets(layout, bucket_elems)) {
    Bucket b;
    b.first_tensor = span.first_tensor;
    b.last_tensor = span.last_tensor;
    b.begin = span.begin;
    b.end = span.end;
    b.pending = span.last_tensor - span.first_tensor;
    b.shard_begin = b.begin;
    for (int j = span.first_tensor; j < span.last_tensor; j++)
      bucket_of_tensor_[j] = static_cast<int>(buckets_.size());
    buckets_.push_back(std::move(b));
  }
  if (distributed_) {
    const int world = dp_->size(), rank = dp_->rank();
    for (Bucket& b : buckets_) {
      b.counts = shard_counts(b.end - b.begin, world);
      b.shard_begin = b.begin;
      for (int r = 0; r < rank; r++) b.shard_begin += b.counts[r];
      host_assign(b.shard, b.counts[rank], MemoryCategory::kCommBuffers);
      stats_.buffer_bytes += b.shard.size() * sizeof(T);
    }
  }
}

template <typename T>
void GradBuckets<T>::start_iteration() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (Bucket& b : buckets_) {
    b.pending = b.last_tensor - b.first_tensor;
    b.request.reset();
  }
}

template <typename T>
Status GradBuckets<T>::launch(Bucket& b) {
  if (!dp_) return Status::ok();
  const size_t len = b.end - b.begin;
  if (distributed_) {
    b.request =
        dp_->reduce_scatter_async(grads_ + b.begin, b.shard.data(), b.counts, dtype_of<T>());
  } else {
    b.request = dp_->all_reduce_async(grads_ + b.begin, len, dtype_of<T>(), ReduceOp::kSum);
  }
  return Status::ok();
}

template <typename T>
Status GradBuckets<T>::mark_ready(int first, int last) {
  for (int i = first; i < last; i++) {
    if (ready_[i]) continue;
    ready_[i] = 1;
    Bucket& b = buckets_[bucket_of_tensor_[i]];
    if (--b.pending == 0)
      if (Status s = launch(b); !s) return s;
  }
  // Give in-flight operations a chance to progress (MPI progresses inside MPI calls).
  for (Bucket& b : buckets_)
    if (b.request) b.request->test();
  return Status::ok();
}

template <typename T>
Status GradBuckets<T>::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) {
    if (b.pending > 0) {
      b.pending = 0;
      if (Status s = launch(b); !s) return s;
    }
  }
  for (Bucket& b : buckets_) {
    if (b.request) {
      if (Status s = b.request->wait(); !s) return s;
      b.request.reset();
    }
    if (distributed_) std::copy(b.shard.begin(), b.shard.end(), grads_ + b.shard_begin);
  }
  stats_.wait_seconds += seconds_since(t0);
  return Status::ok();
}

template <typename T>
std::vector<ArenaRange> GradBuckets<T>::owned_ranges() const {
  if (!distributed_) return {};
  std::vector<ArenaRange> out;
  for (const Bucket& b : buckets_)
    out.push_back({b.shard_begin, b.shard_begin + b.counts[dp_->rank()]});
  std::sort(out.begin(), out.end());
  return out;
}

template <typename T>
Status GradBuckets<T>::gather_params() {
  if (!distributed_) return Status::ok();
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_)
    b.request =
        dp_->all_gather_async(params_ + b.shard_begin, params_ + b.begin, b.counts, dtype_of<T>());
  for (Bucket& b : buckets_) {
    if (Status s = b.request->wait(); !s) return s;
    b.request.reset();
  }
  stats_.wait_seconds += seconds_since(t0);
  return Status::ok();
}

template class GradBuckets<float>;
template class GradBuckets<double>;

}  // namespace lattice
