// Residual add with hidden dropout on the branch (Megatron's bias-dropout-add without the
// bias, which the linear layer already added), and its backward.
#include <type_traits>

#include "dropout_row.h"
#include "lattice/dropout_hash.h"
#include "lattice/kernels.h"
#include "parallel.h"

LATTICE_ISA_BEGIN

template <typename T>
void residual_dropout_forward(T* out, const T* residual, const T* x, size_t n, float p,
                              uint64_t key, size_t index_offset) {
  if (p == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= cpu::kMinParallelWork)
    for (size_t i = 0; i < n; i++) out[i] = (residual ? residual[i] : T(0)) + x[i];
    return;
  }
  const uint32_t threshold = dropout_threshold(p);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  if constexpr (std::is_same_v<T, float>) {
    for_blocks(n, [&](size_t i0, size_t i1) {
      dropout_row(out + i0, residual ? residual + i0 : nullptr, x + i0, i1 - i0, key,
                  index_offset + i0, threshold, keep_scale);
    });
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const T kept = dropout_keep(key, index_offset + i, threshold) ? x[i] * keep_scale : T(0);
    out[i] = (residual ? residual[i] : T(0)) + kept;
  }
}

template <typename T>
void dropout_backward(T* dx, const T* dout, size_t n, float p, uint64_t key, size_t index_offset) {
  if (p == 0.0f) {
    if (dx != dout) {
#pragma omp parallel for simd schedule(static)
      for (size_t i = 0; i < n; i++) dx[i] = dout[i];
    }
    return;
  }
  const uint32_t threshold = dropout_threshold(p);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  if constexpr (std::is_same_v<T, float>) {
    for_blocks(n, [&](size_t i0, size_t i1) {
      dropout_row(dx + i0, nullptr, dout + i0, i1 - i0, key, index_offset + i0, threshold,
                  keep_scale);
    });
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    dx[i] = dropout_keep(key, index_offset + i, threshold) ? dout[i] * keep_scale : T(0);
}

template void residual_dropout_forward(float*, const float*, const float*, size_t, float, uint64_t,
                                       size_t);
template void residual_dropout_forward(double*, const double*, const double*, size_t, float,
                                       uint64_t, size_t);
template void dropout_backward(float*, const float*, size_t, float, uint64_t, size_t);
template void dropout_backward(double*, const double*, size_t, float, uint64_t, size_t);

LATTICE_ISA_END
