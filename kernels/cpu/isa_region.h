// The instruction-set region of a kernel file that kernels/CMakeLists.txt compiles once per ISA
// (Note [CPU dispatch], kernels/cpu/README.md); private to the CPU kernels. The build defines
// LATTICE_KERNEL_ISA_<isa>; this header turns it into
//   LATTICE_ISA_BEGIN ... LATTICE_ISA_END   code compiled for the ISA, in namespace
//                                           lattice::kernels::cpu::<isa>
//   LATTICE_ISA_VEC_BYTES                   the ISA's vector register width in bytes.
// Every #include of a kernel file comes before LATTICE_ISA_BEGIN: headers (the standard library,
// dropout_hash.h, vec_math.h) then compile for plain x86-64, so an out-of-line copy of one of
// their inline functions, which the linker may pick for every caller in the program, never
// holds AVX instructions; inside the region the compiler still inlines them and vectorises the
// result for the ISA.
#pragma once

#if defined(LATTICE_KERNEL_ISA_AVX512)
#define LATTICE_ISA_NS avx512
#define LATTICE_ISA_VEC_BYTES 64
#define LATTICE_ISA_TARGET "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"
#elif defined(LATTICE_KERNEL_ISA_AVX2)
#define LATTICE_ISA_NS avx2
#define LATTICE_ISA_VEC_BYTES 32
#define LATTICE_ISA_TARGET "avx2,fma"
#elif defined(LATTICE_KERNEL_ISA_GENERIC)
#define LATTICE_ISA_NS generic
#define LATTICE_ISA_VEC_BYTES 16
#else
#error "kernels/CMakeLists.txt compiles this file once per ISA with LATTICE_KERNEL_ISA_<isa>"
#endif

#define LATTICE_ISA_PRAGMA(text) _Pragma(#text)
#define LATTICE_ISA_PRAGMA_EXPANDED(text) LATTICE_ISA_PRAGMA(text)

#if !defined(LATTICE_ISA_TARGET)
#define LATTICE_ISA_BEGIN namespace lattice::kernels::cpu::LATTICE_ISA_NS {
#define LATTICE_ISA_END }
#elif defined(__clang__)
#define LATTICE_ISA_BEGIN                                                                     \
  LATTICE_ISA_PRAGMA_EXPANDED(                                                                \
      clang attribute push(__attribute__((target(LATTICE_ISA_TARGET))), apply_to = function)) \
  namespace lattice::kernels::cpu::LATTICE_ISA_NS {
#define LATTICE_ISA_END \
  }                     \
  LATTICE_ISA_PRAGMA(clang attribute pop)
#else
#define LATTICE_ISA_BEGIN                                     \
  LATTICE_ISA_PRAGMA(GCC push_options)                        \
  LATTICE_ISA_PRAGMA_EXPANDED(GCC target(LATTICE_ISA_TARGET)) \
  namespace lattice::kernels::cpu::LATTICE_ISA_NS {
#define LATTICE_ISA_END \
  }                     \
  LATTICE_ISA_PRAGMA(GCC pop_options)
#endif
