// What a device backend can run (docs/one-engine.md 3.9): the limits a backend adds to the
// shared option checks (TrainOptions::validate, layout_errors), stated as data, and the one
// function that turns them into the engine's sentences (capabilities.cpp). Both backends'
// figures are constants in host code, so every build can check options against the CUDA device
// (`lattice train --device cuda` on a machine without one still names what it would refuse).
#pragma once

#include <string>
#include <vector>

#include "lattice/cpu_bf16_gemm.h"
#include "lattice/train_options.h"

namespace lattice {

struct Capabilities {
  std::string device;                   // "cpu" | "cuda", as --device names it
  bool fp64 = false;                    // --fp64: double compute (verification runs)
  bool bf16 = false, fp16 = false;      // 16-bit compute offered to users (the CPU: bf16 where
                                        // it has bf16 GEMMs, kernels::bf16_gemm(); its fp16
                                        // op list is for tests, not for runs)
  std::vector<int> head_sizes;          // attention head sizes it runs; empty: any
  int mlp_slice_multiple = 1;           // each rank's --ffn-hidden-size / TP must be a multiple
  bool host_addressable = false;        // its memory is host memory: checkpoints, weight
                                        // initialisation and data read it directly
  bool cheap_marks = false;       // a time mark is a clock read, so per-op times are always kept
                                  // (CUDA: two timing events per op, kept with --profile only)
  bool moe = false;               // MoE layers (--num-experts; Ops::has_moe) in fp32 (and fp64
  bool moe_16bit = false;         // where offered) / in --bf16 and --fp16 too
  bool context_parallel = false;  // --context-parallel-size > 1: the ring attention
                                  // (parallel/ring_attention.h), in every compute type offered
};

// The CPU backend (kernels/cpu, OpenBLAS + OpenMP): fp32 and fp64, bf16 where this build and
// CPU have oneDNN's bf16 GEMMs (or LATTICE_CPU_BF16_GEMM=widened asks for the slow path), any
// head size, host memory.
inline Capabilities cpu_capabilities() {
  Capabilities c;
  c.device = "cpu";
  c.fp64 = true;
  c.bf16 = kernels::bf16_gemm() != kernels::Bf16Gemm::none;
  c.host_addressable = true;
  c.cheap_marks = true;
  c.moe = true;
  c.moe_16bit = true;  // the 16-bit lists' routing ops on widened rows (cpu_ops_16bit.cpp)
  c.context_parallel = true;
  return c;
}

// The CUDA backend (kernels/cuda, cuBLASLt): fp32, bf16 and fp16, MoE layers in all three,
// context parallelism in all three; the
// flash-style attention takes head sizes 64 and 128 and saves only its log-sum-exp; the GELU
// epilogue of matmul_forward needs output widths % 8 (kernels/include/lattice/cuda_kernels.h).
inline Capabilities cuda_capabilities() {
  Capabilities c;
  c.device = "cuda";
  c.bf16 = true;
  c.fp16 = true;
  c.head_sizes = {64, 128};
  c.mlp_slice_multiple = 8;
  c.moe = true;  // kernels/cuda/moe.cu
  c.moe_16bit = true;
  c.context_parallel = true;  // kernels/cuda/attention_block.cu, every compute type
  return c;
}

// The limits of the backend `c` that these options break, one sentence each naming the flag
// (empty: it runs them). Only the backend's own limits: the shared rules
// (TrainOptions::validate, layout_errors, ParallelOptions::recompute_errors) are the caller's
// to check first and are not repeated. --fp16 is never refused: a backend without 16-bit
// compute runs it as fp32 arithmetic with the loss scaler (train_options.h).
std::vector<std::string> capability_errors(const TrainOptions& options, const Capabilities& c);

}  // namespace lattice
