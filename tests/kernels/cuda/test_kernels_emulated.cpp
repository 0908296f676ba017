// CUDA kernels run on the CPU under tests/kernels/cuda/host_emulation.h (no GPU needed) agree with
// their CPU ops within 1e-5: the flash-style attention forward and backward (tiling, online
// softmax, causal and ragged-T edges, dq apart from dk/dv, the dropout mask), LayerNorm with
// the fused residual and its backward, and the fused and vocabulary-parallel cross-entropy;
// and the loss scaler's unscale-and-check bit for bit against optim/grad_scaling.cpp's
// function, its flag set by an inf, a NaN or an overflow of the unscaling, in any block.
// The Llama family's kernels likewise: grouped-query attention (KV 1, KV 2 of NH 4, KV = NH; the
// fp32 and tensor-core kernels), RMSNorm with the fused residual and its backward, RoPE on the
// grouped layout (positions array, rotary_dim < HS) and SwiGLU, in fp32, fp16 and bf16.
// The vision encoder's kernels in fp32, bf16 and fp16, bit for bit: patchify and its inverse (the
// input's bits), quick_gelu and the exact GELU forward and backward (the CPU's float result
// rounded once to the type).
// The attention and LayerNorm kernels also run on fp16 tensors (the host's to_fp16 rounding,
// as the device's): within fp16's 1e-2 of the CPU ops on the rounded inputs; and the
// tensor-core attention kernels on fp16 and bf16 tensors, mma_16816 emulated from its
// fragment layout (within 1e-2).
// What emulation cannot check (the real instruction's layout, cuBLASLt, shared-memory limits,
// real scheduling, speed) is test_cuda_ops' and test_cuda_attention's, on a GPU.
#include <QtTest/QtTest>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/cuda/host_emulation.h"
// The emulation above must come first: it supplies what the kernels take from CUDA.
#include "adamw_kernels.cuh"  // kernels/cuda/
#include "attention_kernels.cuh"
#include "attention_mma_kernels.cuh"
#include "cross_entropy_kernels.cuh"
#include "lattice/kernels.h"
#include "layernorm_kernels.cuh"
#include "optim/grad_scaling.h"
#include "rmsnorm_kernels.cuh"
#include "rope_kernels.cuh"
#include "swiglu_kernels.cuh"
#include "vision_kernels.cuh"

namespace cu = lattice::kernels::cuda;
namespace emu = lattice::emulation;
namespace k = lattice::kernels;

namespace {

struct Case {
  int B, T, NH, HS;
  float dropout = 0.0f;
  int head_offset = 0, total_heads = 0;
  int kv_heads = 0;  // query groups (kernels.h's grouped layout); 0: NH, GPT-2's [q|k|v]
  // Lengths of the documents packed into each sequence (summing to T; odd sequences take them
  // in reverse order), passed as positions (Note [packed sequences]); empty: plain causal.
  std::vector<int> documents = {};
};

// positions (B, T) of c.documents, or empty.
std::vector<int32_t> packed_positions(const Case& c) {
  std::vector<int32_t> pos;
  if (c.documents.empty()) return pos;
  for (int b = 0; b < c.B; b++) {
    std::vector<int> lengths = c.documents;
    if (b % 2) std::reverse(lengths.begin(), lengths.end());
    for (int len : lengths)
      for (int p = 0; p < len; p++) pos.push_back(p);
  }
  return pos;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

constexpr double kFp32Tolerance = 1e-5;
constexpr double kFp16Tolerance = 1e-2;  // as tests/common/cuda_test_support.h
constexpr double kBf16Tolerance = 1e-2;

double widen(float x) {
  return x;
}
double widen(cu::fp16 x) {
  return cu::from_fp16(x);
}
double widen(cu::bf16 x) {
  return cu::from_bf16(x);
}

// Rounds every element to fp16 in place; the fp16 copy.
std::vector<float>& round_to_fp16(std::vector<float>& v) {
  for (float& x : v) x = cu::from_fp16(cu::to_fp16(x));
  return v;
}
std::vector<cu::fp16> to_fp16(const std::vector<float>& v) {
  std::vector<cu::fp16> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = cu::to_fp16(v[i]);
  return out;
}

// max |a - b| / max |b| within tolerance, else a message naming the worst element.
template <typename G, typename W>
QString mismatch(const char* tensor, const std::vector<G>& got, const std::vector<W>& want,
                 double tolerance = kFp32Tolerance) {
  double scale = 0, worst = 0;
  size_t at = 0;
  for (W w : want) scale = std::max(scale, std::abs(double(w)));
  for (size_t i = 0; i < want.size(); i++) {
    double d = std::abs(widen(got[i]) - want[i]);
    if (std::isnan(d)) d = INFINITY;
    if (d > worst) worst = d, at = i;
  }
  if (worst / scale <= tolerance) return {};
  return QString("%1[%2]: emulated GPU %3, CPU %4, relative error %5 > %6")
      .arg(tensor)
      .arg(at)
      .arg(widen(got[at]))
      .arg(double(want[at]))
      .arg(worst / scale)
      .arg(tolerance);
}

// float stays float; fp16 and bf16 round (v) in place and return the 16-bit copy.
template <typename T>
std::vector<T> stored_as(std::vector<float>& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, cu::fp16>) {
    return to_fp16(round_to_fp16(v));
  } else {
    std::vector<cu::bf16> out(v.size());
    for (size_t i = 0; i < v.size(); i++) {
      out[i] = cu::to_bf16(v[i]);
      v[i] = cu::from_bf16(out[i]);
    }
    return out;
  }
}

template <typename T>
constexpr double tolerance_for() {
  return std::is_same_v<T, float>      ? kFp32Tolerance
         : std::is_same_v<T, cu::fp16> ? kFp16Tolerance
                                       : kBf16Tolerance;
}

template <typename T>
T nan_of() {
  return T(cu::from_float<T>(std::nanf("")));
}

// The elements of got and want are the same bits.
template <typename T>
QString differing_bits(const char* tensor, const std::vector<T>& got, const std::vector<T>& want) {
  for (size_t i = 0; i < want.size(); i++)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return QString("%1[%2]: %3, expected %4 bit for bit")
          .arg(tensor)
          .arg(i)
          .arg(widen(got[i]), 0, 'g', 9)
          .arg(widen(want[i]), 0, 'g', 9);
  return {};
}

// v rounded once to T (for float, v itself).
template <typename T>
std::vector<T> rounded(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); i++) out[i] = cu::from_float<T>(v[i]);
  return out;
}

// The fp32-arithmetic kernels (attention_kernels.cuh) or, with mma, the tensor-core ones
// (attention_mma_kernels.cuh: 16-bit T only, products through the emulated mma_16816).
template <int HS, typename T = float, bool mma = false>
void check(const Case& c) {
  const int C = c.NH * HS, KV = c.kv_heads > 0 ? c.kv_heads : c.NH;
  const size_t rows = static_cast<size_t>(c.B) * c.T;
  const uint64_t key = 0xa77e;
  auto qkv = random_floats(rows * (c.NH + 2 * KV) * HS, 1), dout = random_floats(rows * C, 2);
  const std::vector<T> t_qkv = stored_as<T>(qkv), t_dout = stored_as<T>(dout);
  const double tolerance = tolerance_for<T>();

  std::vector<float> out(rows * C), dqkv(qkv.size()), cpu_lse(size_t(c.B) * c.NH * c.T);
  std::vector<float> ws(k::attention_workspace_elems(c.T, HS) * k::num_threads());
  const std::vector<int32_t> positions = packed_positions(c);
  QCOMPARE(positions.size(), c.documents.empty() ? size_t(0) : rows);
  const int32_t* pos = positions.empty() ? nullptr : positions.data();
  k::attention_forward(out.data(), cpu_lse.data(), qkv.data(), c.B, c.T, C, c.NH, c.dropout, key,
                       ws.data(), c.head_offset, c.total_heads, c.kv_heads, pos);
  k::attention_backward(dqkv.data(), dout.data(), qkv.data(), cpu_lse.data(), c.B, c.T, C, c.NH,
                        c.dropout, key, ws.data(), c.head_offset, c.total_heads, c.kv_heads, pos);

  cu::AttentionArgs a{};
  a.B = c.B, a.T = c.T, a.NH = c.NH, a.KV = KV;
  a.scale = static_cast<float>(1.0 / std::sqrt(double(HS)));
  a.dropout = c.dropout > 0.0f;
  a.threshold = k::dropout_threshold(c.dropout);
  a.keep_scale = a.dropout ? static_cast<float>(1.0 / (1.0 - c.dropout)) : 1.0f;
  a.key = key;
  a.head_offset = c.head_offset;
  a.total_heads = c.total_heads > 0 ? c.total_heads : c.NH;
  a.positions = pos;
  const float nan = std::nanf("");
  std::vector<float> g_lse(size_t(c.B) * c.NH * c.T, nan), g_delta(g_lse.size(), nan);
  std::vector<T> g_out(out.size(), T(cu::from_float<T>(nan))),
      g_dqkv(dqkv.size(), T(cu::from_float<T>(nan)));
  const dim3 grid((c.T + cu::kRows - 1) / cu::kRows, c.B * c.NH), block(cu::kWarps * 32);
  const dim3 mma_grid((c.T + cu::mma_tiles::kBlockRows - 1) / cu::mma_tiles::kBlockRows,
                      c.B * c.NH),
      mma_block(cu::mma_tiles::kBlockWarps * 32);
  // The dk/dv passes run one block per (sequence, group) and key block, as attention.cu.
  const dim3 kv_grid(grid.x, c.B * KV), mma_kv_grid(mma_grid.x, c.B * KV);
  const float* lse = g_lse.data();
  const float* delta = g_delta.data();
  if constexpr (mma)
    emu::launch(mma_grid, mma_block, cu::attention_forward_mma_kernel<T, HS>, g_out.data(),
                g_lse.data(), t_qkv.data(), a);
  else
    emu::launch(grid, block, cu::attention_forward_kernel<T, HS>, g_out.data(), g_lse.data(),
                t_qkv.data(), a);
  const unsigned delta_blocks = (c.B * c.NH * c.T + cu::kWarps - 1) / cu::kWarps;
  emu::launch(dim3(delta_blocks), block, cu::attention_delta_kernel<T, HS>, g_delta.data(),
              t_dout.data(), static_cast<const T*>(g_out.data()), c.B, c.T, c.NH);
  if constexpr (mma) {
    emu::launch(mma_grid, mma_block, cu::attention_backward_dq_mma_kernel<T, HS>, g_dqkv.data(),
                t_dout.data(), t_qkv.data(), lse, delta, a);
    emu::launch(mma_kv_grid, mma_block, cu::attention_backward_dkv_mma_kernel<T, HS>, g_dqkv.data(),
                t_dout.data(), t_qkv.data(), lse, delta, a);
  } else {
    emu::launch(grid, block, cu::attention_backward_dq_kernel<T, HS>, g_dqkv.data(), t_dout.data(),
                t_qkv.data(), lse, delta, a);
    emu::launch(kv_grid, block, cu::attention_backward_dkv_kernel<T, HS>, g_dqkv.data(),
                t_dout.data(), t_qkv.data(), lse, delta, a);
  }

  QString error = mismatch("attention out", g_out, out, tolerance);
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = mismatch("attention log-sum-exps", g_lse, cpu_lse, tolerance);
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = mismatch("attention dqkv", g_dqkv, dqkv, tolerance);
  QVERIFY2(error.isEmpty(), qPrintable(error));
}

#define EXPECT_CLOSE(tensor, got, want)                \
  do {                                                 \
    const QString error = mismatch(tensor, got, want); \
    QVERIFY2(error.isEmpty(), qPrintable(error));      \
  } while (0)
#define EXPECT_CLOSE_FP16(tensor, got, want)                           \
  do {                                                                 \
    const QString error = mismatch(tensor, got, want, kFp16Tolerance); \
    QVERIFY2(error.isEmpty(), qPrintable(error));                      \
  } while (0)

// LayerNorm's weight and bias gradients as layernorm.cu launches them (reduce.cuh's column
// sums), split into three row blocks (the last one short) so that the partials and their
// totals in row-block order are both exercised.
template <typename T>
void column_sums_params(std::vector<float>& dw, std::vector<float>& db, const T* dout, const T* inp,
                        const std::vector<float>& mean, const std::vector<float>& rstd, int N,
                        int C) {
  const int R = 3, rows_per_block = (N + R - 1) / R;
  std::vector<float> partial(2 * size_t(R) * C, std::nanf(""));
  emu::launch(dim3((C + 31) / 32, R), dim3(32, 8), cu::layernorm_backward_params_kernel<T>,
              partial.data(), dw.data(), db.data(), dout, inp, mean.data(), rstd.data(), N, C,
              rows_per_block);
  emu::launch(dim3((C + 255) / 256), dim3(256), cu::column_totals_kernel, dw.data(), db.data(),
              static_cast<const float*>(partial.data()), R, C);
}

void check_layernorm(int N, int C) {
  const auto res = random_floats(size_t(N) * C, 11), x = random_floats(size_t(N) * C, 12),
             w = random_floats(C, 13), b = random_floats(C, 14),
             dout = random_floats(size_t(N) * C, 15);
  std::vector<float> sum(res.size()), out(res.size()), mean(N), rstd(N);
  std::vector<float> dinp = random_floats(res.size(), 16), dw = random_floats(C, 17),
                     db = random_floats(C, 18);
  k::residual_dropout_forward(sum.data(), res.data(), x.data(), sum.size(), 0.0f, 0);
  k::layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), w.data(), b.data(), N, C);
  const std::vector<float> g_dinp0 = dinp, g_dw0 = dw, g_db0 = db;
  k::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), sum.data(), w.data(),
                        mean.data(), rstd.data(), N, C);

  const float nan = std::nanf("");
  std::vector<float> g_res = res, g_out(out.size(), nan), g_mean(N, nan), g_rstd(N, nan);
  std::vector<float> g_dinp = g_dinp0, g_dw = g_dw0, g_db = g_db0;
  const dim3 rows_grid((N + cu::kRowsPerBlock - 1) / cu::kRowsPerBlock),
      rows_block(32, cu::kRowsPerBlock);
  emu::launch(rows_grid, rows_block, cu::layernorm_forward_kernel<float>, g_res.data(),
              g_out.data(), g_mean.data(), g_rstd.data(), static_cast<const float*>(g_res.data()),
              x.data(), w.data(), b.data(), N, C);  // residual_out aliases residual
  emu::launch(rows_grid, rows_block, cu::layernorm_backward_input_kernel<float>, g_dinp.data(),
              dout.data(), static_cast<const float*>(g_res.data()), w.data(),
              static_cast<const float*>(g_mean.data()), static_cast<const float*>(g_rstd.data()), N,
              C);
  column_sums_params<float>(g_dw, g_db, dout.data(), static_cast<const float*>(g_res.data()),
                            g_mean, g_rstd, N, C);
  EXPECT_CLOSE("residual_layernorm residual", g_res, sum);
  EXPECT_CLOSE("layernorm out", g_out, out);
  EXPECT_CLOSE("layernorm mean", g_mean, mean);
  EXPECT_CLOSE("layernorm rstd", g_rstd, rstd);
  EXPECT_CLOSE("layernorm dinp (+=)", g_dinp, dinp);
  EXPECT_CLOSE("layernorm dweight (+=)", g_dw, dw);
  EXPECT_CLOSE("layernorm dbias (+=)", g_db, db);
}

// The same on fp16 tensors: inputs rounded to fp16 for both sides, the CPU's residual sum
// rounded as the kernel stores it; the statistics and parameter gradients stay fp32.
void check_layernorm_fp16(int N, int C) {
  auto res = random_floats(size_t(N) * C, 41), x = random_floats(size_t(N) * C, 42),
       w = random_floats(C, 43), b = random_floats(C, 44), dout = random_floats(size_t(N) * C, 45);
  const std::vector<cu::fp16> h_x = stored_as<cu::fp16>(x), h_w = stored_as<cu::fp16>(w),
                              h_b = stored_as<cu::fp16>(b), h_dout = stored_as<cu::fp16>(dout);
  std::vector<cu::fp16> h_res = stored_as<cu::fp16>(res);
  std::vector<float> sum(res.size()), out(res.size()), mean(N), rstd(N), dinp(res.size(), 0.0f),
      dw(C, 0.0f), db(C, 0.0f);
  k::residual_dropout_forward(sum.data(), res.data(), x.data(), sum.size(), 0.0f, 0);
  round_to_fp16(sum);
  k::layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), w.data(), b.data(), N, C);
  k::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), sum.data(), w.data(),
                        mean.data(), rstd.data(), N, C);

  const float nan = std::nanf("");
  std::vector<cu::fp16> g_out(out.size(), cu::to_fp16(nan)), g_dinp(out.size(), cu::to_fp16(0));
  std::vector<float> g_mean(N, nan), g_rstd(N, nan), g_dw(C, 0.0f), g_db(C, 0.0f);
  const dim3 rows_grid((N + cu::kRowsPerBlock - 1) / cu::kRowsPerBlock),
      rows_block(32, cu::kRowsPerBlock);
  emu::launch(rows_grid, rows_block, cu::layernorm_forward_kernel<cu::fp16>, h_res.data(),
              g_out.data(), g_mean.data(), g_rstd.data(),
              static_cast<const cu::fp16*>(h_res.data()), h_x.data(), h_w.data(), h_b.data(), N,
              C);  // residual_out aliases residual
  emu::launch(rows_grid, rows_block, cu::layernorm_backward_input_kernel<cu::fp16>, g_dinp.data(),
              h_dout.data(), static_cast<const cu::fp16*>(h_res.data()), h_w.data(),
              static_cast<const float*>(g_mean.data()), static_cast<const float*>(g_rstd.data()), N,
              C);
  column_sums_params<cu::fp16>(g_dw, g_db, h_dout.data(),
                               static_cast<const cu::fp16*>(h_res.data()), g_mean, g_rstd, N, C);
  EXPECT_CLOSE_FP16("fp16 residual_layernorm residual", h_res, sum);
  EXPECT_CLOSE_FP16("fp16 layernorm out", g_out, out);
  EXPECT_CLOSE_FP16("fp16 layernorm mean", g_mean, mean);
  EXPECT_CLOSE_FP16("fp16 layernorm rstd", g_rstd, rstd);
  EXPECT_CLOSE_FP16("fp16 layernorm dinp", g_dinp, dinp);
  EXPECT_CLOSE_FP16("fp16 layernorm dweight (fp32)", g_dw, dw);
  EXPECT_CLOSE_FP16("fp16 layernorm dbias (fp32)", g_db, db);
}

// RMSNorm's weight gradient as rmsnorm.cu launches it: reduce.cuh's column sums over R row
// blocks (partials, then their totals in row-block order), or with R = 1 straight into dweight
// (no partials: the launcher's path when the scratch is too small).
template <typename T>
void rmsnorm_weight_grad(std::vector<float>& dw, const T* dout, const T* inp,
                         const std::vector<float>& rstd, int N, int C, int R) {
  const int rows_per_block = (N + R - 1) / R;
  std::vector<float> partial(size_t(R) * C, std::nanf(""));
  float* into = R > 1 ? partial.data() : nullptr;
  emu::launch(dim3((C + 31) / 32, R), dim3(32, 8), cu::rmsnorm_backward_weight_kernel<T>, into,
              dw.data(), dout, inp, rstd.data(), N, C, rows_per_block);
  if (into)
    emu::launch(dim3((C + 255) / 256), dim3(256), cu::column_totals_kernel, dw.data(),
                static_cast<float*>(nullptr), static_cast<const float*>(partial.data()), R, C);
}

// Residual + RMSNorm forward (residual_out aliasing residual) and backward (dinp and dweight
// accumulate) against the CPU ops on the inputs as stored in T, the CPU's residual sum rounded as
// the kernel stores it (as cpu_ops_16bit.cpp); the plain forward on the stored sum must give the
// fused forward's out and rstd bit for bit.
template <typename T>
void check_rmsnorm(int N, int C, int R) {
  const size_t n = size_t(N) * C;
  const float eps = 1e-6f;
  const double tolerance = tolerance_for<T>();
  auto res = random_floats(n, 51), x = random_floats(n, 52), w = random_floats(C, 53),
       dout = random_floats(n, 54), dinp = random_floats(n, 55);
  std::vector<float> dw = random_floats(C, 56);
  std::vector<T> t_res = stored_as<T>(res), t_dinp = stored_as<T>(dinp);
  const std::vector<T> t_x = stored_as<T>(x), t_w = stored_as<T>(w), t_dout = stored_as<T>(dout);
  std::vector<float> g_dw = dw;

  std::vector<float> sum(n), out(n), rstd(N);
  k::residual_dropout_forward(sum.data(), res.data(), x.data(), n, 0.0f, 0);
  stored_as<T>(sum);  // rounded in place
  k::rmsnorm_forward(out.data(), rstd.data(), sum.data(), w.data(), N, C, eps);
  k::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), sum.data(), w.data(), rstd.data(), N, C);

  const dim3 rows_grid((N + cu::kRmsRowsPerBlock - 1) / cu::kRmsRowsPerBlock),
      rows_block(32, cu::kRmsRowsPerBlock);
  std::vector<T> g_out(n, nan_of<T>()), plain_out(n, nan_of<T>());
  std::vector<float> g_rstd(N, std::nanf("")), plain_rstd(N, std::nanf(""));
  const T* stored = t_res.data();
  emu::launch(rows_grid, rows_block, cu::rmsnorm_forward_kernel<T>, t_res.data(), g_out.data(),
              g_rstd.data(), stored, t_x.data(), t_w.data(), N, C, eps);
  emu::launch(rows_grid, rows_block, cu::rmsnorm_forward_kernel<T>, static_cast<T*>(nullptr),
              plain_out.data(), plain_rstd.data(), stored, static_cast<const T*>(nullptr),
              t_w.data(), N, C, eps);
  emu::launch(rows_grid, rows_block, cu::rmsnorm_backward_input_kernel<T>, t_dinp.data(),
              t_dout.data(), stored, t_w.data(), static_cast<const float*>(g_rstd.data()), N, C);
  rmsnorm_weight_grad<T>(g_dw, t_dout.data(), stored, g_rstd, N, C, R);

  QString error = mismatch("residual_rmsnorm residual", t_res, sum, tolerance);
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = mismatch("rmsnorm out", g_out, out, tolerance);
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = mismatch("rmsnorm rstd", g_rstd, rstd, tolerance);
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = mismatch("rmsnorm dinp (+=)", t_dinp, dinp, tolerance);
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = mismatch("rmsnorm dweight (+=, fp32)", g_dw, dw, tolerance);
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = differing_bits("rmsnorm out of the stored sum (plain vs fused)", plain_out, g_out);
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = differing_bits("rmsnorm rstd of the stored sum (plain vs fused)", plain_rstd, g_rstd);
  QVERIFY2(error.isEmpty(), qPrintable(error));
}

struct RopeCase {
  int B, T, NH, KV, HS, rotary_dim;
  bool positions;  // a positions array (random, beyond T too); else row n is at n % T
};

// RoPE forward on qkv and backward on dqkv, in place, against the CPU ops; then every value
// head, and dims [R, HS) of every query and key head, must be the input bit for bit. The kernel
// runs on a grid smaller than its pairs, so threads walk the grid-stride loop several times.
template <typename T>
void check_rope(const RopeCase& c) {
  const int N = c.B * c.T, P = c.T + 9, half = c.rotary_dim / 2, Q = c.NH / c.KV;
  const size_t width = size_t(c.NH + 2 * c.KV) * c.HS, n = N * width;
  std::vector<double> cos64(size_t(P) * half), sin64(cos64.size());
  k::rope_tables(cos64.data(), sin64.data(), P, c.rotary_dim, 500000.0);
  const std::vector<float> cos(cos64.begin(), cos64.end()), sin(sin64.begin(), sin64.end());
  std::vector<int32_t> positions(N);
  std::mt19937_64 rng(63);
  for (int32_t& p : positions) p = std::uniform_int_distribution<int32_t>(0, P - 1)(rng);
  const int32_t* pos = c.positions ? positions.data() : nullptr;
  auto qkv = random_floats(n, 61), dqkv = random_floats(n, 62);
  std::vector<T> t_qkv = stored_as<T>(qkv), t_dqkv = stored_as<T>(dqkv);
  const std::vector<T> qkv0 = t_qkv, dqkv0 = t_dqkv;
  k::rope_forward(qkv.data(), cos.data(), sin.data(), pos, N, c.T, c.NH, c.KV, c.HS, c.rotary_dim);
  k::rope_backward(dqkv.data(), cos.data(), sin.data(), pos, N, c.T, c.NH, c.KV, c.HS,
                   c.rotary_dim);
  emu::launch(dim3(3), dim3(64), cu::rope_kernel<T>, t_qkv.data(), cos.data(), sin.data(), pos, N,
              c.T, c.NH, c.KV, c.HS, c.rotary_dim, 1.0f);
  emu::launch(dim3(3), dim3(64), cu::rope_kernel<T>, t_dqkv.data(), cos.data(), sin.data(), pos, N,
              c.T, c.NH, c.KV, c.HS, c.rotary_dim, -1.0f);
  QString error = mismatch("rope_forward qkv", t_qkv, qkv, tolerance_for<T>());
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = mismatch("rope_backward dqkv", t_dqkv, dqkv, tolerance_for<T>());
  QVERIFY2(error.isEmpty(), qPrintable(error));
  for (size_t i = 0; i < n; i++) {
    const int col = static_cast<int>(i % width), head = col / c.HS % (Q + 2), d = col % c.HS;
    if (head <= Q && d < c.rotary_dim) continue;  // rotated: compared above
    QVERIFY2(std::memcmp(&t_qkv[i], &qkv0[i], sizeof(T)) == 0 &&
                 std::memcmp(&t_dqkv[i], &dqkv0[i], sizeof(T)) == 0,
             qPrintable(QString("rope: qkv / dqkv [%1] (head %2 of its group, dim %3) changed; "
                                "values and dims past rotary_dim %4 must pass through")
                            .arg(i)
                            .arg(head)
                            .arg(d)
                            .arg(c.rotary_dim)));
  }
}

// SwiGLU forward and backward against the CPU ops; gates up to ~+-9 reach both tails of the
// sigmoid. A grid smaller than the elements, as check_rope.
template <typename T>
void check_swiglu(int N, int F) {
  const size_t n = size_t(N) * F;
  auto inp = random_floats(2 * n, 71), dout = random_floats(n, 72);
  for (float& v : inp) v *= 3.0f;
  const std::vector<T> t_inp = stored_as<T>(inp), t_dout = stored_as<T>(dout);
  std::vector<float> out(n), dinp(2 * n);
  k::swiglu_forward(out.data(), inp.data(), N, F);
  k::swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
  std::vector<T> g_out(n, nan_of<T>()), g_dinp(2 * n, nan_of<T>());
  emu::launch(dim3(2), dim3(64), cu::swiglu_forward_kernel<T>, g_out.data(), t_inp.data(), N, F);
  emu::launch(dim3(2), dim3(64), cu::swiglu_backward_kernel<T>, g_dinp.data(), t_inp.data(),
              t_dout.data(), N, F);
  QString error = mismatch("swiglu out", g_out, out, tolerance_for<T>());
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = mismatch("swiglu dinp (gate | up)", g_dinp, dinp, tolerance_for<T>());
  QVERIFY2(error.isEmpty(), qPrintable(error));
}

// The vision encoder's patchify (im2col of a stride = kernel convolution) and its inverse
// against the CPU ops on the same values: data movement, so every type's result is the input's
// bits, bit for bit (a 16-bit patchify must not round). H != W so that a transposed row and
// column index shows; 2 blocks of 64 threads, fewer than the elements (grid-stride loops).
template <typename T>
void check_patchify(int B, int Cin, int H, int W, int P) {
  const size_t n = size_t(B) * Cin * H * W;  // = B (H / P) (W / P) Cin P P
  auto img = random_floats(n, 81), dcols = random_floats(n, 82);
  const std::vector<T> t_img = stored_as<T>(img), t_dcols = stored_as<T>(dcols);
  std::vector<float> cols(n), dimg(n);
  k::patchify_forward(cols.data(), img.data(), B, Cin, H, W, P);
  k::patchify_backward(dimg.data(), dcols.data(), B, Cin, H, W, P);
  std::vector<T> g_cols(n, nan_of<T>()), g_dimg(n, nan_of<T>());
  emu::launch(dim3(2), dim3(64), cu::patchify_forward_kernel<T>, g_cols.data(), t_img.data(), B,
              Cin, H, W, P);
  emu::launch(dim3(2), dim3(64), cu::patchify_backward_kernel<T>, g_dimg.data(), t_dcols.data(), B,
              Cin, H, W, P);
  QString error = differing_bits("patchify cols", g_cols, rounded<T>(cols));
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = differing_bits("patchify dimg", g_dimg, rounded<T>(dimg));
  QVERIFY2(error.isEmpty(), qPrintable(error));
}

// quick_gelu and the exact GELU, forward and backward (the backward also in place on dout, as
// kernels.h allows), against the CPU's float ops on the widened inputs with the result rounded
// once to T: the kernels compute in fp32 and round once, so the bits must match. Bit for bit,
// not within an ulp: under emulation the kernels' expf / erff are the host's, the ones the CPU
// ops call, and neither side fuses a product into a sum (plain x86-64). On a GPU, CUDA's expf
// and erff differ from glibc's by an ulp or two of fp32; test_cuda_op_list compares there,
// within the CUDA parity tolerances. Inputs of ~+-12 and two of +-20 reach both tails (the sigmoid
// and erf saturated, phi(x) underflowed to 0).
template <typename T>
void check_activation(size_t n, k::Activation act) {
  auto inp = random_floats(n, 83), dout = random_floats(n, 84);
  for (float& v : inp) v *= 4.0f;
  inp[0] = 20.0f, inp[1] = -20.0f;
  const std::vector<T> t_inp = stored_as<T>(inp), t_dout = stored_as<T>(dout);
  std::vector<float> out(n), dinp(n);
  k::activation_forward(out.data(), inp.data(), n, act);
  k::activation_backward(dinp.data(), inp.data(), dout.data(), n, act);
  const bool quick = act == k::Activation::kQuickGelu;
  std::vector<T> g_out(n, nan_of<T>()), g_dinp(n, nan_of<T>()), g_in_place = t_dout;
  emu::launch(dim3(2), dim3(64), cu::activation_forward_kernel<T>, g_out.data(), t_inp.data(), n,
              quick);
  emu::launch(dim3(2), dim3(64), cu::activation_backward_kernel<T>, g_dinp.data(), t_inp.data(),
              t_dout.data(), n, quick);
  emu::launch(dim3(2), dim3(64), cu::activation_backward_kernel<T>, g_in_place.data(), t_inp.data(),
              g_in_place.data(), n, quick);
  const char* name = quick ? "quick_gelu" : "exact GELU";
  QString error = differing_bits(qPrintable(QString("%1 out").arg(name)), g_out, rounded<T>(out));
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = differing_bits(qPrintable(QString("%1 dinp").arg(name)), g_dinp, rounded<T>(dinp));
  QVERIFY2(error.isEmpty(), qPrintable(error));
  error = differing_bits(qPrintable(QString("%1 dinp (in place on dout)").arg(name)), g_in_place,
                         rounded<T>(dinp));
  QVERIFY2(error.isEmpty(), qPrintable(error));
}

std::vector<int32_t> random_targets(int N, int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  std::vector<int32_t> t(N);
  for (auto& x : t) x = pick(rng);
  return t;
}

}  // namespace

class KernelsEmulated : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { k::set_num_threads(2); }
  void ragged_sequence_head64_matches_cpu() { check<64>({1, 40, 1, 64}); }
  void dropout_on_tensor_parallel_heads_matches_cpu() {
    check<64>({1, 64, 2, 64, 0.1f, /*head_offset=*/1, /*total_heads=*/4});
  }
  void head128_two_sequences_match_cpu() { check<128>({2, 33, 1, 128}); }

  void residual_layernorm_forward_and_backward_match_cpu() { check_layernorm(19, 72); }
  void fp16_attention_matches_cpu() { check<64, cu::fp16>({1, 40, 1, 64}); }
  // The tensor-core kernels: a ragged T over two 64-row blocks and a partial key tile, two
  // sequences at head size 128, dropout on tensor-parallel heads; fp16 and bf16.
  void mma_fp16_ragged_sequence_matches_cpu() { check<64, cu::fp16, true>({1, 80, 1, 64}); }
  void mma_bf16_head128_two_sequences_match_cpu() { check<128, cu::bf16, true>({2, 40, 1, 128}); }
  void mma_bf16_dropout_on_tensor_parallel_heads_matches_cpu() {
    check<64, cu::bf16, true>({1, 72, 2, 64, 0.1f, /*head_offset=*/1, /*total_heads=*/4});
  }
  void fp16_residual_layernorm_matches_cpu() { check_layernorm_fp16(19, 72); }

  // Grouped-query attention (kernels.h's grouped layout): every query head reads its group's key
  // and value in place; a group's dk and dv sum its query heads. MQA (KV 1), KV 2 of NH 4, KV = NH
  // given explicitly; the fp32 and the tensor-core kernels, fp32, fp16 and bf16.
  void grouped_query_attention_kv1_matches_cpu() { check<64>({1, 40, 4, 64, 0.0f, 0, 0, 1}); }
  void grouped_query_attention_kv2_dropout_on_tensor_parallel_heads_matches_cpu() {
    check<64>({1, 40, 4, 64, 0.1f, /*head_offset=*/4, /*total_heads=*/8, /*kv_heads=*/2});
  }
  void grouped_query_attention_kv_equal_to_nh_matches_cpu() {
    check<128>({1, 33, 2, 128, 0.0f, 0, 0, 2});
  }
  void fp16_grouped_query_attention_matches_cpu() {
    check<64, cu::fp16>({1, 40, 4, 64, 0.0f, 0, 0, 2});
  }
  void mma_fp16_grouped_kv1_ragged_sequence_matches_cpu() {
    check<64, cu::fp16, true>({1, 80, 4, 64, 0.0f, 0, 0, 1});
  }
  void mma_bf16_grouped_kv2_head128_two_sequences_match_cpu() {
    check<128, cu::bf16, true>({2, 40, 4, 128, 0.0f, 0, 0, 2});
  }
  void mma_bf16_grouped_kv2_dropout_on_tensor_parallel_heads_matches_cpu() {
    check<64, cu::bf16, true>({1, 72, 4, 64, 0.1f, 4, 8, 2});
  }

  // RMSNorm with the fused residual (column sums in 3 row blocks, and in 1 without partials).
  void residual_rmsnorm_forward_and_backward_match_cpu() { check_rmsnorm<float>(19, 72, 3); }
  void residual_rmsnorm_single_row_block_matches_cpu() { check_rmsnorm<float>(9, 40, 1); }
  void fp16_residual_rmsnorm_matches_cpu() { check_rmsnorm<cu::fp16>(19, 72, 3); }
  void bf16_residual_rmsnorm_matches_cpu() { check_rmsnorm<cu::bf16>(19, 72, 3); }

  // RoPE on the grouped layout: {B, T, NH, KV, HS, rotary_dim, positions array}.
  // Packed documents (positions): a query sees its own document only. T 100 over documents
  // starting at 0, 3 and 64 makes the query blocks from row 64 skip the first key tiles and the
  // first key blocks stop before the last query tiles (reversed in a second sequence: no
  // skipping); the fp32 and the tensor-core kernels, grouped keys, dropout on tensor-parallel
  // heads, head sizes 64 and 128.
  void packed_documents_match_cpu() { check<64>({2, 100, 1, 64, 0.0f, 0, 0, 0, {3, 61, 36}}); }
  void packed_documents_grouped_dropout_match_cpu() {
    check<64>({1, 100, 2, 64, 0.1f, 2, 4, 1, {3, 61, 36}});
  }
  void mma_bf16_packed_documents_match_cpu() {
    check<64, cu::bf16, true>({2, 100, 1, 64, 0.0f, 0, 0, 0, {3, 61, 36}});
  }
  void mma_fp16_packed_grouped_dropout_head128_match_cpu() {
    check<128, cu::fp16, true>({1, 100, 2, 128, 0.1f, 2, 4, 1, {1, 63, 36}});
  }

  void rope_grouped_matches_cpu() { check_rope<float>({2, 5, 4, 2, 64, 64, false}); }
  void rope_mqa_positions_partial_rotary_matches_cpu() {
    check_rope<float>({1, 6, 4, 1, 64, 32, true});
  }
  void rope_per_head_layout_head128_matches_cpu() {
    check_rope<float>({1, 4, 2, 2, 128, 64, false});
  }
  void bf16_rope_positions_matches_cpu() { check_rope<cu::bf16>({1, 6, 4, 2, 64, 64, true}); }
  void fp16_rope_partial_rotary_matches_cpu() { check_rope<cu::fp16>({2, 3, 4, 1, 64, 48, false}); }

  void swiglu_matches_cpu() { check_swiglu<float>(7, 45); }
  void bf16_swiglu_matches_cpu() { check_swiglu<cu::bf16>(5, 37); }
  void fp16_swiglu_matches_cpu() { check_swiglu<cu::fp16>(5, 37); }
  void patchify_matches_cpu() { check_patchify<float>(2, 3, 12, 8, 4); }
  void bf16_patchify_matches_cpu() { check_patchify<cu::bf16>(2, 3, 8, 12, 4); }
  void fp16_patchify_matches_cpu() { check_patchify<cu::fp16>(1, 2, 6, 9, 3); }
  void vision_activations_match_cpu() {
    check_activation<float>(333, k::Activation::kQuickGelu);
    check_activation<float>(333, k::Activation::kGeluErf);
  }
  void bf16_vision_activations_match_cpu() {
    check_activation<cu::bf16>(333, k::Activation::kQuickGelu);
    check_activation<cu::bf16>(333, k::Activation::kGeluErf);
  }
  void fp16_vision_activations_match_cpu() {
    check_activation<cu::fp16>(333, k::Activation::kQuickGelu);
    check_activation<cu::fp16>(333, k::Activation::kGeluErf);
  }
  void unscale_and_check_is_the_cpu_function();

  void softmax_cross_entropy_matches_cpu() {
    const int N = 3, V = 1003;
    const auto logits = random_floats(size_t(N) * V, 21);
    auto targets = random_targets(N, V, 22);
    targets[1] = k::kIgnoreIndex;  // a masked token: loss 0, zero gradient row
    std::vector<float> losses(N), dlogits(logits.size());
    k::softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V,
                             0.5f);
    std::vector<float> g_logits = logits, g_losses(N, std::nanf(""));
    emu::launch(dim3(N), dim3(cu::kThreads), cu::softmax_cross_entropy_kernel, g_losses.data(),
                g_logits.data(), static_cast<const float*>(g_logits.data()), targets.data(), V,
                0.5f);  // dlogits aliases logits
    EXPECT_CLOSE("cross_entropy losses", g_losses, losses);
    EXPECT_CLOSE("cross_entropy dlogits", g_logits, dlogits);
    QCOMPARE(g_losses[1], 0.0f);
    for (int v = 0; v < V; v++) QCOMPARE(g_logits[size_t(V) + v], 0.0f);
  }

  void vocab_parallel_cross_entropy_matches_cpu() {
    const int N = 2, V = 640, half = V / 2;
    const auto logits = random_floats(size_t(N) * V, 31);
    auto targets = random_targets(N, V, 32);
    targets[0] = k::kIgnoreIndex;
    std::vector<float> losses(N), dlogits(logits.size());
    k::softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V,
                             1.0f);
    std::vector<std::vector<float>> shard(2, std::vector<float>(size_t(N) * half));
    for (int s = 0; s < 2; s++)
      for (int n = 0; n < N; n++)
        std::copy_n(logits.begin() + n * V + s * half, half, shard[s].begin() + n * half);
    std::vector<std::vector<float>> max(2, std::vector<float>(N)), tl(2, std::vector<float>(N));
    std::vector<std::vector<double>> sums(2, std::vector<double>(N));
    const dim3 grid(N), block(cu::kThreads);
    for (int s = 0; s < 2; s++)
      emu::launch(grid, block, cu::shard_max_kernel, max[s].data(),
                  static_cast<const float*>(shard[s].data()), half);
    for (int n = 0; n < N; n++) max[0][n] = max[1][n] = std::max(max[0][n], max[1][n]);
    for (int s = 0; s < 2; s++)
      emu::launch(grid, block, cu::shard_sums_kernel, sums[s].data(), tl[s].data(),
                  static_cast<const float*>(shard[s].data()),
                  static_cast<const float*>(max[s].data()), targets.data(), s * half, half);
    for (int n = 0; n < N; n++) {
      sums[0][n] = sums[1][n] = sums[0][n] + sums[1][n];
      tl[0][n] = tl[1][n] = tl[0][n] + tl[1][n];
    }
    for (int s = 0; s < 2; s++) {
      std::vector<float> g_losses(N, std::nanf("")), want(size_t(N) * half);
      emu::launch(grid, block, cu::shard_finish_kernel, g_losses.data(), shard[s].data(),
                  static_cast<const float*>(shard[s].data()),
                  static_cast<const float*>(max[s].data()),
                  static_cast<const double*>(sums[s].data()),
                  static_cast<const float*>(tl[s].data()), targets.data(), s * half, half, 1.0f);
      for (int n = 0; n < N; n++)
        std::copy_n(dlogits.begin() + n * V + s * half, half, want.begin() + n * half);
      EXPECT_CLOSE("vocab-parallel losses", g_losses, losses);
      EXPECT_CLOSE("vocab-parallel dlogits", shard[s], want);
      QCOMPARE(g_losses[0], 0.0f);
      for (int v = 0; v < half; v++) QCOMPARE(shard[s][v], 0.0f);
    }
  }
};

void KernelsEmulated::unscale_and_check_is_the_cpu_function() {
  // Two blocks of 64 threads over 300 elements: each thread walks the grid more than once.
  const size_t n = 300;
  const dim3 grid(2), block(64);
  std::vector<float> g = random_floats(n, 41);
  for (float& v : g) v *= 1000.0f;
  std::vector<float> x = g, want = g;
  float found = 0.0f;
  emu::launch(grid, block, cu::unscale_and_check_kernel, x.data(), n, 0.125f, &found);
  QVERIFY(!lattice::unscale_and_check(want.data(), n, 0.125));
  QCOMPARE(found, 0.0f);
  for (size_t i = 0; i < n; i++)
    QVERIFY2(std::memcmp(&x[i], &want[i], sizeof(float)) == 0,
             qPrintable(
                 QString("x[%1] = %2, the CPU's %3 (bit for bit)").arg(i).arg(x[i]).arg(want[i])));
  // An inf in block 1's second pass, a NaN in block 0, a value the unscaling makes inf.
  for (const auto& [at, value, inv_scale] :
       {std::tuple{size_t{250}, std::numeric_limits<float>::infinity(), 0.125f},
        std::tuple{size_t{3}, std::numeric_limits<float>::quiet_NaN(), 0.125f},
        std::tuple{size_t{170}, std::numeric_limits<float>::max(), 4.0f}}) {
    x = g;
    x[at] = value;
    found = 0.0f;
    emu::launch(grid, block, cu::unscale_and_check_kernel, x.data(), n, inv_scale, &found);
    QVERIFY2(found == 1.0f, qPrintable(QString("x[%1] = %2 times %3: flag %4, expected 1")
                                           .arg(at)
                                           .arg(value)
                                           .arg(inv_scale)
                                           .arg(found)));
  }
}

QTEST_GUILESS_MAIN(KernelsEmulated)
#include "test_kernels_emulated.moc"
