// Just enough of the CUDA execution model on the CPU to run the kernel headers of
// kernels/cuda/ (*_kernels.cuh) without a GPU: every CUDA thread of a block is a std::thread,
// __syncthreads is a barrier over the block, __shfl_sync exchanges through a per-warp array
// between two barriers over the warp, and shared memory (`__shared__` arrays become function
// statics; dynamic shared memory is one array) is shared by the block, since blocks run one
// after another. fp32 / fp64 arithmetic; fp16 tensors through the host conversions of
// lattice/cuda_kernels.h (round to nearest even, as __float2half_rn), not bf16. It needs what those
// kernels guarantee: every lane of a warp reaches every shuffle, every thread of a block every
// __syncthreads. Non-goals: speed (a T = 64 attention head takes about a second), timing, memory
// model.
#pragma once

#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
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
  explicit Block(unsigned threads) : all(threads), exchange(threads / 32) {
    for (unsigned w = 0; w < threads / 32; w++)
      warps.push_back(std::make_unique<std::barrier<>>(32));
  }
  std::barrier<> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<std::array<double, 32>> exchange;
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
namespace {
float g_dynamic_shared[1 << 15];  // every block's dynamic shared memory, in turn
}  // namespace
inline float* dynamic_shared_floats() {
  return g_dynamic_shared;
}
}  // namespace lattice::kernels::cuda
