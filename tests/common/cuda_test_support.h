// Parity-test support for the CUDA ops (tests/kernels/cuda/, tests/device/test_cuda_op_list.cpp,
// the GPU training tests): device buffers that are poisoned with NaN before every run, random
// host data, bf16 and fp16 rounding, and the error measure
//   max_i |gpu_i - cpu_i| / max_i |cpu_i|      (normwise relative error, NaN -> infinity)
// with the tolerances of the GPU issue: 1e-5 for fp32 ops, 1e-2 for bf16 ops, and bf16's
// 1e-2 for fp16 ops too (see kFp16Tolerance).
#pragma once

#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "lattice/cuda_kernels.h"

namespace lattice::testing {

namespace cu = lattice::kernels::cuda;

inline constexpr double kFp32Tolerance = 1e-5;
inline constexpr double kBf16Tolerance = 1e-2;
// fp16 keeps 10 mantissa bits to bf16's 7 (unit roundoff 2^-11 against 2^-8), so every op
// that is within bf16's class on the same inputs is within it in fp16; its weakness is range
// (65504), which the parity inputs (O(1) values) do not reach and the loss scaler handles.
inline constexpr double kFp16Tolerance = 1e-2;

// The message ctest's SKIP_REGULAR_EXPRESSION matches (tests/kernels/cuda/CMakeLists.txt).
inline constexpr const char* kNoDeviceMessage = "no CUDA device: cuda-labelled test skipped";

// QSKIPs the whole test case when this machine has no usable device.
#define LATTICE_REQUIRE_CUDA_DEVICE()                                                           \
  do {                                                                                          \
    if (lattice::kernels::cuda::device_count() == 0) QSKIP(lattice::testing::kNoDeviceMessage); \
  } while (0)

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n), ptr_(static_cast<T*>(cu::device_malloc(n * sizeof(T)))) {
    poison();
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cu::device_free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  void poison() { cu::fill_nan(ptr_, n_ * sizeof(T)); }
  void upload(const std::vector<T>& host) { cu::copy_to_device(ptr_, host.data(), n_ * sizeof(T)); }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cu::copy_to_host(host.data(), ptr_, n_ * sizeof(T));
    return host;
  }

 private:
  size_t n_;
  T* ptr_;
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

inline std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = pick(rng);
  return v;
}

// The 16-bit storage types of the ops: host rounding, widening, name and tolerance, so one
// test template covers bf16 and fp16.
template <typename H>
struct Half;
template <>
struct Half<cu::bf16> {
  static constexpr const char* kName = "bf16";
  static constexpr double kTolerance = kBf16Tolerance;
  static cu::bf16 round(float x) { return cu::to_bf16(x); }
  static float widen(cu::bf16 x) { return cu::from_bf16(x); }
};
template <>
struct Half<cu::fp16> {
  static constexpr const char* kName = "fp16";
  static constexpr double kTolerance = kFp16Tolerance;
  static cu::fp16 round(float x) { return cu::to_fp16(x); }
  static float widen(cu::fp16 x) { return cu::from_fp16(x); }
};

// Rounds every element to H in place (the CPU reference then sees what the GPU sees).
template <typename H>
std::vector<float>& round_to(std::vector<float>& v) {
  for (float& x : v) x = Half<H>::widen(Half<H>::round(x));
  return v;
}
template <typename H>
std::vector<H> to_half(const std::vector<float>& v) {
  std::vector<H> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = Half<H>::round(v[i]);
  return out;
}
template <typename H>  // bf16, fp16 (the float and double overloads below win for those)
std::vector<float> to_float(const std::vector<H>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = Half<H>::widen(v[i]);
  return out;
}
// v in the compute type A: itself for float, rounded for bf16 and fp16.
template <typename A>
std::vector<A> compute_values(const std::vector<float>& v) {
  if constexpr (std::is_same_v<A, float>)
    return v;
  else
    return to_half<A>(v);
}
inline std::vector<float>& round_to_bf16(std::vector<float>& v) {
  return round_to<cu::bf16>(v);
}
inline std::vector<cu::bf16> to_bf16(const std::vector<float>& v) {
  return to_half<cu::bf16>(v);
}
inline std::vector<float> to_float(const std::vector<float>& v) {
  return v;
}
inline std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// "" when the normwise relative error of gpu against cpu is within tolerance, else a message
// naming the tensor, the worst index, both values, the error and the tolerance.
template <typename G>
std::string compare(const std::string& tensor, const std::vector<G>& gpu_raw,
                    const std::vector<float>& cpu, double tolerance) {
  const std::vector<float> gpu = to_float(gpu_raw);
  if (gpu.size() != cpu.size())
    return tensor + ": " + std::to_string(gpu.size()) + " GPU elements, " +
           std::to_string(cpu.size()) + " CPU elements";
  double scale = 0.0, worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < cpu.size(); i++) scale = std::max(scale, std::abs(double(cpu[i])));
  for (size_t i = 0; i < cpu.size(); i++) {
    double diff = std::abs(double(gpu[i]) - double(cpu[i]));
    if (std::isnan(diff)) diff = std::numeric_limits<double>::infinity();
    if (diff > worst || (i == 0 && std::isinf(diff))) worst = diff, worst_at = i;
  }
  const double error = worst / std::max(scale, 1e-30);
  if (error <= tolerance) return "";
  return tensor + "[" + std::to_string(worst_at) + "]: GPU " + std::to_string(gpu[worst_at]) +
         ", CPU " + std::to_string(cpu[worst_at]) + ", relative error " + std::to_string(error) +
         " > tolerance " + std::to_string(tolerance) + " (max |CPU| " + std::to_string(scale) + ")";
}

#define LATTICE_COMPARE(tensor, gpu, cpu, tol)                                          \
  do {                                                                                  \
    const std::string lattice_error = lattice::testing::compare(tensor, gpu, cpu, tol); \
    QVERIFY2(lattice_error.empty(), lattice_error.c_str());                             \
  } while (0)

}  // namespace lattice::testing
