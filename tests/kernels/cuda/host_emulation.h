// Just enough of the CUDA execution model on the CPU to run the kernel headers of
// kernels/cuda/ (*_kernels.cuh) without a GPU: every CUDA thread of a block is a fiber (its own
// stack, ucontext) on the calling thread, run until it reaches a barrier or returns; __syncthreads
// is a barrier over the block, __shfl_sync exchanges through a per-warp array between two
// barriers over the warp, and shared memory (`__shared__` arrays become function statics; dynamic
// shared memory is one array) is shared by the block, since blocks run one after another. fp32 /
// fp64 arithmetic; fp16 and bf16 tensors through the host conversions of lattice/cuda_kernels.h
// (round to nearest even, as __float2half_rn / __float2bfloat16_rn), and the tensor-core product
// mma.sync.m16n8k16 (kernels/cuda/mma.cuh) from its fragment layout. It needs what those kernels
// guarantee: every lane of a warp reaches every shuffle, every thread of a block every
// __syncthreads (a block whose fibers all wait while some never arrive aborts with a message).
// Fibers rather than one OS thread per CUDA thread: a barrier is a few user-space switches
// instead of hundreds of futex wake-ups (test_kernels_emulated: 5 s instead of 100 s on a 2-core
// machine). Not thread-safe: one launch at a time in the process. AddressSanitizer is not told
// about the stack switches. Non-goals: speed, timing, memory model.
#pragma once

#include <sys/mman.h>
#include <ucontext.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <type_traits>
#include <vector>

#include "lattice/cuda_kernels.h"

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__ static

inline dim3 threadIdx, blockIdx;  // the running fiber's, set by the scheduler at each switch
inline dim3 blockDim, gridDim;

namespace lattice::emulation {

// switch_stack(save, load): saves the callee-saved registers on the running stack and its
// pointer in *save, then continues on the stack `load` (made by switch_stack, or by new_stack).
// On x86-64 six pushes and a stack swap: glibc's swapcontext also saves the signal mask, a system
// call per switch that took 85 % of the emulation's time. Elsewhere ucontext.
#if defined(__x86_64__)
extern "C" inline __attribute__((naked, noinline)) void lattice_emulation_switch_stack(void**,
                                                                                      void*) {
  asm volatile(
      "pushq %rbp\n pushq %rbx\n pushq %r12\n pushq %r13\n pushq %r14\n pushq %r15\n"
      "movq %rsp, (%rdi)\n movq %rsi, %rsp\n"
      "popq %r15\n popq %r14\n popq %r13\n popq %r12\n popq %rbx\n popq %rbp\n ret\n");
}
#endif

// The CUDA threads of the block being run, as fibers, and the scheduler that runs them: a fiber
// runs until it waits at a barrier (then it leaves the ready queue until the barrier's last
// arrival puts every waiter back) or returns.
struct Fiber {
#if defined(__x86_64__)
  void* sp = nullptr;  // the saved stack pointer while not running
#else
  ucontext_t context;
#endif
  dim3 thread;
  bool done = false;
};

class Scheduler {
 public:
  // Fiber stacks: kernels keep small register tiles, so 256 KiB each is ample; reserved lazily.
  static constexpr size_t kStack = 256 << 10;

  ~Scheduler() {
    if (stacks_) munmap(stacks_, capacity_ * kStack);
  }
  // Runs body once per thread of a block of `count` threads (x-fastest in `block`), to the end.
  void run_block(unsigned count, dim3 block, std::function<void()> body) {
    reserve(count);
    body_ = std::move(body);
    fibers_.assign(count, Fiber{});
    ready_.clear();
    for (unsigned t = 0; t < count; t++) {
      Fiber& f = fibers_[t];
      f.thread = dim3(t % block.x, t / block.x);
      char* stack = static_cast<char*>(stacks_) + t * kStack;
#if defined(__x86_64__)
      // The stack as switch_stack leaves it: six registers (zero), then entry() as the return
      // address, then a dummy return address for entry itself (which never returns), so that
      // entry starts with the stack aligned as after a call.
      void** top = reinterpret_cast<void**>(stack + kStack);
      top[-1] = nullptr;
      top[-2] = reinterpret_cast<void*>(&Scheduler::entry);
      for (int r = 3; r <= 8; r++) top[-r] = nullptr;
      f.sp = top - 8;
#else
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = stack;
      f.context.uc_stack.ss_size = kStack;
      f.context.uc_link = nullptr;
      makecontext(&f.context, &Scheduler::entry, 0);
#endif
      ready_.push_back(t);
    }
    size_t finished = 0;
    while (!ready_.empty()) {
      current_ = ready_.front();
      ready_.pop_front();
      threadIdx = fibers_[current_].thread;
      resume(current_);
      if (fibers_[current_].done) finished++;
    }
    if (finished != count) {
      std::fprintf(stderr,
                   "host_emulation: %zu of %u threads of block (%u, %u) wait at a barrier that "
                   "the others never reach\n",
                   count - finished, count, blockIdx.x, blockIdx.y);
      std::abort();
    }
  }
  unsigned current() const { return current_; }
  // Makes the running fiber wait until `arrivals` reaches `expected`; the last arrival resets it
  // and puts every waiter back on the ready queue (in arrival order) and goes on.
  void wait(unsigned& arrivals, unsigned expected, std::vector<unsigned>& waiters) {
    if (++arrivals == expected) {
      arrivals = 0;
      ready_.insert(ready_.end(), waiters.begin(), waiters.end());
      waiters.clear();
      return;
    }
    waiters.push_back(current_);
    suspend();
    threadIdx = fibers_[current_].thread;
  }

  static Scheduler& instance() {
    static Scheduler scheduler;
    return scheduler;
  }

 private:
  static void entry() {
    Scheduler& s = instance();
    s.body_();
    s.fibers_[s.current_].done = true;
    s.suspend();  // never resumed
    std::abort();
  }
  // From the scheduler to fiber f, until it waits or ends; from the running fiber back.
#if defined(__x86_64__)
  void resume(unsigned f) { lattice_emulation_switch_stack(&scheduler_sp_, fibers_[f].sp); }
  void suspend() { lattice_emulation_switch_stack(&fibers_[current_].sp, scheduler_sp_); }
#else
  void resume(unsigned f) { swapcontext(&scheduler_, &fibers_[f].context); }
  void suspend() { swapcontext(&fibers_[current_].context, &scheduler_); }
#endif
  void reserve(unsigned count) {
    if (count <= capacity_) return;
    if (stacks_) munmap(stacks_, capacity_ * kStack);
    void* p = mmap(nullptr, count * kStack, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "host_emulation: cannot map %u fiber stacks\n", count);
      std::abort();
    }
    stacks_ = p;
    capacity_ = count;
  }

  void* stacks_ = nullptr;
  unsigned capacity_ = 0;
#if defined(__x86_64__)
  void* scheduler_sp_ = nullptr;
#else
  ucontext_t scheduler_;
#endif
  std::vector<Fiber> fibers_;
  std::deque<unsigned> ready_;  // fiber indices to run, in order; woken waiters are appended
  unsigned current_ = 0;
  std::function<void()> body_;
};

// A barrier over `expected` fibers of the running block.
struct Barrier {
  explicit Barrier(unsigned n) : expected(n) {}
  void arrive_and_wait() { Scheduler::instance().wait(arrivals, expected, waiters); }
  unsigned expected, arrivals = 0;
  std::vector<unsigned> waiters;
};

struct Block {
  explicit Block(unsigned threads)
      : all(threads), warps(threads / 32, Barrier(32)), exchange(threads / 32),
        fragments(threads / 32) {}
  Barrier all;
  std::vector<Barrier> warps;
  std::vector<std::array<double, 32>> exchange;
  std::vector<std::array<std::array<uint32_t, 6>, 32>> fragments;  // mma_16816's a and b
};
inline Block* t_block = nullptr;  // the block being run

}  // namespace lattice::emulation

inline void __syncthreads() {
  lattice::emulation::t_block->all.arrive_and_wait();
}

template <typename V>
inline V __shfl_sync(unsigned /*mask*/, V value, int src_lane) {
  auto& block = *lattice::emulation::t_block;
  const unsigned id = threadIdx.x + threadIdx.y * blockDim.x, warp = id / 32, lane = id % 32;
  block.exchange[warp][lane] = value;
  block.warps[warp].arrive_and_wait();
  const V result = static_cast<V>(block.exchange[warp][static_cast<unsigned>(src_lane) % 32]);
  block.warps[warp].arrive_and_wait();  // nobody overwrites a slot before all have read
  return result;
}

template <typename V>
inline V __shfl_xor_sync(unsigned mask, V value, int lane_mask) {
  const unsigned id = threadIdx.x + threadIdx.y * blockDim.x;
  return __shfl_sync(mask, value, static_cast<int>(id % 32) ^ lane_mask);
}

inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
// The rounded arithmetic that keeps nvcc from fusing a product into a sum (moe_kernels.cuh);
// the host compiler (no -mfma in the tests) fuses nothing either.
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline double __dadd_rn(double a, double b) {
  return a + b;
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}

namespace lattice::emulation {

// kernel<<<grid, block>>>(args...), one block at a time; block.x * block.y a multiple of 32
// (warps are formed from x-fastest thread ids, as on a GPU).
template <typename Kernel, typename... Args>
void launch(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  gridDim = grid;
  blockDim = block;
  for (unsigned by = 0; by < grid.y; by++) {
    for (unsigned bx = 0; bx < grid.x; bx++) {
      const unsigned count = block.x * block.y;
      Block state(count);
      t_block = &state;
      blockIdx = dim3(bx, by);
      Scheduler::instance().run_block(count, block, [&] { kernel(args...); });
      t_block = nullptr;
    }
  }
}

}  // namespace lattice::emulation

// What the kernel headers take from common.cuh under nvcc (fp32 and fp16 tensors).
namespace lattice::kernels::cuda {
inline float to_float(float x) {
  return x;
}
inline float to_float(fp16 x) {
  return from_fp16(x);
}
template <typename T>
inline T from_float(float x) {
  return x;
}
template <>
inline fp16 from_float<fp16>(float x) {
  return to_fp16(x);
}
inline float to_float(bf16 x) {
  return from_bf16(x);
}
template <>
inline bf16 from_float<bf16>(float x) {
  return to_bf16(x);
}
namespace {
alignas(16) float g_dynamic_shared[1 << 15];  // every block's dynamic shared memory, in turn
}  // namespace

// mma.cuh's primitives on the CPU, from the fragment layout of its note "fragments": every
// lane of the warp posts its A and B registers, then each computes its own four D elements.
template <typename DT>
inline float half_of(uint32_t pair, int which) {
  const uint16_t bits = static_cast<uint16_t>(which ? pair >> 16 : pair & 0xffffu);
  if constexpr (std::is_same_v<DT, fp16>)
    return from_fp16(fp16{bits});
  else
    return from_bf16(bf16{bits});
}
template <typename DT>
inline uint32_t pack2(float lo, float hi) {
  return static_cast<uint32_t>(from_float<DT>(lo).bits) |
         (static_cast<uint32_t>(from_float<DT>(hi).bits) << 16);
}
template <typename DT>
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  auto& block = *lattice::emulation::t_block;
  const unsigned id = threadIdx.x + threadIdx.y * blockDim.x, warp = id / 32, lane = id % 32;
  auto& posted = block.fragments[warp];
  posted[lane] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  block.warps[warp].arrive_and_wait();
  const auto A = [&](int r,
                     int c) {  // lane 4 (r % 8) + (c % 8) / 2, register (r >= 8) + 2 (c >= 8)
    return half_of<DT>(posted[(r % 8) * 4 + (c % 8) / 2][(r >= 8) + 2 * (c >= 8)], c % 2);
  };
  const auto B = [&](int k, int n) {  // lane 4 n + (k % 8) / 2, register 4 + (k >= 8)
    return half_of<DT>(posted[n * 4 + (k % 8) / 2][4 + (k >= 8)], k % 2);
  };
  const int g = static_cast<int>(lane) / 4, t = static_cast<int>(lane) % 4;
  for (int e = 0; e < 4; e++) {
    const int r = g + 8 * (e / 2), c = 2 * t + (e % 2);
    float sum = 0.0f;
    for (int k = 0; k < 16; k++) sum += A(r, k) * B(k, c);
    d[e] += sum;
  }
  block.warps[warp].arrive_and_wait();  // nobody posts again before all have read
}
inline float* dynamic_shared_floats() {
  return g_dynamic_shared;
}
}  // namespace lattice::kernels::cuda
