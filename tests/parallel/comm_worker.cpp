// comm_worker: started by mpirun (tests/parallel/CMakeLists.txt, test_comm.cpp). Mode `check` runs
// every Comm operation on values each rank can compute alone (every DType, bf16 and fp16
// included) and names the op, rank, index, expected and got of any mismatch; `abort` and
// `sigkill` make rank 1 fail while the others block in a collective; `sigstop` and
// `sigstop-recv` stop rank 1 (SIGSTOP) while the others wait for it in an all_reduce, or rank 0
// in a recv from it, under a 2 s timeout; `sigstop-stream` stops rank 1 while the others wait
// for an all-reduce they queued on a CPU device's side stream. `check` also runs the
// stream-ordered calls (comm.h) on a CpuDevice's compute and side streams (Note [CPU stream
// order], device/cpu_device.h). Non-goal: performance (see the benchmarks).
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "device/cpu_device.h"
#include "lattice/comm.h"
#include "parallel/mpi_comm.h"
#include "parallel/staged_comm.h"

namespace {

using lattice::Comm;
using lattice::CpuDevice;
using lattice::DType;
using lattice::Event;
using lattice::ReduceOp;
using lattice::Status;
using lattice::Stream;

float widen(lattice::bf16 x) {
  return lattice::from_bf16(x);
}
float widen(lattice::fp16 x) {
  return lattice::from_fp16(x);
}
template <typename H>
H narrow(float x) {
  if constexpr (std::is_same_v<H, lattice::bf16>)
    return lattice::to_bf16(x);
  else
    return lattice::to_fp16(x);
}

class Checker {
 public:
  explicit Checker(Comm& comm) : comm_(comm) {}

  // A failed call leaves the ranks out of step, so the whole job ends at once.
  void ok(const std::string& op, const Status& status) {
    checks_++;
    if (!status) comm_.abort("comm_worker: " + op + " failed: " + status.message(), 1);
  }

  template <typename T>
  void equal(const std::string& op, size_t index, T expected, T got) {
    checks_++;
    if (expected == got) return;
    if (++failures_ > 20) return;  // the first ones tell the story
    std::ostringstream out;
    out << "comm_worker: FAIL " << op << ": rank " << comm_.rank() << " index " << index
        << ": expected " << +expected << " got " << +got << "\n";
    std::fputs(out.str().c_str(), stderr);
  }

  template <typename T>
  void equal_all(const std::string& op, const std::vector<T>& expected, const std::vector<T>& got,
                 size_t offset = 0) {
    for (size_t i = 0; i < expected.size(); i++)
      equal(op, offset + i, expected[i], got[offset + i]);
  }

  // 16-bit floats (lattice::bf16, lattice::fp16) are equal when their bits are, a NaN's
  // payload included; the message shows the values and the bits.
  template <typename H>
  void equal_half(const std::string& op, size_t index, H expected, H got) {
    checks_++;
    if (expected.bits == got.bits) return;
    if (++failures_ > 20) return;
    std::fprintf(stderr,
                 "comm_worker: FAIL %s: rank %d index %zu: expected %g (bits 0x%04x) got %g "
                 "(bits 0x%04x)\n",
                 op.c_str(), comm_.rank(), index, widen(expected), expected.bits, widen(got),
                 got.bits);
  }
  template <typename H>
  void equal_all_half(const std::string& op, const std::vector<H>& expected,
                      const std::vector<H>& got) {
    for (size_t i = 0; i < expected.size(); i++) equal_half(op, i, expected[i], got[i]);
  }

  void truth(const std::string& op, bool condition, const std::string& detail) {
    checks_++;
    if (condition) return;
    failures_++;
    std::fprintf(stderr, "comm_worker: FAIL %s: rank %d: %s\n", op.c_str(), comm_.rank(),
                 detail.c_str());
  }

  int failures() const { return failures_; }
  int checks() const { return checks_; }

 private:
  Comm& comm_;
  int failures_ = 0, checks_ = 0;
};

// Small integers, exact in every type. uint8 sums stay below 256 up to 4 ranks: an integer
// sum that overflows is undefined here (Open MPI 4.1's AVX reductions saturate instead of
// wrapping, open-mpi/ompi#8045).
template <typename T>
T value(int rank, size_t i) {
  const int modulus = std::is_same_v<T, uint8_t> ? 61 : 101;
  return static_cast<T>((static_cast<int>(i) * 7 + rank * 13) % modulus);
}

template <typename T>
void check_all_reduce(Comm& comm, Checker& c, const char* type_name, size_t n) {
  const int size = comm.size(), rank = comm.rank();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    const std::string name =
        std::string("all_reduce ") + (op == ReduceOp::kSum ? "sum " : "max ") + type_name;
    std::vector<T> data(n), expected(n, T(0));
    for (size_t i = 0; i < n; i++) data[i] = value<T>(rank, i);
    for (int q = 0; q < size; q++) {
      for (size_t i = 0; i < n; i++) {
        const T v = value<T>(q, i);
        expected[i] = op == ReduceOp::kSum ? T(expected[i] + v) : std::max(expected[i], v);
      }
    }
    c.ok(name, comm.all_reduce(data.data(), n, lattice::dtype_of<T>(), op));
    c.equal_all(name, expected, data);
  }
}

std::vector<size_t> uneven_counts(int size, size_t base) {
  std::vector<size_t> counts(size);
  for (int q = 0; q < size; q++) counts[q] = base + q * 3 + (q % 2) * 5;
  return counts;
}

size_t offset_of(const std::vector<size_t>& counts, int rank) {
  size_t offset = 0;
  for (int q = 0; q < rank; q++) offset += counts[q];
  return offset;
}

void check_reduce_scatter(Comm& comm, Checker& c, const std::vector<size_t>& counts, bool async) {
  const int size = comm.size(), rank = comm.rank();
  const std::string name = async ? "reduce_scatter_async" : "reduce_scatter";
  size_t total = 0;
  for (size_t n : counts) total += n;
  std::vector<float> send(total), recv(counts[rank], -1.0f), expected(counts[rank], 0.0f);
  for (size_t j = 0; j < total; j++) send[j] = value<float>(rank, j);
  const size_t own = offset_of(counts, rank);
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < counts[rank]; i++) expected[i] += value<float>(q, own + i);
  if (async) {
    c.ok(name,
         comm.reduce_scatter_async(send.data(), recv.data(), counts, DType::kFloat32)->wait());
  } else {
    c.ok(name, comm.reduce_scatter(send.data(), recv.data(), counts, DType::kFloat32));
  }
  c.equal_all(name, expected, recv);
}

void check_all_gather(Comm& comm, Checker& c, const std::vector<size_t>& counts, bool in_place,
                      bool async) {
  const int size = comm.size(), rank = comm.rank();
  const std::string name =
      std::string(async ? "all_gather_async" : "all_gather") + (in_place ? " in place" : "");
  size_t total = 0;
  for (size_t n : counts) total += n;
  const size_t own = offset_of(counts, rank);
  std::vector<int32_t> send(counts[rank]), recv(total, -1), expected(total);
  for (size_t i = 0; i < counts[rank]; i++) send[i] = rank * 1000 + static_cast<int32_t>(i);
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < counts[q]; i++)
      expected[offset_of(counts, q) + i] = q * 1000 + static_cast<int32_t>(i);
  const int32_t* from = send.data();
  if (in_place) {
    std::copy(send.begin(), send.end(), recv.begin() + own);
    from = recv.data() + own;
  }
  if (async) {
    c.ok(name, comm.all_gather_async(from, recv.data(), counts, DType::kInt32)->wait());
  } else {
    c.ok(name, comm.all_gather(from, recv.data(), counts, DType::kInt32));
  }
  c.equal_all(name, expected, recv);
}

// ---- all_to_all: unequal counts, zeros included, every bit carried ------------------------

// How many elements rank `from` sends rank `to` in round `seed`: unequal, zero for about a
// quarter of the pairs (a rank to itself included), `scale` times larger for the pieces check.
size_t a2a_count(int from, int to, int seed, size_t scale) {
  if ((from + 2 * to + seed) % 4 == 0) return 0;
  return scale * static_cast<size_t>((from * 5 + to * 3 + seed) % 7 + 1);
}

// The bits of element i of the block `from` sends `to`: arbitrary patterns (NaN payloads,
// denormals, negative zero) that an arithmetic path would change.
template <typename Bits>
Bits a2a_bits(int from, int to, size_t i) {
  const uint32_t h = static_cast<uint32_t>(from * 2654435761u) ^
                     static_cast<uint32_t>(to * 40503u) ^ static_cast<uint32_t>(i * 2246822519u);
  return static_cast<Bits>(h ^ (h >> 13));
}

// One all_to_all of `Bits`-wide elements moved as `type` (fp32 or bf16): blocking, async on a
// side stream, or on the compute stream.
template <typename Bits>
void check_all_to_all(Comm& comm, Checker& c, DType type, const char* type_name, int seed,
                      size_t scale, Stream* stream, CpuDevice* device) {
  const int size = comm.size(), rank = comm.rank();
  const std::string name = std::string("all_to_all ") + type_name + " round " +
                           std::to_string(seed) + (stream ? " on " + stream->name() : "");
  std::vector<size_t> send_counts(size), recv_counts(size);
  for (int p = 0; p < size; p++) {
    send_counts[p] = a2a_count(rank, p, seed, scale);
    recv_counts[p] = a2a_count(p, rank, seed, scale);
  }
  std::vector<Bits> send, expected;
  for (int p = 0; p < size; p++) {
    for (size_t i = 0; i < send_counts[p]; i++) send.push_back(a2a_bits<Bits>(rank, p, i));
    for (size_t i = 0; i < recv_counts[p]; i++) expected.push_back(a2a_bits<Bits>(p, rank, i));
  }
  std::vector<Bits> recv(expected.size(), Bits(0x5a5a));
  comm.reset_stats();
  if (stream) {
    c.ok(name, comm.all_to_all(send.data(), send_counts, recv.data(), recv_counts, type, *stream));
    device->wait(device->compute(), device->record(*stream));
  } else {
    c.ok(name, comm.all_to_all(send.data(), send_counts, recv.data(), recv_counts, type));
  }
  c.equal_all(name, expected, recv);
  c.equal(name + " stats all_to_all_bytes", 0, uint64_t{send.size() * sizeof(Bits)},
          comm.stats().all_to_all_bytes);
}

void check_all_to_all_rounds(Comm& comm, Checker& c, size_t scale) {
  for (int seed = 0; seed < 4; seed++) {
    check_all_to_all<uint32_t>(comm, c, DType::kFloat32, "fp32", seed, scale, nullptr, nullptr);
    check_all_to_all<uint16_t>(comm, c, DType::kBFloat16, "bf16", seed, scale, nullptr, nullptr);
  }
  // Nothing at all to move: every count zero.
  const std::vector<size_t> none(comm.size(), 0);
  float x = 0, y = 0;
  c.ok("all_to_all of nothing", comm.all_to_all(&x, none, &y, none, DType::kFloat32));
}

void check_all_to_all_refusals(Comm& comm, Checker& c) {
  float x = 0;
  const Status wrong = comm.all_to_all(&x, std::vector<size_t>(comm.size() + 1, 0), &x,
                                       std::vector<size_t>(comm.size(), 0), DType::kFloat32);
  c.truth("all_to_all with size()+1 send counts", !wrong, "was accepted");
}

void check_broadcast_and_gather(Comm& comm, Checker& c, size_t n) {
  const int size = comm.size(), rank = comm.rank(), root = size - 1;
  std::vector<double> data(n, 0.0), expected(n);
  for (size_t i = 0; i < n; i++) expected[i] = 3.0 * i + 7;
  if (rank == root) data = expected;
  c.ok("broadcast", comm.broadcast(data.data(), n, DType::kFloat64, root));
  c.equal_all("broadcast", expected, data);

  std::vector<int64_t> send(n), recv(rank == 0 ? n * size : 0, -1), all(n * size);
  for (size_t i = 0; i < n; i++) send[i] = (int64_t{1} << 40) + rank * 100 + int64_t(i);
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < n; i++) all[q * n + i] = (int64_t{1} << 40) + q * 100 + int64_t(i);
  c.ok("gather", comm.gather(send.data(), recv.data(), n, DType::kInt64, 0));
  if (rank == 0) c.equal_all("gather", all, recv);
}

// A ring: rank 0 sends first, every other rank receives first, so blocking calls never wait
// on each other in a circle.
void check_send_recv(Comm& comm, Checker& c, size_t n) {
  const int size = comm.size(), rank = comm.rank();
  if (size < 2) return;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  std::vector<float> out(n), in(n, -1.0f), expected(n);
  for (size_t i = 0; i < n; i++) {
    out[i] = value<float>(rank, i);
    expected[i] = value<float>(prev, i);
  }
  if (rank == 0) c.ok("send", comm.send(out.data(), n, DType::kFloat32, next, 5));
  c.ok("recv", comm.recv(in.data(), n, DType::kFloat32, prev, 5));
  if (rank != 0) c.ok("send", comm.send(out.data(), n, DType::kFloat32, next, 5));
  c.equal_all("send/recv", expected, in);
}

// Partners (0,1), (2,3), ...: each posts its receives for tag 2 then tag 1 before sending tag 1
// then tag 2, large enough to need the receiver. With blocking calls both partners would wait
// in recv(tag 2) forever; async, the tags sort the messages out.
void check_isend_irecv(Comm& comm, Checker& c, size_t n) {
  const int rank = comm.rank(), peer = rank ^ 1;
  if (peer >= comm.size()) return;
  std::vector<float> out1(n), out2(n), in1(n, -1.0f), in2(n, -1.0f), expected1(n), expected2(n);
  for (size_t i = 0; i < n; i++) {
    out1[i] = value<float>(rank, i);
    out2[i] = value<float>(rank, i + 1) + 200.0f;
    expected1[i] = value<float>(peer, i);
    expected2[i] = value<float>(peer, i + 1) + 200.0f;
  }
  auto r2 = comm.irecv(in2.data(), n, DType::kFloat32, peer, 2);
  auto r1 = comm.irecv(in1.data(), n, DType::kFloat32, peer, 1);
  auto s1 = comm.isend(out1.data(), n, DType::kFloat32, peer, 1);
  auto s2 = comm.isend(out2.data(), n, DType::kFloat32, peer, 2);
  while (!r1->test()) std::this_thread::yield();
  c.ok("irecv tag 1", r1->wait());
  c.ok("isend tag 2", s2->wait());
  c.ok("isend tag 1", s1->wait());
  c.ok("irecv tag 2", r2->wait());
  c.equal_all("irecv tag 1", expected1, in1);
  c.equal_all("irecv tag 2", expected2, in2);
}

// Three async collectives in flight at once, completed in reverse order.
void check_overlapped_async(Comm& comm, Checker& c) {
  const int size = comm.size(), rank = comm.rank();
  const size_t n = 4096;
  std::vector<double> a(n), a_expected(n, 0.0);
  for (size_t i = 0; i < n; i++) a[i] = value<double>(rank, i);
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < n; i++) a_expected[i] += value<double>(q, i);
  const std::vector<size_t> counts = uneven_counts(size, 300);
  size_t total = 0;
  for (size_t m : counts) total += m;
  std::vector<float> rs_send(total), rs_recv(counts[rank]), rs_expected(counts[rank], 0.0f);
  for (size_t j = 0; j < total; j++) rs_send[j] = value<float>(rank, j);
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < counts[rank]; i++)
      rs_expected[i] += value<float>(q, offset_of(counts, rank) + i);
  std::vector<uint8_t> ag_send(counts[rank], static_cast<uint8_t>(rank + 1)), ag_recv(total, 0),
      ag_expected(total);
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < counts[q]; i++) ag_expected[offset_of(counts, q) + i] = uint8_t(q + 1);

  auto ar = comm.all_reduce_async(a.data(), n, DType::kFloat64, ReduceOp::kSum);
  auto rs = comm.reduce_scatter_async(rs_send.data(), rs_recv.data(), counts, DType::kFloat32);
  auto ag = comm.all_gather_async(ag_send.data(), ag_recv.data(), counts, DType::kUInt8);
  c.ok("overlapped all_gather_async", ag->wait());
  c.ok("overlapped reduce_scatter_async", rs->wait());
  while (!ar->test()) std::this_thread::yield();
  c.ok("overlapped all_reduce_async", ar->wait());
  c.equal_all("overlapped all_reduce_async", a_expected, a);
  c.equal_all("overlapped reduce_scatter_async", rs_expected, rs_recv);
  c.equal_all("overlapped all_gather_async", ag_expected, ag_recv);
}

// 16-bit floats (Note [16-bit reductions on MPI], mpi_comm.cpp). Inputs are integers of
// magnitude 1000 to 2700, a third of them negative, rounded to the type (bf16 keeps multiples
// of 8 there), so a sum in fp32 of the rounded inputs is exact in any order and is rounded once
// into the type. Sums of their bits as integers differ, and so does the maximum of bits
// wherever a negative value (sign bit set) meets a positive one.
template <typename H>
H half_value(int rank, size_t i) {
  const float sign = (i + static_cast<size_t>(rank)) % 3 == 0 ? -1.0f : 1.0f;
  return narrow<H>(sign * (1000.0f + 17.0f * value<int>(rank, i)));
}

template <typename H>
void check_half_all_reduce(Comm& comm, Checker& c, const char* type_name, size_t n, bool async) {
  const int size = comm.size(), rank = comm.rank();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    const std::string name = std::string(async ? "all_reduce_async " : "all_reduce ") +
                             (op == ReduceOp::kSum ? "sum " : "max ") + type_name;
    std::vector<H> data(n), expected(n);
    for (size_t i = 0; i < n; i++) {
      data[i] = half_value<H>(rank, i);
      float want = op == ReduceOp::kSum ? 0.0f : widen(half_value<H>(0, i));
      for (int q = 0; q < size; q++) {
        const float v = widen(half_value<H>(q, i));
        want = op == ReduceOp::kSum ? want + v : std::max(want, v);
      }
      expected[i] = narrow<H>(want);
    }
    if (async) {
      auto request = comm.all_reduce_async(data.data(), n, lattice::dtype_of<H>(), op);
      while (!request->test()) std::this_thread::yield();  // completed by test(), not wait()
      c.ok(name, request->wait());
    } else {
      c.ok(name, comm.all_reduce(data.data(), n, lattice::dtype_of<H>(), op));
    }
    c.equal_all_half(name, expected, data);
  }
}

template <typename H>
void check_half_reduce_scatter(Comm& comm, Checker& c, const char* type_name,
                               const std::vector<size_t>& counts, bool async) {
  const int size = comm.size(), rank = comm.rank();
  const std::string name =
      std::string(async ? "reduce_scatter_async " : "reduce_scatter ") + type_name;
  size_t total = 0;
  for (size_t n : counts) total += n;
  std::vector<H> send(total), recv(counts[rank], H{0xffff}), expected(counts[rank]);
  for (size_t j = 0; j < total; j++) send[j] = half_value<H>(rank, j);
  const size_t own = offset_of(counts, rank);
  for (size_t i = 0; i < counts[rank]; i++) {
    float want = 0.0f;
    for (int q = 0; q < size; q++) want += widen(half_value<H>(q, own + i));
    expected[i] = narrow<H>(want);
  }
  const DType type = lattice::dtype_of<H>();
  if (async)
    c.ok(name, comm.reduce_scatter_async(send.data(), recv.data(), counts, type)->wait());
  else
    c.ok(name, comm.reduce_scatter(send.data(), recv.data(), counts, type));
  c.equal_all_half(name, expected, recv);
}

// Bits that a round trip through fp32 would change: a signalling NaN (fp32 quiets it), then
// arbitrary patterns (NaNs with payloads among them).
template <typename H>
H half_bits(int rank, size_t i) {
  if (i == 0) return H{std::is_same_v<H, lattice::bf16> ? uint16_t{0x7f81} : uint16_t{0x7c01}};
  return H{static_cast<uint16_t>(rank * 7919 + i * 104729)};
}

// all_gather (in place and not), broadcast and a send / recv ring move every bit unchanged.
template <typename H>
void check_half_moves(Comm& comm, Checker& c, const char* type_name,
                      const std::vector<size_t>& counts) {
  const int size = comm.size(), rank = comm.rank();
  const DType type = lattice::dtype_of<H>();
  size_t total = 0;
  for (size_t n : counts) total += n;
  std::vector<H> send(counts[rank]), expected(total);
  for (size_t i = 0; i < counts[rank]; i++) send[i] = half_bits<H>(rank, i);
  for (int q = 0; q < size; q++)
    for (size_t i = 0; i < counts[q]; i++) expected[offset_of(counts, q) + i] = half_bits<H>(q, i);
  for (bool in_place : {false, true}) {
    const std::string name = std::string("all_gather ") + type_name + (in_place ? " in place" : "");
    std::vector<H> recv(total, H{0});
    const H* from = send.data();
    if (in_place) {
      std::copy(send.begin(), send.end(), recv.begin() + offset_of(counts, rank));
      from = recv.data() + offset_of(counts, rank);
    }
    c.ok(name, comm.all_gather(from, recv.data(), counts, type));
    c.equal_all_half(name, expected, recv);
  }
  const size_t n = counts[0] + 1;
  std::vector<H> data(n), root_data(n);
  for (size_t i = 0; i < n; i++) {
    root_data[i] = half_bits<H>(size - 1, i);
    data[i] = rank == size - 1 ? root_data[i] : H{0};
  }
  c.ok(std::string("broadcast ") + type_name, comm.broadcast(data.data(), n, type, size - 1));
  c.equal_all_half(std::string("broadcast ") + type_name, root_data, data);
  if (size < 2) return;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  std::vector<H> out(n), in(n, H{0}), from_prev(n);
  for (size_t i = 0; i < n; i++) {
    out[i] = half_bits<H>(rank, i);
    from_prev[i] = half_bits<H>(prev, i);
  }
  const std::string name = std::string("send/recv ") + type_name;
  if (rank == 0) c.ok(name, comm.send(out.data(), n, type, next, 6));
  c.ok(name, comm.recv(in.data(), n, type, prev, 6));
  if (rank != 0) c.ok(name, comm.send(out.data(), n, type, next, 6));
  c.equal_all_half(name, from_prev, in);
}

template <typename H>
void check_half(Comm& comm, Checker& c, const char* type_name, size_t n) {
  for (bool async : {false, true}) {
    check_half_all_reduce<H>(comm, c, type_name, n, async);
    check_half_reduce_scatter<H>(comm, c, type_name, uneven_counts(comm.size(), n / 4), async);
  }
  check_half_moves<H>(comm, c, type_name, uneven_counts(comm.size(), n / 8));
}

// CommStats counts the caller's buffers: 2 bytes a 16-bit element, not the fp32 copies'.
void check_half_stats(Comm& comm, Checker& c) {
  std::vector<lattice::bf16> data(100, lattice::to_bf16(1.0f));
  comm.reset_stats();
  c.ok("all_reduce bf16", comm.all_reduce(data.data(), 100, DType::kBFloat16, ReduceOp::kSum));
  c.equal("stats all_reduce_bytes bf16", 0, uint64_t{200}, comm.stats().all_reduce_bytes);
  comm.reset_stats();
}

// Megatron-style groups: tensor-parallel pairs of consecutive ranks (color rank / 2) and the
// data-parallel groups across them (color rank % 2), the latter ordered by a reversed key.
void check_split(Comm& comm, Checker& c) {
  const int size = comm.size(), rank = comm.rank();
  const int t = size % 2 == 0 ? 2 : 1;
  auto tp = comm.split(rank / t, rank);
  c.ok("split tensor-parallel", tp.status());
  if (!tp) return;
  Comm& pair = *tp.value();
  c.equal("split tensor-parallel size", 0, t, pair.size());
  c.equal("split tensor-parallel rank", 0, rank % t, pair.rank());
  c.equal("split tensor-parallel node_local_size", 0, t, pair.node_local_size());
  int32_t sum = rank;
  c.ok("all_reduce over tensor-parallel group",
       pair.all_reduce(&sum, 1, DType::kInt32, ReduceOp::kSum));
  int32_t expected = 0;
  for (int q = (rank / t) * t; q < (rank / t + 1) * t; q++) expected += q;
  c.equal("all_reduce over tensor-parallel group", 0, expected, sum);

  auto dp = comm.split(rank % t, -rank);
  c.ok("split data-parallel", dp.status());
  if (!dp) return;
  const int d = size / t;
  c.equal("split data-parallel size", 0, d, dp.value()->size());
  c.equal("split data-parallel rank (key -rank)", 0, d - 1 - rank / t, dp.value()->rank());
  int32_t max = rank;
  c.ok("all_reduce max over data-parallel group",
       dp.value()->all_reduce(&max, 1, DType::kInt32, ReduceOp::kMax));
  c.equal("all_reduce max over data-parallel group", 0, (d - 1) * t + rank % t, max);
}

// Rank 0 arrives 200 ms late: nobody may leave the barrier much before that (the margin is
// for ranks leaving the first barrier at different times), and the wait shows in the stats.
void check_barrier_and_stats(Comm& comm, Checker& c) {
  const int size = comm.size(), rank = comm.rank();
  c.ok("barrier", comm.barrier());
  comm.reset_stats();
  const auto start = std::chrono::steady_clock::now();
  if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  c.ok("barrier", comm.barrier());
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (size > 1 && rank != 0) {
    c.truth("barrier", waited > 0.1, "left after " + std::to_string(waited) + " s");
    c.truth("stats wait_seconds", comm.stats().wait_seconds > 0.1,
            "wait_seconds " + std::to_string(comm.stats().wait_seconds));
  }
  comm.reset_stats();
  std::vector<float> data(1000, 1.0f);
  c.ok("all_reduce", comm.all_reduce(data.data(), data.size(), DType::kFloat32, ReduceOp::kSum));
  const std::vector<size_t> counts = uneven_counts(size, 10);
  size_t total = 0;
  for (size_t m : counts) total += m;
  std::vector<float> big(total, 1.0f), small(counts[rank]);
  c.ok("reduce_scatter", comm.reduce_scatter(big.data(), small.data(), counts, DType::kFloat32));
  c.ok("all_gather", comm.all_gather(small.data(), big.data(), counts, DType::kFloat32));
  c.equal("stats all_reduce_bytes", 0, uint64_t{4000}, comm.stats().all_reduce_bytes);
  c.equal("stats reduce_scatter_bytes", 0, uint64_t{total * 4}, comm.stats().reduce_scatter_bytes);
  c.equal("stats all_gather_bytes", 0, uint64_t{total * 4}, comm.stats().all_gather_bytes);
  c.equal("stats calls", 0, uint64_t{3}, comm.stats().calls);
}

// Arguments a rank can check alone are refused on that rank, before any MPI call.
void check_refusals(Comm& comm, Checker& c) {
  const int size = comm.size();
  float x = 0;
  const Status to_nobody = comm.send(&x, 1, DType::kFloat32, size, 0);
  c.truth("send to rank size()",
          !to_nobody && to_nobody.message().find("peer") != std::string::npos,
          "status: " + to_nobody.message());
  const Status wrong_counts =
      comm.all_gather(&x, &x, std::vector<size_t>(size + 1, 1), DType::kFloat32);
  c.truth("all_gather with size()+1 counts", !wrong_counts, "was accepted");
  const Status bad_root = comm.broadcast(&x, 1, DType::kFloat32, -1);
  c.truth("broadcast from root -1", !bad_root, "was accepted");
}

// Every operation again with MPI calls limited to 7 elements: the pieces and fallbacks that
// otherwise only buffers above INT_MAX elements reach.
void check_pieces(Comm& comm, Checker& c) {
  lattice::set_mpi_max_count_for_testing(7);
  check_all_reduce<float>(comm, c, "float (pieces of 7)", 100);
  check_all_reduce<int64_t>(comm, c, "int64 (pieces of 7)", 15);
  const std::vector<size_t> counts = uneven_counts(comm.size(), 4);
  for (bool async : {false, true}) {
    check_reduce_scatter(comm, c, counts, async);
    for (bool in_place : {false, true}) check_all_gather(comm, c, counts, in_place, async);
  }
  check_broadcast_and_gather(comm, c, 9);
  check_send_recv(comm, c, 50);
  check_isend_irecv(comm, c, 23);
  check_isend_irecv(comm, c, 0);
  check_half<lattice::bf16>(comm, c, "bf16 (pieces of 7)", 40);
  check_half<lattice::fp16>(comm, c, "fp16 (pieces of 7)", 40);
  check_all_to_all_rounds(comm, c, 3);  // totals above 7: point-to-point pieces
  check_all_to_all_rounds(comm, c, 1);
  lattice::set_mpi_max_count_for_testing(0);
}

// ---- stream-ordered calls on a CpuDevice (Note [CPU stream order]) ----------------------------

Stream& side_stream(CpuDevice& device, const std::string& name) {
  lattice::Result<Stream*> s = device.new_stream(name);
  if (!s) std::abort();  // the CPU device makes side streams without fail
  return **s;
}

// A stream that claims a cudaStream_t: MpiComm must refuse it rather than run on it.
class FakeCudaStream final : public Stream {
 public:
  FakeCudaStream() : Stream("compute (CUDA)") {}
  void* native() const override { return const_cast<FakeCudaStream*>(this); }
};

// An all-reduce queued on a side stream returns before the other ranks have joined it: rank 0
// queues a float and a bf16 all-reduce, sees that their event has not completed, and only
// then tells the others to join (a call that waited for them would wait for ever: the test's
// 20 s timeout ends the job naming it). Once the host has waited for the event the sums are
// there, the bf16 one rounded from fp32 as the blocking call rounds it.
void check_stream_all_reduce(Comm& world, CpuDevice& device, Comm& comm, Checker& c) {
  const int size = comm.size(), rank = comm.rank();
  Stream& dp = side_stream(device, "data-parallel");
  const size_t n = 5000;
  std::vector<float> data(n), expected(n, 0.0f);
  std::vector<lattice::bf16> half(n), half_expected(n);
  for (size_t i = 0; i < n; i++) {
    data[i] = value<float>(rank, i);
    half[i] = half_value<lattice::bf16>(rank, i);
    float want = 0.0f;
    for (int q = 0; q < size; q++) {
      expected[i] += value<float>(q, i);
      want += widen(half_value<lattice::bf16>(q, i));
    }
    half_expected[i] = narrow<lattice::bf16>(want);
  }
  int go = 1;
  if (rank != 0) c.ok("stream all_reduce: go word", world.recv(&go, 1, DType::kInt32, 0, 9));
  c.ok("stream all_reduce float (queued)",
       comm.all_reduce(data.data(), n, DType::kFloat32, ReduceOp::kSum, dp));
  c.ok("stream all_reduce bf16 (queued)",
       comm.all_reduce(half.data(), n, DType::kBFloat16, ReduceOp::kSum, dp));
  const Event done = device.record(dp);
  c.equal("stream all_reduce: requests queued on the side stream", 0, uint64_t{2}, done.seq);
  if (rank == 0 && size > 1) {
    c.truth("stream all_reduce", !device.completed(done),
            "its event completed before the other ranks had joined");
    for (int q = 1; q < size; q++)
      c.ok("stream all_reduce: go word", world.send(&go, 1, DType::kInt32, q, 9));
  }
  device.wait(device.compute(), done);
  c.truth("stream all_reduce", device.completed(done), "its event is not complete after a wait");
  c.equal_all("stream all_reduce float", expected, data);
  c.equal_all_half("stream all_reduce bf16", half_expected, half);
  c.ok("stream all_reduce: synchronize", device.synchronize(dp));
}

// Every rank queues three 4 MiB messages (above Open MPI's eager limit: a send completes only
// once its receive is posted) to the next rank on one side stream before it queues the three
// receives from the previous rank on another; on two ranks that is both directions between one
// pair at once. A send that held the host until its receive was posted would deadlock every
// rank (the 20 s timeout ends the job). The messages arrive in issue order (tag 0).
void check_stream_messages(CpuDevice& device, Comm& comm, Checker& c) {
  const int size = comm.size(), rank = comm.rank();
  if (size < 2) return;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  Stream& out = side_stream(device, "pipeline out");
  Stream& in = side_stream(device, "pipeline in");
  const size_t n = size_t{1} << 20;
  auto message = [&](int from, int k) {
    std::vector<float> m(n);
    for (size_t i = 0; i < n; i += 997) m[i] = float(from * 10 + k);
    m[n - 1] = float(from * 10 + k + 1);
    return m;
  };
  std::vector<std::vector<float>> sent, got(3, std::vector<float>(n, -1.0f));
  for (int k = 0; k < 3; k++) sent.push_back(message(rank, k));
  for (int k = 0; k < 3; k++)
    c.ok("stream send", comm.send(sent[k].data(), n, DType::kFloat32, next, out));
  for (int k = 0; k < 3; k++)
    c.ok("stream recv", comm.recv(got[k].data(), n, DType::kFloat32, prev, in));
  device.wait(device.compute(), device.record(in));
  for (int k = 0; k < 3; k++)
    c.truth("stream recv", got[k] == message(prev, k),
            "message " + std::to_string(k) + " from rank " + std::to_string(prev) +
                " arrived changed or out of order");
  c.ok("stream send: synchronize", device.synchronize(out));
  c.equal("stream messages: sends pending after synchronize", 0, size_t{0}, out.queue()->pending());
}

// reduce_scatter and all_gather on the compute stream (complete when the call returns) and on a
// side stream (after an event wait), out of place and in place (the receive buffer this rank's
// block of the send buffer, which MPI_Ireduce_scatter may not alias: MpiComm stages it). The
// stats count them as the blocking calls do.
void check_stream_scatter_gather(CpuDevice& device, Comm& comm, Checker& c) {
  const int size = comm.size(), rank = comm.rank();
  const size_t count = 37, total = count * size;
  std::vector<float> summed(total, 0.0f);
  for (int q = 0; q < size; q++)
    for (size_t j = 0; j < total; j++) summed[j] += value<float>(q, j);
  const std::vector<float> mine(summed.begin() + rank * count, summed.begin() + (rank + 1) * count);
  for (bool side : {false, true}) {
    Stream& s = side ? side_stream(device, "data-parallel 2") : device.compute();
    const std::string on = side ? " (side stream)" : " (compute stream)";
    auto settle = [&] {
      if (side) device.wait(device.compute(), device.record(s));
    };
    std::vector<float> send(total), recv(count, -1.0f);
    for (size_t j = 0; j < total; j++) send[j] = value<float>(rank, j);
    std::vector<float> arena = send;
    comm.reset_stats();
    c.ok("stream reduce_scatter" + on,
         comm.reduce_scatter(send.data(), recv.data(), count, DType::kFloat32, s));
    c.ok("stream reduce_scatter in place" + on,
         comm.reduce_scatter(arena.data(), arena.data() + rank * count, count, DType::kFloat32, s));
    settle();
    c.equal_all("stream reduce_scatter" + on, mine, recv);
    c.equal_all("stream reduce_scatter in place" + on, mine, arena, rank * count);
    // Every rank's block of the sum, gathered in place and from a separate buffer.
    std::vector<float> gathered(total, -1.0f);
    c.ok("stream all_gather" + on,
         comm.all_gather(recv.data(), gathered.data(), count, DType::kFloat32, s));
    c.ok("stream all_gather in place" + on,
         comm.all_gather(arena.data() + rank * count, arena.data(), count, DType::kFloat32, s));
    settle();
    c.equal_all("stream all_gather" + on, summed, gathered);
    c.equal_all("stream all_gather in place" + on, summed, arena);
    c.equal("stream stats reduce_scatter_bytes" + on, 0, uint64_t{2 * total * 4},
            comm.stats().reduce_scatter_bytes);
    c.equal("stream stats all_gather_bytes" + on, 0, uint64_t{2 * total * 4},
            comm.stats().all_gather_bytes);
    c.ok("stream scatter/gather: synchronize" + on, device.synchronize(s));
  }
  comm.reset_stats();
}

// What a rank can tell alone comes back from the call and queues nothing: a peer that is not a
// rank, a CUDA stream.
void check_stream_refusals(CpuDevice& device, Comm& comm, Checker& c) {
  Stream& s = side_stream(device, "refusals");
  float x = 0;
  const Status to_nobody = comm.send(&x, 1, DType::kFloat32, comm.size(), s);
  c.truth("stream send to rank size()",
          !to_nobody && to_nobody.message().find("peer") != std::string::npos,
          "status: " + to_nobody.message());
  FakeCudaStream cuda;
  const Status on_cuda = comm.all_reduce(&x, 1, DType::kFloat32, ReduceOp::kSum, cuda);
  c.truth("stream all_reduce on a CUDA stream",
          !on_cuda && on_cuda.message().find("compute (CUDA)") != std::string::npos &&
              on_cuda.message().find("NcclComm") != std::string::npos,
          "status: " + on_cuda.message());
  c.equal("stream refusals: requests queued", 0, uint64_t{0}, s.queue()->queued());
}

void check_streams(Comm& world, Checker& c) {
  // A deadlock ends the job within 20 s, naming the wait, instead of the ctest timeout.
  lattice::set_comm_timeout(20.0, "comm_worker's 20 s stream timeout");
  {
    CpuDevice device;
    auto comm = device.make_comm(world);
    c.ok("make_comm", comm.status());
    if (!comm) return;
    check_stream_all_reduce(world, device, **comm, c);
    check_stream_messages(device, **comm, c);
    check_stream_scatter_gather(device, **comm, c);
    check_stream_refusals(device, **comm, c);
    for (int seed = 0; seed < 2; seed++) {
      check_all_to_all<uint32_t>(**comm, c, DType::kFloat32, "fp32", seed, 5, &device.compute(),
                                 &device);
      check_all_to_all<uint16_t>(**comm, c, DType::kBFloat16, "bf16", seed, 5,
                                 &side_stream(device, "expert " + std::to_string(seed)), &device);
    }
    // Every side stream was synchronised: the communicator may go before the device.
  }
  lattice::set_comm_timeout(0.0);
}

// The stream-ordered calls that mean the same on every communicator (none of Note [CPU stream
// order]'s queued requests or refusals): messages, reduce-scatter and all-gather, all-to-all.
void check_stream_results(CpuDevice& device, Comm& comm, Checker& c) {
  lattice::set_comm_timeout(20.0, "comm_worker's 20 s stream timeout");
  check_stream_messages(device, comm, c);
  check_stream_scatter_gather(device, comm, c);
  for (int seed = 0; seed < 2; seed++) {
    check_all_to_all<uint32_t>(comm, c, DType::kFloat32, "fp32", seed, 5, &device.compute(),
                               &device);
    check_all_to_all<uint16_t>(comm, c, DType::kBFloat16, "bf16", seed, 5,
                               &side_stream(device, "expert " + std::to_string(seed)), &device);
  }
  lattice::set_comm_timeout(0.0);
}

// Every check; `streams`: the CpuDevice stream checks of a split made by CpuDevice::make_comm
// (MpiComm's Note [CPU stream order]), or else those of check_stream_results on `comm` itself
// over `device`.
int run_checks(Comm& comm, CpuDevice* device = nullptr) {
  Checker c(comm);
  const int size = comm.size();
  c.equal("node_local_size (one machine)", 0, size, comm.node_local_size());
  check_all_reduce<float>(comm, c, "float", 1001);
  check_all_reduce<double>(comm, c, "double", 257);
  check_all_reduce<int32_t>(comm, c, "int32", 64);
  check_all_reduce<int64_t>(comm, c, "int64", 3);
  check_all_reduce<uint8_t>(comm, c, "uint8", 17);
  for (size_t base : {size_t{1}, size_t{1000}}) {
    const std::vector<size_t> counts = uneven_counts(size, base);
    for (bool async : {false, true}) {
      check_reduce_scatter(comm, c, counts, async);
      for (bool in_place : {false, true}) check_all_gather(comm, c, counts, in_place, async);
    }
  }
  std::vector<size_t> with_empty = uneven_counts(size, 2);
  with_empty[0] = 0;
  check_reduce_scatter(comm, c, with_empty, false);
  check_all_gather(comm, c, with_empty, false, false);
  check_broadcast_and_gather(comm, c, 300);
  check_send_recv(comm, c, 100000);
  check_isend_irecv(comm, c, size_t{1} << 20);
  check_overlapped_async(comm, c);
  check_half<lattice::bf16>(comm, c, "bf16", 1000);
  check_half<lattice::fp16>(comm, c, "fp16", 1000);
  check_half_stats(comm, c);
  check_split(comm, c);
  check_barrier_and_stats(comm, c);
  check_refusals(comm, c);
  check_all_to_all_rounds(comm, c, 1);
  check_all_to_all_rounds(comm, c, 1000);
  check_all_to_all_refusals(comm, c);
  check_pieces(comm, c);
  if (device)
    check_stream_results(*device, comm, c);
  else
    check_streams(comm, c);

  int failures = c.failures();
  c.ok("all_reduce of failure counts",
       comm.all_reduce(&failures, 1, DType::kInt32, ReduceOp::kSum));
  if (failures > 0) {
    std::fprintf(stderr, "comm_worker: rank %d of %d: %d check(s) failed (%d here)\n", comm.rank(),
                 size, failures, c.failures());
    return 1;
  }
  std::printf("comm_worker: rank %d of %d: %d checks passed\n", comm.rank(), size, c.checks());
  return 0;
}

// The checks over a StagedComm (Note [device collectives through host memory]) on a CpuDevice:
// every operation through the staging copies.
int run_staged_checks(Comm& world) {
  CpuDevice device;
  lattice::Result<std::unique_ptr<Comm>> staged = lattice::make_staged_comm(device, world);
  if (!staged) {
    std::fprintf(stderr, "comm_worker: %s\n", staged.status().message().c_str());
    return 2;
  }
  return run_checks(**staged, &device);
}

// Rank 1 fails (abort or SIGKILL) while every other rank waits in an all_reduce it never
// joins: the launcher must end the whole job.
int run_failure(Comm& comm, const std::string& mode) {
  if (comm.size() < 2) {
    std::fprintf(stderr, "comm_worker %s: needs at least 2 ranks\n", mode.c_str());
    return 2;
  }
  if (comm.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (mode == "abort") comm.abort("disk full on rank 1", 3);
    std::raise(SIGKILL);
  }
  // As `lattice train` does (its stop handler), outlive the SIGTERM that mpirun sends once
  // rank 1 is gone, for the second before its SIGKILL: the wait then says which rank died.
  std::signal(SIGTERM, [](int) {});
  float x = 1;
  const Status s = comm.all_reduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
  std::fprintf(stderr, "comm_worker: rank %d: all_reduce returned (%s) though rank 1 is gone\n",
               comm.rank(), s ? "ok" : s.message().c_str());
  return 4;
}

// Rank 1 stops itself (SIGSTOP) after one all_reduce with everyone; the others then wait for
// it in a second all_reduce (`sigstop`), or rank 0 in a recv from it while the rest wait in a
// barrier (`sigstop-recv`), or in an all-reduce they queued on a CPU device's side stream and
// then wait for through its event (`sigstop-stream`, on the device's communicator named
// "data-parallel"). Rank 0's timeout (2 s) must end the job, naming rank 1 and the wait.
int run_hang(Comm& comm, const std::string& mode) {
  if (comm.size() < 2) {
    std::fprintf(stderr, "comm_worker %s: needs at least 2 ranks\n", mode.c_str());
    return 2;
  }
  // Rank 0 times out first, so the message the test reads is always rank 0's; rank 2, also
  // waiting, is patient enough never to race it on a loaded machine.
  if (comm.rank() == 0)
    lattice::set_comm_timeout(2.0, "a 2 s test timeout");
  else
    lattice::set_comm_timeout(20.0, "a 20 s test timeout");
  lattice::set_comm_activity("the hang test");
  std::unique_ptr<Comm> dp;  // sigstop-stream: made while every rank is still running
  CpuDevice device;          // after dp: its side stream's requests need dp alive
  if (mode == "sigstop-stream") {
    auto made = device.make_comm(comm);
    if (!made) return 3;
    dp = std::move(*made);
    dp->set_name("data-parallel");
  }
  float x = 1;
  if (Status s = comm.all_reduce(&x, 1, DType::kFloat32, ReduceOp::kSum); !s) return 3;
  if (comm.rank() == 1) std::raise(SIGSTOP);
  Status s = Status::ok();
  if (mode == "sigstop-stream") {
    Stream& side = side_stream(device, "data-parallel");
    s = dp->all_reduce(&x, 1, DType::kFloat32, ReduceOp::kSum, side);
    if (!s) return 3;
    device.wait(device.compute(), device.record(side));
    s = device.error();
  } else if (mode == "sigstop")
    s = comm.all_reduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
  else if (comm.rank() == 0)
    s = comm.recv(&x, 1, DType::kFloat32, 1, 7);
  else
    s = comm.barrier();
  std::fprintf(stderr, "comm_worker: rank %d: the wait returned (%s) though rank 1 is stopped\n",
               comm.rank(), s ? "ok" : s.message().c_str());
  return 4;
}

}  // namespace

// comm_worker check | abort | sigkill | sigstop | sigstop-recv | sigstop-stream [marker]
// (marker: ignored, for pgrep)
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool hang = mode == "sigstop" || mode == "sigstop-recv" || mode == "sigstop-stream";
  if (mode != "check" && mode != "check-staged" && mode != "abort" && mode != "sigkill" && !hang) {
    std::fprintf(stderr,
                 "usage: comm_worker check | abort | sigkill | sigstop | sigstop-recv | "
                 "sigstop-stream [marker]\n");
    return 2;
  }
  auto world = lattice::make_world_comm();
  if (!world) {
    std::fprintf(stderr, "comm_worker: %s\n", world.status().message().c_str());
    return 2;
  }
  const int code = mode == "check"          ? run_checks(*world.value())
                   : mode == "check-staged" ? run_staged_checks(*world.value())
                   : hang                   ? run_hang(*world.value(), mode)
                                            : run_failure(*world.value(), mode);
  world.value().reset();
  lattice::finalize_comm();
  return code;
}
