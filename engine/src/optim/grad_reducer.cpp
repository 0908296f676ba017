// GradReducer (grad_reducer.h, Note [one reducer on two devices]).
#include "optim/grad_reducer.h"

#include <algorithm>
#include <chrono>

namespace lattice {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

template <typename T>
GradReducer<T>::GradReducer(Device& device, Stream& dp_stream, const ParamLayout& layout, Comm* dp,
                            bool distributed, size_t bucket_elems, T* grads, void* weights,
                            DType weights_type, Comm* edp)
    : device_(device),
      dp_(dp && dp->size() > 1 ? dp : nullptr),
      edp_(edp && edp->size() > 1 ? edp : nullptr),
      distributed_(distributed && dp_ != nullptr),
      grads_(grads),
      weights_(static_cast<char*>(weights)),
      weights_type_(weights_type) {
  const int n = static_cast<int>(layout.tensors().size());
  bucket_of_tensor_.assign(n, -1);
  ready_.assign(n, 0);
  for (const BucketSpan& span : split_buckets(layout, bucket_elems)) {
    Bucket b{span.begin,
             span.end,
             span.first_tensor,
             span.last_tensor,
             span.last_tensor - span.first_tensor,
             {},
             span.begin,
             nullptr};
    // Note [LoRA] (param_layout.h): a bucket of frozen tensors alone has no gradient to reduce
    // and no parameter to gather; the layout, hence the bucket, is the same on every DP rank.
    b.frozen = true;
    for (int j = span.first_tensor; j < span.last_tensor; j++) {
      bucket_of_tensor_[j] = static_cast<int>(buckets_.size());
      b.frozen = b.frozen && layout.tensors()[j].frozen;
      b.expert = layout.tensors()[j].expert_parallel;  // alike in a bucket (split_buckets)
    }
    const ParamTensor& first = layout.tensors()[span.first_tensor];
    if (!b.frozen)
      b.grad_shift =
          static_cast<ptrdiff_t>(first.grad_offset) - static_cast<ptrdiff_t>(first.offset);
    buckets_.push_back(std::move(b));
  }
  // Expert TP 1 can leave DP 1 with an expert-data group of several ranks: experts alone.
  if (!dp_ && !edp_) return;
  stream_ = &dp_stream;
  if (!distributed_) return;
  const bool own_buffers = device_.capabilities().host_addressable;
  for (Bucket& b : buckets_) {
    // Experts' buckets are shards over the expert-data group (the whole bucket when it has one
    // rank: nothing to reduce), as distributed_shard cuts them.
    const int world = ranks_of(b), rank = rank_of(b);
    b.counts = shard_counts(b.end - b.begin, world);
    for (int r = 0; r < rank; r++) b.shard_begin += b.counts[r];
    if (!own_buffers || b.frozen || !comm_of(b)) continue;
    b.shard =
        static_cast<T*>(device_.allocate(b.counts[rank] * sizeof(T), MemoryCategory::kCommBuffers));
    if (!b.shard) return;  // allocated() says so
    stats_.buffer_bytes += b.counts[rank] * sizeof(T);
  }
}

template <typename T>
Result<std::unique_ptr<GradReducer<T>>> GradReducer<T>::create(
    Device& device, Stream& dp_stream, const ParamLayout& layout, Comm* dp, bool distributed,
    size_t bucket_elems, T* grads, void* weights, DType weights_type, Comm* edp) {
  std::unique_ptr<GradReducer> r(new GradReducer(device, dp_stream, layout, dp, distributed,
                                                 bucket_elems, grads, weights, weights_type, edp));
  if (!r->allocated()) {
    size_t bytes = 0;
    for (const Bucket& b : r->buckets_)
      if (!b.frozen && r->comm_of(b)) bytes += b.counts[r->rank_of(b)] * sizeof(T);
    return device.out_of_memory(MemoryCategory::kCommBuffers, bytes);
  }
  return r;
}

template <typename T>
GradReducer<T>::~GradReducer() {
  // Nothing may still be in flight into the buffers freed here.
  if (stream_) (void)device_.synchronize(*stream_);
  for (Bucket& b : buckets_)
    if (b.shard) device_.free(b.shard);
}

template <typename T>
bool GradReducer<T>::allocated() const {
  if (!distributed_ || !device_.capabilities().host_addressable) return true;
  for (const Bucket& b : buckets_)
    if (!b.shard && !b.frozen && comm_of(b)) return false;
  return true;
}

template <typename T>
void GradReducer<T>::start_iteration() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (Bucket& b : buckets_) b.pending = b.last_tensor - b.first_tensor;
}

template <typename T>
Status GradReducer<T>::launch(Bucket& b) {
  if (!stream_ || b.frozen) return Status::ok();
  // The bucket's gradients are final once compute has run what it has queued (on the CPU that
  // has happened: the wait costs nothing).
  device_.wait(*stream_, device_.record(device_.compute()));
  // Experts' buckets over the other ranks of this expert range (expert-data), the rest over DP.
  Comm* comm = comm_of(b);
  if (!comm) return Status::ok();
  if (distributed_) {
    T* recv = b.shard ? b.shard : grads_ + b.grad_shift + b.shard_begin;
    return comm->reduce_scatter(grads_ + b.grad_shift + b.begin, recv, b.counts, dtype_of<T>(),
                                *stream_);
  }
  return comm->all_reduce(grads_ + b.grad_shift + b.begin, b.end - b.begin, dtype_of<T>(),
                          ReduceOp::kSum, *stream_);
}

template <typename T>
Status GradReducer<T>::mark_ready(int first, int last) {
  for (int i = first; i < last; i++) {
    if (ready_[i]) continue;
    ready_[i] = 1;
    Bucket& b = buckets_[bucket_of_tensor_[i]];
    if (--b.pending == 0)
      if (Status s = launch(b); !s) return s;
  }
  // Operations in flight progress (MPI moves them only inside MPI calls).
  if (stream_) device_.progress();
  return Status::ok();
}

template <typename T>
Status GradReducer<T>::finish() {
  if (!stream_) return Status::ok();
  const auto t0 = std::chrono::steady_clock::now();
  // Buckets backward did not complete (the tied embedding on a stage outside its group, ...):
  // every rank alike.
  for (Bucket& b : buckets_) {
    if (b.pending > 0) {
      b.pending = 0;
      if (Status s = launch(b); !s) return s;
    }
  }
  device_.wait(device_.compute(), device_.record(*stream_));
  if (Status s = device_.synchronize(*stream_); !s) return s;
  for (Bucket& b : buckets_)
    if (b.shard)
      device_.copy(grads_ + b.grad_shift + b.shard_begin, b.shard, b.counts[rank_of(b)] * sizeof(T),
                   CopyKind::kDeviceToDevice, device_.compute());
  stats_.wait_seconds += seconds_since(t0);
  return Status::ok();
}

template <typename T>
std::vector<ArenaRange> GradReducer<T>::owned_ranges() const {
  if (!distributed_) return {};
  std::vector<ArenaRange> out;
  for (const Bucket& b : buckets_)
    out.push_back({b.shard_begin, b.shard_begin + b.counts[rank_of(b)]});
  std::sort(out.begin(), out.end());
  return out;
}

template <typename T>
Status GradReducer<T>::gather_params() {
  if (!distributed_) return Status::ok();
  const auto t0 = std::chrono::steady_clock::now();
  device_.wait(*stream_, device_.record(device_.compute()));  // the step wrote the shards
  const size_t element = dtype_size(weights_type_);
  for (Bucket& b : buckets_)
    if (b.frozen || !comm_of(b)) {
      continue;
    } else if (Status s = comm_of(b)->all_gather(weights_ + b.shard_begin * element,
                                                 weights_ + b.begin * element, b.counts,
                                                 weights_type_, *stream_);
               !s) {
      return s;
    }
  device_.wait(device_.compute(), device_.record(*stream_));
  Status s = device_.synchronize(*stream_);
  const double seconds = seconds_since(t0);
  stats_.wait_seconds += seconds;
  stats_.gather_seconds += seconds;
  return s;
}

template <typename T>
Status GradReducer<T>::gather_master(const OptimizerShard& shard, const T* master, T* out) {
  size_t most = 0;
  for (const Bucket& b : buckets_) most = std::max(most, b.end - b.begin);
  T* bucket = static_cast<T*>(device_.allocate(most * sizeof(T), MemoryCategory::kWorkspace));
  if (!bucket && most > 0)
    return device_.out_of_memory(MemoryCategory::kWorkspace, most * sizeof(T));
  Stream& stream = stream_ ? *stream_ : device_.compute();
  device_.wait(stream, device_.record(device_.compute()));  // the last step wrote the pieces
  Status status = Status::ok();
  const std::vector<OptimizerPiece>& pieces = shard.pieces;  // in arena order
  for (const Bucket& b : buckets_) {
    if (b.frozen) continue;  // no pieces: `out` keeps what it holds there
    const size_t n = b.end - b.begin;
    device_.zero(bucket, n * sizeof(T), stream);
    auto p = std::lower_bound(pieces.begin(), pieces.end(), b.begin,
                              [](const OptimizerPiece& x, size_t at) { return x.offset < at; });
    for (; p != pieces.end() && p->offset < b.end; ++p)
      device_.copy(bucket + (p->offset - b.begin), master + p->state, p->numel * sizeof(T),
                   CopyKind::kDeviceToDevice, stream);
    // Each rank's block of the bucket in place (gather_params' in-place all-gather).
    if (Comm* comm = distributed_ ? comm_of(b) : nullptr)
      if (status = comm->all_gather(bucket + (b.shard_begin - b.begin), bucket, b.counts,
                                    dtype_of<T>(), stream);
          !status)
        break;
    if (out) device_.copy(out + b.begin, bucket, n * sizeof(T), CopyKind::kDeviceToHost, stream);
    if (status = device_.synchronize(stream); !status) break;  // the buffer is refilled next
  }
  if (status) status = device_.synchronize(stream);
  device_.free(bucket);
  return status;
}

template class GradReducer<float>;
template class GradReducer<double>;

}  // namespace lattice
