// Packed sequences (Note [packed sequences] in engine/src/model/gpt_layer.cpp, issue 24): with
// positions (B, T) the attention, the position embedding and RoPE treat each packed document as
// if it ran alone. Attention over a packed sequence equals attention over each document by itself
// (forward and backward, the per-head layout and grouped keys, a sequence longer than a row
// block), its backward agrees with finite differences (with dropout too), and the position
// embedding reads and scatters wpe by position. In double precision, once per copy of the
// kernels (Note [CPU dispatch]).
#include <QtTest/QtTest>

#include <cmath>

#include "common/cpu_isa_rows.h"
#include "common/grad_check.h"
#include "lattice/kernels.h"

using lattice::testing::check_gradient;
using lattice::testing::dot;
using lattice::testing::random_vector;
namespace k = lattice::kernels;

namespace {

// "" when every |a[i] - b[i]| <= tol * (1 + |b[i]|), else the first disagreement.
QString differs(const char* tensor, const std::vector<double>& a, const std::vector<double>& b,
                double tol) {
  if (a.size() != b.size())
    return QString("%1: %2 vs %3 elements").arg(tensor).arg(a.size()).arg(b.size());
  for (size_t i = 0; i < a.size(); i++)
    if (!(std::abs(a[i] - b[i]) <= tol * (1 + std::abs(b[i]))))
      return QString("%1[%2]: %3, expected %4 (tolerance %5)")
          .arg(tensor)
          .arg(i)
          .arg(a[i], 0, 'g', 10)
          .arg(b[i], 0, 'g', 10)
          .arg(tol);
  return {};
}

#define VERIFY_CLOSE(tensor, a, b, tol)             \
  do {                                              \
    const QString why = differs(tensor, a, b, tol); \
    QVERIFY2(why.isEmpty(), qPrintable(why));       \
  } while (0)

// positions (B, T) of sequences packed from documents of the given lengths (each sequence's
// lengths sum to T).
std::vector<int32_t> packed_positions(const std::vector<std::vector<int>>& lengths) {
  std::vector<int32_t> pos;
  for (const auto& sequence : lengths)
    for (int len : sequence)
      for (int p = 0; p < len; p++) pos.push_back(p);
  return pos;
}

}  // namespace

class PackedSequences : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { k::set_num_threads(2); }
  void initTestCase_data() { lattice::testing::add_cpu_isa_rows(); }
  void init() {
    const QString unavailable = lattice::testing::select_row_isa();
    if (!unavailable.isEmpty()) QSKIP(qPrintable(unavailable));
  }

  // Each document's rows of out and dqkv are those of the document run alone as a sequence of
  // its own length (whose probabilities are exactly the packed ones' block).
  void packed_attention_equals_documents_alone() {
    struct Case {
      int NH, KV, HS;
      std::vector<std::vector<int>> lengths;  // per sequence, summing to T
    };
    const std::vector<Case> cases = {
        {2, 2, 3, {{5, 1, 7}, {13}}},        // GPT-2's layout, one unpacked sequence
        {4, 2, 2, {{4, 4, 5}, {1, 1, 11}}},  // grouped keys and values
        {3, 1, 2, {{30, 45}, {2, 70, 3}}},   // one KV head, documents across row blocks
        // Blocks whose products start past key 0 (the keys of earlier documents skipped), one
        // of them at a document that starts exactly at the block.
        {2, 1, 3, {{10, 120, 20}, {64, 64, 22}}},
    };
    for (const Case& c : cases) {
      int T = 0;
      for (int len : c.lengths[0]) T += len;
      const int B = static_cast<int>(c.lengths.size()), C = c.NH * c.HS;
      const int W = (c.NH + 2 * c.KV) * c.HS;  // a row of qkv
      const std::vector<int32_t> pos = packed_positions(c.lengths);
      const auto qkv = random_vector(static_cast<size_t>(B) * T * W, 21);
      const auto dout = random_vector(static_cast<size_t>(B) * T * C, 22);
      std::vector<double> out(B * T * C), lse(static_cast<size_t>(B) * c.NH * T),
          dqkv(B * T * W, std::nan(""));  // the backward writes every element
      std::vector<double> ws(k::attention_workspace_elems(T, c.HS) * k::num_threads());
      k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, c.NH, 0.0f, 0, ws.data(),
                           0, 0, c.KV, pos.data());
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), B, T, C, c.NH, 0.0f,
                            0, ws.data(), 0, 0, c.KV, pos.data());
      std::vector<double> want_out(B * T * C), want_dqkv(B * T * W), want_lse(lse.size());
      for (int b = 0; b < B; b++) {
        int start = 0;
        for (int len : c.lengths[b]) {
          const size_t row0 = static_cast<size_t>(b) * T + start;
          const std::vector<double> q(qkv.begin() + row0 * W, qkv.begin() + (row0 + len) * W),
              d(dout.begin() + row0 * C, dout.begin() + (row0 + len) * C);
          std::vector<double> o(len * C), l(static_cast<size_t>(c.NH) * len), dq(len * W);
          std::vector<double> ws1(k::attention_workspace_elems(len, c.HS) * k::num_threads());
          k::attention_forward(o.data(), l.data(), q.data(), 1, len, C, c.NH, 0.0f, 0, ws1.data(),
                               0, 0, c.KV);
          k::attention_backward(dq.data(), d.data(), q.data(), l.data(), 1, len, C, c.NH, 0.0f, 0,
                                ws1.data(), 0, 0, c.KV);
          for (int h = 0; h < c.NH; h++)
            std::copy(l.begin() + h * len, l.begin() + (h + 1) * len,
                      want_lse.begin() + (static_cast<size_t>(b) * c.NH + h) * T + start);
          std::copy(o.begin(), o.end(), want_out.begin() + row0 * C);
          std::copy(dq.begin(), dq.end(), want_dqkv.begin() + row0 * W);
          start += len;
        }
      }
      VERIFY_CLOSE("packed attention out", out, want_out, 1e-12);
      VERIFY_CLOSE("packed attention dqkv", dqkv, want_dqkv, 1e-12);
      // No score crosses a document boundary: each row's log-sum-exp is its document's alone.
      VERIFY_CLOSE("packed attention log-sum-exps", lse, want_lse, 1e-12);
    }
  }

  // Null positions is the plain causal attention: bit for bit positions 0..T-1 of one document.
  void null_positions_is_one_document() {
    const int B = 2, T = 9, NH = 2, KV = 1, HS = 4, C = NH * HS, W = (NH + 2 * KV) * HS;
    const std::vector<int32_t> pos = packed_positions({{T}, {T}});
    const auto qkv = random_vector(B * T * W, 23);
    std::vector<double> a(B * T * C), b(B * T * C), pa(B * NH * T), pb(B * NH * T);
    std::vector<double> ws(k::attention_workspace_elems(T, HS) * k::num_threads());
    k::attention_forward(a.data(), pa.data(), qkv.data(), B, T, C, NH, 0.25f, 9, ws.data(), 0, 0,
                         KV, nullptr);
    k::attention_forward(b.data(), pb.data(), qkv.data(), B, T, C, NH, 0.25f, 9, ws.data(), 0, 0,
                         KV, pos.data());
    QVERIFY(a == b);
    QVERIFY(pa == pb);
  }

  void packed_attention_backward_matches_finite_differences() {
    const int NH = 4, KV = 2, HS = 3, C = NH * HS, W = (NH + 2 * KV) * HS;
    const std::vector<int32_t> pos = packed_positions({{2, 3, 1}, {1, 5}});
    const int B = 2, T = 6;
    for (float p : {0.0f, 0.25f}) {
      auto qkv = random_vector(B * T * W, 24);
      const auto dout = random_vector(B * T * C, 25);
      std::vector<double> out(B * T * C), lse(B * NH * T), dqkv(B * T * W);
      std::vector<double> ws(k::attention_workspace_elems(T, HS) * k::num_threads());
      auto loss = [&] {
        k::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, p, 5, ws.data(), 0,
                             0, KV, pos.data());
        return dot(out, dout);
      };
      loss();
      k::attention_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), B, T, C, NH, p, 5,
                            ws.data(), 0, 0, KV, pos.data());
      const std::string err = check_gradient(
          "packed attention qkv (dropout " + std::to_string(p) + ")", qkv, dqkv, loss);
      QVERIFY2(err.empty(), err.c_str());
    }
  }

  // out = wte[token] + wpe[position]; dwpe sums each position's rows, dwte each token's.
  void position_embedding_reads_and_scatters_by_position() {
    const int B = 2, T = 5, C = 3, V = 4;
    const std::vector<int32_t> tokens = {0, 3, 1, 1, 2, 2, 0, 3, 3, 1};
    const std::vector<int32_t> pos = packed_positions({{2, 3}, {1, 1, 3}});
    const auto wte = random_vector(V * C, 26), wpe = random_vector(T * C, 27);
    const auto dout = random_vector(B * T * C, 28);
    std::vector<double> out(B * T * C), dwte(V * C, 0.0), dwpe(T * C, 0.0);
    k::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, 0, V,
                         pos.data());
    k::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, 0, V,
                          pos.data());
    std::vector<double> want(B * T * C), want_dwte(V * C, 0.0), want_dwpe(T * C, 0.0);
    for (int n = 0; n < B * T; n++)
      for (int c = 0; c < C; c++) {
        want[n * C + c] = wte[tokens[n] * C + c] + wpe[pos[n] * C + c];
        want_dwte[tokens[n] * C + c] += dout[n * C + c];
        want_dwpe[pos[n] * C + c] += dout[n * C + c];
      }
    VERIFY_CLOSE("packed embedding out", out, want, 0);
    VERIFY_CLOSE("packed embedding dwte", dwte, want_dwte, 1e-15);
    VERIFY_CLOSE("packed embedding dwpe", dwpe, want_dwpe, 1e-15);
    QCOMPARE(dwpe[4 * C], 0.0);  // no document reaches position 4
  }
};

QTEST_APPLESS_MAIN(PackedSequences)
#include "test_packed_sequences.moc"
