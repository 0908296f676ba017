// One attention row's softmax, and the same row again from its log-sum-exp, for the attention
// kernels (attention.cpp, attention_block.cpp); private to the CPU kernels. Float rows run
// simd.h's explicit vectors of the including file's ISA (Note [CPU dispatch]).
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "isa_region.h"
#include "simd.h"
#include "vec_math.h"

LATTICE_ISA_BEGIN

// row[0, n) = softmax(row[0, n)), n > 0; returns the row's log-sum-exp.
template <typename T>
T softmax_row(T* row, int n) {
  if constexpr (std::is_same_v<T, float>) {
    const float maxv = row_max(row, n);
    const double sum = exp_shifted(row, row, n, maxv);
    scale_row(row, n, static_cast<float>(1.0 / sum));
    return maxv + static_cast<float>(std::log(sum));
  } else {
    T maxv = row[0];
    for (int j = 1; j < n; j++) maxv = std::max(maxv, row[j]);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
      row[j] = cpu::exp_approx(row[j] - maxv);
      sum += row[j];
    }
    const T inv = T(1) / sum;
#pragma omp simd
    for (int j = 0; j < n; j++) row[j] *= inv;
    return maxv + std::log(sum);
  }
}

// row[0, n) = exp(row[0, n) - lse): the softmax again, from its log-sum-exp.
template <typename T>
void exp_minus(T* row, int n, T lse) {
  if constexpr (std::is_same_v<T, float>) {
    exp_shifted(row, row, n, lse);
  } else {
#pragma omp simd
    for (int j = 0; j < n; j++) row[j] = cpu::exp_approx(row[j] - lse);
  }
}

LATTICE_ISA_END
