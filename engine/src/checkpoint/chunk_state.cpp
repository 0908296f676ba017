#include "checkpoint/chunk_state.h"

#include <cassert>

#include "core/host_memory.h"
#include "device/device.h"

namespace lattice {

template <typename A>
ChunkState<A>::ChunkState(GptModel<A>& model, AdamW<A>* optimizer, GradReducer<G>* reducer)
    : device_(model.device()), model_(model), optimizer_(optimizer), reducer_(reducer) {
  assert(model_.params() || (optimizer_ && reducer_));
}

template <typename A>
bool ChunkState<A>::device_staged() const {
  return !device_.capabilities().host_addressable;
}

template <typename A>
bool ChunkState<A>::weights_staged() const {
  return device_staged() || !model_.params();
}

template <typename A>
typename ChunkState<A>::G* ChunkState<A>::params() {
  if (!weights_staged()) return model_.params();
  if (params_.empty()) host_assign(params_, model_.arena_size(), MemoryCategory::kWeights);
  return params_.data();
}

template <typename A>
std::vector<MomentPiece> ChunkState<A>::moments() {
  if constexpr (!std::is_same_v<G, float>) {
    return {};
  } else {
    if (!optimizer_) return {};
    std::vector<MomentPiece> pieces = moment_pieces(*optimizer_);
    if (!device_staged()) return pieces;
    const size_t n = optimizer_->exp_avg().size();
    if (exp_avg_.empty() && n > 0) {
      host_assign(exp_avg_, n, MemoryCategory::kOptimizer);
      host_assign(exp_avg_sq_, n, MemoryCategory::kOptimizer);
    }
    // The same packed positions in the host copies.
    for (MomentPiece& p : pieces) {
      const size_t at = static_cast<size_t>(p.exp_avg - optimizer_->exp_avg().data());
      p.exp_avg = exp_avg_.data() + at;
      p.exp_avg_sq = exp_avg_sq_.data() + at;
    }
    return pieces;
  }
}

template <typename A>
Status ChunkState<A>::download(bool weights, bool moments) {
  if (!model_.params()) {
    // Frozen tensors have no fp32 master: their 16-bit values, widened. Then the trained ones'
    // master from every rank's pieces (each rank sends its own, whether or not it keeps them).
    if (weights && model_.layout().has_frozen()) model_.download(params());
    if (Status s = reducer_->gather_master(optimizer_->shard(), optimizer_->master().data(),
                                           weights ? params() : nullptr);
        !s)
      return s;
  } else if (weights && device_staged()) {
    model_.download(params());
  }
  if (moments && optimizer_ && device_staged()) {
    (void)this->moments();  // allocates the host copies
    const size_t bytes = exp_avg_.size() * sizeof(G);
    device_.copy(exp_avg_.data(), optimizer_->exp_avg().data(), bytes, CopyKind::kDeviceToHost,
                 device_.compute());
    device_.copy(exp_avg_sq_.data(), optimizer_->exp_avg_sq().data(), bytes,
                 CopyKind::kDeviceToHost, device_.compute());
  }
  return device_.synchronize(device_.compute());
}

template <typename A>
Status ChunkState<A>::upload(bool moments) {
  if (weights_staged()) {
    model_.upload(params());  // and the compute copy
    if (!model_.params())
      if (Status s = optimizer_->load_master(params(), 0, model_.arena_size()); !s) return s;
  } else {
    model_.refresh_compute_copy();  // the load wrote the master arena in place
  }
  if (moments && optimizer_ && device_staged() && !exp_avg_.empty()) {
    const size_t bytes = exp_avg_.size() * sizeof(G);
    device_.copy(optimizer_->exp_avg().data(), exp_avg_.data(), bytes, CopyKind::kHostToDevice,
                 device_.compute());
    device_.copy(optimizer_->exp_avg_sq().data(), exp_avg_sq_.data(), bytes,
                 CopyKind::kHostToDevice, device_.compute());
  }
  return device_.synchronize(device_.compute());
}

template class ChunkState<float>;
template class ChunkState<double>;
template class ChunkState<bf16>;
template class ChunkState<fp16>;

}  // namespace lattice
