// Just enough of the CUDA execution model on the CPU to run the kernel headers of
// kernels/cuda/ (*_kernels.cuh) without a GPU: every CUDA thread of a block is a std::thread,
// __syncthreads is a barrier over the block, __shfl_sync exchanges through a per-warp array
// between two barriers over the warp, and shared memory (`__shared__` arrays become function
// statics; dynamic shared memory is one array) is shared by the block, since blocks run one
// after another. fp32 / fp64 arithmetic; fp16 and bf16 tensors through the host conversions of
// lattice/cuda_kernels.h (round to nearest even, as __float2half_rn / __float2bfloat16_rn), and
// the tensor-core product mma.sync.m16n8k16 (kernels/cuda/mma.cuh) from its fragment layout. It
// needs what those kernels guarantee: every lane of a warp reaches every shuffle, every thread of a
// block every
// __syncthreads. Non-goals: speed (a T = 64 attention head takes about a second), timing, memory
// model.
#pragma once

#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
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

namespace lattice::emulation {

struct Block {
  explicit Block(unsigned threads) : all(threads), exchange(threads / 32), fragments(threads / 32) {
    for (unsigned w = 0; w < threads / 32; w++)
      warps.push_back(std::make_unique<std::barrier<>>(32));
  }
  std::barrier<> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<std::array<double, 32>> exchange;
  std::vector<std::array<std::array<uint32_t, 6>, 32>> fragments;  // mma_16816's a and b
};
inline thread_local Block* t_block = nullptr;

}  // namespace lattice::emulation

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

inline void __syncthreads() {
  lattice::emulation::t_block->all.arrive_and_wait();
}

template <typename V>
inline V __shfl_sync(unsigned /*mask*/, V value, int src_lane) {
  auto& block = *lattice::emulation::t_block;
  const unsigned id = threadIdx.x + threadIdx.y * blockDim.x, warp = id / 32, lane = id % 32;
  block.exchange[warp][lane] = value;
  block.warps[warp]->arrive_and_wait();
  const V result = static_cast<V>(block.exchange[warp][static_cast<unsigned>(src_lane) % 32]);
  block.warps[warp]->arrive_and_wait();  // nobody overwrites a slot before all have read
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
      std::vector<std::thread> threads;
      for (unsigned t = 0; t < count; t++) {
        threads.emplace_back([&, t] {
          t_block = &state;
          threadIdx = dim3(t % block.x, t / block.x);
          blockIdx = dim3(bx, by);
          kernel(args...);
        });
      }
      for (auto& thread : threads) thread.join();
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
  block.warps[warp]->arrive_and_wait();
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
  block.warps[warp]->arrive_and_wait();  // nobody posts again before all have read
}
inline float* dynamic_shared_floats() {
  return g_dynamic_shared;
}
}  // namespace lattice::kernels::cuda
