// Ring attention for context parallelism (--context-parallel-size): causal self-attention of a
// sequence whose rows are spread over the CP group by context_split.h's load-balanced split,
// computed without ever gathering the sequence: the key/value rows travel round the ring of CP
// ranks while each rank attends its own queries to the block it holds (Note [ring attention],
// ring_attention.cpp). Same semantics as kernels.h's attention_forward / attention_backward on
// the whole sequence (grouped query attention, packed documents by positions), in fp32, fp64,
// bf16 or fp16 (the 16-bit types merge in fp32: Note [ring attention in 16 bits]), on any Device
// whose op list has the ring ops (Ops::has_ring_attention: every list of the CPU and of CUDA):
// every buffer is device memory, every op is queued on the device's compute stream, the
// transfers are the CP communicator's isend / irecv (Note [ring attention on a device]).
// Non-goal here: attention dropout (refused by the caller with CP > 1).
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "device/device.h"
#include "device/device_blocks.h"
#include "device/ops.h"
#include "lattice/comm.h"
#include "lattice/kernels.h"
#include "lattice/status.h"

namespace lattice {

// Where the ring's time went, summed over calls since the last reset.
struct RingAttentionTimes {
  double compute_seconds = 0;  // in the block kernels
  double wait_seconds = 0;     // blocked on a key/value or gradient transfer
  int steps = 0;               // ring steps taken (CP per call)
};

// One layer's attention on one CP rank. The buffers the ring passes (2 x this rank's keys and
// values, their gradients, the kernels' workspace) are device memory held here and reused by
// every call, so one object can serve every layer of a model. Not thread-safe; `device`, `ops`
// and `cp` must outlive it, and `cp` must carry no other point-to-point messages with tags 7301
// and 7302 while a call runs. `cp` moves `device`'s buffers: the CPU's communicators, or on CUDA
// an NcclComm made by device.make_comm.
template <typename A>
class RingAttention {
 public:
  using G = accum_t<A>;  // what the blocks merge into: lse, the gradients of the travelling keys
  // cp: the context-parallel group (CP = cp.size()); B sequences of `seq_length` rows each;
  // NH query heads and KV key/value heads (NH % KV == 0) of HS each, on this rank; ops:
  // device.ops<A>(), with has_ring_attention(). seq_length must pass
  // check_context_split(seq_length, CP) (asserted). Errors: the device is out of memory.
  static Result<std::unique_ptr<RingAttention>> create(Device& device, Ops<A>& ops, Comm& cp, int B,
                                                       int seq_length, int NH, int KV, int HS);

  // This rank's rows per sequence: T / CP (chunks cp.rank() and 2 CP - 1 - cp.rank()).
  int local_rows() const { return Tl_; }
  // (local_rows()) the global positions of this rank's rows (RoPE's positions, the mask's
  // order), in host memory.
  const int32_t* positions() const { return positions_of_[rank_].data(); }

  // out (B, Tl, NH HS) = causal attention of this rank's queries over every key of the sequence;
  // lse (B, NH, Tl) = each query row's log-sum-exp of scores, kept for backward. qkv (B, Tl,
  // (NH + 2 KV) HS) in kernels.h's grouped layout: cp_split of the whole sequence's qkv (after
  // RoPE at global positions). doc (B, Tl), when non-null: each row's position within its packed
  // document (cp_split of the loader's positions); null: plain causal. All device memory, written
  // by the compute stream (ordered before this call); the results are queued on it. Collective
  // over cp.
  Status forward(A* out, G* lse, const A* qkv, const int32_t* doc);
  // dqkv (B, Tl, (NH + 2 KV) HS), WRITTEN: the gradient of this rank's qkv rows given dout (B, Tl,
  // NH HS), with the forward's qkv, out, lse and doc. Device memory as forward's. Collective over
  // cp.
  Status backward(A* dqkv, const A* dout, const A* qkv, const A* out, const G* lse,
                  const int32_t* doc);

  // false: each step waits for the next block's transfer before computing (for measuring the
  // overlap; the results are the same).
  void set_overlap(bool on) { overlap_ = on; }
  const RingAttentionTimes& times() const { return times_; }
  void reset_times() { times_ = RingAttentionTimes{}; }

  // The blocks this rank computes against the keys and values of CP rank `src` (Note [ring
  // attention]): local query rows [q_begin, q_end) against src's rows [k_begin, k_end); their
  // positions are the device copies.
  std::vector<kernels::AttentionBlock> blocks_against(int src, const int32_t* doc) const;

  ~RingAttention();
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

 private:
  RingAttention(Device& device, Ops<A>& ops, Comm& cp, int B, int seq_length, int NH, int KV,
                int HS);
  G* workspace();
  Status compute_done();
  template <typename X>
  void shift(std::unique_ptr<CommRequest>& receive, X* into, std::unique_ptr<CommRequest>& send,
             const X* from, int tag);
  Status wait(std::unique_ptr<CommRequest>& request);
  void progress(std::unique_ptr<CommRequest>* requests, int count);

  Device& device_;
  Ops<A>& ops_;
  Comm& cp_;
  int B_, T_, NH_, KV_, HS_, CP_, rank_, Tl_, c_;
  size_t kv_elems_;                                 // B Tl 2 KV HS
  std::vector<std::vector<int32_t>> positions_of_;  // [CP] (Tl) every rank's global positions
  DeviceBlocks blocks_;                             // the buffers below but the workspace
  int32_t* positions_ = nullptr;                    // (CP, Tl) positions_of_ on the device
  A* kv_[2] = {};           // (B, Tl, 2 KV HS) the block in use and the one in transit
  G* dkv_[2] = {};          // (B, Tl, 2 KV HS) gradients of a block's keys and values, sent on
  G* dkv_in_ = nullptr;     // (B, Tl, 2 KV HS) the gradients received from the previous rank
  G* delta_ = nullptr;      // (B, NH, Tl) rowsum(dout * out)
  G* out_acc_ = nullptr;    // (B, Tl, NH HS) the merged output, 16-bit A only
  G* dqkv_acc_ = nullptr;   // (B, Tl, (NH + 2 KV) HS) the summed gradient, 16-bit A only
  G* workspace_ = nullptr;  // workspace_elems_ of ops_.attention_block_workspace_elems
  size_t workspace_elems_ = 0;
  bool overlap_ = true;
  RingAttentionTimes times_;
};

extern template class RingAttention<float>;
extern template class RingAttention<double>;
extern template class RingAttention<bf16>;
extern template class RingAttention<fp16>;

}  // namespace lattice
