// SwiGLU, Llama's gated MLP activation: out = silu(gate) * up over the (gate | up) halves of
// each row of FC1's output. Compiled once per ISA (Note [CPU dispatch]); exp is vec_math.h's.
#include <cstddef>

#include "lattice/kernels.h"
#include "parallel.h"
#include "vec_math.h"

LATTICE_ISA_BEGIN

template <typename T>
void swiglu_forward(T* out, const T* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (size_t(N) * F >= cpu::kMinParallelWork)
  for (int n = 0; n < N; n++) {
    const T* gate = inp + static_cast<size_t>(n) * 2 * F;
    const T* up = gate + F;
    T* o = out + static_cast<size_t>(n) * F;
#pragma omp simd
    for (int f = 0; f < F; f++) {
      const T g = gate[f];
      o[f] = g / (T(1) + cpu::exp_approx(-g)) * up[f];
    }
  }
}

// d gate = d out * up * silu'(g), silu'(g) = sig(g) (1 + g (1 - sig(g))); d up = d out * silu(g).
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F) {
#pragma omp parallel for schedule(static) if (size_t(N) * F >= cpu::kMinParallelWork)
  for (int n = 0; n < N; n++) {
    const T* gate = inp + static_cast<size_t>(n) * 2 * F;
    const T* up = gate + F;
    const T* d = dout + static_cast<size_t>(n) * F;
    T* dgate = dinp + static_cast<size_t>(n) * 2 * F;
    T* dup = dgate + F;
#pragma omp simd
    for (int f = 0; f < F; f++) {
      const T g = gate[f];
      const T sig = T(1) / (T(1) + cpu::exp_approx(-g));
      dgate[f] = d[f] * up[f] * sig * (T(1) + g * (T(1) - sig));
      dup[f] = d[f] * g * sig;
    }
  }
}

template void swiglu_forward(float*, const float*, int, int);
template void swiglu_forward(double*, const double*, int, int);
template void swiglu_backward(float*, const float*, const float*, int, int);
template void swiglu_backward(double*, const double*, const double*, int, int);

LATTICE_ISA_END
