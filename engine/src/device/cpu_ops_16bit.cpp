// The CPU's op lists for bf16 and fp16 (ops.h): the float kernels of kernels.h on widened copies
// of the 16-bit tensors, their results rounded back with dtype.h's conversions (a CUDA op too
// computes in fp32 between 16-bit loads and stores; summation orders differ). Statistics,
// parameter gradients, the attention's saved log-sum-exps and cross-entropy logits are float
// (G), as on CUDA. For tests of the 16-bit data flow on machines without a GPU
// (tests/model/test_gpt_layouts, test_ops) and for --bf16 runs where the CPU has bf16 GEMMs
// (cpu_capabilities()); the widened copies live in per-thread memory reused across calls.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "device/ops.h"
#include "lattice/cpu_bf16_gemm.h"
#include "lattice/dtype.h"
#include "lattice/kernels.h"

namespace lattice {
namespace {

// The widened copies' memory, kept per thread for the next call: a step calls the same shapes
// over and over, and a fresh vector per call (the LM head's logits are 32 MiB at config A) paid
// for its pages in faults and zeroing every time, which was most of a bf16 step's time on the
// CPU. Blocks are reused only at their exact size; a thread keeps at most kKept of them. What it
// holds (taken and kept) is the sizes one step's ops widen at once, which the ops keep to a few
// activations' worth: a vocabulary-wide product goes by column blocks (matmul_forward), the
// embedding widens the rows it reads (embedding_forward). widened_high_water() reports it.
class BlockPool {
 public:
  static constexpr size_t kKept = 256;
  ~BlockPool() {
    for (auto& [n, p] : free_) std::free(p);
  }
  float* take(size_t n) {
    auto it = free_.find(n);
    if (it == free_.end()) {
      void* p = std::malloc(n * sizeof(float));
      if (!p) throw std::bad_alloc();
      held_ += n * sizeof(float);
      high_water_ = std::max(high_water_, held_);
      return static_cast<float*>(p);
    }
    float* p = it->second;
    free_.erase(it);
    return p;
  }
  void give(float* p, size_t n) {
    if (free_.size() >= kKept) {
      std::free(p);
      held_ -= n * sizeof(float);
      return;
    }
    free_.emplace(n, p);
  }
  size_t take_high_water() { return std::exchange(high_water_, held_); }

 private:
  std::multimap<size_t, float*> free_;
  size_t held_ = 0, high_water_ = 0;  // bytes taken from malloc and not freed
};
BlockPool& pool() {
  thread_local BlockPool p;
  return p;
}
template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}
  T* allocate(size_t n) { return pool().take(n); }
  void deallocate(T* p, size_t n) { pool().give(p, n); }
  // Elements default-initialised, not zeroed: an op writes each Buffer whole before reading it,
  // and zeroing one first was a pass over its memory (zeros() makes the one that needs them).
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  bool operator==(const PoolAllocator&) const { return true; }
};
using Buffer = std::vector<float, PoolAllocator<float>>;

// Element loops over whole tensors run on the OpenMP threads above this size.
constexpr size_t kParallelElems = size_t(1) << 16;

// f(first, count) over [0, rows) rows of `unit` elements, in chunks of about kChunkElems
// elements on the OpenMP threads. The element-wise and row-wise ops widen, compute and round a
// chunk at a time on one thread, so that the widened copies stay in that core's cache: one pass
// over the tensors' memory where whole-tensor copies made three. The float kernels run whole on
// a chunk (below their own threading threshold, cpu::kMinParallelWork).
constexpr size_t kChunkElems = size_t(1) << 13;
template <typename F>
void by_chunks(size_t rows, size_t unit, F&& f) {
  const size_t per = std::max<size_t>(1, kChunkElems / std::max<size_t>(unit, 1));
  const size_t chunks = (rows + per - 1) / per;
#pragma omp parallel for schedule(static) if (rows * unit >= kParallelElems)
  for (size_t c = 0; c < chunks; c++) f(c * per, std::min(per, rows - c * per));
}

// (n) zeros.
Buffer zeros(size_t n) {
  Buffer v(n);
  float* out = v.data();
#pragma omp parallel for schedule(static) if (n >= kParallelElems)
  for (size_t i = 0; i < n; i++) out[i] = 0.0f;
  return v;
}

float widen(bf16 x) {
  return from_bf16(x);
}
float widen(fp16 x) {
  return from_fp16(x);
}
template <typename H>
H narrow(float x);
// dtype.h's to_bf16 without its branch, so that store's loop vectorises (a select instead):
// the same bits for every input, NaN included (test_bf16_gemm compares it with to_bf16).
template <>
bf16 narrow<bf16>(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return bf16{static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
}
template <>
fp16 narrow<fp16>(float x) {
  return to_fp16(x);
}
// (n) widened; empty when p is null.
template <typename H>
Buffer wide(const H* p, size_t n) {
  Buffer v(p ? n : 0);
  float* out = v.data();
  const size_t size = v.size();
#pragma omp parallel for schedule(static) if (size >= kParallelElems)
  for (size_t i = 0; i < size; i++) out[i] = widen(p[i]);
  return v;
}
template <typename H>
void store(H* dst, const float* src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelElems)
  for (size_t i = 0; i < n; i++) dst[i] = narrow<H>(src[i]);
}
template <typename H>
void store(H* dst, const Buffer& v) {
  store(dst, v.data(), v.size());
}
// dst's columns [c0, c0 + cols) of its rows of ld elements = src (rows, cols), rounded.
template <typename H>
void store_columns(H* dst, size_t ld, size_t c0, const float* src, size_t rows, size_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElems)
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) dst[r * ld + c0 + c] = narrow<H>(src[r * cols + c]);
}
// The columns a block of matmul_forward's output takes: all of them up to kBlockElems floats,
// else a multiple of 64 near kBlockElems / N, no fewer than 1024 (below that the GEMM would
// pack its N input rows again for too few columns).
constexpr size_t kBlockElems = size_t(1) << 22;
int column_block(int N, int OC) {
  if (static_cast<size_t>(N) * OC <= kBlockElems) return OC;
  const size_t cols = kBlockElems / static_cast<size_t>(std::max(N, 1)) / 64 * 64;
  return static_cast<int>(std::min<size_t>(OC, std::max<size_t>(cols, 1024)));
}
const float* data_or_null(const Buffer& v) {
  return v.empty() ? nullptr : v.data();
}
// The permuted rows the kept routes of N tokens name (route_slot (N, k), -1 where dropped):
// one past the largest slot.
size_t permuted_rows(const int32_t* route_slot, int N, int k) {
  int32_t last = -1;
  for (size_t i = 0; i < static_cast<size_t>(N) * k; i++) last = std::max(last, route_slot[i]);
  return static_cast<size_t>(last + 1);
}
// B T HS: the elements of one head's columns over a block's B sequences of T rows (times the
// heads a tensor has, its size).
size_t head_elems(const kernels::AttentionBlock& a, int T) {
  return static_cast<size_t>(a.B) * T * a.HS;
}

template <typename H>
class CpuOps16 final : public Ops<H> {
 public:
  Ops<float>& f32 = cpu_ops<float>();

  void matmul_forward(H* out, H* pre_gelu, const H* inp, const H* weight, const H* bias, int N,
                      int C, int OC, Epilogue epilogue) override {
    const bool gelu = epilogue == Epilogue::kGelu;
    if (onednn()) {
      // bf16 GEMM into fp32, then bias and GELU in fp32 and one rounding: cuBLASLt's epilogue.
      // By blocks of columns, so that the fp32 rows stay a few MiB (the LM head's whole logits
      // are N V floats: 196 MiB at config B).
      const int block = column_block(N, OC);
      for (int o0 = 0; o0 < OC; o0 += block) {
        const int cols = std::min(block, OC - o0);
        const size_t n = static_cast<size_t>(N) * cols;
        Buffer pre(n), act(gelu ? n : 0);
        if constexpr (std::is_same_v<H, bf16>)
          kernels::gemm_bf16(false, true, N, cols, C, inp, C, weight + static_cast<size_t>(o0) * C,
                             C, 0.0f, pre.data(), cols);
        if (bias) f32.add_bias(pre.data(), wide(bias + o0, cols).data(), N, cols);
        if (gelu) f32.gelu_forward(act.data(), pre.data(), n);
        if (gelu && pre_gelu) store_columns(pre_gelu, OC, o0, pre.data(), N, cols);
        store_columns(out, OC, o0, gelu ? act.data() : pre.data(), N, cols);
      }
      return;
    }
    const size_t n = static_cast<size_t>(N) * OC;
    Buffer pre(n), act(gelu ? n : 0);
    const Buffer i = wide(inp, static_cast<size_t>(N) * C),
                 w = wide(weight, static_cast<size_t>(OC) * C), b = wide(bias, OC);
    f32.matmul_forward(gelu ? act.data() : pre.data(), gelu ? pre.data() : nullptr, i.data(),
                       w.data(), data_or_null(b), N, C, OC, epilogue);
    if (gelu && pre_gelu) store(pre_gelu, pre);
    store(out, gelu ? act : pre);
  }
  void matmul_backward(H* dinp, float* dweight, float* dbias, const H* dout, const H* inp,
                       const H* weight, int N, int C, int OC) override {
    if (onednn()) {
      if constexpr (std::is_same_v<H, bf16>) {
        if (dinp) {
          Buffer di(static_cast<size_t>(N) * C);
          kernels::gemm_bf16(false, false, N, C, OC, dout, OC, weight, C, 0.0f, di.data(), C);
          store(dinp, di);
        }
        // fp32 gradients accumulate in place (the sum post-op), never through bf16.
        if (dweight) kernels::gemm_bf16(true, false, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
        if (dbias)
          for (int r = 0; r < N; r++)
            for (int o = 0; o < OC; o++) dbias[o] += widen(dout[static_cast<size_t>(r) * OC + o]);
      }
      return;
    }
    const Buffer d = wide(dout, static_cast<size_t>(N) * OC),
                 i = wide(inp, static_cast<size_t>(N) * C),
                 w = wide(weight, static_cast<size_t>(OC) * C);
    Buffer di(dinp ? static_cast<size_t>(N) * C : 0);
    f32.matmul_backward(dinp ? di.data() : nullptr, dweight, dbias, d.data(), i.data(), w.data(), N,
                        C, OC);
    if (dinp) store(dinp, di);
  }
  void add_bias(H* out, const H* bias, int N, int OC) override {
    Buffer o = wide(out, static_cast<size_t>(N) * OC);
    const Buffer b = wide(bias, OC);
    f32.add_bias(o.data(), b.data(), N, OC);
    store(out, o);
  }

  void embedding_forward(H* out, const int32_t* tokens, const H* wte, const H* wpe, int B, int T,
                         int C, int vocab_begin, int vocab_end, const int32_t* positions) override {
    // Each token's row of wte widened into row bt of a (B T, C) table that the float op reads
    // with token bt (a token outside the vocabulary slice reads none), rather than the whole
    // table (the vocabulary: 147 MiB at config B); the rows of wpe the positions read (its size
    // is not passed: a context-parallel rank's positions run up to the whole sequence's length).
    const int rows = B * T;
    int position_rows = positions ? 0 : T;
    std::vector<int32_t> row_of(static_cast<size_t>(rows));
    Buffer te(static_cast<size_t>(rows) * C);
#pragma omp parallel for schedule(static) if (te.size() >= kParallelElems)
    for (int i = 0; i < rows; i++) {
      const bool mine = tokens[i] >= vocab_begin && tokens[i] < vocab_end;
      row_of[i] = mine ? i : -1;
      if (!mine) continue;
      const H* src = wte + static_cast<size_t>(tokens[i] - vocab_begin) * C;
      float* dst = te.data() + static_cast<size_t>(i) * C;
      for (int c = 0; c < C; c++) dst[c] = widen(src[c]);
    }
    if (positions)
      for (int i = 0; i < rows; i++) position_rows = std::max(position_rows, positions[i] + 1);
    const Buffer pe = wide(wpe, static_cast<size_t>(position_rows) * C);
    Buffer o(static_cast<size_t>(rows) * C);
    f32.embedding_forward(o.data(), row_of.data(), te.data(), data_or_null(pe), B, T, C, 0, rows,
                          positions);
    store(out, o);
  }
  void embedding_backward(float* dwte, float* dwpe, const H* dout, const int32_t* tokens, int B,
                          int T, int C, int vocab_begin, int vocab_end,
                          const int32_t* positions) override {
    const Buffer d = wide(dout, static_cast<size_t>(B) * T * C);
    f32.embedding_backward(dwte, dwpe, d.data(), tokens, B, T, C, vocab_begin, vocab_end,
                           positions);
  }

  void layernorm_forward(H* out, float* mean, float* rstd, const H* inp, const H* weight,
                         const H* bias, int N, int C) override {
    const Buffer w = wide(weight, C), b = wide(bias, C);
    by_chunks(N, C, [&](size_t r, size_t rows) {
      const size_t at = r * C;
      normalise(out + at, mean + r, rstd + r, wide(inp + at, rows * C), w, b, C);
    });
  }
  // The stored (rounded) sum is what the LayerNorm normalises, as on the device.
  void residual_layernorm_forward(H* residual_out, H* out, float* mean, float* rstd,
                                  const H* residual, const H* x, const H* weight, const H* bias,
                                  int N, int C) override {
    const Buffer w = wide(weight, C), b = wide(bias, C);
    by_chunks(N, C, [&](size_t r, size_t rows) {
      const size_t at = r * C;
      add_and_store(residual_out + at, residual + at, x + at, rows * C);
      normalise(out + at, mean + r, rstd + r, wide(residual_out + at, rows * C), w, b, C);
    });
  }
  void layernorm_backward(H* dinp, float* dweight, float* dbias, const H* dout, const H* inp,
                          const H* weight, const float* mean, const float* rstd, int N,
                          int C) override {
    const size_t n = static_cast<size_t>(N) * C;
    Buffer di = wide(dinp, n);
    const Buffer d = wide(dout, n), i = wide(inp, n), w = wide(weight, C);
    f32.layernorm_backward(di.data(), dweight, dbias, d.data(), i.data(), w.data(), mean, rstd, N,
                           C);
    store(dinp, di);
  }

  void rmsnorm_forward(H* out, float* rstd, const H* inp, const H* weight, int N, int C,
                       float eps) override {
    const Buffer w = wide(weight, C);
    by_chunks(N, C, [&](size_t r, size_t rows) {
      const size_t at = r * C;
      rms_normalise(out + at, rstd + r, wide(inp + at, rows * C), w, C, eps);
    });
  }
  // The stored (rounded) sum is what the RMSNorm normalises, as on the device.
  void residual_rmsnorm_forward(H* residual_out, H* out, float* rstd, const H* residual, const H* x,
                                const H* weight, int N, int C, float eps) override {
    const Buffer w = wide(weight, C);
    by_chunks(N, C, [&](size_t r, size_t rows) {
      const size_t at = r * C;
      add_and_store(residual_out + at, residual + at, x + at, rows * C);
      rms_normalise(out + at, rstd + r, wide(residual_out + at, rows * C), w, C, eps);
    });
  }
  void rmsnorm_backward(H* dinp, float* dweight, const H* dout, const H* inp, const H* weight,
                        const float* rstd, int N, int C) override {
    const size_t n = static_cast<size_t>(N) * C;
    Buffer di = wide(dinp, n);
    const Buffer d = wide(dout, n), i = wide(inp, n), w = wide(weight, C);
    f32.rmsnorm_backward(di.data(), dweight, d.data(), i.data(), w.data(), rstd, N, C);
    store(dinp, di);
  }

  void rope_forward(H* qkv, const float* cos, const float* sin, const int32_t* positions, int N,
                    int T, int NH, int KV, int HS, int rotary_dim) override {
    Buffer x = wide(qkv, static_cast<size_t>(N) * (NH + 2 * KV) * HS);
    f32.rope_forward(x.data(), cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
    store(qkv, x);
  }
  void rope_backward(H* dqkv, const float* cos, const float* sin, const int32_t* positions, int N,
                     int T, int NH, int KV, int HS, int rotary_dim) override {
    Buffer x = wide(dqkv, static_cast<size_t>(N) * (NH + 2 * KV) * HS);
    f32.rope_backward(x.data(), cos, sin, positions, N, T, NH, KV, HS, rotary_dim);
    store(dqkv, x);
  }

  void swiglu_forward(H* out, const H* inp, int N, int F) override {
    const Buffer i = wide(inp, static_cast<size_t>(N) * 2 * F);
    Buffer o(static_cast<size_t>(N) * F);
    f32.swiglu_forward(o.data(), i.data(), N, F);
    store(out, o);
  }
  void swiglu_backward(H* dinp, const H* inp, const H* dout, int N, int F) override {
    const Buffer i = wide(inp, static_cast<size_t>(N) * 2 * F),
                 d = wide(dout, static_cast<size_t>(N) * F);
    Buffer di(i.size());
    f32.swiglu_backward(di.data(), i.data(), d.data(), N, F);
    store(dinp, di);
  }

  // The element-wise ops by chunks (by_chunks); a chunk from element i draws the dropout masks
  // of elements index_offset + i on, as the whole tensor's would.
  void gelu_forward(H* out, const H* inp, size_t n) override {
    by_chunks(n, 1, [&](size_t i, size_t m) {
      Buffer o = wide(inp + i, m);
      f32.gelu_forward(o.data(), o.data(), m);
      store(out + i, o);
    });
  }
  void gelu_backward(H* dinp, const H* inp, const H* dout, size_t n) override {
    by_chunks(n, 1, [&](size_t i, size_t m) {
      const Buffer in = wide(inp + i, m);
      Buffer d = wide(dout + i, m);
      f32.gelu_backward(d.data(), in.data(), d.data(), m);
      store(dinp + i, d);
    });
  }
  void residual_dropout_forward(H* out, const H* residual, const H* x, size_t n, float p,
                                uint64_t key, size_t index_offset) override {
    by_chunks(n, 1, [&](size_t i, size_t m) {
      const Buffer r = wide(residual ? residual + i : nullptr, m);
      Buffer o = wide(x + i, m);
      f32.residual_dropout_forward(o.data(), data_or_null(r), o.data(), m, p, key,
                                   index_offset + i);
      store(out + i, o);
    });
  }
  void dropout_backward(H* dx, const H* dout, size_t n, float p, uint64_t key,
                        size_t index_offset) override {
    by_chunks(n, 1, [&](size_t i, size_t m) {
      Buffer d = wide(dout + i, m);
      f32.dropout_backward(d.data(), d.data(), m, p, key, index_offset + i);
      store(dx + i, d);
    });
  }

  // The MoE routing ops (ops.h: logits and rows in H, probabilities, weights and the loss in
  // float): the float kernels on widened rows and logits, each result rounded once. The permuted
  // rows number at most N k; the largest slot a token's routes name bounds those read.
  bool has_moe() const override { return true; }
  void moe_route(float* probs, int32_t* route, float* weight, const H* logits, int N, int E,
                 int k) override {
    f32.moe_route(probs, route, weight, wide(logits, static_cast<size_t>(N) * E).data(), N, E, k);
  }
  void moe_dispatch_plan(int32_t* tokens_per_expert, int32_t* counts, int32_t* route_slot,
                         int32_t* slot_row, const int32_t* route, const float* weight, int N, int E,
                         int k, int capacity) override {
    f32.moe_dispatch_plan(tokens_per_expert, counts, route_slot, slot_row, route, weight, N, E, k,
                          capacity);
  }
  void moe_gather_rows(H* out, const H* inp, const int32_t* slot_row, int rows, int C) override {
    kernels::moe_gather_rows(out, inp, slot_row, rows, C);
  }
  void moe_scatter_add_rows(H* dinp, const H* d_rows, const int32_t* route_slot, int N, int C,
                            int k) override {
    const size_t n = static_cast<size_t>(N) * C;
    Buffer di = wide(dinp, n);
    f32.moe_scatter_add_rows(di.data(), wide(d_rows, permuted_rows(route_slot, N, k) * C).data(),
                             route_slot, N, C, k);
    store(dinp, di);
  }
  void moe_combine(H* out, const H* expert_out, const float* weight, const int32_t* route_slot,
                   int N, int C, int k) override {
    Buffer o(static_cast<size_t>(N) * C);
    f32.moe_combine(o.data(), wide(expert_out, permuted_rows(route_slot, N, k) * C).data(), weight,
                    route_slot, N, C, k);
    store(out, o);
  }
  void moe_combine_backward(H* d_expert_out, float* dweight, const H* dout, const H* expert_out,
                            const float* weight, const int32_t* route_slot, int N, int C,
                            int k) override {
    // Zeros: the float op writes only the rows a kept route names.
    const size_t rows = permuted_rows(route_slot, N, k);
    Buffer d = zeros(rows * C);
    f32.moe_combine_backward(d.data(), dweight, wide(dout, static_cast<size_t>(N) * C).data(),
                             wide(expert_out, rows * C).data(), weight, route_slot, N, C, k);
    store(d_expert_out, d);
  }
  void moe_aux_loss(float* loss, const float* probs, const int32_t* tokens_per_expert, int N, int E,
                    int k, double coeff) override {
    f32.moe_aux_loss(loss, probs, tokens_per_expert, N, E, k, coeff);
  }
  void moe_route_backward(H* dlogits, const float* dweight, const float* probs,
                          const int32_t* route, const float* weight,
                          const int32_t* tokens_per_expert, int N, int E, int k,
                          double aux_scale) override {
    Buffer d(static_cast<size_t>(N) * E);
    f32.moe_route_backward(d.data(), dweight, probs, route, weight, tokens_per_expert, N, E, k,
                           aux_scale);
    store(dlogits, d);
  }

  // The ring's blocks (Note [ring attention in 16 bits] in parallel/ring_attention.cpp): the
  // float kernels on widened qkv, kv and dout, merging into the caller's float buffers.
  bool has_ring_attention() const override { return true; }
  size_t attention_block_workspace_elems(int B, int NH, int Tq, int Tk, int HS) const override {
    return f32.attention_block_workspace_elems(B, NH, Tq, Tk, HS);
  }
  void attention_block_forward(float* out, float* lse, const H* qkv, const H* kv,
                               const kernels::AttentionBlock& a, float* workspace) override {
    const Buffer q = wide(qkv, head_elems(a, a.Tq) * (a.NH + 2 * a.KV)),
                 k = wide(kv, head_elems(a, a.Tk) * 2 * a.KV);
    f32.attention_block_forward(out, lse, q.data(), k.data(), a, workspace);
  }
  void attention_block_backward(float* dqkv, float* dkv, const H* dout, const float* delta,
                                const float* lse, const H* qkv, const H* kv,
                                const kernels::AttentionBlock& a, float* workspace) override {
    const Buffer q = wide(qkv, head_elems(a, a.Tq) * (a.NH + 2 * a.KV)),
                 k = wide(kv, head_elems(a, a.Tk) * 2 * a.KV),
                 d = wide(dout, head_elems(a, a.Tq) * a.NH);
    f32.attention_block_backward(dqkv, dkv, d.data(), delta, lse, q.data(), k.data(), a, workspace);
  }
  void attention_kv_pack(H* kv, const H* qkv, size_t rows, int NH, int KV, int HS) override {
    kernels::attention_kv_pack(kv, qkv, rows, NH, KV, HS);
  }
  void attention_kv_unpack(float* qkv, const float* kv, size_t rows, int NH, int KV,
                           int HS) override {
    f32.attention_kv_unpack(qkv, kv, rows, NH, KV, HS);
  }
  void attention_row_dot(float* delta, const H* dout, const H* out, int B, int T, int NH,
                         int HS) override {
    const size_t n = static_cast<size_t>(B) * T * NH * HS;
    f32.attention_row_dot(delta, wide(dout, n).data(), wide(out, n).data(), B, T, NH, HS);
  }
  void fill(float* x, size_t n, float value) override { f32.fill(x, n, value); }
  void accumulate(float* acc, const float* x, size_t n) override { f32.accumulate(acc, x, n); }

  // The vision tower's ops (model/vision_encoder.h): patches move elements unchanged; the
  // activations compute in float and round once.
  bool has_vision() const override { return true; }
  void patchify_forward(H* cols, const H* img, int B, int Cin, int H_, int W, int P) override {
    kernels::patchify_forward(cols, img, B, Cin, H_, W, P);
  }
  void patchify_backward(H* dimg, const H* dcols, int B, int Cin, int H_, int W, int P) override {
    kernels::patchify_backward(dimg, dcols, B, Cin, H_, W, P);
  }
  void activation_forward(H* out, const H* inp, size_t n, kernels::Activation act) override {
    by_chunks(n, 1, [&](size_t i, size_t m) {
      Buffer o = wide(inp + i, m);
      f32.activation_forward(o.data(), o.data(), m, act);
      store(out + i, o);
    });
  }
  void activation_backward(H* dinp, const H* inp, const H* dout, size_t n,
                           kernels::Activation act) override {
    by_chunks(n, 1, [&](size_t i, size_t m) {
      const Buffer in = wide(inp + i, m);
      Buffer d = wide(dout + i, m);
      f32.activation_backward(d.data(), in.data(), d.data(), m, act);
      store(dinp + i, d);
    });
  }

  size_t attention_saved_elems(int B, int T, int NH) const override {
    return f32.attention_saved_elems(B, T, NH);
  }
  size_t attention_workspace_elems(int B, int T, int NH, int HS) const override {
    return f32.attention_workspace_elems(B, T, NH, HS);
  }
  void attention_forward(H* out, float* saved, const H* qkv, float* workspace, int B, int T, int C,
                         int NH, float p, uint64_t key, int head_offset, int total_heads, int KV,
                         const int32_t* positions) override {
    const size_t n = static_cast<size_t>(B) * T * C, nqkv = n / NH * (NH + 2 * KV);
    const Buffer q = wide(qkv, nqkv);
    Buffer o(n);
    f32.attention_forward(o.data(), saved, q.data(), workspace, B, T, C, NH, p, key, head_offset,
                          total_heads, KV, positions);
    store(out, o);
  }
  // out is not widened: the float backward recomputes from saved and does not read it.
  void attention_backward(H* dqkv, const H* dout, const H* qkv, const H* /*out*/,
                          const float* saved, float* workspace, int B, int T, int C, int NH,
                          float p, uint64_t key, int head_offset, int total_heads, int KV,
                          const int32_t* positions) override {
    const size_t n = static_cast<size_t>(B) * T * C, nqkv = n / NH * (NH + 2 * KV);
    const Buffer d = wide(dout, n), q = wide(qkv, nqkv);
    Buffer dq(nqkv);
    f32.attention_backward(dq.data(), d.data(), q.data(), nullptr, saved, workspace, B, T, C, NH,
                           p, key, head_offset, total_heads, KV, positions);
    store(dqkv, dq);
  }

  // Logits are float: the float ops themselves.
  void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                             const int32_t* targets, int N, int V, float grad_scale) override {
    f32.softmax_cross_entropy(losses, dlogits, logits, targets, N, V, grad_scale);
  }
  void cross_entropy_shard_max(float* row_max, const float* logits, int N, int V) override {
    f32.cross_entropy_shard_max(row_max, logits, N, V);
  }
  void cross_entropy_shard_sums(double* sum_exp, float* target_logit, const float* logits,
                                const float* row_max, const int32_t* targets, int vocab_begin,
                                int N, int V) override {
    f32.cross_entropy_shard_sums(sum_exp, target_logit, logits, row_max, targets, vocab_begin, N,
                                 V);
  }
  void cross_entropy_shard_finish(float* losses, float* dlogits, const float* logits,
                                  const float* row_max, const double* sum_exp,
                                  const float* target_logit, const int32_t* targets,
                                  int vocab_begin, int N, int V, float grad_scale) override {
    f32.cross_entropy_shard_finish(losses, dlogits, logits, row_max, sum_exp, target_logit, targets,
                                   vocab_begin, N, V, grad_scale);
  }

  void to_compute(H* dst, const float* src, size_t n) override { store(dst, src, n); }
  void to_accum(float* dst, const H* src, size_t n) override {
#pragma omp parallel for schedule(static) if (n >= kParallelElems)
    for (size_t i = 0; i < n; i++) dst[i] = widen(src[i]);
  }

  void adamw_update(const AdamWSpan<H>* tensors, int count, const kernels::AdamWParams& p,
                    float grad_scale) override {
    std::vector<kernels::AdamWTensor<float>> all(static_cast<size_t>(count));
    for (int i = 0; i < count; i++) {
      const AdamWSpan<H>& t = tensors[i];
      all[i] = {t.param, t.grad, t.m, t.v, t.n, t.decay};
    }
    kernels::adamw_update(all.data(), count, p, grad_scale);
    for (int i = 0; i < count; i++)
      if (tensors[i].param_copy) store(tensors[i].param_copy, tensors[i].param, tensors[i].n);
  }
  void unscale_and_check(float* x, size_t n, float inv_scale, float* found_inf) override {
    f32.unscale_and_check(x, n, inv_scale, found_inf);
  }
  void sum_squares(double* result, const float* const* tensors, const size_t* sizes,
                   int count) override {
    f32.sum_squares(result, tensors, sizes, count);
  }
  void scale(float* x, size_t n, float s) override {
    f32.scale(x, n, s);
  }

 private:
  // The linear layers' GEMMs on oneDNN's bf16 matmul (Note [bf16 GEMMs], kernels/cpu/README.md):
  // bf16 lists only, as kernels::bf16_gemm() chooses.
  static bool onednn() {
    return std::is_same_v<H, bf16> && kernels::bf16_gemm() == kernels::Bf16Gemm::onednn;
  }
  // out, rstd = the float RMSNorm of x (rows of C, widened) with weight w, out rounded to H.
  void rms_normalise(H* out, float* rstd, const Buffer& x, const Buffer& w, int C, float eps) {
    Buffer o(x.size());
    f32.rmsnorm_forward(o.data(), rstd, x.data(), w.data(), static_cast<int>(x.size() / C), C,
                        eps);
    store(out, o);
  }
  // out, mean, rstd = the float LayerNorm of x (rows of C, widened) with weight w and bias b,
  // out rounded to H.
  void normalise(H* out, float* mean, float* rstd, const Buffer& x, const Buffer& w,
                 const Buffer& b, int C) {
    Buffer o(x.size());
    f32.layernorm_forward(o.data(), mean, rstd, x.data(), w.data(), b.data(),
                          static_cast<int>(x.size() / C), C);
    store(out, o);
  }
  // sum (n) = residual + x, widened, added in float and rounded.
  static void add_and_store(H* sum, const H* residual, const H* x, size_t n) {
    for (size_t i = 0; i < n; i++) sum[i] = narrow<H>(widen(residual[i]) + widen(x[i]));
  }
};

}  // namespace

size_t widened_high_water() {
  return pool().take_high_water();
}

template <>
Ops<bf16>& cpu_ops<bf16>() {
  static CpuOps16<bf16> ops;
  return ops;
}
template <>
Ops<fp16>& cpu_ops<fp16>() {
  static CpuOps16<fp16> ops;
  return ops;
}

}  // namespace lattice
