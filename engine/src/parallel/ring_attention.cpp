// ring_attention.h: causal attention over the context-parallel ring.
//
// Note [ring attention]
// Each of the CP ranks holds 2 chunks of c = T / (2 CP) rows of every sequence: chunks r and
// 2 CP - 1 - r (context_split.h). Attention needs every query to see every earlier key, so the
// keys and values go round the ring: at step s (0 <= s < CP) rank r holds the key/value rows of
// rank src = r - s (mod CP), computes its queries against them, and meanwhile sends them on to
// rank r + 1 and receives rank r - s - 1's from rank r - 1 (isend / irecv posted before the
// compute, waited for after it: the transfer of the next block overlaps the compute of this one;
// Open MPI moves the bytes while the rank is inside an MPI call, so the loop polls test()
// between kernel calls). A query chunk against a key chunk is a full block when the key chunk
// comes earlier, the causal diagonal when it is the same chunk, nothing when it comes later.
// With the zigzag split that makes (Megatron / Transformer Engine's load-balanced ring):
//   s = 0        both local query chunks against the local keys, causal (3 of 4 chunk pairs);
//   src < r      both query chunks against src's FIRST chunk only, no mask (half the work);
//   src > r      the SECOND query chunk only against both of src's chunks, no mask (half).
// blocks_against() finds these from the chunk order alone; the kernel masks by global positions
// (kernels.h's AttentionBlock), which gives the same result and also packed documents' masks.
// The blocks merge by log-sum-exp (flash attention's online softmax): the output and lse of
// each row stay normalised after every block, so the forward saves only out and lse.
// Backward goes round the ring again: the keys and values travel as in the forward, and with
// them the gradients of the block's keys and values, accumulated by every rank the block
// visits: rank r adds its part for src's block to what it received from rank r - 1 and sends
// the sum on to rank r + 1. After the last step the sum for rank r + 1's keys sits on rank r,
// one more send brings each block home. The probabilities are recomputed from the saved lse.
#include "parallel/ring_attention.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <limits>

#include "lattice/dtype.h"
#include "parallel/context_split.h"

namespace lattice {
namespace {

constexpr int kTagKv = 7301;   // a block's keys and values
constexpr int kTagDkv = 7302;  // the gradients of a block's keys and values

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

template <typename T>
RingAttention<T>::RingAttention(Comm& cp, int B, int seq_length, int NH, int KV, int HS)
    : cp_(cp),
      B_(B),
      T_(seq_length),
      NH_(NH),
      KV_(KV),
      HS_(HS),
      CP_(cp.size()),
      rank_(cp.rank()),
      Tl_(seq_length / cp.size()),
      c_(seq_length / (2 * cp.size())) {
  assert(check_context_split(seq_length, CP_).is_ok());
  assert(KV > 0 && NH % KV == 0);
  positions_of_.resize(CP_);
  for (int r = 0; r < CP_; r++) {
    positions_of_[r].resize(Tl_);
    cp_positions(positions_of_[r].data(), T_, r, CP_);
  }
  const size_t kv_elems = static_cast<size_t>(B_) * Tl_ * 2 * KV_ * HS_;
  for (int i = 0; i < 2; i++) {
    kv_[i].resize(kv_elems);
    dkv_[i].resize(kv_elems);
  }
  dkv_in_.resize(kv_elems);
  delta_.resize(static_cast<size_t>(B_) * NH_ * Tl_);
}

template <typename T>
std::vector<kernels::AttentionBlock> RingAttention<T>::blocks_against(int src,
                                                                      const int32_t* doc) const {
  kernels::AttentionBlock base;
  base.B = B_;
  base.NH = NH_;
  base.KV = KV_;
  base.HS = HS_;
  base.Tq = Tl_;
  base.Tk = Tl_;
  base.q_pos = positions_of_[rank_].data();
  base.k_pos = positions_of_[src].data();
  base.doc = doc;
  // Key chunks of src that query half h needs: those not after its chunk. src's chunks ascend,
  // so they are a prefix: none, the first, or both.
  int keys_needed[2];
  for (int half = 0; half < 2; half++) {
    const int q_chunk = cp_chunk(rank_, CP_, half);
    keys_needed[half] =
        (cp_chunk(src, CP_, 0) <= q_chunk ? 1 : 0) + (cp_chunk(src, CP_, 1) <= q_chunk ? 1 : 0);
  }
  std::vector<kernels::AttentionBlock> blocks;
  auto add = [&](int q_begin, int q_end, int chunks) {
    if (chunks == 0) return;
    kernels::AttentionBlock b = base;
    b.q_begin = q_begin;
    b.q_end = q_end;
    b.k_begin = 0;
    b.k_end = chunks * c_;
    blocks.push_back(b);
  };
  if (keys_needed[0] == keys_needed[1]) {
    add(0, Tl_, keys_needed[0]);
  } else {
    add(0, c_, keys_needed[0]);
    add(c_, Tl_, keys_needed[1]);
  }
  return blocks;
}

// kv (B, Tl, 2 KV HS) = the key and value columns of qkv: in the grouped layout a group's value
// follows its key, so each group is one run of 2 HS.
template <typename T>
void RingAttention<T>::pack_kv(T* kv, const T* qkv) const {
  const int Q = NH_ / KV_, ld = (NH_ + 2 * KV_) * HS_, ldk = 2 * KV_ * HS_;
  for (size_t row = 0; row < static_cast<size_t>(B_) * Tl_; row++)
    for (int g = 0; g < KV_; g++) {
      const T* src = qkv + row * ld + (static_cast<size_t>(g) * (Q + 2) + Q) * HS_;
      std::copy(src, src + 2 * HS_, kv + row * ldk + static_cast<size_t>(g) * 2 * HS_);
    }
}

template <typename T>
T* RingAttention<T>::workspace() {
  const size_t elems =
      kernels::attention_block_workspace_elems(Tl_, Tl_, HS_) * kernels::num_threads();
  if (workspace_.size() < elems) workspace_.resize(elems);
  return workspace_.data();
}

template <typename T>
Status RingAttention<T>::wait(std::unique_ptr<CommRequest>& request) {
  if (!request) return Status::ok();
  const auto start = std::chrono::steady_clock::now();
  Status s = request->wait();
  times_.wait_seconds += seconds_since(start);
  request.reset();
  return s;
}

// Lets MPI move the bytes of the transfers in flight (Note [ring attention]).
template <typename T>
void RingAttention<T>::progress(std::unique_ptr<CommRequest>* requests, int count) {
  for (int i = 0; i < count; i++)
    if (requests[i]) requests[i]->test();
}

template <typename T>
Status RingAttention<T>::forward(T* out, T* lse, const T* qkv, const int32_t* doc) {
  const int next = (rank_ + 1) % CP_, prev = (rank_ + CP_ - 1) % CP_;
  const size_t kv_elems = kv_[0].size();
  std::fill(out, out + static_cast<size_t>(B_) * Tl_ * NH_ * HS_, T(0));
  std::fill(lse, lse + delta_.size(), -std::numeric_limits<T>::infinity());
  pack_kv(kv_[0].data(), qkv);
  T* ws = workspace();
  for (int s = 0; s < CP_; s++) {
    const int src = (rank_ - s + CP_) % CP_;
    std::unique_ptr<CommRequest> transfers[2];  // receive the next block, send this one
    if (s + 1 < CP_) {
      transfers[0] = cp_.irecv(kv_[(s + 1) % 2].data(), kv_elems, dtype_of<T>(), prev, kTagKv);
      transfers[1] = cp_.isend(kv_[s % 2].data(), kv_elems, dtype_of<T>(), next, kTagKv);
    }
    if (!overlap_)
      for (auto& t : transfers)
        if (Status st = wait(t); !st) return st;
    const auto start = std::chrono::steady_clock::now();
    for (const kernels::AttentionBlock& block : blocks_against(src, doc)) {
      kernels::attention_block_forward(out, lse, qkv, kv_[s % 2].data(), block, ws);
      progress(transfers, 2);
    }
    times_.compute_seconds += seconds_since(start);
    times_.steps++;
    for (auto& t : transfers)
      if (Status st = wait(t); !st) return st;
  }
  return Status::ok();
}

template <typename T>
Status RingAttention<T>::backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                                  const int32_t* doc) {
  const int next = (rank_ + 1) % CP_, prev = (rank_ + CP_ - 1) % CP_;
  const int Q = NH_ / KV_, ld = (NH_ + 2 * KV_) * HS_, ldk = 2 * KV_ * HS_, C = NH_ * HS_;
  const size_t kv_elems = kv_[0].size(), rows = static_cast<size_t>(B_) * Tl_;
  // delta = rowsum(dout * out) per head: the softmax backward's sum over every key of the ring.
  for (size_t row = 0; row < rows; row++)
    for (int h = 0; h < NH_; h++) {
      const T* d = dout + row * C + static_cast<size_t>(h) * HS_;
      const T* o = out + row * C + static_cast<size_t>(h) * HS_;
      T dot = 0;
      for (int i = 0; i < HS_; i++) dot += d[i] * o[i];
      delta_[(row / Tl_ * NH_ + h) * Tl_ + row % Tl_] = dot;
    }
  std::fill(dqkv, dqkv + rows * ld, T(0));
  pack_kv(kv_[0].data(), qkv);
  T* ws = workspace();
  // [0] receive the next block, [1] send this one, [2] receive the gradients of the next block
  // (or, after the last step, of this rank's own), [3], [4] the gradients sent from dkv_[0], [1].
  std::unique_ptr<CommRequest> transfers[5];
  for (int s = 0; s < CP_; s++) {
    const int src = (rank_ - s + CP_) % CP_;
    if (s + 1 < CP_) {
      transfers[0] = cp_.irecv(kv_[(s + 1) % 2].data(), kv_elems, dtype_of<T>(), prev, kTagKv);
      transfers[1] = cp_.isend(kv_[s % 2].data(), kv_elems, dtype_of<T>(), next, kTagKv);
    }
    if (Status st = wait(transfers[3 + s % 2]); !st) return st;  // dkv_[s % 2] is free again
    if (!overlap_)
      for (int i = 0; i < 3; i++)
        if (Status st = wait(transfers[i]); !st) return st;
    T* acc = dkv_[s % 2].data();
    std::fill(acc, acc + kv_elems, T(0));
    const auto start = std::chrono::steady_clock::now();
    for (const kernels::AttentionBlock& block : blocks_against(src, doc)) {
      kernels::attention_block_backward(dqkv, acc, dout, delta_.data(), lse, qkv, kv_[s % 2].data(),
                                        block, ws);
      progress(transfers, 5);
    }
    times_.compute_seconds += seconds_since(start);
    times_.steps++;
    if (s > 0) {  // add the parts of the ranks this block visited before
      if (Status st = wait(transfers[2]); !st) return st;
      for (size_t i = 0; i < kv_elems; i++) acc[i] += dkv_in_[i];
    }
    if (CP_ > 1) {
      transfers[3 + s % 2] = cp_.isend(acc, kv_elems, dtype_of<T>(), next, kTagDkv);
      transfers[2] = cp_.irecv(dkv_in_.data(), kv_elems, dtype_of<T>(), prev, kTagDkv);
    }
    for (int i = 0; i < 2; i++)
      if (Status st = wait(transfers[i]); !st) return st;
  }
  for (int i = 2; i < 5; i++)
    if (Status st = wait(transfers[i]); !st) return st;
  // This rank's own keys' and values' gradients: back from the ring, or kept with CP = 1.
  const T* own = CP_ > 1 ? dkv_in_.data() : dkv_[0].data();
  for (size_t row = 0; row < rows; row++)
    for (int g = 0; g < KV_; g++) {
      const T* src = own + row * ldk + static_cast<size_t>(g) * 2 * HS_;
      std::copy(src, src + 2 * HS_, dqkv + row * ld + (static_cast<size_t>(g) * (Q + 2) + Q) * HS_);
    }
  return Status::ok();
}

template class RingAttention<float>;
template class RingAttention<double>;

}  // namespace lattice
