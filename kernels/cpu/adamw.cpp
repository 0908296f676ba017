// AdamW step (decoupled weight decay, bias-corrected moments) and the reductions the
// optimizer needs (global gradient norm, scaling for clipping). The multi-tensor forms run a
// whole model's tensors in one OpenMP region, cut into blocks of kOptimizerBlock elements: a
// GPT's optimizer step has a few large tensors and many small ones (biases, LayerNorms), and
// a region per tensor and pass woke the threads more often than the small tensors were worth
// (Note [OpenMP waiting]).
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "lattice/kernels.h"
#include "parallel.h"

LATTICE_ISA_BEGIN

namespace {

constexpr size_t kOptimizerBlock = 8192;

// A block of one tensor: elements [begin, end) of tensor `tensor`.
struct Block {
  int tensor;
  size_t begin, end;
};

// The blocks of `count` tensors of size(i) elements, a tensor's in order, tensors in order.
template <typename SizeOf>
std::vector<Block> blocks_of(int count, SizeOf size) {
  std::vector<Block> blocks;
  for (int t = 0; t < count; t++)
    for (size_t b = 0; b < size(t); b += kOptimizerBlock)
      blocks.push_back({t, b, std::min(size(t), b + kOptimizerBlock)});
  return blocks;
}

template <typename T>
struct AdamWCoefficients {
  T b1, b2, lr, eps, c1, c2;
  explicit AdamWCoefficients(const AdamWParams& p)
      : b1(p.beta1),
        b2(p.beta2),
        lr(p.lr),
        eps(p.eps),
        c1(static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta1), p.step)))),
        c2(static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(p.beta2), p.step)))) {}
};

// Elements [0, n) of one tensor; g = grad * grad_scale (exact for grad_scale 1).
template <typename T>
inline void adamw_elements(T* param, const T* grad, T* m, T* v, size_t n,
                           const AdamWCoefficients<T>& k, T wd, T grad_scale) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const T g = grad[i] * grad_scale;
    const T mi = k.b1 * m[i] + (T(1) - k.b1) * g;
    const T vi = k.b2 * v[i] + (T(1) - k.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= k.lr * ((mi * k.c1) / (std::sqrt(vi * k.c2) + k.eps) + wd * param[i]);
  }
}

// Sum of x^2 over [0, n) in double: 16 lanes (lane j takes the elements i with i % 16 == j),
// folded pairwise, so every ISA gets the same bits. The lanes are kAccumulators registers of the
// ISA's width (2 AVX-512, 4 AVX2, 8 SSE2): a single 16-double vector, wider than an AVX2
// register, was lowered through the stack and ran 2.5x slower than AVX-512 (docs/benchmarks.md).
constexpr int kSumLanes = 16;
constexpr int kDoublesPerVector = LATTICE_ISA_VEC_BYTES / sizeof(double);
constexpr int kAccumulators = kSumLanes / kDoublesPerVector;
typedef double vdouble __attribute__((vector_size(LATTICE_ISA_VEC_BYTES)));
typedef float vfloat_half __attribute__((vector_size(LATTICE_ISA_VEC_BYTES / 2)));
template <typename T>
double block_sum_squares(const T* x, size_t n) {
  vdouble acc[kAccumulators] = {};
  size_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int r = 0; r < kAccumulators; r++) {
      vdouble d;
      if constexpr (std::is_same_v<T, float>) {
        vfloat_half f;
        std::memcpy(&f, x + i + r * kDoublesPerVector, sizeof f);
        d = __builtin_convertvector(f, vdouble);
      } else {
        std::memcpy(&d, x + i + r * kDoublesPerVector, sizeof d);
      }
      acc[r] += d * d;
    }
  double lanes[kSumLanes];
  std::memcpy(lanes, acc, sizeof lanes);
  for (size_t j = 0; i + j < n; j++)
    lanes[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  for (int w = kSumLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) lanes[j] += lanes[j + w];
  return lanes[0];
}

}  // namespace

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, size_t n, const AdamWParams& p) {
  const AdamWTensor<T> one{param, grad, m, v, n, true};
  adamw_update(&one, 1, p, T(1));
}

template <typename T>
void adamw_update(const AdamWTensor<T>* tensors, int count, const AdamWParams& p, T grad_scale) {
  const AdamWCoefficients<T> k(p);
  const std::vector<Block> blocks = blocks_of(count, [&](int t) { return tensors[t].n; });
  size_t total = 0;
  for (int t = 0; t < count; t++) total += tensors[t].n;
  const T decay = p.weight_decay;
#pragma omp parallel for schedule(static) if (total >= cpu::kMinParallelWork)
  for (size_t b = 0; b < blocks.size(); b++) {
    const AdamWTensor<T>& t = tensors[blocks[b].tensor];
    const size_t at = blocks[b].begin;
    adamw_elements(t.param + at, t.grad + at, t.m + at, t.v + at, blocks[b].end - at, k,
                   t.decay ? decay : T(0), grad_scale);
  }
}

template <typename T>
double sum_squares(const T* const* tensors, const size_t* sizes, int count) {
  const std::vector<Block> blocks = blocks_of(count, [&](int t) { return sizes[t]; });
  std::vector<double> partial(blocks.size());
  size_t total = 0;
  for (int t = 0; t < count; t++) total += sizes[t];
#pragma omp parallel for schedule(static) if (total >= cpu::kMinParallelWork)
  for (size_t b = 0; b < blocks.size(); b++)
    partial[b] = block_sum_squares(tensors[blocks[b].tensor] + blocks[b].begin,
                                   blocks[b].end - blocks[b].begin);
  // Each tensor's blocks in order, then the tensors in order.
  double sum = 0, tensor_sum = 0;
  for (size_t b = 0; b < blocks.size(); b++) {
    tensor_sum += partial[b];
    if (b + 1 == blocks.size() || blocks[b + 1].tensor != blocks[b].tensor) {
      sum += tensor_sum;
      tensor_sum = 0;
    }
  }
  return sum;
}

template <typename T>
double sum_squares(const T* x, size_t n) {
  const T* const tensors[] = {x};
  return sum_squares(tensors, &n, 1);
}

template <typename T>
void scale(T* x, size_t n, T s) {
#pragma omp parallel for simd schedule(static) if (n >= cpu::kMinParallelWork)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

template void adamw_update(float*, const float*, float*, float*, size_t, const AdamWParams&);
template void adamw_update(double*, const double*, double*, double*, size_t, const AdamWParams&);
template void adamw_update(const AdamWTensor<float>*, int, const AdamWParams&, float);
template void adamw_update(const AdamWTensor<double>*, int, const AdamWParams&, double);
template double sum_squares(const float*, size_t);
template double sum_squares(const double*, size_t);
template double sum_squares(const float* const*, const size_t*, int);
template double sum_squares(const double* const*, const size_t*, int);
template void scale(float*, size_t, float);
template void scale(double*, size_t, double);

LATTICE_ISA_END
