// The optimizer's range arithmetic (engine/src/optim/optimizer_shard.h), on the CPU in every
// build. Specifies that:
//   - without the distributed optimizer a rank owns the whole arena, one piece per tensor,
//     moments packed without the alignment gaps;
//   - with it the data-parallel ranks' shards tile the arena and every tensor exactly once,
//     shards are the CPU engine's bucket split (split_buckets, shard_counts), pieces cut at
//     shard boundaries keep their tensor's decay and norm flags, and the moments are packed as
//     the host AdamW over the same owned ranges (GradReducer::owned_ranges) packs them;
//   - the counted pieces of all ranks add up to the whole model's sum of squares, each counted
//     gradient once (also on a tensor-parallel rank > 0, whose replicas do not count), and
//     AdamW::sum_squares is that sum;
//   - state_of finds a piece's moments and refuses a range outside one piece;
//   - AdamW<bf16> made on a device (AdamW::create) over a distributed shard steps exactly as
//     the host AdamW<float> over the same owned ranges, writes the 16-bit copy of the owned
//     weights (the updated master rounded) and nothing else, and keeps its moments on the
//     device (category optimizer).
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>

#include "common/tiny_model.h"
#include "device/cpu_device.h"
#include "optim/adamw.h"
#include "optim/grad_buckets.h"
#include "optim/optimizer_shard.h"

using namespace lattice;

namespace {

// Hidden 40 leaves alignment gaps between tensors; vocabulary 100 pads to 128.
ModelConfig model() {
  return testing::tiny_config(2, 40, 4, 16, 100);
}

// Gradients that differ everywhere, zero in the alignment gaps (as the device's are).
std::vector<float> gradients(const ParamLayout& layout) {
  std::vector<float> g(layout.total_numel(), 0.0f);
  for (const ParamTensor& t : layout.tensors())
    for (size_t i = 0; i < t.numel; i++)
      g[t.offset + i] = 1e-2f * static_cast<float>((t.offset + i) % 89) - 0.4f;
  return g;
}

// The squares of the shard's pieces that count in the global norm.
double piece_squares(const OptimizerShard& s, const std::vector<float>& g) {
  double sum = 0;
  for (const OptimizerPiece& p : s.pieces)
    if (p.counts_in_norm)
      for (size_t i = p.offset; i < p.offset + p.numel; i++)
        sum += static_cast<double>(g[i]) * g[i];
  return sum;
}

// Every rank's shard tiles the arena and every tensor once; pieces keep their tensor's flags
// and pack as the CPU AdamW; norms add up. Returns how many tensors were cut.
int check_distributed(const ParamLayout& layout, size_t bucket_elems, int dp) {
  const std::vector<ParamTensor>& tensors = layout.tensors();
  std::vector<int> owner(layout.total_numel(), -1);
  std::vector<int> covered(layout.total_numel(), 0);
  const std::vector<float> g = gradients(layout);
  double whole = 0;
  for (const ParamTensor& t : tensors)
    if (t.counts_in_norm)
      for (size_t i = 0; i < t.numel; i++)
        whole += static_cast<double>(g[t.offset + i]) * g[t.offset + i];
  double squares = 0;
  size_t states = 0;
  int cut = 0;
  const std::vector<BucketSpan> split = split_buckets(layout, bucket_elems);
  for (int rank = 0; rank < dp; rank++) {
    const OptimizerShard s = distributed_shard(layout, bucket_elems, dp, rank);
    const QString who = QString("rank %1 of %2, buckets of %3").arg(rank).arg(dp).arg(bucket_elems);
    if (!s.distributed) qFatal("%s: not distributed", qPrintable(who));
    // The CPU engine's buckets, each cut in rank order by shard_counts.
    if (s.buckets.size() != split.size()) qFatal("%s: bucket count", qPrintable(who));
    for (size_t b = 0; b < split.size(); b++) {
      const ShardBucket& x = s.buckets[b];
      const std::vector<size_t> counts = shard_counts(split[b].end - split[b].begin, dp);
      size_t begin = split[b].begin;
      for (int r = 0; r < rank; r++) begin += counts[r];
      if (x.begin != split[b].begin || x.end != split[b].end || x.counts != counts ||
          x.shard_begin != begin || x.first_tensor != split[b].first_tensor ||
          x.last_tensor != split[b].last_tensor)
        qFatal("%s: bucket %zu is not the CPU engine's", qPrintable(who), b);
    }
    for (const ArenaRange& r : s.owned)
      for (size_t i = r.first; i < r.second; i++) {
        if (owner[i] != -1)
          qFatal("%s: arena element %zu also owned by rank %d", qPrintable(who), i, owner[i]);
        owner[i] = rank;
      }
    // The CPU AdamW over the same owned ranges packs its moments as the pieces do.
    AdamW<float> cpu(layout, OptimizerConfig{}, s.owned);
    const auto views = cpu.state_views();
    if (views.size() != s.pieces.size())
      qFatal("%s: %zu pieces, the CPU AdamW has %zu segments", qPrintable(who), s.pieces.size(),
             views.size());
    for (size_t k = 0; k < s.pieces.size(); k++) {
      const OptimizerPiece& p = s.pieces[k];
      const ParamTensor& t = tensors[p.tensor];
      if (p.offset < t.offset || p.offset + p.numel > t.offset + t.numel)
        qFatal("%s: piece %zu [%zu, +%zu) outside tensor %s", qPrintable(who), k, p.offset, p.numel,
               t.name.c_str());
      if (p.decay != t.decay || p.counts_in_norm != t.counts_in_norm)
        qFatal("%s: piece %zu of %s lost its tensor's flags", qPrintable(who), k, t.name.c_str());
      if (views[k].offset != p.offset || views[k].numel != p.numel ||
          views[k].exp_avg != cpu.exp_avg().data() + p.state)
        qFatal("%s: piece %zu of %s: moments at %zu, the CPU AdamW's at %zu", qPrintable(who), k,
               t.name.c_str(), p.state,
               static_cast<size_t>(views[k].exp_avg - cpu.exp_avg().data()));
      if (p.numel < t.numel) cut++;
      for (size_t i = p.offset; i < p.offset + p.numel; i++) covered[i]++;
      if (s.state_of(p.offset, p.numel) != p.state)
        qFatal("%s: state_of piece %zu", qPrintable(who), k);
    }
    if (s.state_numel != cpu.exp_avg().size()) qFatal("%s: state_numel", qPrintable(who));
    states += s.state_numel;
    const double mine = piece_squares(s, g);
    if (std::fabs(mine - cpu.sum_squares(g.data())) > 1e-9 * (1 + mine))
      qFatal("%s: counted pieces %.17g, AdamW's sum of squares %.17g", qPrintable(who), mine,
             cpu.sum_squares(g.data()));
    squares += mine;
  }
  for (size_t i = 0; i < owner.size(); i++)
    if (owner[i] == -1)
      qFatal("dp %d, buckets of %zu: arena element %zu has no owner", dp, bucket_elems, i);
  for (const ParamTensor& t : tensors)
    for (size_t i = 0; i < t.numel; i++)
      if (covered[t.offset + i] != 1)
        qFatal("dp %d: %s[%zu] is in %d pieces", dp, t.name.c_str(), i, covered[t.offset + i]);
  size_t params = 0;
  for (const ParamTensor& t : tensors) params += t.numel;
  if (states != params) qFatal("dp %d: %zu moment elements for %zu parameters", dp, states, params);
  if (std::fabs(squares - whole) > 1e-9 * whole)
    qFatal("dp %d: the ranks' counted pieces sum to %.17g, the model's counted gradients to %.17g",
           dp, squares, whole);
  return cut;
}

}  // namespace

class OptimizerShardTest : public QObject {
  Q_OBJECT

 private slots:
  void without_the_distributed_optimizer_a_rank_owns_the_whole_arena() {
    const ParamLayout layout(model());
    const OptimizerShard s = whole_arena_shard(layout);
    QVERIFY(!s.distributed);
    QCOMPARE(s.owned.size(), size_t{1});
    QCOMPARE(s.owned[0], (ArenaRange{0, layout.total_numel()}));
    QCOMPARE(s.pieces.size(), layout.tensors().size());
    size_t packed = 0;
    for (size_t i = 0; i < s.pieces.size(); i++) {
      const ParamTensor& t = layout.tensors()[i];
      QCOMPARE(s.pieces[i].offset, t.offset);
      QCOMPARE(s.pieces[i].numel, t.numel);
      QCOMPARE(s.pieces[i].state, packed);  // moments packed: the gaps between tensors skipped
      QCOMPARE(s.pieces[i].decay, t.decay);
      QVERIFY(s.pieces[i].counts_in_norm);  // TP 1: every tensor counts
      packed += t.numel;
    }
    QCOMPARE(s.state_numel, packed);
    QVERIFY2(packed < layout.total_numel(), "no alignment gap: the packing check proves little");
    // owned_shard with no ranges is the whole arena.
    QCOMPARE(owned_shard(layout, {}).state_numel, packed);
  }

  void data_parallel_shards_tile_the_arena_and_keep_tensor_flags() {
    const ParamLayout layout(model());
    // One bucket (the default size), then small buckets that cut tensors of both decay kinds.
    for (int dp : {2, 3, 4}) {
      QVERIFY(check_distributed(layout, 40000000, dp) > 0);
      QVERIFY(check_distributed(layout, 1000, dp) > 0);
      QVERIFY(check_distributed(layout, 1, dp) >= 0);  // a bucket per tensor
    }
    // A bucket per tensor cuts every tensor, the no-decay ones too (the flags then matter).
    bool cut_no_decay = false;
    for (int rank = 0; rank < 3; rank++)
      for (const OptimizerPiece& p : distributed_shard(layout, 1, 3, rank).pieces)
        cut_no_decay = cut_no_decay || (!p.decay && p.numel < layout.tensors()[p.tensor].numel);
    QVERIFY2(cut_no_decay, "no no-decay tensor is cut: the decay check proves little");
  }

  // Note [LoRA]: a bucket holds frozen tensors alone or trained ones alone, whatever its size,
  // so the trained buckets are the adapters (with the gaps before the tensors above them) and
  // the reducer, which skips the frozen ones, moves nothing else. Each layer's adapters are its
  // last tensors: one trained bucket per layer when buckets are large. Each trained bucket,
  // shifted into the gradient arena (ParamTensor::grad_offset) as GradReducer shifts it, lies
  // inside that arena, and together they tile it: rank 4 makes every adapter a multiple of the
  // 16-element alignment, rank 3 leaves gaps after them (3 x 40 = 120 elements).
  void lora_buckets_hold_frozen_or_trained_tensors_alone() {
    for (int rank : {4, 3}) {
      ModelConfig c = model();
      c.lora_rank = rank;
      const ParamLayout layout(c);
      const std::vector<ParamTensor>& t = layout.tensors();
      size_t adapters = 0;
      for (const ParamTensor& x : t) adapters += x.frozen ? 0 : x.numel;
      QVERIFY(adapters > 0 && adapters < layout.total_numel() / 4);
      for (size_t bucket : {size_t{40000000}, size_t{1000}, size_t{1}}) {
        const QString what = QString("rank %1, bucket size %2").arg(rank).arg(bucket);
        size_t trained = 0, trained_buckets = 0, end = layout.total_numel();
        size_t grad_end = layout.grad_numel();  // the trained buckets tile it, top down
        for (const BucketSpan& b : split_buckets(layout, bucket)) {
          QCOMPARE(b.end, end);  // backward order, tiling the arena
          end = b.begin;
          const bool frozen = t[b.first_tensor].frozen;
          for (int i = b.first_tensor; i < b.last_tensor; i++)
            QVERIFY2(
                t[i].frozen == frozen,
                qPrintable(what + QString(": %1 and %2 share a bucket")
                                      .arg(t[b.first_tensor].name.c_str(), t[i].name.c_str())));
          if (frozen) continue;
          trained += b.end - b.begin, trained_buckets++;
          const size_t shift = t[b.first_tensor].offset - t[b.first_tensor].grad_offset;
          QVERIFY2(b.end - shift == grad_end,
                   qPrintable(what + QString(": a trained bucket's gradients end at %1, the next "
                                             "begin at %2")
                                         .arg(b.end - shift)
                                         .arg(grad_end)));
          grad_end = b.begin - shift;
        }
        QCOMPARE(end, size_t{0});
        QCOMPARE(grad_end, size_t{0});
        QCOMPARE(trained, layout.grad_numel());
        // Rank 4: no gap falls in a trained bucket, which hold the adapters exactly.
        if (rank == 4) QCOMPARE(trained, adapters);
        if (bucket == 40000000) QCOMPARE(trained_buckets, size_t{2});  // one per layer
      }
    }
  }

  void a_tensor_parallel_rank_counts_only_its_own_slices() {
    ModelShard shard;
    shard.tp_rank = 1;
    shard.tp_size = 2;
    const ParamLayout layout(model(), shard);
    bool replicas = false;
    for (const ParamTensor& t : layout.tensors()) replicas = replicas || !t.counts_in_norm;
    QVERIFY2(replicas, "TP rank 1 holds no replicated tensor: the test proves nothing");
    QVERIFY(check_distributed(layout, 1000, 2) > 0);
    // The whole arena's counted pieces skip the replicas as well.
    const std::vector<float> g = gradients(layout);
    const OptimizerShard whole = whole_arena_shard(layout);
    AdamW<float> cpu(layout, OptimizerConfig{});
    QCOMPARE(piece_squares(whole, g), cpu.sum_squares(g.data()));
  }

  void state_of_refuses_ranges_outside_one_piece() {
    const ParamLayout layout(model());
    const OptimizerShard s = distributed_shard(layout, 1000, 2, 1);
    const OptimizerPiece& p = s.pieces[1];
    QCOMPARE(s.state_of(p.offset + 1, p.numel - 1), p.state + 1);
    QCOMPARE(s.state_of(p.offset, p.numel + 1), OptimizerShard::npos);
    // An element rank 0 owns.
    const OptimizerShard other = distributed_shard(layout, 1000, 2, 0);
    QCOMPARE(s.state_of(other.pieces[0].offset, 1), OptimizerShard::npos);
  }

  void adamw_on_a_device_steps_its_pieces_and_writes_the_16_bit_copy() {
    const ParamLayout layout(model());
    const OptimizerShard shard = distributed_shard(layout, 1000, 2, 1);
    OptimizerConfig c;
    c.weight_decay = 0.1f;
    CpuDevice device;
    Result<std::unique_ptr<AdamW<bf16>>> made = AdamW<bf16>::create(device, shard, c);
    QVERIFY2(made, made ? "" : made.status().message().c_str());
    AdamW<bf16>& adam = **made;
    QCOMPARE(device.usage(MemoryCategory::kOptimizer).current,
             2 * shard.state_numel * sizeof(float));
    AdamW<float> host(layout, c, shard.owned);
    std::vector<float> master(layout.total_numel()), reference;
    for (size_t i = 0; i < master.size(); i++) master[i] = 0.05f * std::sin(0.37f * i);
    reference = master;
    const bf16 untouched = to_bf16(-7.0f);
    std::vector<bf16> copy(layout.total_numel(), untouched);
    for (int step = 1; step <= 2; step++) {
      const std::vector<float> g = gradients(layout);
      adam.update(master.data(), g.data(), 1e-2, 0.5, copy.data());
      host.update(reference.data(), g.data(), 1e-2, 0.5);
    }
    std::vector<bool> owned(layout.total_numel(), false);
    for (const OptimizerPiece& p : shard.pieces)
      for (size_t i = p.offset; i < p.offset + p.numel; i++) owned[i] = true;
    for (size_t i = 0; i < master.size(); i++) {
      if (std::memcmp(&master[i], &reference[i], sizeof(float)) != 0)
        QFAIL(qPrintable(QString("master[%1] = %2, the host AdamW's %3 (bit for bit)")
                             .arg(i)
                             .arg(master[i])
                             .arg(reference[i])));
      const bf16 want = owned[i] ? to_bf16(master[i]) : untouched;
      if (std::memcmp(&copy[i], &want, sizeof(bf16)) != 0)
        QFAIL(qPrintable(QString("copy[%1] = %2, expected %3 (%4 element)")
                             .arg(i)
                             .arg(from_bf16(copy[i]))
                             .arg(from_bf16(want))
                             .arg(owned[i] ? "an owned" : "a foreign")));
    }
    QCOMPARE(adam.steps_taken(), 2);
  }

  void the_options_choose_the_shard() {
    const ParamLayout layout(model());
    TrainOptions o;
    QVERIFY(!optimizer_shard(o, layout, 2, 1).distributed);
    o.parallel.use_distributed_optimizer = true;
    QVERIFY(!optimizer_shard(o, layout, 1, 0).distributed);  // DP 1: nothing to shard
    o.parallel.ddp_bucket_size = 1000;
    const OptimizerShard s = optimizer_shard(o, layout, 2, 1);
    QVERIFY(s.distributed);
    QCOMPARE(s.buckets.size(), split_buckets(layout, 1000).size());
    // The moments shrink by DP (up to the bucket shards' rounding and the arena's gaps).
    QVERIFY(s.state_numel <= layout.total_numel() / 2 + s.buckets.size());
  }
};

QTEST_GUILESS_MAIN(OptimizerShardTest)
#include "test_optimizer_shard.moc"
