// GradReducer (optim/grad_reducer.h) on the CPU device, this program rerun as two MPI ranks
// (--worker). Specifies that two steps of the distributed optimizer (gradients marked ready
// tensor by tensor in backward order, each bucket reduce-scattered on the data-parallel side
// stream once its tensors are ready, AdamW on the shard the reducer owns, the norm summed over
// the ranks, master weights all-gathered) leave every rank with exactly the weights and grad
// norms of the all-reduce path with an AdamW over the whole arena; that the reducer's shards
// are the distributed optimizer's (optimizer_shard.h, which the GPU loop's AdamW is cut by);
// that the moments take about half the memory; and the same for two model chunks of one rank
// (an interleaved pipeline stage) whose reducers share one side stream and communicator; and
// that gather_master rebuilds the whole master arena from the ranks' packed pieces.
// Not covered here: CUDA streams and NCCL (the GPU set), the CPU trainer's whole runs
// (test_parallel_equivalence).
#include <QtTest/QtTest>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/mpi_worker.h"
#include "common/process.h"
#include "common/tiny_model.h"
#include "device/cpu_device.h"
#include "optim/adamw.h"
#include "optim/grad_reducer.h"
#include "optim/grad_scaling.h"
#include "optim/optimizer_shard.h"

using namespace lattice;

namespace {

OptimizerConfig adam_config() {
  OptimizerConfig c;
  c.weight_decay = 0.1f;
  return c;
}

// One rank's state of one model chunk: master weights, gradients, the reducer and an AdamW
// over the ranges the reducer owns (the whole arena on the all-reduce path), its moments on
// `device`.
struct Replica {
  Replica(const ParamLayout& layout, Device& device, Stream& dp_stream, Comm& dp, bool distributed,
          size_t bucket_elems)
      : master(layout.total_numel()), grads(layout.total_numel()) {
    for (const ParamTensor& t : layout.tensors())
      for (size_t i = 0; i < t.numel; i++)
        master[t.offset + i] = 0.05f * std::sin(0.37f * static_cast<float>(t.offset + i));
    auto made =
        GradReducer<float>::create(device, dp_stream, layout, &dp, distributed, bucket_elems,
                                   grads.data(), master.data(), DType::kFloat32);
    if (!made) qFatal("GradReducer: %s", made.status().message().c_str());
    reducer = std::move(*made);
    auto adam =
        AdamW<float>::create(device, owned_shard(layout, reducer->owned_ranges()), adam_config());
    if (!adam) qFatal("AdamW: %s", adam.status().message().c_str());
    this->adam = std::move(*adam);
  }
  std::vector<float> master, grads;  // (numel) each
  std::unique_ptr<GradReducer<float>> reducer;
  std::unique_ptr<AdamW<float>> adam;
};

// Rank-dependent gradients of step `step` (zero in the alignment gaps, as backward leaves them).
void fill_gradients(const ParamLayout& layout, int rank, int step, std::vector<float>& g) {
  std::fill(g.begin(), g.end(), 0.0f);
  for (const ParamTensor& t : layout.tensors())
    for (size_t i = 0; i < t.numel; i++) {
      const size_t k = t.offset + i;
      g[k] = 1e-2f * std::cos(0.11f * static_cast<float>(k) + 1.3f * rank + 0.7f * step);
    }
}

// Backward's half of a step for the chunks (the last chunk's backward ends first): the
// gradients, every tensor marked ready from the last one down, then every reducer finished.
// Returns this rank's sum of squares over what its optimizers own.
Result<double> reduce(const std::vector<ParamLayout>& layouts,
                      std::vector<std::unique_ptr<Replica>>& chunks, int rank, int step) {
  for (int c = static_cast<int>(chunks.size()) - 1; c >= 0; c--) {
    Replica& r = *chunks[c];
    r.reducer->start_iteration();
    fill_gradients(layouts[c], rank + 2 * c, step, r.grads);
    for (int i = static_cast<int>(layouts[c].tensors().size()) - 1; i >= 0; i--)
      if (Status s = r.reducer->mark_ready(i, i + 1); !s) return s;
  }
  double squares = 0;
  for (auto& r : chunks) {
    if (Status s = r->reducer->finish(); !s) return s;
    squares += r->adam->sum_squares(r->grads.data());
  }
  return squares;
}

// The optimizer's half: AdamW (clipped at 1.0) on every chunk, then the gather.
Status step_and_gather(std::vector<std::unique_ptr<Replica>>& chunks, double norm) {
  for (auto& r : chunks) {
    r->adam->update(r->master.data(), r->grads.data(), 1e-2, clip_coefficient(norm, 1.0f));
    if (Status s = r->reducer->gather_params(); !s) return s;
  }
  return Status::ok();
}

// Buckets of `bucket_elems`: 1000 makes several buckets of several tensors whose shards cut
// some tensors; 1 makes a bucket per tensor, so every tensor is cut (the no-decay ones too).
std::string compare_paths(Comm& world, const std::vector<ParamLayout>& layouts,
                          size_t bucket_elems) {
  const std::string me = "rank " + std::to_string(world.rank()) + ", " +
                         std::to_string(layouts.size()) + " chunk(s), buckets of " +
                         std::to_string(bucket_elems) + ": ";
  CpuDevice plain_device, dopt_device;
  Result<std::unique_ptr<Comm>> dp = dopt_device.make_comm(world);
  if (!dp) return me + dp.status().message();
  Result<Stream*> plain_stream = plain_device.new_stream("data-parallel");
  Result<Stream*> dopt_stream = dopt_device.new_stream("data-parallel");
  if (!plain_stream || !dopt_stream) return me + "no side stream";
  std::vector<std::unique_ptr<Replica>> plain, dopt;
  for (const ParamLayout& layout : layouts) {
    plain.push_back(
        std::make_unique<Replica>(layout, plain_device, **plain_stream, **dp, false, bucket_elems));
    dopt.push_back(
        std::make_unique<Replica>(layout, dopt_device, **dopt_stream, **dp, true, bucket_elems));
  }
  // The reducer's shards are the distributed optimizer's, which the GPU loop's AdamW uses.
  // Agreed over the ranks, so that no rank goes on into a collective the other left.
  std::string shard_error;
  for (size_t c = 0; c < layouts.size() && shard_error.empty(); c++) {
    const OptimizerShard want =
        distributed_shard(layouts[c], bucket_elems, world.size(), world.rank());
    if (dopt[c]->reducer->owned_ranges() != want.owned)
      shard_error = "chunk " + std::to_string(c) + ": owned ranges differ from distributed_shard's";
    else if (dopt[c]->reducer->num_buckets() != static_cast<int>(want.buckets.size()))
      shard_error = "chunk " + std::to_string(c) + ": bucket count differs";
  }
  int failed = shard_error.empty() ? 0 : 1;
  if (Status s = world.all_reduce(&failed, 1, DType::kInt32, ReduceOp::kMax); !s)
    return me + s.message();
  if (failed) return me + (shard_error.empty() ? "another rank's shards differ" : shard_error);
  size_t arena = 0;
  for (const ParamLayout& layout : layouts) arena += layout.total_numel();
  for (int step = 1; step <= 2; step++) {
    Result<double> a = reduce(layouts, plain, world.rank(), step);
    if (!a) return me + "all-reduce path: " + a.status().message();
    Result<double> b = reduce(layouts, dopt, world.rank(), step);
    if (!b) return me + "distributed optimizer: " + b.status().message();
    double squares = *b;
    if (Status s = world.all_reduce(&squares, 1, DType::kFloat64, ReduceOp::kSum); !s)
      return me + s.message();
    const double plain_norm = std::sqrt(*a), dopt_norm = std::sqrt(squares);
    if (std::fabs(plain_norm - dopt_norm) > 1e-12 * plain_norm)
      return me + "step " + std::to_string(step) + ": grad norm " + std::to_string(dopt_norm) +
             ", the all-reduce path's " + std::to_string(plain_norm);
    if (Status s = step_and_gather(plain, plain_norm); !s) return me + s.message();
    if (Status s = step_and_gather(dopt, dopt_norm); !s) return me + s.message();
    for (size_t c = 0; c < layouts.size(); c++)
      for (const ParamTensor& t : layouts[c].tensors())
        for (size_t i = 0; i < t.numel; i++) {
          const float got = dopt[c]->master[t.offset + i];
          const float want = plain[c]->master[t.offset + i];
          if (got != want)
            return me + "step " + std::to_string(step) + ": chunk " + std::to_string(c) + " " +
                   t.name + "[" + std::to_string(i) + "] = " + std::to_string(got) +
                   ", the all-reduce path's " + std::to_string(want) + " (tolerance 0)";
        }
  }
  // Every gradient element reduce-scattered once a step and every weight gathered once; the
  // same arena all-reduced on the other path.
  const CommStats& st = (*dp)->stats();
  const uint64_t want = 2 * arena * sizeof(float);
  if (st.reduce_scatter_bytes != want || st.all_gather_bytes != want || st.all_reduce_bytes != want)
    return me + "moved " + std::to_string(st.reduce_scatter_bytes) + " B reduce-scattered, " +
           std::to_string(st.all_gather_bytes) + " B gathered, " +
           std::to_string(st.all_reduce_bytes) + " B all-reduced; want " + std::to_string(want) +
           " B each";
  // Note [master weights in the optimizer] (adamw.h): the whole master arena rebuilt from every
  // rank's pieces packed as the optimizer packs them, into rank 0 while rank 1 only sends,
  // alignment gaps zero. Agreed over the ranks, as the shards above.
  std::string gather_error;
  for (size_t c = 0; c < layouts.size(); c++) {
    const OptimizerShard& shard = dopt[c]->adam->shard();
    std::vector<float> packed(shard.state_numel);
    for (const OptimizerPiece& p : shard.pieces)
      std::copy_n(dopt[c]->master.begin() + p.offset, p.numel, packed.begin() + p.state);
    std::vector<float> whole(layouts[c].total_numel(), std::nanf(""));
    const bool keeps = world.rank() == 0;
    if (Status s =
            dopt[c]->reducer->gather_master(shard, packed.data(), keeps ? whole.data() : nullptr);
        !s)
      return me + "gather_master: " + s.message();
    for (size_t k = 0; keeps && k < whole.size() && gather_error.empty(); k++)
      if (!(whole[k] == plain[c]->master[k]))
        gather_error = "gather_master: chunk " + std::to_string(c) + " arena[" + std::to_string(k) +
                       "] = " + std::to_string(whole[k]) + ", the weights' " +
                       std::to_string(plain[c]->master[k]) + " (tolerance 0)";
  }
  failed = gather_error.empty() ? 0 : 1;
  if (Status s = world.all_reduce(&failed, 1, DType::kInt32, ReduceOp::kMax); !s)
    return me + s.message();
  if (failed) return me + (gather_error.empty() ? "another rank's gather differs" : gather_error);
  const size_t full = plain_device.usage(MemoryCategory::kOptimizer).current;
  const size_t half = dopt_device.usage(MemoryCategory::kOptimizer).current;
  if (!(half * 10 <= full * 6 && half * 10 >= full * 4))
    return me + "optimizer memory " + std::to_string(half) + " B, without sharding " +
           std::to_string(full) + " B: not about half";
  return "";
}

std::string worker_run(Comm& world) {
  const std::vector<ParamLayout> one = {ParamLayout(testing::tiny_config(2, 40, 4, 16, 100))};
  const std::vector<ParamLayout> two = {ParamLayout(testing::tiny_config(2, 40, 4, 16, 100)),
                                        ParamLayout(testing::tiny_config(1, 40, 4, 16, 100))};
  for (const auto* layouts : {&one, &two})
    for (size_t bucket_elems : {size_t{1000}, size_t{1}})
      if (std::string e = compare_paths(world, *layouts, bucket_elems); !e.empty()) return e;
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

class GradReducerTest : public QObject {
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
  GradReducerTest test;
  return QTest::qExec(&test, argc, argv);
}

#include "test_grad_reducer.moc"
