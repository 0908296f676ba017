// NcclComm on device buffers, one process per GPU under mpirun (ctest: test_nccl_comm, labels
// cuda and mpi). Every rank checks every comm.h operation against values it can compute
// itself, with receive buffers NaN-poisoned first; point-to-point and unequal counts need two
// or more ranks (`mpirun -n <GPUs>`). Prints kNoDeviceMessage and exits 0 without a device
// (ctest reports SKIPPED by SKIP_REGULAR_EXPRESSION), 1 on the first disagreement. The
// stream-ordered members run on the CUDA device's (device/device.h) compute and side streams.
// --without-device (ctest: test_nccl_comm_failure, no GPU needed): make_nccl_comm must return
// an error on every rank, whichever rank fails first.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_test_support.h"
#include "device/cpu_device.h"
#include "device/device.h"
#include "lattice/comm.h"
#include "parallel/nccl_comm.h"

namespace cu = lattice::kernels::cuda;
using lattice::DType;
using lattice::ReduceOp;
using lattice::testing::DeviceBuffer;

namespace {

int g_rank = 0;

bool expect(bool ok, const std::string& what) {
  if (!ok) std::fprintf(stderr, "rank %d: FAIL %s\n", g_rank, what.c_str());
  return ok;
}

bool ok(const lattice::Status& s, const std::string& what) {
  return expect(s.is_ok(), what + ": " + s.message());
}

// Every element of got equals want (exact: sums of small integers are exact in fp32).
bool same_values(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  if (got.size() != want.size()) return expect(false, what + ": size");
  for (size_t i = 0; i < got.size(); i++)
    if (!(got[i] == want[i]))
      return expect(false, what + "[" + std::to_string(i) + "] = " + std::to_string(got[i]) +
                               ", expected " + std::to_string(want[i]));
  return true;
}

bool run(lattice::Comm& comm) {
  const int rank = comm.rank(), size = comm.size();
  bool good = true;
  const size_t n = 1000;
  {  // all_reduce sum and max, blocking and async
    std::vector<float> mine(n), sum(n, 0.0f), max(n);
    for (size_t i = 0; i < n; i++) mine[i] = float(rank + 1) * float(i % 7);
    for (int r = 0; r < size; r++)
      for (size_t i = 0; i < n; i++) sum[i] += float(r + 1) * float(i % 7);
    for (size_t i = 0; i < n; i++) max[i] = float(size) * float(i % 7);
    DeviceBuffer<float> a(mine), b(mine);
    good &= ok(comm.all_reduce(a.get(), n, DType::kFloat32, ReduceOp::kSum), "all_reduce sum");
    good &= same_values(a.download(), sum, "all_reduce sum");
    auto request = comm.all_reduce_async(b.get(), n, DType::kFloat32, ReduceOp::kMax);
    good &= ok(request->wait(), "all_reduce_async max");
    good &= same_values(b.download(), max, "all_reduce_async max");
  }
  for (bool unequal : {false, true}) {  // reduce_scatter and all_gather, equal and unequal counts
    std::vector<size_t> counts(size);
    size_t total = 0;
    for (int r = 0; r < size; r++) total += counts[r] = unequal ? 10 + 3 * r : 16;
    std::vector<float> send(total);
    for (size_t i = 0; i < total; i++) send[i] = float(i);
    DeviceBuffer<float> d_send(send), d_recv(counts[rank]);
    const std::string tag = unequal ? " (unequal counts)" : "";
    good &= ok(comm.reduce_scatter(d_send.get(), d_recv.get(), counts, DType::kFloat32),
               "reduce_scatter" + tag);
    size_t offset = 0;
    for (int r = 0; r < rank; r++) offset += counts[r];
    std::vector<float> want(counts[rank]);
    for (size_t i = 0; i < want.size(); i++) want[i] = float(size) * float(offset + i);
    good &= same_values(d_recv.download(), want, "reduce_scatter" + tag);

    std::vector<float> block(counts[rank], float(rank)), gathered;
    for (int r = 0; r < size; r++) gathered.insert(gathered.end(), counts[r], float(r));
    DeviceBuffer<float> d_block(block), d_all(total);
    auto request = comm.all_gather_async(d_block.get(), d_all.get(), counts, DType::kFloat32);
    good &= ok(request->wait(), "all_gather_async" + tag);
    good &= same_values(d_all.download(), gathered, "all_gather" + tag);

    // In place, as the GPU trainer's distributed optimizer uses them (grad_reducer.h): the
    // reduce-scatter's receive buffer is this rank's block of the send buffer, the
    // all-gather's send buffer this rank's block of the receive buffer.
    DeviceBuffer<float> d_arena(send);
    float* mine = d_arena.get() + offset;
    good &= ok(comm.reduce_scatter(d_arena.get(), mine, counts, DType::kFloat32),
               "reduce_scatter in place" + tag);
    std::vector<float> arena = d_arena.download();
    good &= same_values(
        std::vector<float>(arena.begin() + offset, arena.begin() + offset + counts[rank]), want,
        "reduce_scatter in place" + tag);
    auto in_place = comm.all_gather_async(mine, d_arena.get(), counts, DType::kFloat32);
    good &= ok(in_place->wait(), "all_gather_async in place" + tag);
    std::vector<float> summed;
    size_t begin = 0;
    for (int r = 0; r < size; begin += counts[r], r++)
      for (size_t i = 0; i < counts[r]; i++) summed.push_back(float(size) * float(begin + i));
    good &= same_values(d_arena.download(), summed, "all_gather in place" + tag);
  }
  {  // the stream-ordered members (comm.h) on the CUDA device's compute stream and a side
     // stream, fp32 and bf16 (small integers: exact), read after the stream's synchronisation
    auto made = lattice::make_cuda_device();
    good &= ok(made.status(), "make_cuda_device");
    if (!made) return false;
    lattice::Device& device = **made;
    auto side = device.new_stream("data-parallel");
    good &= ok(side.status(), "new_stream");
    if (!side) return false;
    const size_t count = 24;
    std::vector<float> send(count * size), block(count, float(rank + 1)), gathered, want(count);
    std::vector<float> sum(count), max(count, float(size));
    for (size_t i = 0; i < send.size(); i++) send[i] = float(i % 11);
    for (int r = 0; r < size; r++) gathered.insert(gathered.end(), count, float(r + 1));
    for (size_t i = 0; i < count; i++) want[i] = float(size) * float((rank * count + i) % 11);
    for (size_t i = 0; i < count; i++) sum[i] = float(size * (size + 1) / 2) * float(i % 5);
    // bf16: the upper half of the fp32 pattern (exact for these values).
    auto to_bf16 = [](const std::vector<float>& v) {
      std::vector<uint16_t> out(v.size());
      for (size_t i = 0; i < v.size(); i++) {
        uint32_t bits;
        std::memcpy(&bits, &v[i], 4);
        out[i] = static_cast<uint16_t>(bits >> 16);
      }
      return out;
    };
    auto from_bf16 = [](const std::vector<uint16_t>& v) {
      std::vector<float> out(v.size());
      for (size_t i = 0; i < v.size(); i++) {
        const uint32_t bits = uint32_t{v[i]} << 16;
        std::memcpy(&out[i], &bits, 4);
      }
      return out;
    };
    for (lattice::Stream* stream : {&device.compute(), *side}) {
      const std::string on = " on " + stream->name();
      std::vector<float> mine(count), ones(count, float(rank + 1));
      for (size_t i = 0; i < count; i++) mine[i] = float(rank + 1) * float(i % 5);
      DeviceBuffer<float> d_send(send), d_recv(count), d_block(block), d_all(count * size),
          d_sum(mine), d_max(ones);
      good &= ok(comm.reduce_scatter(d_send.get(), d_recv.get(), count, DType::kFloat32, *stream),
                 "reduce_scatter" + on);
      good &= ok(comm.all_gather(d_block.get(), d_all.get(), count, DType::kFloat32, *stream),
                 "all_gather" + on);
      good &= ok(comm.all_reduce(d_sum.get(), count, DType::kFloat32, ReduceOp::kSum, *stream),
                 "all_reduce sum" + on);
      good &= ok(comm.all_reduce(d_max.get(), count, DType::kFloat32, ReduceOp::kMax, *stream),
                 "all_reduce max" + on);
      DeviceBuffer<uint16_t> h_send(to_bf16(send)), h_recv(count), h_block(to_bf16(block)),
          h_all(count * size);
      good &= ok(comm.reduce_scatter(h_send.get(), h_recv.get(), count, DType::kBFloat16, *stream),
                 "reduce_scatter bf16" + on);
      good &= ok(comm.all_gather(h_block.get(), h_all.get(), count, DType::kBFloat16, *stream),
                 "all_gather bf16" + on);
      good &= ok(device.synchronize(*stream), "synchronize" + on);
      good &= same_values(d_recv.download(), want, "reduce_scatter" + on);
      good &= same_values(d_all.download(), gathered, "all_gather" + on);
      good &= same_values(d_sum.download(), sum, "all_reduce sum" + on);
      good &= same_values(d_max.download(), max, "all_reduce max" + on);
      good &= same_values(from_bf16(h_recv.download()), want, "reduce_scatter bf16" + on);
      good &= same_values(from_bf16(h_all.download()), gathered, "all_gather bf16" + on);
      if (size >= 2) {  // a ring on the stream: rank 0 sends first, the others receive first
        const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        DeviceBuffer<float> out(std::vector<float>(count, float(rank))), in(count);
        if (rank == 0)
          good &= ok(comm.send(out.get(), count, DType::kFloat32, next, *stream), "send" + on);
        good &= ok(comm.recv(in.get(), count, DType::kFloat32, prev, *stream), "recv" + on);
        if (rank != 0)
          good &= ok(comm.send(out.get(), count, DType::kFloat32, next, *stream), "send" + on);
        good &= ok(device.synchronize(*stream), "synchronize after send/recv" + on);
        good &= same_values(in.download(), std::vector<float>(count, float(prev)),
                            "send/recv ring" + on);
      }
    }
    // A stream without a cudaStream_t (a CPU device's) is refused.
    DeviceBuffer<float> d(std::vector<float>(4, 1.0f));
    lattice::CpuDevice cpu;
    good &= expect(!comm.all_reduce(d.get(), 4, DType::kFloat32, ReduceOp::kSum, cpu.compute()),
                   "all_reduce on a CPU device's stream was accepted");
  }
  {  // broadcast from the last rank, gather to rank 0, barrier
    std::vector<float> mine(n, float(rank)), root_value(n, float(size - 1));
    DeviceBuffer<float> d(mine);
    good &= ok(comm.broadcast(d.get(), n, DType::kFloat32, size - 1), "broadcast");
    good &= same_values(d.download(), root_value, "broadcast");
    DeviceBuffer<float> one(std::vector<float>(3, float(rank))), all(3 * size);
    good &= ok(comm.gather(one.get(), all.get(), 3, DType::kFloat32, 0), "gather");
    if (rank == 0) {
      std::vector<float> want;
      for (int r = 0; r < size; r++) want.insert(want.end(), 3, float(r));
      good &= same_values(all.download(), want, "gather");
    }
    good &= ok(comm.barrier(), "barrier");
  }
  if (size >= 2) {  // a ring of sends: rank r sends r to r + 1
    DeviceBuffer<float> out(std::vector<float>(n, float(rank))), in(n);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    auto r = comm.irecv(in.get(), n, DType::kFloat32, prev, 7);
    auto s = comm.isend(out.get(), n, DType::kFloat32, next, 7);
    good &= ok(s->wait(), "isend") & ok(r->wait(), "irecv");
    good &= same_values(in.download(), std::vector<float>(n, float(prev)), "send/recv ring");
  }
  {  // all_to_all with unequal counts and zeros (the MoE token dispatch): rank r sends rank p
     // (r + 2p) % 3 values 1000 r + 10 p + i; blocking, then on the device's compute stream
    auto count = [](int from, int to) { return static_cast<size_t>((from + 2 * to) % 3); };
    std::vector<size_t> send_counts(size), recv_counts(size);
    std::vector<float> send, want;
    for (int p = 0; p < size; p++) {
      send_counts[p] = count(rank, p);
      recv_counts[p] = count(p, rank);
      for (size_t i = 0; i < send_counts[p]; i++) send.push_back(float(1000 * rank + 10 * p + i));
      for (size_t i = 0; i < recv_counts[p]; i++) want.push_back(float(1000 * p + 10 * rank + i));
    }
    send.push_back(-1.0f);  // one spare element: no buffer of size 0
    want.push_back(NAN);
    DeviceBuffer<float> d_send(send), d_recv(want.size());
    good &= ok(comm.all_to_all(d_send.get(), send_counts, d_recv.get(), recv_counts,
                               DType::kFloat32),
               "all_to_all");
    std::vector<float> got = d_recv.download();
    got.pop_back();
    want.pop_back();
    good &= same_values(got, want, "all_to_all");
    auto made = lattice::make_cuda_device();
    good &= ok(made.status(), "make_cuda_device (all_to_all)");
    if (made) {
      lattice::Device& device = **made;
      DeviceBuffer<float> d_on(want.size() + 1);
      good &= ok(comm.all_to_all(d_send.get(), send_counts, d_on.get(), recv_counts,
                                 DType::kFloat32, device.compute()),
                 "all_to_all on the compute stream");
      good &= ok(device.synchronize(device.compute()), "synchronize after all_to_all");
      std::vector<float> on = d_on.download();
      on.pop_back();
      good &= same_values(on, want, "all_to_all on the compute stream");
    }
  }
  {  // sub-communicators: even and odd ranks
    auto part = comm.split(rank % 2, rank);
    good &= ok(part.status(), "split");
    if (part) {
      lattice::Comm& sub = *part.value();
      DeviceBuffer<float> d(std::vector<float>(4, 1.0f));
      good &= ok(sub.all_reduce(d.get(), 4, DType::kFloat32, ReduceOp::kSum), "split all_reduce");
      const float members = float((size - rank % 2 + 1) / 2);
      good &= same_values(d.download(), std::vector<float>(4, members), "split all_reduce");
    }
  }
  return good;
}

}  // namespace

int main(int argc, char** argv) {
  // --without-device: make the communicator on a machine without a GPU, where it must fail on
  // every rank and end the job with its message instead of leaving ranks waiting for each
  // other (ctest: test_nccl_comm_failure).
  const bool without_device = argc > 1 && std::string(argv[1]) == "--without-device";
  auto world = lattice::make_world_comm();
  if (!world) {
    std::fprintf(stderr, "%s\n", world.status().message().c_str());
    return 1;
  }
  g_rank = world.value()->rank();
  if (without_device) {
    if (cu::device_count() > 0) {
      if (g_rank == 0) std::printf("a CUDA device is visible: the no-device check is skipped\n");
      lattice::finalize_comm();
      return 0;
    }
    auto nccl = lattice::make_nccl_comm(std::move(world.value()));
    const bool failed = !nccl;
    std::printf("rank %d: make_nccl_comm %s%s\n", g_rank,
                failed ? "failed as it should: " : "returned a communicator without a device",
                failed ? nccl.status().message().c_str() : "");
    lattice::finalize_comm();
    return failed ? 0 : 1;
  }
  if (cu::device_count() == 0) {
    if (g_rank == 0) std::printf("%s\n", lattice::testing::kNoDeviceMessage);
    lattice::finalize_comm();
    return 0;
  }
  auto device = lattice::select_device_for_rank();
  if (!device) {
    std::fprintf(stderr, "rank %d: %s\n", g_rank, device.status().message().c_str());
    return 1;
  }
  bool good = false;
  {
    auto nccl = lattice::make_nccl_comm(std::move(world.value()));
    if (!nccl) {
      std::fprintf(stderr, "rank %d: %s\n", g_rank, nccl.status().message().c_str());
      return 1;
    }
    good = run(*nccl.value());
  }
  std::printf("rank %d: NcclComm checks %s\n", g_rank, good ? "passed" : "FAILED");
  lattice::finalize_comm();
  return good ? 0 : 1;
}
