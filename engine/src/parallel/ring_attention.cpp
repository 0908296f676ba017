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
//
// Note [ring attention on a device]
// Every buffer is device memory and every op (the blocks, packing, fills, sums) is queued on the
// device's compute stream through its op list (ops.h); the transfers are the CP communicator's
// isend / irecv. On the CPU the ops have run when their call returns and MPI moves host memory,
// so this is the loop above. On CUDA the communicator is an NcclComm, which queues its sends and
// receives on a stream of its own that knows nothing of the compute stream, so two rules order
// them: (1) before posting a shift the host waits for the compute stream (compute_done): the
// buffers sent were written by it (pack, the gradient sums) and the buffers received into were
// read by it one step earlier (kv_[(s + 1) % 2], dkv_in_); (2) a received buffer is used only
// after its request's wait() returned, so the ops queued after it follow the transfer. The
// transfer of the next block still overlaps this block's compute: it is posted before the
// blocks are queued, and the host waits for both only after that. A shift posts its send and its
// receive in an order by rank parity (shift): NCCL runs a communicator's point-to-point calls in
// issue order, each waiting for its peer, so if every rank received first no send would start.
// compute_seconds covers queueing the blocks and waiting for them, so it is the blocks' time on
// every device.
//
// Note [ring attention in 16 bits]
// Under --bf16 / --fp16 the ring reads and sends in the compute type and merges in fp32, as a
// 16-bit flash attention computes in fp32 between its 16-bit loads and its one rounded store:
// qkv, the travelling keys and values (half the bytes of fp32 on the wire), dout and the saved
// out are 16-bit; each block merges into an fp32 output and log-sum-exp (out_acc_), rounded into
// the model's 16-bit output once, after the last step, so CP merges add no rounding of their
// own. Backward the same: delta is fp32 (from the 16-bit dout and out, as FlashAttention takes
// it), the query gradients add up in an fp32 dqkv (dqkv_acc_), and the key/value gradients
// travel the ring in fp32 (dkv_), because every rank adds its part to them on the way and a
// 16-bit sum would round at each of the CP hops; dqkv is rounded once at the end. On the CPU
// the 16-bit list widens the block's inputs and runs the float kernels (cpu_ops_16bit.cpp), so a
// 16-bit ring is the fp32 ring on the widened inputs, rounded at its two ends (test_ring_attention
// checks it bit for bit); CUDA's kernels widen as they load (attention_block.cu).
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

template <typename A>
RingAttention<A>::RingAttention(Device& device, Ops<A>& ops, Comm& cp, int B, int seq_length,
                                int NH, int KV, int HS)
    : device_(device),
      ops_(ops),
      cp_(cp),
      B_(B),
      T_(seq_length),
      NH_(NH),
      KV_(KV),
      HS_(HS),
      CP_(cp.size()),
      rank_(cp.rank()),
      Tl_(seq_length / cp.size()),
      c_(seq_length / (2 * cp.size())),
      kv_elems_(static_cast<size_t>(B) * (seq_length / cp.size()) * 2 * KV * HS),
      blocks_(device) {
  assert(check_context_split(seq_length, CP_).is_ok());
  assert(KV > 0 && NH % KV == 0);
  assert(ops.has_ring_attention());
  positions_of_.resize(CP_);
  for (int r = 0; r < CP_; r++) {
    positions_of_[r].resize(Tl_);
    cp_positions(positions_of_[r].data(), T_, r, CP_);
  }
  positions_ = blocks_.take<int32_t>(static_cast<size_t>(CP_) * Tl_, MemoryCategory::kWorkspace);
  for (int i = 0; i < 2; i++) {
    kv_[i] = blocks_.take<A>(kv_elems_, MemoryCategory::kCommBuffers);
    dkv_[i] = blocks_.take<G>(kv_elems_, MemoryCategory::kCommBuffers);
  }
  dkv_in_ = blocks_.take<G>(kv_elems_, MemoryCategory::kCommBuffers);
  delta_ = blocks_.take<G>(static_cast<size_t>(B_) * NH_ * Tl_, MemoryCategory::kWorkspace);
  if constexpr (!std::is_same_v<A, G>) {  // Note [ring attention in 16 bits]
    const size_t rows = static_cast<size_t>(B_) * Tl_;
    out_acc_ = blocks_.take<G>(rows * NH_ * HS_, MemoryCategory::kWorkspace);
    dqkv_acc_ = blocks_.take<G>(rows * (NH_ + 2 * KV_) * HS_, MemoryCategory::kWorkspace);
  }
}

template <typename A>
Result<std::unique_ptr<RingAttention<A>>> RingAttention<A>::create(Device& device, Ops<A>& ops,
                                                                   Comm& cp, int B, int seq_length,
                                                                   int NH, int KV, int HS) {
  std::unique_ptr<RingAttention<A>> ring(
      new RingAttention<A>(device, ops, cp, B, seq_length, NH, KV, HS));
  if (Status s = ring->blocks_.status(); !s) return s;
  // Every rank's positions, uploaded once (from pageable memory: read before copy() returns).
  const int Tl = ring->Tl_;
  for (int r = 0; r < ring->CP_; r++)
    device.copy(ring->positions_ + static_cast<size_t>(r) * Tl, ring->positions_of_[r].data(),
                static_cast<size_t>(Tl) * sizeof(int32_t), CopyKind::kHostToDevice,
                device.compute());
  if (Status s = device.synchronize(device.compute()); !s) return s;
  return ring;
}

template <typename A>
RingAttention<A>::~RingAttention() {
  device_.free(workspace_);
}

template <typename A>
std::vector<kernels::AttentionBlock> RingAttention<A>::blocks_against(int src,
                                                                      const int32_t* doc) const {
  kernels::AttentionBlock base;
  base.B = B_;
  base.NH = NH_;
  base.KV = KV_;
  base.HS = HS_;
  base.Tq = Tl_;
  base.Tk = Tl_;
  base.q_pos = positions_ + static_cast<size_t>(rank_) * Tl_;
  base.k_pos = positions_ + static_cast<size_t>(src) * Tl_;
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

// The kernels' workspace for the thread count now (the CPU's is per thread): grown when it is
// too small; null when the device is out of memory.
template <typename A>
typename RingAttention<A>::G* RingAttention<A>::workspace() {
  const size_t elems = ops_.attention_block_workspace_elems(B_, NH_, Tl_, Tl_, HS_);
  if (elems <= workspace_elems_ && workspace_) return workspace_;
  device_.free(workspace_);  // only the compute stream has used it
  workspace_elems_ = 0;
  workspace_ = static_cast<G*>(
      device_.allocate(std::max<size_t>(elems, 1) * sizeof(G), MemoryCategory::kWorkspace));
  if (workspace_) workspace_elems_ = elems;
  return workspace_;
}

// The host waits for the compute stream (Note [ring attention on a device], rule 1).
template <typename A>
Status RingAttention<A>::compute_done() {
  return device_.synchronize(device_.compute());
}

// One shift of the ring: `into` receives from the previous rank, `from` goes to the next.
// Even ranks send first, odd ranks receive first, so that no cycle of ranks waits for each other
// where the communicator runs them in issue order (NCCL; Note [ring attention on a device]). With
// an odd CP, ranks CP - 1 and 0 are both even: rank 0's receive follows its send to rank 1,
// which completes, so that pair only waits in turn. MPI's non-blocking calls do not care.
template <typename A>
template <typename X>
void RingAttention<A>::shift(std::unique_ptr<CommRequest>& receive, X* into,
                             std::unique_ptr<CommRequest>& send, const X* from, int tag) {
  const int next = (rank_ + 1) % CP_, prev = (rank_ + CP_ - 1) % CP_;
  if (rank_ % 2 == 0) send = cp_.isend(from, kv_elems_, dtype_of<X>(), next, tag);
  receive = cp_.irecv(into, kv_elems_, dtype_of<X>(), prev, tag);
  if (rank_ % 2 != 0) send = cp_.isend(from, kv_elems_, dtype_of<X>(), next, tag);
}

template <typename A>
Status RingAttention<A>::wait(std::unique_ptr<CommRequest>& request) {
  if (!request) return Status::ok();
  const auto start = std::chrono::steady_clock::now();
  Status s = request->wait();
  times_.wait_seconds += seconds_since(start);
  request.reset();
  return s;
}

// Lets MPI move the bytes of the transfers in flight (Note [ring attention]).
template <typename A>
void RingAttention<A>::progress(std::unique_ptr<CommRequest>* requests, int count) {
  for (int i = 0; i < count; i++)
    if (requests[i]) requests[i]->test();
}

template <typename A>
Status RingAttention<A>::forward(A* out, G* lse, const A* qkv, const int32_t* doc) {
  const size_t rows = static_cast<size_t>(B_) * Tl_;
  G* ws = workspace();
  if (!ws)
    return device_.out_of_memory(
        MemoryCategory::kWorkspace,
        ops_.attention_block_workspace_elems(B_, NH_, Tl_, Tl_, HS_) * sizeof(G));
  G* merged = merged_in_accum(out, out_acc_);
  ops_.fill(merged, rows * NH_ * HS_, G(0));
  ops_.fill(lse, static_cast<size_t>(B_) * NH_ * Tl_, -std::numeric_limits<G>::infinity());
  ops_.attention_kv_pack(kv_[0], qkv, rows, NH_, KV_, HS_);
  if (Status st = compute_done(); !st) return st;
  for (int s = 0; s < CP_; s++) {
    const int src = (rank_ - s + CP_) % CP_;
    std::unique_ptr<CommRequest> transfers[2];  // receive the next block, send this one
    if (s + 1 < CP_) shift(transfers[0], kv_[(s + 1) % 2], transfers[1], kv_[s % 2], kTagKv);
    if (!overlap_)
      for (auto& t : transfers)
        if (Status st = wait(t); !st) return st;
    const auto start = std::chrono::steady_clock::now();
    for (const kernels::AttentionBlock& block : blocks_against(src, doc)) {
      ops_.attention_block_forward(merged, lse, qkv, kv_[s % 2], block, ws);
      progress(transfers, 2);
    }
    if (Status st = compute_done(); !st) return st;  // kv_[s % 2] is received into next step
    times_.compute_seconds += seconds_since(start);
    times_.steps++;
    for (auto& t : transfers)
      if (Status st = wait(t); !st) return st;
  }
  if constexpr (!std::is_same_v<A, G>) ops_.to_compute(out, merged, rows * NH_ * HS_);
  return Status::ok();
}

template <typename A>
Status RingAttention<A>::backward(A* dqkv, const A* dout, const A* qkv, const A* out, const G* lse,
                                  const int32_t* doc) {
  const size_t rows = static_cast<size_t>(B_) * Tl_, dqkv_elems = rows * (NH_ + 2 * KV_) * HS_;
  G* ws = workspace();
  if (!ws)
    return device_.out_of_memory(
        MemoryCategory::kWorkspace,
        ops_.attention_block_workspace_elems(B_, NH_, Tl_, Tl_, HS_) * sizeof(G));
  // delta = rowsum(dout * out) per head: the softmax backward's sum over every key of the ring.
  ops_.attention_row_dot(delta_, dout, out, B_, Tl_, NH_, HS_);
  G* grads = merged_in_accum(dqkv, dqkv_acc_);
  ops_.fill(grads, dqkv_elems, G(0));
  ops_.attention_kv_pack(kv_[0], qkv, rows, NH_, KV_, HS_);
  if (Status st = compute_done(); !st) return st;
  // [0] receive the next block, [1] send this one, [2] receive the gradients of the next block
  // (or, after the last step, of this rank's own), [3], [4] the gradients sent from dkv_[0], [1].
  std::unique_ptr<CommRequest> transfers[5];
  for (int s = 0; s < CP_; s++) {
    const int src = (rank_ - s + CP_) % CP_;
    if (s + 1 < CP_) shift(transfers[0], kv_[(s + 1) % 2], transfers[1], kv_[s % 2], kTagKv);
    if (Status st = wait(transfers[3 + s % 2]); !st) return st;  // dkv_[s % 2] is free again
    if (!overlap_)
      for (int i = 0; i < 3; i++)
        if (Status st = wait(transfers[i]); !st) return st;
    G* acc = dkv_[s % 2];
    ops_.fill(acc, kv_elems_, G(0));
    const auto start = std::chrono::steady_clock::now();
    for (const kernels::AttentionBlock& block : blocks_against(src, doc)) {
      ops_.attention_block_backward(grads, acc, dout, delta_, lse, qkv, kv_[s % 2], block, ws);
      progress(transfers, 5);
    }
    if (Status st = compute_done(); !st) return st;
    times_.compute_seconds += seconds_since(start);
    times_.steps++;
    if (s > 0) {  // add the parts of the ranks this block visited before
      if (Status st = wait(transfers[2]); !st) return st;
      ops_.accumulate(acc, dkv_in_, kv_elems_);
      if (Status st = compute_done(); !st) return st;  // acc is sent, dkv_in_ received into
    }
    if (CP_ > 1) shift(transfers[2], dkv_in_, transfers[3 + s % 2], acc, kTagDkv);
    for (int i = 0; i < 2; i++)
      if (Status st = wait(transfers[i]); !st) return st;
  }
  for (int i = 2; i < 5; i++)
    if (Status st = wait(transfers[i]); !st) return st;
  // This rank's own keys' and values' gradients: back from the ring, or kept with CP = 1.
  ops_.attention_kv_unpack(grads, CP_ > 1 ? dkv_in_ : dkv_[0], rows, NH_, KV_, HS_);
  if constexpr (!std::is_same_v<A, G>) ops_.to_compute(dqkv, grads, dqkv_elems);
  return Status::ok();
}

template class RingAttention<float>;
template class RingAttention<double>;
template class RingAttention<bf16>;
template class RingAttention<fp16>;

}  // namespace lattice
