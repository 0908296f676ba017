// The GPU trainer's distributed optimizer on the CPU (every build, no device): GradReducer
// compiled against the host op list (gpu_ops_on_host.cpp) and the stand-in CUDA runtime header
// (host_cuda/), the one AdamW (optim/adamw.h) on CPU devices, this program rerun as two MPI
// ranks (--worker) whose communicator stands in for the data-parallel NcclComm. Specifies that two
// steps of the distributed optimizer (gradients marked ready tensor by tensor in backward
// order, reduce-scattered per bucket by the reducer's thread, AdamW on the shard, the norm
// summed over the ranks, master weights all-gathered) leave every rank with exactly the
// weights and grad norms of the all-reduce path with an AdamW over the whole arena, and that
// the moments take about half the memory; and the same for two model chunks of one rank (an
// interleaved pipeline stage) sharing one GradReducer, each chunk with its own shard. Not
// covered: CUDA streams and events (every host op
// runs when called), NCCL, bf16.
#include <QtTest/QtTest>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/mpi_worker.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "device/cpu_device.h"
#include "gpu/grad_reducer.h"
#include "optim/adamw.h"
#include "optim/optimizer_shard.h"

using namespace lattice;
namespace cu = lattice::kernels::cuda;

namespace {

// The MPI communicator as the data-parallel NcclComm: NCCL reduce-scatters in place (the
// receive buffer this rank's block of the send buffer), MPI_Reduce_scatter may not alias its
// buffers, so this copy of the send buffer goes first. Everything else is passed through.
class InPlaceComm final : public Comm {
 public:
  explicit InPlaceComm(Comm& c) : c_(c) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  int node_local_size() const override { return c_.node_local_size(); }
  Status all_reduce(void* d, size_t n, DType t, ReduceOp op) override {
    return c_.all_reduce(d, n, t, op);
  }
  Status reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts,
                        DType t) override {
    size_t total = 0;
    for (size_t c : counts) total += c;
    std::vector<char> copy(static_cast<const char*>(send),
                           static_cast<const char*>(send) + total * dtype_size(t));
    reduce_scatters++;
    return c_.reduce_scatter(copy.data(), recv, counts, t);
  }
  Status all_gather(const void* s, void* r, const std::vector<size_t>& c, DType t) override {
    return c_.all_gather(s, r, c, t);
  }
  Status broadcast(void* d, size_t n, DType t, int root) override {
    return c_.broadcast(d, n, t, root);
  }
  Status gather(const void* s, void* r, size_t n, DType t, int root) override {
    return c_.gather(s, r, n, t, root);
  }
  Status send(const void* d, size_t n, DType t, int peer, int tag) override {
    return c_.send(d, n, t, peer, tag);
  }
  Status recv(void* d, size_t n, DType t, int peer, int tag) override {
    return c_.recv(d, n, t, peer, tag);
  }
  Status barrier() override { return c_.barrier(); }
  std::unique_ptr<CommRequest> all_reduce_async(void* d, size_t n, DType t, ReduceOp op) override {
    return c_.all_reduce_async(d, n, t, op);
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const void*, void*, const std::vector<size_t>&,
                                                    DType) override {
    std::abort();  // GradReducer reduce-scatters with the blocking call
  }
  std::unique_ptr<CommRequest> all_gather_async(const void* s, void* r,
                                                const std::vector<size_t>& c, DType t) override {
    return c_.all_gather_async(s, r, c, t);
  }
  std::unique_ptr<CommRequest> isend(const void* d, size_t n, DType t, int peer, int tag) override {
    return c_.isend(d, n, t, peer, tag);
  }
  std::unique_ptr<CommRequest> irecv(void* d, size_t n, DType t, int peer, int tag) override {
    return c_.irecv(d, n, t, peer, tag);
  }
  // Stream-ordered calls: passed through (GradReducer does not use them).
  Status all_reduce(void* d, size_t n, DType t, ReduceOp op, Stream& s) override {
    return c_.all_reduce(d, n, t, op, s);
  }
  Status all_gather(const void* sd, void* r, size_t n, DType t, Stream& s) override {
    return c_.all_gather(sd, r, n, t, s);
  }
  Status reduce_scatter(const void* sd, void* r, size_t n, DType t, Stream& s) override {
    return c_.reduce_scatter(sd, r, n, t, s);
  }
  Status send(const void* d, size_t n, DType t, int peer, Stream& s) override {
    return c_.send(d, n, t, peer, s);
  }
  Status recv(void* d, size_t n, DType t, int peer, Stream& s) override {
    return c_.recv(d, n, t, peer, s);
  }
  Result<std::unique_ptr<Comm>> split(int color, int key) override { return c_.split(color, key); }
  [[noreturn]] void abort(const std::string& m, int code) override {
    c_.abort(m, code);
    std::abort();  // not reached: the wrapped abort never returns either
  }
  int reduce_scatters = 0;

 private:
  Comm& c_;
};

OptimizerConfig adam_config() {
  OptimizerConfig c;
  c.weight_decay = 0.1f;
  return c;
}

// One rank's model state on the "device": master weights, gradients, an AdamW whose moments
// live on `device` and a reducer.
struct Replica {
  Replica(const ParamLayout& layout, OptimizerShard shard, Comm& dp, cu::Context& ctx,
          Device& device)
      : master(layout.total_numel()), grads(layout.total_numel()) {
    for (const ParamTensor& t : layout.tensors())
      for (size_t i = 0; i < t.numel; i++)
        master[t.offset + i] = 0.05f * std::sin(0.37f * static_cast<float>(t.offset + i));
    Result<std::unique_ptr<AdamW<float>>> made =
        AdamW<float>::create(device, std::move(shard), adam_config());
    if (!made) qFatal("AdamW: %s", made.status().message().c_str());
    adam = std::move(*made);
    reducer = std::make_unique<gpu::GradReducer>(dp, ctx, 0, grads.data(), layout, &adam->shard());
  }
  std::vector<float> master, grads;  // (numel) each
  std::unique_ptr<AdamW<float>> adam;
  std::unique_ptr<gpu::GradReducer> reducer;
};

// Rank-dependent gradients of step `step` (zero in the alignment gaps, as on the device).
void fill_gradients(const ParamLayout& layout, int rank, int step, std::vector<float>& g) {
  std::fill(g.begin(), g.end(), 0.0f);
  for (const ParamTensor& t : layout.tensors())
    for (size_t i = 0; i < t.numel; i++) {
      const size_t k = t.offset + i;
      g[k] = 1e-2f * std::cos(0.11f * static_cast<float>(k) + 1.3f * rank + 0.7f * step);
    }
}

// One step as GpuLoop::step() takes it: backward marks the tensors ready from the last one
// down, the reducer finishes, the norm is summed over `norm_group`, AdamW steps (clipped at
// 1.0), the distributed optimizer all-gathers. Returns the norm.
Result<double> train_step(const ParamLayout& layout, Replica& r, cu::Context& ctx, Comm& norm_group,
                          int rank, int step) {
  fill_gradients(layout, rank, step, r.grads);
  const int n = static_cast<int>(layout.tensors().size());
  for (int i = n - 1; i >= 0; i--) r.reducer->ready(i, i + 1);
  if (Status s = r.reducer->finish(); !s) return s;
  double squares = r.adam->sum_squares(r.grads.data());
  if (Status s = norm_group.all_reduce(&squares, 1, DType::kFloat64, ReduceOp::kSum); !s) return s;
  const double norm = std::sqrt(squares);
  r.adam->update(r.master.data(), r.grads.data(), 1e-2, clip_coefficient(norm, 1.0f));
  if (Status s = r.reducer->gather_params(r.master.data(), cu::ComputeCopy{}); !s) return s;
  if (std::string e = ctx.synchronize(); !e.empty()) return Status::internal(e);
  return norm;
}

// Buckets of `bucket_elems`: 1000 makes several buckets of several tensors whose shards cut
// some tensors; 1 makes a bucket per tensor, so every tensor is cut (the no-decay ones too).
std::string compare_paths(Comm& world, size_t bucket_elems) {
  const ParamLayout layout(testing::tiny_config(2, 40, 4, 16, 100));  // alignment gaps
  std::string error;
  std::unique_ptr<cu::Context> ctx = cu::Context::create(&error);
  CpuDevice plain_device, dopt_device;
  InPlaceComm dp(world);
  std::unique_ptr<Comm> one = make_local_comm();  // TP 1: the model-parallel group
  Replica plain(layout, whole_arena_shard(layout), dp, *ctx, plain_device);
  Replica dopt(layout, distributed_shard(layout, bucket_elems, world.size(), world.rank()), dp,
               *ctx, dopt_device);
  const std::string me = "rank " + std::to_string(world.rank()) + ", buckets of " +
                         std::to_string(bucket_elems) + ": ";
  for (int step = 1; step <= 2; step++) {
    Result<double> a = train_step(layout, plain, *ctx, *one, world.rank(), step);
    if (!a) return me + "all-reduce path: " + a.status().message();
    Result<double> b = train_step(layout, dopt, *ctx, world, world.rank(), step);
    if (!b) return me + "distributed optimizer: " + b.status().message();
    if (std::fabs(*a - *b) > 1e-12 * *a)
      return me + "step " + std::to_string(step) + ": grad norm " + std::to_string(*b) +
             ", the all-reduce path's " + std::to_string(*a);
    for (const ParamTensor& t : layout.tensors())
      for (size_t i = 0; i < t.numel; i++)
        if (dopt.master[t.offset + i] != plain.master[t.offset + i])
          return me + "step " + std::to_string(step) + ": " + t.name + "[" + std::to_string(i) +
                 "] = " + std::to_string(dopt.master[t.offset + i]) + ", the all-reduce path's " +
                 std::to_string(plain.master[t.offset + i]) + " (tolerance 0)";
  }
  const size_t buckets = dopt.adam->shard().buckets.size();
  if (dp.reduce_scatters != 2 * static_cast<int>(buckets))
    return me + std::to_string(dp.reduce_scatters) + " reduce-scatters for 2 steps of " +
           std::to_string(buckets) + " buckets";
  const size_t full = plain_device.usage(MemoryCategory::kOptimizer).current;
  const size_t half = dopt_device.usage(MemoryCategory::kOptimizer).current;
  if (!(half * 10 <= full * 6 && half * 10 >= full * 4))
    return me + "optimizer memory " + std::to_string(half) + " B, without sharding " +
           std::to_string(full) + " B: not about half";
  return "";
}

// Two model chunks of one rank (an interleaved pipeline stage), as GpuLoop runs them: one
// GradReducer over both arenas, each chunk's AdamW over its own shard of its own buckets,
// ranges marked ready chunk after chunk (the last chunk's backward ends first), the norm each
// chunk's share summed, every chunk's master weights all-gathered. Both chunks' weights and the
// norms equal the all-reduce path's (a replica per chunk, summed norm).
std::string compare_two_chunks(Comm& world, size_t bucket_elems) {
  const std::vector<ParamLayout> layouts = {ParamLayout(testing::tiny_config(2, 40, 4, 16, 100)),
                                            ParamLayout(testing::tiny_config(1, 40, 4, 16, 100))};
  std::string error;
  std::unique_ptr<cu::Context> ctx = cu::Context::create(&error);
  CpuDevice plain_device, dopt_device;
  InPlaceComm dp(world);
  std::vector<std::unique_ptr<Replica>> plain, dopt;  // per chunk; dopt's own reducers unused
  std::vector<gpu::ReducedArena> arenas;
  for (const ParamLayout& layout : layouts) {
    plain.push_back(
        std::make_unique<Replica>(layout, whole_arena_shard(layout), dp, *ctx, plain_device));
    dopt.push_back(std::make_unique<Replica>(
        layout, distributed_shard(layout, bucket_elems, world.size(), world.rank()), dp, *ctx,
        dopt_device));
    arenas.push_back({dopt.back()->grads.data(), &layout, &dopt.back()->adam->shard()});
  }
  gpu::GradReducer reducer(dp, *ctx, 0, arenas);
  const std::string me = "rank " + std::to_string(world.rank()) + ", two chunks, buckets of " +
                         std::to_string(bucket_elems) + ": ";
  for (int step = 1; step <= 2; step++) {
    // The all-reduce path first, then the shared reducer (one communicator: never both at once).
    double plain_squares = 0, dopt_squares = 0;
    for (int chunk = 1; chunk >= 0; chunk--) {
      const ParamLayout& layout = layouts[chunk];
      fill_gradients(layout, world.rank() + 2 * chunk, step, plain[chunk]->grads);
      for (int i = static_cast<int>(layout.tensors().size()) - 1; i >= 0; i--)
        plain[chunk]->reducer->ready(i, i + 1);
      if (Status s = plain[chunk]->reducer->finish(); !s) return me + s.message();
      plain_squares += plain[chunk]->adam->sum_squares(plain[chunk]->grads.data());
    }
    for (int chunk = 1; chunk >= 0; chunk--) {  // the last chunk's backward ends first
      const ParamLayout& layout = layouts[chunk];
      fill_gradients(layout, world.rank() + 2 * chunk, step, dopt[chunk]->grads);
      for (int i = static_cast<int>(layout.tensors().size()) - 1; i >= 0; i--)
        reducer.ready(chunk, i, i + 1);
    }
    if (Status s = reducer.finish(); !s) return me + s.message();
    for (int chunk = 0; chunk < 2; chunk++)
      dopt_squares += dopt[chunk]->adam->sum_squares(dopt[chunk]->grads.data());
    if (Status s = world.all_reduce(&dopt_squares, 1, DType::kFloat64, ReduceOp::kSum); !s)
      return me + s.message();
    const double a = std::sqrt(plain_squares), b = std::sqrt(dopt_squares);
    if (std::fabs(a - b) > 1e-12 * a)
      return me + "step " + std::to_string(step) + ": grad norm " + std::to_string(b) +
             ", the all-reduce path's " + std::to_string(a);
    for (int chunk = 0; chunk < 2; chunk++) {
      Replica& p = *plain[chunk];
      Replica& d = *dopt[chunk];
      p.adam->update(p.master.data(), p.grads.data(), 1e-2, clip_coefficient(a, 1.0f));
      d.adam->update(d.master.data(), d.grads.data(), 1e-2, clip_coefficient(b, 1.0f));
      if (Status s = reducer.gather_params(chunk, dopt[chunk]->master.data(), cu::ComputeCopy{});
          !s)
        return me + s.message();
    }
    if (std::string e = ctx->synchronize(); !e.empty()) return me + e;
    for (int chunk = 0; chunk < 2; chunk++)
      for (const ParamTensor& t : layouts[chunk].tensors())
        for (size_t i = 0; i < t.numel; i++) {
          const float got = dopt[chunk]->master[t.offset + i];
          const float want = plain[chunk]->master[t.offset + i];
          if (got != want)
            return me + "step " + std::to_string(step) + ": chunk " + std::to_string(chunk) + " " +
                   t.name + "[" + std::to_string(i) + "] = " + std::to_string(got) +
                   ", the all-reduce path's " + std::to_string(want) + " (tolerance 0)";
        }
  }
  size_t buckets = 0;
  for (int chunk = 0; chunk < 2; chunk++) buckets += dopt[chunk]->adam->shard().buckets.size();
  if (dp.reduce_scatters != 2 * static_cast<int>(buckets))
    return me + std::to_string(dp.reduce_scatters) + " reduce-scatters for 2 steps of " +
           std::to_string(buckets) + " buckets";
  return "";
}

std::string worker_run(Comm& world) {
  for (size_t bucket_elems : {size_t{1000}, size_t{1}})
    if (std::string e = compare_paths(world, bucket_elems); !e.empty()) return e;
  for (size_t bucket_elems : {size_t{1000}, size_t{1}})
    if (std::string e = compare_two_chunks(world, bucket_elems); !e.empty()) return e;
  return "";
}

int worker() {
  Result<std::unique_ptr<Comm>> world = make_world_comm();
  if (!world) {
    std::fprintf(stderr, "worker: %s\n", world.status().message().c_str());
    return 1;
  }
  return testing::end_worker(*world, worker_run(**world));
}

}  // namespace

class GpuOptimizerOnHost : public QObject {
  Q_OBJECT

 private slots:
  void distributed_optimizer_steps_as_the_all_reduce_path() {
    const QString self =
        QString::fromStdString(std::filesystem::read_symlink("/proc/self/exe").string());
    const testing::Run run = testing::run_mpi(2, self, {"--worker"}, {}, 120000);
    QVERIFY2(run.exit_code == 0, qPrintable("DP 2: " + run.err + run.out));
  }
};

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--worker") return worker();
  GpuOptimizerOnHost test;
  return QTest::qExec(&test, argc, argv);
}

#include "test_gpu_optimizer_on_host.moc"
