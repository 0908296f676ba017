// ring_attention_worker: ring attention (parallel/ring_attention.h) on every rank of the world as
// one context-parallel group, against kernels.h's attention on the whole sequence in one
// process. Each rank draws the same whole-sequence qkv, doc positions and output gradient from
// one seed, keeps its rows (cp_split), runs the ring forward and backward, and the gathered
// (cp_gather) output and qkv gradient must equal the reference: 1e-12 in double, 2e-5 in float
// (relative above 1). Cases: grouped-query and per-head attention, packed documents, a float
// case, each on every copy of the CPU kernels this CPU runs; central finite differences of the
// double backward on a tiny case; the split itself and Megatron's per-step block selection.
// Run alone (a world of one: CP = 1, ring attention must equal plain attention) or under
// `mpirun -n 2|4` (tests/parallel/CMakeLists.txt). Mode `bench`: times forward + backward with
// and without the transfer overlapped (no check).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "device/cpu_device.h"
#include "device/ops.h"
#include "lattice/comm.h"
#include "lattice/cpu_isa.h"
#include "lattice/dtype.h"
#include "lattice/kernels.h"
#include "parallel/context_split.h"
#include "parallel/ring_attention.h"

namespace {

using lattice::Comm;
using lattice::RingAttention;
using lattice::Status;

// The ring on the CPU device (its memory is host memory, so the host vectors below serve as
// device buffers) with the CPU's op list for T.
template <typename T>
std::unique_ptr<RingAttention<T>> make_ring(Comm& cp, int B, int T_, int NH, int KV, int HS) {
  lattice::Device& device = lattice::host_device();
  auto made = RingAttention<T>::create(device, *device.ops<T>(), cp, B, T_, NH, KV, HS);
  if (!made) cp.abort("ring_attention_worker: " + made.status().message(), 1);
  return std::move(*made);
}

struct Case {
  std::string name;
  int B, c, NH, KV, HS;  // c: rows per chunk, T = 2 CP c
  bool packed;           // documents packed into each sequence (positions restart)
};

template <typename T>
std::vector<T> random_values(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(u(rng));
  return v;
}

// doc (B, T): each row's position in its document, documents of 1..T/3+1 rows.
std::vector<int32_t> random_documents(int B, int T, std::mt19937_64& rng) {
  std::vector<int32_t> doc(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; b++) {
    int pos = 0, left = 1 + static_cast<int>(rng() % (T / 3 + 1));
    for (int t = 0; t < T; t++) {
      doc[static_cast<size_t>(b) * T + t] = pos++;
      if (--left == 0) {
        pos = 0;
        left = 1 + static_cast<int>(rng() % (T / 3 + 1));
      }
    }
  }
  return doc;
}

class Checker {
 public:
  explicit Checker(Comm& comm) : comm_(comm) {}
  void ok(const std::string& what, const Status& s) {
    if (!s) comm_.abort("ring_attention_worker: " + what + ": " + s.message(), 1);
  }
  // got and want (n) agree within tol (relative above magnitude 1); names the first mismatch.
  template <typename T>
  void close(const std::string& what, const std::vector<T>& got, const std::vector<T>& want,
             double tol) {
    checks_++;
    double worst = 0;
    size_t bad = 0, first = got.size();
    for (size_t i = 0; i < got.size(); i++) {
      const double err = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])) /
                         std::max(1.0, std::abs(static_cast<double>(want[i])));
      worst = std::max(worst, std::isnan(err) ? INFINITY : err);
      if (!(err <= tol)) {
        if (bad++ == 0) first = i;
      }
    }
    if (bad > 0) {
      failures_++;
      std::fprintf(stderr,
                   "rank %d: %s: %zu of %zu elements differ; first [%zu] got %.17g want %.17g; "
                   "worst error %.3g > tolerance %.1g\n",
                   comm_.rank(), what.c_str(), bad, got.size(), first,
                   static_cast<double>(got[first]), static_cast<double>(want[first]), worst, tol);
    } else if (comm_.rank() == 0) {
      std::printf("  %-58s worst error %.2e (tolerance %.0e)\n", what.c_str(), worst, tol);
    }
  }
  void expect(const std::string& what, bool condition) {
    checks_++;
    if (!condition) {
      failures_++;
      std::fprintf(stderr, "rank %d: %s\n", comm_.rank(), what.c_str());
    }
  }
  int failures() const { return failures_; }
  int checks() const { return checks_; }

 private:
  Comm& comm_;
  int failures_ = 0, checks_ = 0;
};

// The whole-sequence reference (kernels.h's attention on one process): out (B, T, C) and dqkv.
template <typename T>
void reference(std::vector<T>& out, std::vector<T>& dqkv, const std::vector<T>& qkv,
               const std::vector<T>& dout, const int32_t* doc, const Case& k, int T_) {
  const int C = k.NH * k.HS;
  std::vector<T> lse(static_cast<size_t>(k.B) * k.NH * T_);
  std::vector<T> ws(lattice::kernels::attention_workspace_elems(T_, k.HS) *
                    lattice::kernels::num_threads());
  out.assign(static_cast<size_t>(k.B) * T_ * C, T(0));
  dqkv.assign(qkv.size(), T(0));
  lattice::kernels::attention_forward(out.data(), lse.data(), qkv.data(), k.B, T_, C, k.NH, 0.0f,
                                      0, ws.data(), 0, 0, k.KV, doc);
  lattice::kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), lse.data(), k.B, T_,
                                       C, k.NH, 0.0f, 0, ws.data(), 0, 0, k.KV, doc);
}

// Ring attention over `cp` of the whole-sequence qkv: out and dqkv gathered back to (B, T, ...).
template <typename T>
void ring(Checker& check, Comm& cp, std::vector<T>& out, std::vector<T>& dqkv,
          const std::vector<T>& qkv, const std::vector<T>& dout, const std::vector<int32_t>& doc,
          const Case& k, int T_) {
  const int CP = cp.size(), r = cp.rank(), Tl = T_ / CP, C = k.NH * k.HS;
  const size_t W = static_cast<size_t>(k.NH + 2 * k.KV) * k.HS;
  std::vector<T> qkv_l(static_cast<size_t>(k.B) * Tl * W),
      dout_l(static_cast<size_t>(k.B) * Tl * C);
  std::vector<T> out_l(dout_l.size()), dqkv_l(qkv_l.size()),
      lse(static_cast<size_t>(k.B) * k.NH * Tl);
  std::vector<int32_t> doc_l(static_cast<size_t>(k.B) * Tl);
  lattice::cp_split(qkv_l.data(), qkv.data(), k.B, T_, W, r, CP);
  lattice::cp_split(dout_l.data(), dout.data(), k.B, T_, C, r, CP);
  if (k.packed) lattice::cp_split(doc_l.data(), doc.data(), k.B, T_, 1, r, CP);
  auto ring_ptr = make_ring<T>(cp, k.B, T_, k.NH, k.KV, k.HS);
  RingAttention<T>& attention = *ring_ptr;
  const int32_t* d = k.packed ? doc_l.data() : nullptr;
  check.ok(k.name + " forward", attention.forward(out_l.data(), lse.data(), qkv_l.data(), d));
  check.ok(k.name + " backward", attention.backward(dqkv_l.data(), dout_l.data(), qkv_l.data(),
                                                    out_l.data(), lse.data(), d));
  out.assign(static_cast<size_t>(k.B) * T_ * C, T(0));
  dqkv.assign(qkv.size(), T(0));
  check.ok(k.name + " gather out", lattice::cp_gather(cp, out.data(), out_l.data(), k.B, T_, C));
  check.ok(k.name + " gather dqkv", lattice::cp_gather(cp, dqkv.data(), dqkv_l.data(), k.B, T_, W));
}

template <typename T>
void check_case(Checker& check, Comm& cp, const Case& k, double tol) {
  const int T_ = 2 * cp.size() * k.c, C = k.NH * k.HS;
  std::mt19937_64 rng(1234 + k.c * 7 + k.KV);
  const std::vector<T> qkv =
      random_values<T>(static_cast<size_t>(k.B) * T_ * (k.NH + 2 * k.KV) * k.HS, rng);
  const std::vector<T> dout = random_values<T>(static_cast<size_t>(k.B) * T_ * C, rng);
  const std::vector<int32_t> doc = random_documents(k.B, T_, rng);
  std::vector<T> out_ref, dqkv_ref, out, dqkv;
  reference(out_ref, dqkv_ref, qkv, dout, k.packed ? doc.data() : nullptr, k, T_);
  ring(check, cp, out, dqkv, qkv, dout, doc, k, T_);
  const std::string tag =
      k.name + " (T " + std::to_string(T_) + ", CP " + std::to_string(cp.size()) + ")";
  check.close(tag + " out", out, out_ref, tol);
  check.close(tag + " dqkv", dqkv, dqkv_ref, tol);
}

// dtype.h's conversions under one name per direction.
template <typename H>
H round_to(float x) {
  if constexpr (std::is_same_v<H, lattice::bf16>)
    return lattice::to_bf16(x);
  else
    return lattice::to_fp16(x);
}
float widen(lattice::bf16 x) {
  return lattice::from_bf16(x);
}
float widen(lattice::fp16 x) {
  return lattice::from_fp16(x);
}
template <typename H>
uint16_t bits_of(H x) {
  return x.bits;
}

// Note [ring attention in 16 bits]: a bf16 or fp16 ring on the CPU is the float ring run on the
// widened inputs, rounded at its two ends. This rank's qkv and dout are drawn in float and
// rounded to H; the 16-bit ring runs on them and the float ring on their widened values (its
// backward given the widened 16-bit output, the out the 16-bit ring's delta is taken from). The
// 16-bit out and dqkv must be the float ones rounded, and the log-sum-exps equal, bit for bit.
template <typename H>
void check_16bit_case(Checker& check, Comm& cp, const Case& k, const char* type) {
  const int T_ = 2 * cp.size() * k.c, Tl = T_ / cp.size(), C = k.NH * k.HS;
  const size_t rows = static_cast<size_t>(k.B) * Tl,
               W = static_cast<size_t>(k.NH + 2 * k.KV) * k.HS;
  std::mt19937_64 rng(4321 + cp.rank());
  std::vector<float> qkv = random_values<float>(rows * W, rng),
                     dout = random_values<float>(rows * C, rng);
  std::vector<H> qkv16(qkv.size()), dout16(dout.size()), out16(dout.size()), dqkv16(qkv.size());
  for (size_t i = 0; i < qkv.size(); i++) qkv16[i] = round_to<H>(qkv[i]);
  for (size_t i = 0; i < dout.size(); i++) dout16[i] = round_to<H>(dout[i]);
  for (size_t i = 0; i < qkv.size(); i++) qkv[i] = widen(qkv16[i]);
  for (size_t i = 0; i < dout.size(); i++) dout[i] = widen(dout16[i]);
  std::vector<int32_t> doc(rows);
  for (size_t i = 0; i < rows; i++) doc[i] = static_cast<int32_t>(i % Tl % 5);
  const int32_t* d = k.packed ? doc.data() : nullptr;
  const std::string tag = std::string(type) + " " + k.name + " (T " + std::to_string(T_) + ", CP " +
                          std::to_string(cp.size()) + ")";

  std::vector<float> lse16(static_cast<size_t>(k.B) * k.NH * Tl), lse(lse16.size());
  auto ring16 = make_ring<H>(cp, k.B, T_, k.NH, k.KV, k.HS);
  check.ok(tag + " forward", ring16->forward(out16.data(), lse16.data(), qkv16.data(), d));
  check.ok(tag + " backward", ring16->backward(dqkv16.data(), dout16.data(), qkv16.data(),
                                               out16.data(), lse16.data(), d));
  std::vector<float> out(dout.size()), dqkv(qkv.size());
  auto ring32 = make_ring<float>(cp, k.B, T_, k.NH, k.KV, k.HS);
  check.ok(tag + " float forward", ring32->forward(out.data(), lse.data(), qkv.data(), d));
  std::vector<float> out_rounded(out.size());
  for (size_t i = 0; i < out.size(); i++) out_rounded[i] = widen(out16[i]);
  check.ok(tag + " float backward", ring32->backward(dqkv.data(), dout.data(), qkv.data(),
                                                     out_rounded.data(), lse.data(), d));
  auto same_bits = [&](const std::string& what, const std::vector<H>& got,
                       const std::vector<float>& want) {
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); i++)
      differ += bits_of(got[i]) != bits_of(round_to<H>(want[i])) ? 1 : 0;
    check.expect("rank " + std::to_string(cp.rank()) + ": " + tag + " " + what + ": " +
                     std::to_string(differ) + " of " + std::to_string(got.size()) +
                     " elements are not the float ring's rounded",
                 differ == 0);
  };
  same_bits("out", out16, out);
  same_bits("dqkv", dqkv16, dqkv);
  check.expect("rank " + std::to_string(cp.rank()) + ": " + tag +
                   " log-sum-exps differ from the float ring's",
               std::memcmp(lse16.data(), lse.data(), lse.size() * sizeof(float)) == 0);
  // And the rounding is not vacuous: the float ring's values are not all representable in H.
  size_t inexact = 0;
  for (float x : out) inexact += widen(round_to<H>(x)) != x ? 1 : 0;
  check.expect(tag + ": every float output is exact in 16 bits, the test compares nothing",
               inexact > 0);
}

// Central differences of L = sum(w * out) over every element of the whole qkv, in double.
void check_finite_differences(Checker& check, Comm& cp) {
  const Case k{"finite differences", 1, 2, 2, 1, 2, false};
  const int T_ = 2 * cp.size() * k.c, CP = cp.size(), r = cp.rank(), Tl = T_ / CP;
  const int C = k.NH * k.HS, W = (k.NH + 2 * k.KV) * k.HS;
  std::mt19937_64 rng(99);
  std::vector<double> qkv = random_values<double>(static_cast<size_t>(T_) * W, rng);
  const std::vector<double> w = random_values<double>(static_cast<size_t>(T_) * C, rng);
  std::vector<double> out, dqkv;
  ring(check, cp, out, dqkv, qkv, w, {}, k, T_);
  auto ring_ptr = make_ring<double>(cp, 1, T_, k.NH, k.KV, k.HS);
  RingAttention<double>& attention = *ring_ptr;
  std::vector<double> qkv_l(static_cast<size_t>(Tl) * W), out_l(static_cast<size_t>(Tl) * C);
  std::vector<double> lse(static_cast<size_t>(k.NH) * Tl);
  auto loss = [&]() {
    lattice::cp_split(qkv_l.data(), qkv.data(), 1, T_, W, r, CP);
    check.ok("finite differences forward",
             attention.forward(out_l.data(), lse.data(), qkv_l.data(), nullptr));
    double sum = 0;
    for (int t = 0; t < Tl; t++)
      for (int i = 0; i < C; i++)
        sum += out_l[static_cast<size_t>(t) * C + i] *
               w[static_cast<size_t>(lattice::cp_global_row(t, T_, r, CP)) * C + i];
    check.ok("finite differences all_reduce",
             cp.all_reduce(&sum, 1, lattice::DType::kFloat64, lattice::ReduceOp::kSum));
    return sum;
  };
  const double eps = 1e-5;
  std::vector<double> numeric(qkv.size());
  for (size_t i = 0; i < qkv.size(); i++) {
    const double x = qkv[i];
    qkv[i] = x + eps;
    const double up = loss();
    qkv[i] = x - eps;
    const double down = loss();
    qkv[i] = x;
    numeric[i] = (up - down) / (2 * eps);
  }
  check.close(
      "finite differences of dqkv (T " + std::to_string(T_) + ", CP " + std::to_string(CP) + ")",
      dqkv, numeric, 1e-7);
}

// The split: positions and their inverse (cp_local_row), split then gather, and the error of a
// length that does not split.
void check_split(Checker& check, Comm& cp) {
  const int CP = cp.size(), T_ = 2 * CP * 3, B = 2;
  std::vector<int32_t> full(static_cast<size_t>(B) * T_ * 2);
  for (size_t i = 0; i < full.size(); i++) full[i] = static_cast<int32_t>(i);
  std::vector<int32_t> local(full.size() / CP), back(full.size(), -1);
  lattice::cp_split(local.data(), full.data(), B, T_, 2, cp.rank(), CP);
  // Megatron's zigzag: rank r's rows are chunks r and 2 CP - 1 - r of 3 rows.
  std::vector<int32_t> pos(T_ / CP);
  lattice::cp_positions(pos.data(), T_, cp.rank(), CP);
  for (int t = 0; t < T_ / CP; t++) {
    const int chunk = t < 3 ? cp.rank() : 2 * CP - 1 - cp.rank();
    check.expect("cp_positions[" + std::to_string(t) + "] = " + std::to_string(pos[t]) + ", want " +
                     std::to_string(chunk * 3 + t % 3),
                 pos[t] == chunk * 3 + t % 3);
    check.expect("cp_split row " + std::to_string(t) + " holds global row " +
                     std::to_string(local[static_cast<size_t>(t) * 2] / 2),
                 local[static_cast<size_t>(t) * 2] == pos[t] * 2 &&
                     local[(static_cast<size_t>(T_ / CP) + t) * 2 + 1] == (T_ + pos[t]) * 2 + 1);
  }
  // cp_local_row inverts cp_positions: each global row is one local row here, or -1 where
  // another rank holds it (T_ / CP of the T_ rows are this rank's).
  int held = 0;
  for (int g = 0; g < T_; g++) {
    const int l = lattice::cp_local_row(g, T_, cp.rank(), CP);
    const bool mine = l >= 0 && l < T_ / CP && pos[l] == g;
    held += mine ? 1 : 0;
    check.expect("cp_local_row(" + std::to_string(g) + ") = " + std::to_string(l) + " on CP rank " +
                     std::to_string(cp.rank()),
                 mine || (l == -1 && std::find(pos.begin(), pos.end(), g) == pos.end()));
  }
  check.expect("cp_local_row finds T / CP rows: " + std::to_string(held), held == T_ / CP);
  check.ok("cp_gather", lattice::cp_gather(cp, back.data(), local.data(), B, T_, 2));
  check.expect("cp_gather(cp_split(x)) == x", back == full);
  const Status bad = lattice::check_context_split(10, 4);
  check.expect("check_context_split(10, 4) refuses: " + bad.message(),
               !bad && bad.message().find("--context-parallel-size 4") != std::string::npos);
}

// Megatron's load-balanced ring: step 0 computes the causal diagonal (3 of the 4 chunk pairs),
// every later step exactly half of a full block: both query chunks against the first key chunk
// of a lower rank, or the second query chunk against both key chunks of a higher rank. So every
// rank computes 3 c^2 + (CP - 1) 2 c^2 scores per head, the same on every rank.
void check_load_balance(Checker& check, Comm& cp) {
  const int CP = cp.size(), r = cp.rank(), c = 4, T_ = 2 * CP * c;
  auto ring_ptr = make_ring<double>(cp, 1, T_, 2, 1, 4);
  RingAttention<double>& attention = *ring_ptr;
  long total = 0;
  for (int s = 0; s < CP; s++) {
    const int src = (r - s + CP) % CP;
    std::string got;
    long scores = 0;
    for (const auto& b : attention.blocks_against(src, nullptr)) {
      got += "q[" + std::to_string(b.q_begin) + "," + std::to_string(b.q_end) + ")xk[" +
             std::to_string(b.k_begin) + "," + std::to_string(b.k_end) + ") ";
      scores += static_cast<long>(b.q_end - b.q_begin) * (b.k_end - b.k_begin);
    }
    const std::string want = s == 0    ? "q[0,4)xk[0,4) q[4,8)xk[0,8) "
                             : src < r ? "q[0,8)xk[0,4) "
                                       : "q[4,8)xk[0,8) ";
    check.expect("rank " + std::to_string(r) + " step " + std::to_string(s) + " (keys of rank " +
                     std::to_string(src) + ") computes " + got + "; want " + want,
                 got == want && scores == (s == 0 ? 3 : 2) * c * c);
    total += scores;
  }
  check.expect("rank " + std::to_string(r) + " computes " + std::to_string(total) + " scores",
               total == 3L * c * c + (CP - 1) * 2L * c * c);
}

int run_checks(Comm& cp) {
  Checker check(cp);
  if (cp.rank() == 0) std::printf("ring attention over %d rank(s)\n", cp.size());
  check_split(check, cp);
  check_load_balance(check, cp);
  // Every copy of the kernels this CPU runs (Note [CPU dispatch]); the same ISA on every rank.
  for (lattice::kernels::CpuIsa isa : lattice::kernels::kAllCpuIsas) {
    if (!lattice::kernels::set_cpu_isa(isa)) continue;
    const std::string on = std::string(" ") + lattice::kernels::cpu_isa_name(isa);
    check_case<double>(check, cp, {"double GQA 4 heads / 2 kv" + on, 2, 3, 4, 2, 8, false}, 1e-12);
    check_case<double>(check, cp, {"double MHA 2 heads" + on, 1, 2, 2, 2, 4, false}, 1e-12);
    check_case<double>(check, cp, {"double GQA packed documents" + on, 2, 4, 4, 2, 4, true}, 1e-12);
    // 80 rows a rank: the block kernel's query rows in two blocks (kAttentionRowBlock), the
    // whole-sequence reference's in several.
    check_case<double>(check, cp, {"double GQA packed, 80 rows a rank" + on, 1, 40, 4, 2, 4, true},
                       1e-12);
    check_case<float>(check, cp, {"float GQA 8 heads / 2 kv" + on, 2, 16, 8, 2, 16, false}, 2e-5);
    check_case<float>(check, cp, {"float MHA packed documents" + on, 1, 8, 2, 2, 8, true}, 2e-5);
  }
  lattice::kernels::set_cpu_isa(lattice::kernels::best_cpu_isa());
  check_16bit_case<lattice::bf16>(check, cp, {"GQA 8 heads / 2 kv", 2, 8, 8, 2, 16, false}, "bf16");
  check_16bit_case<lattice::bf16>(check, cp, {"packed documents", 1, 4, 2, 2, 8, true}, "bf16");
  check_16bit_case<lattice::fp16>(check, cp, {"GQA 4 heads / 1 kv", 2, 8, 4, 1, 16, false}, "fp16");
  check_finite_differences(check, cp);
  int failures = check.failures();
  check.ok("failure count",
           cp.all_reduce(&failures, 1, lattice::DType::kInt32, lattice::ReduceOp::kSum));
  if (cp.rank() == 0)
    std::printf("%d checks per rank, %d failures over all ranks\n", check.checks(), failures);
  return failures == 0 ? 0 : 1;
}

// Forward + backward of one float layer, overlapped and not, a few times each.
int run_bench(Comm& cp, int T_) {
  const Case k{"bench", 1, T_ / (2 * cp.size()), 8, 8, 64, false};
  const int Tl = T_ / cp.size(), C = k.NH * k.HS, W = (k.NH + 2 * k.KV) * k.HS;
  std::mt19937_64 rng(5);
  const std::vector<float> qkv = random_values<float>(static_cast<size_t>(Tl) * W, rng);
  const std::vector<float> dout = random_values<float>(static_cast<size_t>(Tl) * C, rng);
  std::vector<float> out(dout.size()), dqkv(qkv.size()), lse(static_cast<size_t>(k.NH) * Tl);
  auto ring_ptr = make_ring<float>(cp, 1, T_, k.NH, k.KV, k.HS);
  RingAttention<float>& attention = *ring_ptr;
  Checker check(cp);
  for (bool overlap : {true, false, true, false}) {
    attention.set_overlap(overlap);
    attention.reset_times();
    check.ok("barrier", cp.barrier());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; i++) {
      check.ok("forward", attention.forward(out.data(), lse.data(), qkv.data(), nullptr));
      check.ok("backward", attention.backward(dqkv.data(), dout.data(), qkv.data(), out.data(),
                                              lse.data(), nullptr));
    }
    check.ok("barrier", cp.barrier());
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (cp.rank() == 0)
      std::printf("CP %d T %d overlap %-3s: %.3f s per fwd+bwd, compute %.3f s, waiting %.3f s\n",
                  cp.size(), T_, overlap ? "on" : "off", wall / 3,
                  attention.times().compute_seconds / 3, attention.times().wait_seconds / 3);
  }
  return 0;
}

}  // namespace

// ring_attention_worker check | bench [seq_length]
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode != "check" && mode != "bench") {
    std::fprintf(stderr, "usage: ring_attention_worker check | bench [seq_length]\n");
    return 2;
  }
  auto world = lattice::make_world_comm();
  if (!world) {
    std::fprintf(stderr, "ring_attention_worker: %s\n", world.status().message().c_str());
    return 2;
  }
  const int code = mode == "check"
                       ? run_checks(*world.value())
                       : run_bench(*world.value(), argc > 2 ? std::atoi(argv[2]) : 2048);
  world.value().reset();
  lattice::finalize_comm();
  return code;
}
