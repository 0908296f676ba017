// The CUDA kernels of the context-parallel ring's blocks (kernels/cuda/attention_block_kernels.cuh)
// run on the CPU under host_emulation.h agree with the CPU kernels (kernels.h's
// attention_block_forward / _backward, kernels/cpu/attention_block.cpp) on the blocks of a zigzag
// ring (Note [ring attention]): the causal diagonal, a full block, both half blocks (q_begin > 0,
// k_end < Tk), grouped query heads (NH 4, KV 2), packed documents (doc, with rows that see no
// key of the block), head sizes 64 and 128. The forward merges into a state left by an earlier
// block; rows outside [q_begin, q_end) must stay bit for bit. The backward adds to random
// gradients: its increments are compared, and dqkv's key and value columns must stay bit for bit.
// Tolerance: the normwise relative error max |gpu - cpu| / max |cpu| <= 1e-5 (the fp32 parity
// tolerance of tests/common/cuda_test_support.h): the two sum in different orders and the CPU
// uses its polynomial exp. The pack / unpack / fill / accumulate kernels are compared bit for
// bit with plain loops, row_dot within 1e-6 of a double sum. And a whole CP 2 ring of these kernels
// gives the CPU's full causal attention (out and dqkv within 1e-5).
// bf16 and fp16 inputs (qkv, kv, dout; row_dot's out: random values rounded to the type; out, lse,
// dqkv, dkv and delta stay fp32): the same blocks against the CPU float kernels run on the widened
// values, within the same 1e-5 (both compute in fp32 from the same values, so this checks the
// widening loads, not 16-bit rounding); the pack bit for bit, row_dot within 1e-5 of the CPU's.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/host_emulation.h"
// The emulation above must come first: it supplies what the kernels take from CUDA.
// reduce.cuh, included by the kernels, defines column_totals_kernel, unused here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "attention_block_kernels.cuh"  // kernels/cuda/
#pragma GCC diagnostic pop
#include "lattice/kernels.h"

namespace cu = lattice::kernels::cuda;
namespace emu = lattice::emulation;
namespace k = lattice::kernels;

namespace {

constexpr double kTolerance = 1e-5;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// An input of the kernels in T (float, bf16 or fp16): x rounded to T (`in`, what the emulated
// kernels read) and those values widened back (`wide`, what the CPU float kernels read).
template <typename T>
struct Input {
  std::vector<T> in;
  std::vector<float> wide;
};
template <typename T>
Input<T> input_of(const std::vector<float>& x) {
  Input<T> v;
  v.in.reserve(x.size()), v.wide.reserve(x.size());
  for (float f : x) {
    v.in.push_back(cu::from_float<T>(f));
    v.wide.push_back(cu::to_float(v.in.back()));
  }
  return v;
}

// max |got - want| / max |want| over the elements (both -inf: equal; NaN: infinity), and where
// the largest difference is.
QString normwise(const char* tensor, const std::vector<float>& got, const std::vector<float>& want,
                 double tolerance) {
  double worst = 0.0, scale = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); i++) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;
    const double d = std::isnan(got[i]) || std::isinf(got[i]) || std::isinf(want[i])
                         ? std::numeric_limits<double>::infinity()
                         : std::abs(double(got[i]) - want[i]);
    if (d > worst || (std::isinf(d) && !std::isinf(worst))) worst = d, at = i;
    scale = std::max(scale, std::isinf(want[i]) ? 0.0 : std::abs(double(want[i])));
  }
  const double err = scale > 0 ? worst / scale : worst;
  if (err <= tolerance) return {};
  return QString("%1: normwise error %2 > %3 (at %4: emulated GPU %5, CPU %6)")
      .arg(tensor)
      .arg(err)
      .arg(tolerance)
      .arg(at)
      .arg(got[at], 0, 'g', 9)
      .arg(want[at], 0, 'g', 9);
}

#define EXPECT_CLOSE(tensor, got, want, tol)                \
  do {                                                      \
    const QString e_ = normwise(tensor, got, want, tol);    \
    QVERIFY2(e_.isEmpty(), qPrintable(e_));                 \
  } while (0)

// A ring block: this rank's queries (positions q_pos, rows [q_begin, q_end)) against a rank's
// keys and values (k_pos, rows [k_begin, k_end)); docs (empty: not packed) are the lengths of
// the documents that tile the global positions of every sequence (sequence b's list rotated by
// b, so that the sequences differ).
struct Case {
  int B, NH, KV, HS;
  std::vector<int32_t> q_pos, k_pos;
  int q_begin, q_end, k_begin, k_end;
  std::vector<int> docs = {};
};

// Positions of chunks `chunks` of c rows each (the zigzag split: rank r of CP holds r, 2CP-1-r).
std::vector<int32_t> chunk_positions(std::initializer_list<int> chunks, int c) {
  std::vector<int32_t> pos;
  for (int ch : chunks)
    for (int p = 0; p < c; p++) pos.push_back(ch * c + p);
  return pos;
}
std::vector<int32_t> iota_positions(int from, int n) {
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; i++) pos[i] = from + i;
  return pos;
}

// doc (B, Tq): each query's position in its packed document.
std::vector<int32_t> doc_of(const Case& c) {
  std::vector<int32_t> doc;
  if (c.docs.empty()) return doc;
  const int Tq = static_cast<int>(c.q_pos.size());
  for (int b = 0; b < c.B; b++) {
    std::vector<int> lens = c.docs;
    std::rotate(lens.begin(), lens.begin() + b % lens.size(), lens.end());
    for (int i = 0; i < Tq; i++) {
      int start = 0;
      for (size_t d = 0; d < lens.size() && start + lens[d] <= c.q_pos[i]; d++) start += lens[d];
      doc.push_back(c.q_pos[i] - start);
    }
  }
  return doc;
}

k::AttentionBlock block_of(const Case& c, const std::vector<int32_t>& doc) {
  k::AttentionBlock a;
  a.B = c.B, a.NH = c.NH, a.KV = c.KV, a.HS = c.HS;
  a.Tq = static_cast<int>(c.q_pos.size()), a.q_begin = c.q_begin, a.q_end = c.q_end;
  a.Tk = static_cast<int>(c.k_pos.size()), a.k_begin = c.k_begin, a.k_end = c.k_end;
  a.q_pos = c.q_pos.data(), a.k_pos = c.k_pos.data();
  a.doc = doc.empty() ? nullptr : doc.data();
  return a;
}

template <typename T>
std::vector<T> pack_kv(const std::vector<T>& qkv, size_t rows, int NH, int KV, int HS) {
  const int Q = NH / KV, ld = (NH + 2 * KV) * HS, ldk = 2 * KV * HS;
  std::vector<T> kv(rows * ldk);
  for (size_t r = 0; r < rows; r++)
    for (int g = 0; g < KV; g++)
      for (int c = 0; c < 2 * HS; c++)
        kv[r * ldk + g * 2 * HS + c] = qkv[r * ld + (g * (Q + 2) + Q) * HS + c];
  return kv;
}

template <typename Kernel, typename... Args>
void launch_tiles(dim3 grid, Kernel kernel, Args... args) {
  emu::launch(grid, dim3(cu::kWarps * 32), kernel, args...);
}

// In: float, bf16 or fp16 (the emulation's to_float widens the 16-bit ones).
template <int HS, typename In>
void emulated_forward(float* out, float* lse, const In* qkv, const In* kv,
                      const k::AttentionBlock& a) {
  const float scale = static_cast<float>(1.0 / std::sqrt(double(HS)));
  launch_tiles(dim3((a.q_end - a.q_begin + cu::kRows - 1) / cu::kRows, a.B * a.NH),
               cu::attention_block_forward_kernel<In, HS>, out, lse, qkv, kv, a, scale);
}

template <int HS, typename In>
void emulated_backward(float* dqkv, float* dkv, const In* dout, const float* delta,
                       const float* lse, const In* qkv, const In* kv, const k::AttentionBlock& a) {
  const float scale = static_cast<float>(1.0 / std::sqrt(double(HS)));
  launch_tiles(dim3((a.q_end - a.q_begin + cu::kRows - 1) / cu::kRows, a.B * a.NH),
               cu::attention_block_backward_dq_kernel<In, HS>, dqkv, dout, delta, lse, qkv, kv, a,
               scale);
  launch_tiles(dim3((a.k_end - a.k_begin + cu::kRows - 1) / cu::kRows, a.B * a.KV),
               cu::attention_block_backward_dkv_kernel<In, HS>, dkv, dout, delta, lse, qkv, kv, a,
               scale);
}

std::vector<float> cpu_workspace(const k::AttentionBlock& a) {
  return std::vector<float>(k::attention_block_workspace_elems(a.Tq, a.Tk, a.HS) *
                            k::num_threads());
}

}  // namespace

class AttentionBlockEmulated : public QObject {
  Q_OBJECT

  // The block c against the CPU kernels, forward and backward, the kernels reading their inputs
  // (qkv, kv, dout) in T and the CPU those values widened.
  template <int HS, typename T = float>
  void check(const Case& c) {
    QCOMPARE(c.HS, HS);
    const int Tq = static_cast<int>(c.q_pos.size()), Tk = static_cast<int>(c.k_pos.size());
    const int ld = (c.NH + 2 * c.KV) * HS, C = c.NH * HS;
    const std::vector<int32_t> doc = doc_of(c);
    const k::AttentionBlock a = block_of(c, doc);
    const auto qkv_t = input_of<T>(random_floats(size_t(c.B) * Tq * ld, 1));
    const auto kv_t = input_of<T>(
        pack_kv(random_floats(size_t(c.B) * Tk * ld, 2), size_t(c.B) * Tk, c.NH, c.KV, HS));
    const auto dout_t = input_of<T>(random_floats(size_t(c.B) * Tq * C, 3));
    const std::vector<float>& qkv = qkv_t.wide;
    const std::vector<float>& kv = kv_t.wide;
    const std::vector<float>& dout = dout_t.wide;
    auto ws = cpu_workspace(a);

    // The state before the block: the queries' own causal diagonal (on the CPU), unless the block
    // is that diagonal; out 0 and lse -inf where no key was seen.
    std::vector<float> out0(size_t(c.B) * Tq * C, 0.0f), lse0(size_t(c.B) * c.NH * Tq, kNegInf);
    if (c.k_pos != c.q_pos) {
      const auto self_kv = pack_kv(qkv, size_t(c.B) * Tq, c.NH, c.KV, HS);
      k::AttentionBlock self = a;
      self.Tk = Tq, self.k_begin = 0, self.k_end = Tq, self.k_pos = c.q_pos.data();
      self.q_begin = 0, self.q_end = Tq;
      auto self_ws = cpu_workspace(self);
      k::attention_block_forward(out0.data(), lse0.data(), qkv.data(), self_kv.data(), self,
                                 self_ws.data());
    }

    std::vector<float> out = out0, lse = lse0, g_out = out0, g_lse = lse0;
    k::attention_block_forward(out.data(), lse.data(), qkv.data(), kv.data(), a, ws.data());
    emulated_forward<HS>(g_out.data(), g_lse.data(), qkv_t.in.data(), kv_t.in.data(), a);
    EXPECT_CLOSE("out", g_out, out, kTolerance);
    EXPECT_CLOSE("lse", g_lse, lse, kTolerance);
    for (int b = 0; b < c.B; b++)  // rows outside [q_begin, q_end) untouched
      for (int i = 0; i < Tq; i++) {
        if (i >= c.q_begin && i < c.q_end) continue;
        const size_t row = (size_t(b) * Tq + i) * C;
        QVERIFY2(std::memcmp(&g_out[row], &out0[row], C * sizeof(float)) == 0,
                 qPrintable(QString("out row %1 of sequence %2 was written").arg(i).arg(b)));
        for (int h = 0; h < c.NH; h++) {
          const size_t at = (size_t(b) * c.NH + h) * Tq + i;
          QVERIFY2(std::memcmp(&g_lse[at], &lse0[at], sizeof(float)) == 0,
                   qPrintable(QString("lse row %1 head %2 was written").arg(i).arg(h)));
        }
      }

    // Backward with the state after the block as the final one: delta = rowsum(dout * out).
    std::vector<float> delta(lse.size(), 0.0f);
    for (int b = 0; b < c.B; b++)
      for (int h = 0; h < c.NH; h++)
        for (int i = 0; i < Tq; i++) {
          double s = 0;
          for (int d = 0; d < HS; d++) {
            const size_t at = (size_t(b) * Tq + i) * C + size_t(h) * HS + d;
            s += double(dout[at]) * out[at];
          }
          delta[(size_t(b) * c.NH + h) * Tq + i] = float(s);
        }
    const auto dqkv0 = random_floats(qkv.size(), 4), dkv0 = random_floats(kv.size(), 5);
    std::vector<float> dqkv = dqkv0, dkv = dkv0, g_dqkv = dqkv0, g_dkv = dkv0;
    k::attention_block_backward(dqkv.data(), dkv.data(), dout.data(), delta.data(), lse.data(),
                                qkv.data(), kv.data(), a, ws.data());
    emulated_backward<HS>(g_dqkv.data(), g_dkv.data(), dout_t.in.data(), delta.data(), lse.data(),
                          qkv_t.in.data(), kv_t.in.data(), a);
    // The increments (the gradients added), compared; dqkv's key and value columns untouched.
    auto increment = [](std::vector<float> x, const std::vector<float>& x0) {
      for (size_t i = 0; i < x.size(); i++) x[i] -= x0[i];
      return x;
    };
    EXPECT_CLOSE("dqkv (added)", increment(g_dqkv, dqkv0), increment(dqkv, dqkv0), kTolerance);
    EXPECT_CLOSE("dkv (added)", increment(g_dkv, dkv0), increment(dkv, dkv0), kTolerance);
    const int Q = c.NH / c.KV;
    for (size_t r = 0; r < size_t(c.B) * Tq; r++)
      for (int g = 0; g < c.KV; g++) {
        const size_t at = r * ld + size_t(g * (Q + 2) + Q) * HS;
        QVERIFY2(std::memcmp(&g_dqkv[at], &dqkv0[at], 2 * HS * sizeof(float)) == 0,
                 qPrintable(QString("dqkv's key/value columns of row %1 were written").arg(r)));
      }
    // The block has work: some query sees some key (else the comparisons above prove little).
    const auto added = increment(dkv, dkv0);
    QVERIFY(std::any_of(added.begin(), added.end(), [](float x) { return x != 0.0f; }));
  }

  // 16-bit pack: the key and value columns copied bit for bit (what travels the forward's ring).
  template <typename T>
  void check_kv_pack() {
    const int NH = 4, KV = 2, HS = 64, rows = 7, ld = (NH + 2 * KV) * HS;
    const auto qkv = input_of<T>(random_floats(size_t(rows) * ld, 6)).in;
    const auto want = pack_kv(qkv, rows, NH, KV, HS);
    std::vector<T> kv(want.size(), cu::from_float<T>(std::nanf("")));
    emu::launch(dim3(3), dim3(64), cu::attention_kv_pack_kernel<T>, kv.data(), qkv.data(),
                want.size(), NH, KV, HS);
    QVERIFY(std::memcmp(kv.data(), want.data(), kv.size() * sizeof(T)) == 0);
  }
  // 16-bit row_dot: delta (fp32) against the CPU's on the widened values.
  template <typename T>
  void check_row_dot() {
    const int B = 2, T_ = 5, NH = 3, HS = 128;
    const auto dout = input_of<T>(random_floats(size_t(B) * T_ * NH * HS, 9));
    const auto out = input_of<T>(random_floats(dout.in.size(), 10));
    std::vector<float> want(size_t(B) * NH * T_), got(want.size(), std::nanf(""));
    k::attention_row_dot(want.data(), dout.wide.data(), out.wide.data(), B, T_, NH, HS);
    emu::launch(dim3(2), dim3(64), cu::attention_row_dot_kernel<T>, got.data(), dout.in.data(),
                out.in.data(), B, T_, NH, HS);
    EXPECT_CLOSE("delta", got, want, kTolerance);
  }

 private slots:
  void initTestCase() { k::set_num_threads(2); }

  // Zigzag CP 2, chunks of c = 24 rows: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  void causal_diagonal_block() {
    const auto pos = chunk_positions({0, 3}, 24);
    check<64>({2, 2, 2, 64, pos, pos, 0, 48, 0, 48});
  }
  void full_block() {  // every key earlier than every query (a later chunk against an earlier)
    check<64>({1, 2, 2, 64, iota_positions(70, 40), iota_positions(0, 70), 0, 40, 0, 70});
  }
  void half_block_second_query_chunk() {  // rank 0's second chunk against rank 1's (src > r)
    check<64>({2, 2, 2, 64, chunk_positions({0, 3}, 24), chunk_positions({1, 2}, 24), 24, 48, 0,
               48});
  }
  void half_block_first_key_chunk() {  // rank 1's queries against rank 0's first chunk (src < r)
    check<64>({2, 2, 2, 64, chunk_positions({1, 2}, 24), chunk_positions({0, 3}, 24), 0, 48, 0,
               24});
  }
  void grouped_query_heads_half_block() {
    check<64>({2, 4, 2, 64, chunk_positions({0, 3}, 20), chunk_positions({1, 2}, 20), 20, 40, 0,
               40});
  }
  void grouped_query_heads_diagonal() {
    const auto pos = chunk_positions({1, 2}, 20);
    check<64>({1, 4, 2, 64, pos, pos, 0, 40, 0, 40});
  }
  // Documents of 5, 30, 17, ... tokens over 96 positions: some rows of the half block see none
  // of its keys (their document starts after them), others only part.
  void packed_documents_diagonal() {
    const auto pos = chunk_positions({0, 3}, 24);
    check<64>({2, 2, 2, 64, pos, pos, 0, 48, 0, 48, {5, 30, 17, 1, 23, 20}});
  }
  void packed_documents_half_block() {
    check<64>({2, 4, 2, 64, chunk_positions({0, 3}, 24), chunk_positions({1, 2}, 24), 24, 48, 0,
               48, {5, 30, 17, 1, 23, 20}});
  }
  void head_size_128_half_block() {
    check<128>({1, 2, 1, 128, chunk_positions({1, 2}, 20), chunk_positions({0, 3}, 20), 0, 40, 0,
                20});
  }

  // The same blocks with 16-bit inputs (a 16-bit model's ring: Note [ring attention in 16 bits]).
  void bf16_causal_diagonal_block() {
    const auto pos = chunk_positions({0, 3}, 24);
    check<64, cu::bf16>({2, 2, 2, 64, pos, pos, 0, 48, 0, 48});
  }
  void bf16_full_block() {
    check<64, cu::bf16>({1, 2, 2, 64, iota_positions(70, 40), iota_positions(0, 70), 0, 40, 0, 70});
  }
  void bf16_grouped_query_heads_half_block() {
    check<64, cu::bf16>(
        {2, 4, 2, 64, chunk_positions({0, 3}, 20), chunk_positions({1, 2}, 20), 20, 40, 0, 40});
  }
  void bf16_packed_documents_half_block() {
    const auto q_pos = chunk_positions({0, 3}, 24), k_pos = chunk_positions({1, 2}, 24);
    check<64, cu::bf16>({2, 4, 2, 64, q_pos, k_pos, 24, 48, 0, 48, {5, 30, 17, 1, 23, 20}});
  }
  void bf16_head_size_128_half_block() {
    check<128, cu::bf16>(
        {1, 2, 1, 128, chunk_positions({1, 2}, 20), chunk_positions({0, 3}, 20), 0, 40, 0, 20});
  }
  void fp16_grouped_query_heads_diagonal() {
    const auto pos = chunk_positions({1, 2}, 20);
    check<64, cu::fp16>({1, 4, 2, 64, pos, pos, 0, 40, 0, 40});
  }
  void fp16_full_block() {
    check<64, cu::fp16>({1, 2, 2, 64, iota_positions(70, 40), iota_positions(0, 70), 0, 40, 0, 70});
  }
  void fp16_packed_documents_diagonal() {
    const auto pos = chunk_positions({0, 3}, 24);
    check<64, cu::fp16>({2, 2, 2, 64, pos, pos, 0, 48, 0, 48, {5, 30, 17, 1, 23, 20}});
  }
  void fp16_head_size_128_half_block() {
    check<128, cu::fp16>(
        {1, 2, 1, 128, chunk_positions({0, 3}, 20), chunk_positions({1, 2}, 20), 20, 40, 0, 40});
  }

  // A whole zigzag ring of CP 2 over T = 128 (both ranks' steps in turn) with the emulated
  // kernels (pack, fill, blocks, row_dot, accumulate, unpack) equals the CPU's causal attention on
  // the full sequence: out and dqkv (test_cuda_attention_block runs the same on a device).
  void ring_of_two_ranks_equals_full_attention() {
    const int B = 1, T = 128, NH = 4, KV = 2, HS = 64, c = T / 4;
    const int ld = (NH + 2 * KV) * HS, ldk = 2 * KV * HS, C = NH * HS, Tr = 2 * c;
    const auto qkv = random_floats(size_t(B) * T * ld, 13);
    const auto dout = random_floats(size_t(B) * T * C, 14);
    std::vector<float> out(size_t(B) * T * C), dqkv(qkv.size(), 0.0f);
    std::vector<float> probs(size_t(B) * NH * T * T);
    std::vector<float> ws(k::attention_workspace_elems(T, HS) * k::num_threads());
    k::attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH, 0.0f, 0, ws.data(), 0,
                         0, KV);
    k::attention_backward(dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, C, NH, 0.0f,
                          0, ws.data(), 0, 0, KV);
    auto take_rows = [&](const std::vector<float>& x, size_t width,
                         const std::vector<int32_t>& rows) {
      std::vector<float> got;
      for (int b = 0; b < B; b++)
        for (int32_t r : rows)
          got.insert(got.end(), x.begin() + (size_t(b) * T + r) * width,
                     x.begin() + (size_t(b) * T + r + 1) * width);
      return got;
    };
    const dim3 ops(2), threads(64);
    struct Rank {
      std::vector<int32_t> pos;
      std::vector<float> qkv, dout, kv, out, lse, delta, dqkv, dkv, tmp;
    };
    Rank rank[2];
    for (int r = 0; r < 2; r++) {
      Rank& R = rank[r];
      R.pos = chunk_positions({r, 3 - r}, c);
      R.qkv = take_rows(qkv, ld, R.pos);
      R.dout = take_rows(dout, C, R.pos);
      R.kv.resize(size_t(B) * Tr * ldk), R.out.resize(size_t(B) * Tr * C);
      R.lse.resize(size_t(B) * NH * Tr), R.delta.resize(R.lse.size());
      R.dqkv.resize(R.qkv.size()), R.dkv.resize(R.kv.size()), R.tmp.resize(R.kv.size());
      emu::launch(ops, threads, cu::attention_kv_pack_kernel<float>, R.kv.data(),
                  static_cast<const float*>(R.qkv.data()), R.kv.size(), NH, KV, HS);
      emu::launch(ops, threads, cu::fill_kernel, R.out.data(), R.out.size(), 0.0f);
      emu::launch(ops, threads, cu::fill_kernel, R.lse.data(), R.lse.size(), kNegInf);
      emu::launch(ops, threads, cu::fill_kernel, R.dqkv.data(), R.dqkv.size(), 0.0f);
      emu::launch(ops, threads, cu::fill_kernel, R.dkv.data(), R.dkv.size(), 0.0f);
    }
    auto block = [&](int r, int src) {  // Note [ring attention]'s blocks
      k::AttentionBlock a;
      a.B = B, a.NH = NH, a.KV = KV, a.HS = HS;
      a.Tq = Tr, a.q_begin = 0, a.q_end = Tr, a.Tk = Tr, a.k_begin = 0, a.k_end = Tr;
      a.q_pos = rank[r].pos.data(), a.k_pos = rank[src].pos.data();
      if (src < r) a.k_end = c;    // src's first chunk only
      if (src > r) a.q_begin = c;  // the second query chunk only
      return a;
    };
    for (int r = 0; r < 2; r++)
      for (int s = 0; s < 2; s++) {
        const int src = (r - s + 2) % 2;
        emulated_forward<HS>(rank[r].out.data(), rank[r].lse.data(), rank[r].qkv.data(),
                             rank[src].kv.data(), block(r, src));
      }
    for (int r = 0; r < 2; r++) {
      Rank& R = rank[r];
      emu::launch(ops, threads, cu::attention_row_dot_kernel<float>, R.delta.data(),
                  static_cast<const float*>(R.dout.data()), static_cast<const float*>(R.out.data()),
                  B, Tr, NH, HS);
      for (int s = 0; s < 2; s++) {  // each block's key gradient added where its keys live
        const int src = (r - s + 2) % 2;
        std::fill(R.tmp.begin(), R.tmp.end(), 0.0f);
        emulated_backward<HS>(R.dqkv.data(), R.tmp.data(), R.dout.data(), R.delta.data(),
                              R.lse.data(), R.qkv.data(), rank[src].kv.data(), block(r, src));
        emu::launch(ops, threads, cu::accumulate_kernel, rank[src].dkv.data(),
                    static_cast<const float*>(R.tmp.data()), R.tmp.size());
      }
    }
    for (int r = 0; r < 2; r++) {
      emu::launch(ops, threads, cu::attention_kv_unpack_kernel, rank[r].dqkv.data(),
                  static_cast<const float*>(rank[r].dkv.data()), rank[r].dkv.size(), NH, KV, HS);
      EXPECT_CLOSE("ring out", rank[r].out, take_rows(out, C, rank[r].pos), kTolerance);
      EXPECT_CLOSE("ring dqkv", rank[r].dqkv, take_rows(dqkv, ld, rank[r].pos), kTolerance);
    }
  }

  void kv_pack_and_unpack() {
    const int NH = 4, KV = 2, HS = 64, rows = 7, ld = (NH + 2 * KV) * HS;
    const auto qkv = random_floats(size_t(rows) * ld, 6);
    const auto want = pack_kv(qkv, rows, NH, KV, HS);
    std::vector<float> kv(want.size(), std::nanf(""));
    emu::launch(dim3(3), dim3(64), cu::attention_kv_pack_kernel<float>, kv.data(), qkv.data(),
                want.size(), NH, KV, HS);
    QVERIFY(std::memcmp(kv.data(), want.data(), kv.size() * sizeof(float)) == 0);
    // Unpack into a qkv of other values: its key and value columns become kv, the rest stays.
    const auto kv2 = random_floats(want.size(), 7);
    const auto other = random_floats(qkv.size(), 8);
    std::vector<float> back = other;
    emu::launch(dim3(3), dim3(64), cu::attention_kv_unpack_kernel, back.data(), kv2.data(),
                kv2.size(), NH, KV, HS);
    const int Q = NH / KV;
    for (int r = 0; r < rows; r++)
      for (int g = 0; g < KV; g++)
        for (int c = 0; c < (Q + 2) * HS; c++) {
          const size_t at = size_t(r) * ld + g * (Q + 2) * HS + c;
          const float expect =
              c < Q * HS ? other[at] : kv2[size_t(r) * 2 * KV * HS + g * 2 * HS + c - Q * HS];
          QVERIFY2(back[at] == expect, qPrintable(QString("qkv[%1] after unpack").arg(at)));
        }
  }

  void row_dot() {
    const int B = 2, T = 5, NH = 3, HS = 64;
    const auto dout = random_floats(size_t(B) * T * NH * HS, 9);
    const auto out = random_floats(dout.size(), 10);
    std::vector<float> want(size_t(B) * NH * T), got(want.size(), std::nanf(""));
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++) {
          double s = 0;
          for (int d = 0; d < HS; d++) {
            const size_t at = (size_t(b) * T + t) * NH * HS + h * HS + d;
            s += double(dout[at]) * out[at];
          }
          want[(size_t(b) * NH + h) * T + t] = float(s);
        }
    // 2 blocks of 2 warps for 30 rows: the grid-stride loop runs several times.
    emu::launch(dim3(2), dim3(64), cu::attention_row_dot_kernel<float>, got.data(), dout.data(),
                out.data(), B, T, NH, HS);
    EXPECT_CLOSE("delta", got, want, 1e-6);
  }

  void bf16_kv_pack() { check_kv_pack<cu::bf16>(); }
  void fp16_kv_pack() { check_kv_pack<cu::fp16>(); }

  void bf16_row_dot() { check_row_dot<cu::bf16>(); }
  void fp16_row_dot() { check_row_dot<cu::fp16>(); }

  void fill_and_accumulate() {
    std::vector<float> x(1000, 1.0f);
    emu::launch(dim3(2), dim3(64), cu::fill_kernel, x.data(), size_t(999), -2.5f);
    for (size_t i = 0; i < 999; i++) QCOMPARE(x[i], -2.5f);
    QCOMPARE(x[999], 1.0f);
    const auto a = random_floats(1000, 11), b = random_floats(1000, 12);
    std::vector<float> acc = a;
    emu::launch(dim3(2), dim3(64), cu::accumulate_kernel, acc.data(), b.data(), size_t(1000));
    for (size_t i = 0; i < acc.size(); i++) QCOMPARE(acc[i], a[i] + b[i]);
  }
};

QTEST_GUILESS_MAIN(AttentionBlockEmulated)
#include "test_attention_block_emulated.moc"
