// The CUDA kernels of the context-parallel ring (kernels/cuda/attention_block.cu) agree with the
// CPU kernels (kernels.h's attention_block_forward / _backward) block by block, fp32 within 1e-5
// (normwise): the causal diagonal, both half blocks of the zigzag ring (q_begin > 0, k_end < Tk),
// grouped query heads, packed documents, head sizes 64 and 128, 200-row blocks (not a multiple
// of the 32-row tiles). The forward merges into a state an earlier block left, rows outside the
// block stay bit for bit; the backward ADDS to NaN-free random gradients, dqkv's key and value
// columns untouched. And a whole CP 2 ring run on the device (pack, fill, the blocks, row_dot,
// accumulate, unpack) gives the output and the input gradient of the CPU's full causal attention.
// The blocks also on bf16 and fp16 inputs (fp32 outputs), against the CPU on the rounded inputs.
// Without a CUDA device the whole case is SKIPPED.
#include <QtTest/QtTest>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "common/cuda_test_support.h"
#include "lattice/kernels.h"

using namespace lattice::testing;
namespace k = lattice::kernels;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Case {
  int B, NH, KV, HS;
  std::vector<int32_t> q_pos, k_pos;
  int q_begin, q_end, k_begin, k_end;
  std::vector<int> docs = {};  // lengths of the packed documents over the global positions
};

// Positions of the zigzag chunks `chunks`, c rows each.
std::vector<int32_t> chunk_positions(std::initializer_list<int> chunks, int c) {
  std::vector<int32_t> pos;
  for (int ch : chunks)
    for (int p = 0; p < c; p++) pos.push_back(ch * c + p);
  return pos;
}

// doc (B, Tq) of c.docs (sequence b's list rotated by b), or empty.
std::vector<int32_t> doc_of(const Case& c) {
  std::vector<int32_t> doc;
  if (c.docs.empty()) return doc;
  for (int b = 0; b < c.B; b++) {
    std::vector<int> lens = c.docs;
    std::rotate(lens.begin(), lens.begin() + b % lens.size(), lens.end());
    for (int32_t p : c.q_pos) {
      int start = 0;
      for (size_t d = 0; d < lens.size() && start + lens[d] <= p; d++) start += lens[d];
      doc.push_back(p - start);
    }
  }
  return doc;
}

std::vector<float> pack_kv(const std::vector<float>& qkv, size_t rows, int NH, int KV, int HS) {
  const int Q = NH / KV, ld = (NH + 2 * KV) * HS, ldk = 2 * KV * HS;
  std::vector<float> kv(rows * ldk);
  for (size_t r = 0; r < rows; r++)
    for (int g = 0; g < KV; g++)
      for (int c = 0; c < 2 * HS; c++)
        kv[r * ldk + g * 2 * HS + c] = qkv[r * ld + (g * (Q + 2) + Q) * HS + c];
  return kv;
}

std::vector<float> minus(std::vector<float> x, const std::vector<float>& x0) {
  for (size_t i = 0; i < x.size(); i++) x[i] -= x0[i];
  return x;
}

// Rows `rows` of each sequence of x (B, T, width).
std::vector<float> take_rows(const std::vector<float>& x, int B, int T, size_t width,
                             const std::vector<int32_t>& rows) {
  std::vector<float> out;
  for (int b = 0; b < B; b++)
    for (int32_t r : rows) {
      const float* src = x.data() + (size_t(b) * T + r) * width;
      out.insert(out.end(), src, src + width);
    }
  return out;
}

}  // namespace

class CudaAttentionBlock : public QObject {
  Q_OBJECT
  std::unique_ptr<cu::Context> ctx_;

  void sync() {
    const std::string error = ctx_->synchronize();
    QVERIFY2(error.empty(), error.c_str());
  }

  // In: the type of what the blocks read (qkv, kv, dout); their outputs are float. A 16-bit In
  // rounds those inputs, and the CPU reference runs on the rounded values (Note [ring attention
  // in 16 bits]): the same fp32 arithmetic, so the fp32 tolerance.
  template <typename In = float>
  void check(const Case& c) {
    const int HS = c.HS, Tq = static_cast<int>(c.q_pos.size());
    const int Tk = static_cast<int>(c.k_pos.size());
    const int ld = (c.NH + 2 * c.KV) * HS, C = c.NH * HS;
    const std::vector<int32_t> doc = doc_of(c);
    k::AttentionBlock a;
    a.B = c.B, a.NH = c.NH, a.KV = c.KV, a.HS = HS;
    a.Tq = Tq, a.q_begin = c.q_begin, a.q_end = c.q_end;
    a.Tk = Tk, a.k_begin = c.k_begin, a.k_end = c.k_end;
    a.q_pos = c.q_pos.data(), a.k_pos = c.k_pos.data(), a.doc = doc.empty() ? nullptr : doc.data();
    auto qkv = random_floats(size_t(c.B) * Tq * ld, 1);
    auto kv = pack_kv(random_floats(size_t(c.B) * Tk * ld, 2), size_t(c.B) * Tk, c.NH, c.KV, HS);
    auto dout = random_floats(size_t(c.B) * Tq * C, 3);
    if constexpr (!std::is_same_v<In, float>) {
      round_to<In>(qkv);
      round_to<In>(kv);
      round_to<In>(dout);
    }
    std::vector<float> ws(k::attention_block_workspace_elems(Tq, Tk, HS) * k::num_threads());

    std::vector<float> out0(size_t(c.B) * Tq * C, 0.0f), lse0(size_t(c.B) * c.NH * Tq, kNegInf);
    if (c.k_pos != c.q_pos) {  // the state the queries' own diagonal leaves
      const auto self_kv = pack_kv(qkv, size_t(c.B) * Tq, c.NH, c.KV, HS);
      k::AttentionBlock self = a;
      self.Tk = Tq, self.k_begin = 0, self.k_end = Tq, self.k_pos = c.q_pos.data();
      self.q_begin = 0, self.q_end = Tq;
      std::vector<float> self_ws(k::attention_block_workspace_elems(Tq, Tq, HS) *
                                 k::num_threads());
      k::attention_block_forward(out0.data(), lse0.data(), qkv.data(), self_kv.data(), self,
                                 self_ws.data());
    }
    std::vector<float> out = out0, lse = lse0;
    k::attention_block_forward(out.data(), lse.data(), qkv.data(), kv.data(), a, ws.data());
    std::vector<float> delta(lse.size());
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
    std::vector<float> dqkv = dqkv0, dkv = dkv0;
    k::attention_block_backward(dqkv.data(), dkv.data(), dout.data(), delta.data(), lse.data(),
                                qkv.data(), kv.data(), a, ws.data());

    DeviceBuffer<In> d_qkv(compute_values<In>(qkv)), d_kv(compute_values<In>(kv)), d_dout(compute_values<In>(dout));
    DeviceBuffer<float> d_out(out0), d_lse(lse0), d_delta(delta), d_dqkv(dqkv0), d_dkv(dkv0),
        d_ws(std::max<size_t>(1, cu::attention_block_workspace_floats(c.B, c.NH, Tq, Tk, HS)));
    DeviceBuffer<int32_t> d_qpos(c.q_pos), d_kpos(c.k_pos),
        d_doc(doc.empty() ? std::vector<int32_t>{0} : doc);
    k::AttentionBlock g = a;
    g.q_pos = d_qpos.get(), g.k_pos = d_kpos.get(), g.doc = doc.empty() ? nullptr : d_doc.get();
    cu::attention_block_forward(*ctx_, d_out.get(), d_lse.get(), d_qkv.get(), d_kv.get(), g,
                                d_ws.get());
    cu::attention_block_backward(*ctx_, d_dqkv.get(), d_dkv.get(), d_dout.get(), d_delta.get(),
                                 d_lse.get(), d_qkv.get(), d_kv.get(), g, d_ws.get());
    sync();
    const auto g_out = d_out.download(), g_lse = d_lse.download();
    const auto g_dqkv = d_dqkv.download(), g_dkv = d_dkv.download();
    LATTICE_COMPARE("block out", g_out, out, kFp32Tolerance);
    LATTICE_COMPARE("block lse", g_lse, lse, kFp32Tolerance);
    LATTICE_COMPARE("block dqkv (added)", minus(g_dqkv, dqkv0), minus(dqkv, dqkv0),
                    kFp32Tolerance);
    LATTICE_COMPARE("block dkv (added)", minus(g_dkv, dkv0), minus(dkv, dkv0), kFp32Tolerance);
    for (int b = 0; b < c.B; b++)
      for (int i = 0; i < Tq; i++) {
        if (i >= c.q_begin && i < c.q_end) continue;
        const size_t row = (size_t(b) * Tq + i) * C;
        QVERIFY2(std::memcmp(&g_out[row], &out0[row], C * sizeof(float)) == 0,
                 "an out row outside [q_begin, q_end) was written");
      }
    const int Q = c.NH / c.KV;
    for (size_t r = 0; r < size_t(c.B) * Tq; r++)
      for (int kvh = 0; kvh < c.KV; kvh++) {
        const size_t at = r * ld + size_t(kvh * (Q + 2) + Q) * HS;
        QVERIFY2(std::memcmp(&g_dqkv[at], &dqkv0[at], 2 * HS * sizeof(float)) == 0,
                 "dqkv's key/value columns were written");
      }
  }

 private slots:
  void initTestCase() {
    LATTICE_REQUIRE_CUDA_DEVICE();
    k::set_num_threads(4);
    std::string error;
    ctx_ = cu::Context::create(&error);
    QVERIFY2(ctx_, error.c_str());
  }

  // Zigzag CP 2 with chunks of 100 rows: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  void causal_diagonal_block() {
    const auto pos = chunk_positions({0, 3}, 100);
    check({2, 2, 2, 64, pos, pos, 0, 200, 0, 200});
  }
  void half_block_second_query_chunk() {
    check({2, 4, 2, 128, chunk_positions({0, 3}, 100), chunk_positions({1, 2}, 100), 100, 200, 0,
           200});
  }
  void half_block_first_key_chunk() {
    check({2, 4, 2, 64, chunk_positions({1, 2}, 100), chunk_positions({0, 3}, 100), 0, 200, 0,
           100});
  }
  void packed_documents() {
    const auto pos = chunk_positions({0, 3}, 100);
    check({2, 4, 1, 128, pos, pos, 0, 200, 0, 200, {7, 120, 1, 90, 100, 82}});
    check({2, 4, 2, 64, pos, chunk_positions({1, 2}, 100), 100, 200, 0, 200,
           {7, 120, 1, 90, 100, 82}});
  }
  // 16-bit inputs (--bf16 / --fp16 context parallelism): the diagonal, a half block with packed
  // documents, both head sizes.
  void bf16_and_fp16_inputs() {
    const auto pos = chunk_positions({0, 3}, 100), other = chunk_positions({1, 2}, 100);
    check<cu::bf16>({2, 2, 2, 64, pos, pos, 0, 200, 0, 200});
    check<cu::bf16>({2, 4, 2, 128, pos, other, 100, 200, 0, 200, {7, 120, 1, 90, 100, 82}});
    check<cu::fp16>({2, 4, 1, 128, pos, pos, 0, 200, 0, 200, {7, 120, 1, 90, 100, 82}});
    check<cu::fp16>({2, 4, 2, 64, other, pos, 0, 200, 0, 100});
  }

  // A whole zigzag ring of CP 2 over T = 512 (both ranks' steps in turn on one device) equals
  // the CPU's causal attention on the full sequence: out and dqkv.
  void ring_of_two_ranks_equals_full_attention() {
    const int B = 2, T = 512, NH = 4, KV = 2, HS = 128, c = T / 4;
    const int ld = (NH + 2 * KV) * HS, ldk = 2 * KV * HS, C = NH * HS, Tr = 2 * c;
    const auto qkv = random_floats(size_t(B) * T * ld, 6);
    const auto dout = random_floats(size_t(B) * T * C, 7);
    std::vector<float> out(size_t(B) * T * C), dqkv(qkv.size(), 0.0f);
    std::vector<float> probs(size_t(B) * NH * T * T);
    std::vector<float> ws(k::attention_workspace_elems(T, HS) * k::num_threads());
    k::attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH, 0.0f, 0, ws.data(), 0,
                         0, KV);
    k::attention_backward(dqkv.data(), dout.data(), qkv.data(), probs.data(), B, T, C, NH, 0.0f,
                          0, ws.data(), 0, 0, KV);

    struct Rank {
      std::vector<int32_t> rows;
      std::unique_ptr<DeviceBuffer<float>> qkv, kv, dout, out, lse, delta, dqkv, dkv, tmp;
      std::unique_ptr<DeviceBuffer<int32_t>> pos;
    };
    Rank rank[2];
    for (int r = 0; r < 2; r++) {
      Rank& R = rank[r];
      R.rows = chunk_positions({r, 3 - r}, c);
      R.qkv = std::make_unique<DeviceBuffer<float>>(take_rows(qkv, B, T, ld, R.rows));
      R.dout = std::make_unique<DeviceBuffer<float>>(take_rows(dout, B, T, C, R.rows));
      R.kv = std::make_unique<DeviceBuffer<float>>(size_t(B) * Tr * ldk);
      R.out = std::make_unique<DeviceBuffer<float>>(size_t(B) * Tr * C);
      R.lse = std::make_unique<DeviceBuffer<float>>(size_t(B) * NH * Tr);
      R.delta = std::make_unique<DeviceBuffer<float>>(size_t(B) * NH * Tr);
      R.dqkv = std::make_unique<DeviceBuffer<float>>(size_t(B) * Tr * ld);
      R.dkv = std::make_unique<DeviceBuffer<float>>(size_t(B) * Tr * ldk);
      R.tmp = std::make_unique<DeviceBuffer<float>>(size_t(B) * Tr * ldk);
      R.pos = std::make_unique<DeviceBuffer<int32_t>>(R.rows);
      cu::attention_kv_pack(*ctx_, R.kv->get(), R.qkv->get(), size_t(B) * Tr, NH, KV, HS);
      cu::fill(*ctx_, R.out->get(), R.out->size(), 0.0f);
      cu::fill(*ctx_, R.lse->get(), R.lse->size(), kNegInf);
      cu::fill(*ctx_, R.dqkv->get(), R.dqkv->size(), 0.0f);
      cu::fill(*ctx_, R.dkv->get(), R.dkv->size(), 0.0f);
    }
    // The block of rank r's queries against rank src's keys (Note [ring attention]).
    auto block = [&](int r, int src) {
      k::AttentionBlock a;
      a.B = B, a.NH = NH, a.KV = KV, a.HS = HS;
      a.Tq = Tr, a.q_begin = 0, a.q_end = Tr, a.Tk = Tr, a.k_begin = 0, a.k_end = Tr;
      a.q_pos = rank[r].pos->get(), a.k_pos = rank[src].pos->get();
      if (src < r) a.k_end = c;    // src's first chunk only
      if (src > r) a.q_begin = c;  // the second query chunk only
      return a;
    };
    for (int r = 0; r < 2; r++)
      for (int s = 0; s < 2; s++) {
        const int src = (r - s + 2) % 2;
        cu::attention_block_forward(*ctx_, rank[r].out->get(), rank[r].lse->get(),
                                    rank[r].qkv->get(), rank[src].kv->get(), block(r, src),
                                    nullptr);
      }
    for (int r = 0; r < 2; r++) {
      Rank& R = rank[r];
      cu::attention_row_dot(*ctx_, R.delta->get(), R.dout->get(), R.out->get(), B, Tr, NH, HS);
      for (int s = 0; s < 2; s++) {  // each block's key gradient added where its keys live
        const int src = (r - s + 2) % 2;
        cu::fill(*ctx_, R.tmp->get(), R.tmp->size(), 0.0f);
        cu::attention_block_backward(*ctx_, R.dqkv->get(), R.tmp->get(), R.dout->get(),
                                     R.delta->get(), R.lse->get(), R.qkv->get(),
                                     rank[src].kv->get(), block(r, src), nullptr);
        cu::accumulate(*ctx_, rank[src].dkv->get(), R.tmp->get(), R.tmp->size());
      }
    }
    for (int r = 0; r < 2; r++)
      cu::attention_kv_unpack(*ctx_, rank[r].dqkv->get(), rank[r].dkv->get(), size_t(B) * Tr, NH,
                              KV, HS);
    sync();
    for (int r = 0; r < 2; r++) {
      const std::string name = "rank " + std::to_string(r) + " ";
      LATTICE_COMPARE(name + "out", rank[r].out->download(), take_rows(out, B, T, C, rank[r].rows),
                      kFp32Tolerance);
      LATTICE_COMPARE(name + "dqkv", rank[r].dqkv->download(),
                      take_rows(dqkv, B, T, ld, rank[r].rows), kFp32Tolerance);
    }
  }

  void unsupported_head_size_is_an_error() {
    std::string error;
    auto ctx = cu::Context::create(&error);
    QVERIFY2(ctx, error.c_str());
    DeviceBuffer<float> qkv(4 * 4 * 96), kv(4 * 2 * 96), out(4 * 2 * 96), lse(8);
    DeviceBuffer<int32_t> pos(std::vector<int32_t>{0, 1, 2, 3});
    k::AttentionBlock a;
    a.B = 1, a.NH = 2, a.KV = 1, a.HS = 96, a.Tq = 4, a.q_end = 4, a.Tk = 4, a.k_end = 4;
    a.q_pos = pos.get(), a.k_pos = pos.get();
    cu::attention_block_forward(*ctx, out.get(), lse.get(), qkv.get(), kv.get(), a, nullptr);
    const std::string got = ctx->synchronize();
    QVERIFY2(got.find("head size 96") != std::string::npos,
             ("expected an error naming head size 96, got: " + got).c_str());
  }
};

QTEST_GUILESS_MAIN(CudaAttentionBlock)
#include "test_cuda_attention_block.moc"
