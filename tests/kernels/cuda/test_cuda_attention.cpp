// The flash-style CUDA attention agrees with the CPU attention (which keeps log-sum-exps too)
// forward and backward: fp32 within 1e-5, bf16 and fp16 within 1e-2, at T = 1024 with head sizes 64
// and 128, at a T that is not a multiple of the 32-row tiles, and with attention dropout on a
// tensor-parallel rank's heads (the same mask as the CPU); and grouped-query attention (kernels.h's
// grouped layout: MQA and KV 2 of NH 4 or 8, the key and value read in place, their gradients
// summed over each group's query heads); and packed documents (positions: each query sees its own
// document, Note [packed sequences]). Output buffers are NaN-poisoned.
// Without a CUDA device the whole case is SKIPPED.
#include <QtTest/QtTest>

#include "common/cuda_test_support.h"
#include "lattice/kernels.h"

using namespace lattice::testing;
namespace k = lattice::kernels;

namespace {

struct Case {
  int B, T, NH, HS;
  float dropout = 0.0f;
  int head_offset = 0, total_heads = 0;
  int kv_heads = 0;  // query groups; 0: NH (GPT-2's per-head [q|k|v])
  // Lengths of the documents packed into every sequence (summing to T); empty: not packed.
  std::vector<int> documents = {};
};

// positions (B, T) of c.documents, or empty.
std::vector<int32_t> packed_positions(const Case& c) {
  std::vector<int32_t> pos;
  for (int b = 0; b < c.B && !c.documents.empty(); b++)
    for (int len : c.documents)
      for (int p = 0; p < len; p++) pos.push_back(p);
  return pos;
}

// Elements of qkv (B, T, (NH + 2 KV) HS).
size_t qkv_elems(const Case& c) {
  const int KV = c.kv_heads > 0 ? c.kv_heads : c.NH;
  return static_cast<size_t>(c.B) * c.T * (c.NH + 2 * KV) * c.HS;
}

struct CpuResult {
  std::vector<float> out, dqkv;
};

CpuResult cpu_attention(const Case& c, const std::vector<float>& qkv,
                        const std::vector<float>& dout, uint64_t key,
                        const std::vector<int32_t>& positions) {
  const int C = c.NH * c.HS;
  CpuResult r;
  r.out.resize(static_cast<size_t>(c.B) * c.T * C);
  r.dqkv.resize(qkv.size());
  std::vector<float> lse(static_cast<size_t>(c.B) * c.NH * c.T);
  std::vector<float> ws(k::attention_workspace_elems(c.T, c.HS) * k::num_threads());
  k::attention_forward(r.out.data(), lse.data(), qkv.data(), c.B, c.T, C, c.NH, c.dropout, key,
                       ws.data(), c.head_offset, c.total_heads, c.kv_heads,
                       positions.empty() ? nullptr : positions.data());
  k::attention_backward(r.dqkv.data(), dout.data(), qkv.data(), lse.data(), c.B, c.T, C, c.NH,
                        c.dropout, key, ws.data(), c.head_offset, c.total_heads, c.kv_heads,
                        positions.empty() ? nullptr : positions.data());
  return r;
}

}  // namespace

class CudaAttention : public QObject {
  Q_OBJECT
  std::unique_ptr<cu::Context> ctx_;

  void sync() {
    const std::string error = ctx_->synchronize();
    QVERIFY2(error.empty(), error.c_str());
  }

  void check_fp32(const Case& c) {
    const int C = c.NH * c.HS;
    const uint64_t key = 0xa77e;
    const auto qkv = random_floats(qkv_elems(c), 1);
    const auto dout = random_floats(static_cast<size_t>(c.B) * c.T * C, 2);
    const std::vector<int32_t> positions = packed_positions(c);
    const CpuResult cpu = cpu_attention(c, qkv, dout, key, positions);
    DeviceBuffer<float> d_qkv(qkv), d_dout(dout), d_out(cpu.out.size()), d_dqkv(qkv.size()),
        d_lse(static_cast<size_t>(c.B) * c.NH * c.T),
        d_ws(cu::attention_workspace_floats(c.B, c.T, c.NH));
    DeviceBuffer<int32_t> d_pos(positions.empty() ? std::vector<int32_t>{0} : positions);
    const int32_t* pos = positions.empty() ? nullptr : d_pos.get();
    cu::attention_forward(*ctx_, d_out.get(), d_lse.get(), d_qkv.get(), c.B, c.T, C, c.NH,
                          c.dropout, key, c.head_offset, c.total_heads, c.kv_heads, pos);
    cu::attention_backward(*ctx_, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(),
                           d_ws.get(), c.B, c.T, C, c.NH, c.dropout, key, c.head_offset,
                           c.total_heads, c.kv_heads, pos);
    sync();
    LATTICE_COMPARE("attention out", d_out.download(), cpu.out, kFp32Tolerance);
    LATTICE_COMPARE("attention dqkv", d_dqkv.download(), cpu.dqkv, kFp32Tolerance);
  }

  template <typename H>
  void check_half(const Case& c) {
    const int C = c.NH * c.HS;
    const std::string name = Half<H>::kName;
    auto qkv = random_floats(qkv_elems(c), 3);
    auto dout = random_floats(static_cast<size_t>(c.B) * c.T * C, 4);
    round_to<H>(qkv), round_to<H>(dout);
    const std::vector<int32_t> positions = packed_positions(c);
    const CpuResult cpu = cpu_attention(c, qkv, dout, 0, positions);
    DeviceBuffer<H> d_qkv(to_half<H>(qkv)), d_dout(to_half<H>(dout)), d_out(cpu.out.size()),
        d_dqkv(qkv.size());
    DeviceBuffer<float> d_lse(static_cast<size_t>(c.B) * c.NH * c.T),
        d_ws(cu::attention_workspace_floats(c.B, c.T, c.NH));
    DeviceBuffer<int32_t> d_pos(positions.empty() ? std::vector<int32_t>{0} : positions);
    const int32_t* pos = positions.empty() ? nullptr : d_pos.get();
    cu::attention_forward(*ctx_, d_out.get(), d_lse.get(), d_qkv.get(), c.B, c.T, C, c.NH,
                          c.dropout, 0, c.head_offset, c.total_heads, c.kv_heads, pos);
    cu::attention_backward(*ctx_, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(),
                           d_ws.get(), c.B, c.T, C, c.NH, c.dropout, 0, c.head_offset,
                           c.total_heads, c.kv_heads, pos);
    sync();
    LATTICE_COMPARE(name + " attention out", d_out.download(), cpu.out, Half<H>::kTolerance);
    LATTICE_COMPARE(name + " attention dqkv", d_dqkv.download(), cpu.dqkv, Half<H>::kTolerance);
  }

 private slots:
  void initTestCase() {
    LATTICE_REQUIRE_CUDA_DEVICE();
    k::set_num_threads(4);
    std::string error;
    ctx_ = cu::Context::create(&error);
    QVERIFY2(ctx_, error.c_str());
  }

  void fp32_short_sequence_matches_cpu() { check_fp32({2, 64, 2, 64}); }
  void fp32_ragged_sequence_matches_cpu() { check_fp32({2, 100, 3, 64}); }
  void fp32_t1024_head64_matches_cpu() { check_fp32({1, 1024, 2, 64}); }
  void fp32_t1024_head128_matches_cpu() { check_fp32({1, 1024, 2, 128}); }
  void fp32_dropout_on_tensor_parallel_heads_matches_cpu() {
    check_fp32({2, 96, 2, 64, 0.1f, /*head_offset=*/2, /*total_heads=*/4});
  }
  void bf16_t1024_head64_matches_cpu() { check_half<cu::bf16>({1, 1024, 2, 64}); }
  void bf16_t1024_head128_matches_cpu() { check_half<cu::bf16>({1, 1024, 2, 128}); }
  void bf16_ragged_sequence_matches_cpu() { check_half<cu::bf16>({2, 77, 2, 64}); }
  void fp16_t1024_head64_matches_cpu() { check_half<cu::fp16>({1, 1024, 2, 64}); }
  void fp16_t1024_head128_matches_cpu() { check_half<cu::fp16>({1, 1024, 2, 128}); }
  void fp16_ragged_sequence_matches_cpu() { check_half<cu::fp16>({2, 77, 2, 64}); }

  // Grouped-query attention: {B, T, NH, HS, dropout, head_offset, total_heads, kv_heads}.
  void fp32_grouped_kv1_ragged_sequence_matches_cpu() {
    check_fp32({2, 100, 4, 64, 0.0f, 0, 0, 1});
  }
  void fp32_grouped_kv2_t1024_head128_matches_cpu() {
    check_fp32({1, 1024, 4, 128, 0.0f, 0, 0, 2});
  }
  void fp32_grouped_dropout_on_tensor_parallel_heads_matches_cpu() {
    check_fp32({2, 96, 4, 64, 0.1f, /*head_offset=*/4, /*total_heads=*/8, /*kv_heads=*/2});
  }
  void bf16_grouped_kv2_t1024_head64_matches_cpu() {
    check_half<cu::bf16>({1, 1024, 8, 64, 0.0f, 0, 0, 2});
  }
  void bf16_grouped_kv1_ragged_sequence_matches_cpu() {
    check_half<cu::bf16>({2, 77, 4, 64, 0.0f, 0, 0, 1});
  }
  void bf16_grouped_dropout_on_tensor_parallel_heads_matches_cpu() {
    check_half<cu::bf16>({2, 96, 4, 64, 0.1f, 4, 8, 2});
  }
  void fp16_grouped_kv2_t1024_head128_matches_cpu() {
    check_half<cu::fp16>({1, 1024, 4, 128, 0.0f, 0, 0, 2});
  }
  void fp16_grouped_kv1_ragged_sequence_matches_cpu() {
    check_half<cu::fp16>({2, 77, 4, 128, 0.0f, 0, 0, 1});
  }

  // Packed documents: {..., documents}; T 1024 of documents from 1 to 500 tokens.
  void fp32_packed_documents_match_cpu() {
    check_fp32({2, 1024, 2, 64, 0.0f, 0, 0, 0, {1, 300, 3, 220, 500}});
  }
  void fp32_packed_grouped_dropout_match_cpu() {
    check_fp32({2, 300, 4, 128, 0.1f, 4, 8, 2, {40, 7, 253}});
  }
  void bf16_packed_documents_match_cpu() {
    check_half<cu::bf16>({2, 1024, 2, 64, 0.0f, 0, 0, 0, {1, 300, 3, 220, 500}});
  }
  void fp16_packed_grouped_head128_match_cpu() {
    check_half<cu::fp16>({2, 300, 4, 128, 0.0f, 0, 0, 2, {40, 7, 253}});
  }

  void kv_heads_not_dividing_the_heads_is_an_error() {
    DeviceBuffer<float> qkv(64 * (4 + 2 * 3) * 4), out(64 * 4 * 4), lse(4 * 4);
    std::string error;
    auto ctx = cu::Context::create(&error);
    QVERIFY2(ctx, error.c_str());
    cu::attention_forward(*ctx, out.get(), lse.get(), qkv.get(), 1, 4, 256, 4, 0.0f, 0, 0, 0, 3);
    const std::string got = ctx->synchronize();
    QVERIFY2(got.find("3 key/value heads do not divide 4 query heads") != std::string::npos,
             ("expected an error naming 3 key/value heads and 4 query heads, got: " + got).c_str());
  }
};

QTEST_GUILESS_MAIN(CudaAttention)
#include "test_cuda_attention.moc"
