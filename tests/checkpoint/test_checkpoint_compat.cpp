// The checkpoint format of 2373ec8, issue 21's baseline, stays loadable through the one-engine
// migration (docs/one-engine.md, risk 3). The fixture, data/compat_2373ec8/ (its README.md gives
// the command), is what that commit's `lattice train` wrote at TP 2 x PP 2 x DP 2 with the
// distributed optimizer and --fp16. Specifies that:
//   - it holds what it pins: model pieces split along rows and columns, moments as
//     data-parallel shards, a loss scaler that has backed off and skipped an iteration;
//   - loaded into each rank of the layout that saved it, and into one process, every weight
//     and AdamW moment equals the bytes of its piece (read here with safetensors::File where
//     metadata.json says, not through the loader under test), and every stored element is
//     loaded by some rank;
//   - the iteration, consumed samples, step and skip counts and the scaler's state come back;
//   - `lattice train --load` continues two iterations at both layouts with the same losses
//     (within 1e-5) and the saved scaler.
#include <QtTest/QtTest>

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "checkpoint/checkpoint.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/safetensors.h"
#include "common/process.h"
#include "lattice/layout.h"
#include "lattice/storage/run_store.h"
#include "lattice/train_options.h"
#include "optim/adamw.h"
#include "optim/grad_buckets.h"
#include "parallel/model_chunks.h"

using namespace lattice;

namespace {

const char* const kFixture = LATTICE_TEST_DATA_DIR "/compat_2373ec8";
const char* const kFixtureIteration = LATTICE_TEST_DATA_DIR "/compat_2373ec8/iter_0000005";
// CRC-32C of the fixture's metadata.json, which lists every file's size and CRC-32C.
constexpr uint32_t kMetadataCrc = 0xf252dc12;
constexpr int kSavedIteration = 5;

// The fixture run's settings (data/compat_2373ec8/README.md) without its layout, --save and
// --exit-interval; it planned 7 iterations, so continuing runs to the end of the same schedule.
const QStringList kRun = {"--mock-data",
                          "--num-layers",
                          "2",
                          "--hidden-size",
                          "32",
                          "--num-attention-heads",
                          "4",
                          "--seq-length",
                          "16",
                          "--vocab-size",
                          "255",
                          "--micro-batch-size",
                          "2",
                          "--global-batch-size",
                          "8",
                          "--train-iters",
                          "7",
                          "--lr",
                          "1e-3",
                          "--lr-warmup-iters",
                          "2",
                          "--lr-decay-style",
                          "cosine",
                          "--eval-iters",
                          "0",
                          "--log-interval",
                          "1",
                          "--threads",
                          "1",
                          "--fp16",
                          "--initial-loss-scale",
                          "1e39",
                          "--hysteresis",
                          "1",
                          "--loss-scale-window",
                          "4"};
const QStringList kSavedLayout = {"--tensor-model-parallel-size", "2",
                                  "--pipeline-model-parallel-size", "2",
                                  "--use-distributed-optimizer"};
constexpr int kSavedWorld = 8;

std::vector<int64_t> int_list(const QJsonValue& v) {
  std::vector<int64_t> out;
  for (const QJsonValue& x : v.toArray()) out.push_back(x.toInteger());
  return out;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Element i (row-major) of the slice holding [begin, begin + size) of dimension `dim` (-1: the
// whole tensor) of a tensor of shape `global`, as a row-major index into the global tensor.
int64_t global_index(const std::vector<int64_t>& global, int dim, int64_t begin, int64_t size,
                     int64_t i) {
  int64_t index = 0, stride = 1;
  for (int d = static_cast<int>(global.size()) - 1; d >= 0; d--) {
    const int64_t extent = d == dim ? size : global[d];
    index += (i % extent + (d == dim ? begin : 0)) * stride;
    i /= extent;
    stride *= global[d];
  }
  return index;
}

// One stored piece as metadata.json describes it.
struct Piece {
  std::string file, key, kind, name;
  std::vector<int64_t> global_shape;
  int split_dim = -1;
  int64_t split_begin = 0, split_size = 0, flat_begin = 0, flat_end = 0;
};

// A global tensor assembled from the fixture's pieces. piece[g]: the piece that stored element
// g (-1: none).
struct StoredTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<int> piece;
};

// The fixture read without the engine's loader: metadata.json as JSON, each piece's bytes from
// its safetensors entry.
struct Fixture {
  QJsonObject meta;
  std::vector<Piece> pieces;
  std::map<std::string, StoredTensor> tensors;  // "kind/name"

  // Empty, or why the fixture cannot be read.
  QString read(const QString& iteration_dir) {
    QFile f(iteration_dir + "/metadata.json");
    if (!f.open(QIODevice::ReadOnly)) return f.fileName() + ": cannot open";
    meta = QJsonDocument::fromJson(f.readAll()).object();
    std::map<std::string, safetensors::File> files;
    for (const QJsonValue& v : meta["pieces"].toArray()) {
      const QJsonObject o = v.toObject();
      for (const char* field : {"file", "key", "kind", "name", "global_shape", "split_dim",
                                "split_begin", "split_size", "flat_begin", "flat_end"})
        if (!o.contains(field))
          return QString("%1/metadata.json: piece %2 has no \"%3\"")
              .arg(iteration_dir)
              .arg(pieces.size())
              .arg(field);
      Piece p{o["file"].toString().toStdString(), o["key"].toString().toStdString(),
              o["kind"].toString().toStdString(), o["name"].toString().toStdString(),
              int_list(o["global_shape"]),        o["split_dim"].toInt(),
              o["split_begin"].toInteger(),       o["split_size"].toInteger(),
              o["flat_begin"].toInteger(),        o["flat_end"].toInteger()};
      if (!files.count(p.file)) {
        Result<safetensors::File> opened =
            safetensors::File::open(iteration_dir.toStdString() + "/" + p.file);
        if (!opened) return QString::fromStdString(opened.status().message());
        files.emplace(p.file, std::move(*opened));
      }
      const safetensors::File& file = files.at(p.file);
      const safetensors::TensorInfo* entry = file.find(p.key);
      const int64_t n = p.flat_end - p.flat_begin;
      if (!entry || entry->dtype != safetensors::Dtype::kF32 || int64_t(entry->numel) != n)
        return QString("%1: no F32 entry %2 of %3 elements")
            .arg(p.file.c_str(), p.key.c_str())
            .arg(n);
      StoredTensor& t = tensors[p.kind + "/" + p.name];
      if (t.shape.empty()) {
        t.shape = p.global_shape;
        t.values.assign(numel(p.global_shape), 0.0f);
        t.piece.assign(numel(p.global_shape), -1);
      }
      std::vector<float> data(n);
      std::memcpy(data.data(), file.bytes(*entry).data(), n * sizeof(float));
      for (int64_t i = 0; i < n; i++) {
        const int64_t g = global_index(p.global_shape, p.split_dim, p.split_begin,
                                       p.split_dim >= 0 ? p.split_size : 0, p.flat_begin + i);
        if (t.piece[g] >= 0)
          return QString("%1 element %2 is stored twice").arg(p.key.c_str()).arg(g);
        t.values[g] = data[i];
        t.piece[g] = static_cast<int>(pieces.size());
      }
      pieces.push_back(std::move(p));
    }
    return {};
  }
};

// What one rank holds after loading: each chunk's weights by tensor, each optimizer's moments
// by owned range of a tensor.
struct LoadedWeights {
  ParamTensor tensor;
  std::vector<float> values;  // the rank's slice of the tensor
};
struct LoadedMoments {
  ParamTensor tensor;
  int64_t begin = 0;  // flat offset of the range in the rank's slice
  std::vector<float> exp_avg, exp_avg_sq;
};
struct LoadedRank {
  Status status;
  TrainState state;
  std::vector<LoadedWeights> weights;
  std::vector<LoadedMoments> moments;
};

// The ranges of a chunk's arena that data-parallel rank dp_rank's optimizer owns, as
// GradReducer::owned_ranges cuts them (its shard of every bucket); empty: all of it.
std::vector<ArenaRange> owned_ranges(const TrainOptions& o, const ParallelLayout& L,
                                     const ParamLayout& layout, int dp_rank) {
  if (!o.parallel.use_distributed_optimizer || L.dp == 1) return {};
  std::vector<ArenaRange> out;
  for (const BucketSpan& b : split_buckets(layout, ddp_bucket_elems(o.parallel, L.dp))) {
    const std::vector<size_t> counts = shard_counts(b.end - b.begin, L.dp);
    size_t begin = b.begin;
    for (int r = 0; r < dp_rank; r++) begin += counts[r];
    out.push_back({begin, begin + counts[dp_rank]});
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Rank `rank` of `o`'s layout built as `lattice ckpt reshard` builds it (a HostChunk per
// chunk), with the optimizer of `lattice train`, and the checkpoint `ref` loaded into it. The
// one place that names the engine's weight and optimizer types: the migration changes this
// function, not the checks.
LoadedRank load_rank(const TrainOptions& o, const ParallelLayout& L, int rank,
                     const CheckpointRef& ref) {
  const ParallelLayout::Coord me = L.coord(rank);
  std::vector<std::unique_ptr<HostChunk>> chunks;
  std::vector<std::unique_ptr<AdamW<float>>> optimizers;
  RankParts parts;
  parts.layout = &L;
  parts.sequence_parallel = o.parallel.sequence_parallel;
  parts.distributed_optimizer = o.parallel.use_distributed_optimizer;
  for (int c = 0; c < L.vpp; c++) {
    chunks.push_back(
        std::make_unique<HostChunk>(o.model, shard_of(L, me, c, o.parallel.sequence_parallel)));
    const ParamLayout& layout = chunks.back()->layout;
    optimizers.push_back(
        std::make_unique<AdamW<float>>(layout, o.optim, owned_ranges(o, L, layout, me.dp)));
    parts.chunks.push_back(chunks.back()->weights());
    parts.moments.push_back(moment_pieces(*optimizers.back()));
  }
  LoadedRank out;
  out.status = load_checkpoint(ref, parts, false, &out.state);
  for (size_t c = 0; c < chunks.size(); c++) {
    const HostChunk& chunk = *chunks[c];
    const auto& tensors = chunk.layout.tensors();
    const float* params = chunk.params.data();
    for (const ParamTensor& t : tensors)
      out.weights.push_back(
          {t, std::vector<float>(params + t.offset, params + t.offset + t.numel)});
    for (const auto& view : optimizers[c]->state_views()) {
      const auto t = std::find_if(tensors.begin(), tensors.end(), [&](const ParamTensor& p) {
        return view.offset >= p.offset && view.offset < p.offset + p.numel;
      });
      out.moments.push_back({*t, static_cast<int64_t>(view.offset - t->offset),
                             std::vector<float>(view.exp_avg, view.exp_avg + view.numel),
                             std::vector<float>(view.exp_avg_sq, view.exp_avg_sq + view.numel)});
    }
  }
  return out;
}

}  // namespace

class CheckpointCompat : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  Fixture fixture_;

  QString db() const { return dir_.filePath("runs.sqlite"); }

  // A private copy of the fixture (loading may remove interrupted saves in its directory).
  QString copy_of_fixture(const QString& name) {
    const QString to = dir_.filePath(name);
    std::filesystem::copy(kFixture, to.toStdString(), std::filesystem::copy_options::recursive);
    return to;
  }

  static TrainOptions options(const QStringList& layout) {
    std::vector<std::string> args;
    for (const QString& a : kRun + layout) args.push_back(a.toStdString());
    Result<TrainOptions> o = parse_train_options(args);
    if (!o) qFatal("%s", o.status().message().c_str());
    return *o;
  }

  // Compares `loaded` (elements [begin, begin + n) of the rank's slice of `t`) with the
  // fixture's stored kind/t.name bit for bit; marks the stored elements it covers in `seen`.
  void expect_stored(const char* kind, const ParamTensor& t, int64_t begin,
                     const std::vector<float>& loaded, const QString& where,
                     std::map<std::string, std::vector<char>>& seen) {
    const std::string key = std::string(kind) + "/" + t.name;
    const auto it = fixture_.tensors.find(key);
    if (it == fixture_.tensors.end()) {
      QFAIL(qPrintable(where + ": the fixture stores no " + QString::fromStdString(key)));
    }
    const StoredTensor& stored = it->second;
    QVERIFY2(stored.shape == t.global_shape,
             qPrintable(where + ": " + QString::fromStdString(key) + " has another shape"));
    std::vector<char>& marks = seen[key];
    marks.resize(stored.values.size(), 0);
    const int64_t width = t.split_dim >= 0 ? t.shape[t.split_dim] : 0;
    for (size_t i = 0; i < loaded.size(); i++) {
      const int64_t g = global_index(t.global_shape, t.split_dim, t.split_begin, width,
                                     begin + static_cast<int64_t>(i));
      marks[g] = 1;
      if (std::bit_cast<uint32_t>(loaded[i]) == std::bit_cast<uint32_t>(stored.values[g])) continue;
      QFAIL(qPrintable(QString("%1: %2 element %3 of the slice (global %4) loaded as %5; "
                               "%6 stores %7 there (bit for bit)")
                           .arg(where, QString::fromStdString(key))
                           .arg(begin + static_cast<int64_t>(i))
                           .arg(g)
                           .arg(loaded[i], 0, 'g', 9)
                           .arg(QString::fromStdString(fixture_.pieces[stored.piece[g]].file))
                           .arg(stored.values[g], 0, 'g', 9)));
    }
  }

  // Loads the fixture into every rank of `layout` (world ranks) and checks each weight and
  // moment; afterwards every element the fixture stores was loaded by some rank.
  void load_everywhere(const QStringList& layout, int world) {
    const TrainOptions o = options(layout);
    Result<ParallelLayout> L = make_layout(o, world);
    QVERIFY2(L, qPrintable(QString::fromStdString(L.status().message())));
    Result<CheckpointRef> ref =
        find_checkpoint(copy_of_fixture(QString("load-%1").arg(world)).toStdString(), 0);
    QVERIFY2(ref, qPrintable(QString::fromStdString(ref.status().message())));
    std::map<std::string, std::vector<char>> seen;
    for (int rank = 0; rank < world; rank++) {
      const LoadedRank r = load_rank(o, *L, rank, *ref);
      const QString where = QString("rank %1 of %2").arg(rank).arg(world);
      QVERIFY2(r.status, qPrintable(where + ": " + QString::fromStdString(r.status.message())));
      for (const LoadedWeights& w : r.weights) {
        expect_stored("model", w.tensor, 0, w.values, where, seen);
        if (QTest::currentTestFailed()) return;
      }
      for (const LoadedMoments& m : r.moments) {
        expect_stored("exp_avg", m.tensor, m.begin, m.exp_avg, where, seen);
        if (QTest::currentTestFailed()) return;
        expect_stored("exp_avg_sq", m.tensor, m.begin, m.exp_avg_sq, where, seen);
        if (QTest::currentTestFailed()) return;
      }
    }
    for (const auto& [key, stored] : fixture_.tensors) {
      const auto marks = seen.find(key);
      const int64_t missed = marks == seen.end()
                                 ? static_cast<int64_t>(stored.values.size())
                                 : std::count(marks->second.begin(), marks->second.end(), 0);
      QVERIFY2(missed == 0, qPrintable(QString("%1 of %2 elements of %3 reached no rank")
                                           .arg(missed)
                                           .arg(stored.values.size())
                                           .arg(QString::fromStdString(key))));
    }
  }

  // Every logged iteration's `key` of run `name`, by iteration.
  std::map<int64_t, double> series(const QString& name, const char* key) {
    std::map<int64_t, double> out;
    auto store = storage::RunStore::open(db().toStdString());
    if (!store) return out;
    auto run = (*store)->find_run(name.toStdString());
    if (!run) return out;
    auto history = (*store)->history(run->id);
    if (!history) return out;
    for (const auto& s : history->metrics)
      if (s.key == key)
        for (const auto& p : s.points) out[p.step] = p.value;
    return out;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    const QString why = fixture_.read(kFixtureIteration);
    QVERIFY2(why.isEmpty(), qPrintable(why));
  }

  // Its metadata.json's checksum pins the checksum of every file it lists: a fixture made again
  // or edited, even with its checksums rewritten to agree, is not the one 2373ec8 wrote.
  void the_fixture_is_the_one_2373ec8_wrote() {
    auto crc_of = [](const QString& path) {
      QFile f(path);
      if (!f.open(QIODevice::ReadOnly)) return QString("cannot open %1").arg(path);
      const QByteArray bytes = f.readAll();
      return QString::number(crc32c(0, bytes.data(), bytes.size()), 16).rightJustified(8, '0');
    };
    const QString dir = kFixtureIteration;
    QCOMPARE(crc_of(dir + "/metadata.json"),
             QString::number(kMetadataCrc, 16).rightJustified(8, '0'));
    const QJsonArray files = fixture_.meta["files"].toArray();
    QCOMPARE(files.size(), kSavedWorld);
    for (const QJsonValue& v : files) {
      const QString name = v.toObject()["name"].toString();
      QVERIFY2(crc_of(dir + "/" + name) == v.toObject()["crc32c"].toString(),
               qPrintable(name + ": its CRC-32C differs from metadata.json's"));
    }
  }

  // So that a fixture made again by mistake cannot quietly pin less.
  void the_fixture_holds_every_kind_of_piece() {
    const QJsonObject layout = fixture_.meta["layout"].toObject();
    QCOMPARE(layout["tp"].toInt(), 2);
    QCOMPARE(layout["pp"].toInt(), 2);
    QCOMPARE(layout["dp"].toInt(), 2);
    QVERIFY(layout["distributed_optimizer"].toBool());
    QCOMPARE(fixture_.meta["iteration"].toInt(), kSavedIteration);
    int rows = 0, columns = 0, moment_shards = 0;
    for (const Piece& p : fixture_.pieces) {
      if (p.kind == "model" && p.split_dim == 0) rows++;
      if (p.kind == "model" && p.split_dim == 1) columns++;
      const int64_t slice = numel(p.global_shape) /
                            (p.split_dim >= 0 ? p.global_shape[p.split_dim] : 1) *
                            (p.split_dim >= 0 ? p.split_size : 1);
      if (p.kind == "exp_avg" && p.flat_end - p.flat_begin < slice) moment_shards++;
    }
    QVERIFY2(rows > 0 && columns > 0 && moment_shards > 0,
             qPrintable(QString("row-split model pieces %1, column-split %2, partial moment "
                                "ranges %3: each must occur")
                            .arg(rows)
                            .arg(columns)
                            .arg(moment_shards)));
    // The scaler backed off once and one step was skipped: the counts differ from the
    // iteration and from a fresh scaler's.
    const QJsonObject scaler = fixture_.meta["grad_scaler"].toObject();
    QVERIFY(scaler["scale"].toDouble() < 1e39);
    QVERIFY(scaler["growth_tracker"].toInt() > 0);
    QVERIFY(fixture_.meta["skipped_iterations"].toInt() > 0);
    QVERIFY(fixture_.meta["steps_taken"].toInt() < kSavedIteration);
    // Each stored tensor is whole once its pieces are put together.
    for (const auto& [key, stored] : fixture_.tensors)
      QVERIFY2(std::count(stored.piece.begin(), stored.piece.end(), -1) == 0,
               qPrintable(QString::fromStdString(key) + " has elements no piece stores"));
  }

  void every_rank_of_the_saving_layout_loads_the_stored_bytes() {
    load_everywhere(kSavedLayout, kSavedWorld);
  }

  void one_process_loads_the_stored_bytes() { load_everywhere({}, 1); }

  void the_training_state_comes_back() {
    const TrainOptions o = options({});
    Result<ParallelLayout> L = make_layout(o, 1);
    QVERIFY(L);
    Result<CheckpointRef> ref = find_checkpoint(copy_of_fixture("state").toStdString(), 0);
    QVERIFY2(ref, qPrintable(QString::fromStdString(ref.status().message())));
    QCOMPARE(ref->iteration, kSavedIteration);
    const LoadedRank r = load_rank(o, *L, 0, *ref);
    QVERIFY2(r.status, r.status.message().c_str());
    const QJsonObject& m = fixture_.meta;
    const QJsonObject scaler = m["grad_scaler"].toObject();
    QCOMPARE(r.state.iteration, m["iteration"].toInt());
    QCOMPARE(r.state.consumed_samples, m["consumed_samples"].toInteger());
    QCOMPARE(r.state.valid_consumed, m["valid_consumed_samples"].toInteger());
    QCOMPARE(r.state.steps_taken, m["steps_taken"].toInt());
    QCOMPARE(r.state.skipped_iterations, m["skipped_iterations"].toInt());
    QCOMPARE(r.state.nan_iterations, m["nan_iterations"].toInt());
    QCOMPARE(r.state.loss_scale, scaler["scale"].toDouble());
    QCOMPARE(r.state.loss_scale_growth_tracker, scaler["growth_tracker"].toInt());
    QCOMPARE(r.state.loss_scale_hysteresis_tracker, scaler["hysteresis_tracker"].toInt());
  }

  // Both continuations stay below the overflow: the scale grows only by the window's rule,
  // from the saved growth tracker.
  void training_continues_alike_at_both_layouts() {
#ifndef LATTICE_MPIEXEC
    QSKIP("the saving layout needs 8 MPI ranks; this build has no MPI");
#else
    const struct {
      const char* name;
      int ranks;
      QStringList layout;
    } runs[] = {{"saved-layout", kSavedWorld, kSavedLayout}, {"one-process", 1, {}}};
    for (const auto& c : runs) {
      const testing::Run r = testing::run_lattice(
          c.ranks,
          QStringList{"train"} + kRun + c.layout +
              QStringList{"--load", copy_of_fixture(c.name), "--db", db(), "--run-name", c.name});
      QVERIFY2(r.exit_code == 0, qPrintable(c.name + QString(": ") + r.err));
      QVERIFY2(r.out.contains("continuing after iteration 5"), qPrintable(r.out));
    }
    const QJsonObject& m = fixture_.meta;
    const QJsonObject scaler = m["grad_scaler"].toObject();
    const int window = 4;  // --loss-scale-window
    for (const char* name : {"saved-layout", "one-process"}) {
      const auto consumed = series(name, "consumed samples");
      const auto scale = series(name, "loss scale");
      const auto skipped = series(name, "skipped iterations");
      QCOMPARE(consumed.size(), size_t{2});
      for (int it = kSavedIteration + 1; it <= kSavedIteration + 2; it++) {
        const int clean = it - kSavedIteration;
        QCOMPARE(consumed.at(it), m["consumed_samples"].toDouble() + 8 * clean);
        QCOMPARE(skipped.at(it), m["skipped_iterations"].toDouble());
        const int doublings = (scaler["growth_tracker"].toInt() + clean) / window;
        QVERIFY2(scale.at(it) == scaler["scale"].toDouble() * std::pow(2.0, doublings),
                 qPrintable(QString("%1 iteration %2: loss scale %3, saved %4 with growth "
                                    "tracker %5 (--loss-scale-window %6)")
                                .arg(name)
                                .arg(it)
                                .arg(scale.at(it))
                                .arg(scaler["scale"].toDouble())
                                .arg(scaler["growth_tracker"].toInt())
                                .arg(window)));
      }
    }
    const auto want = series("one-process", "lm loss"), got = series("saved-layout", "lm loss");
    QCOMPARE(want.size(), size_t{2});
    QCOMPARE(got.size(), size_t{2});
    for (int it = kSavedIteration + 1; it <= kSavedIteration + 2; it++) {
      const double rel = std::abs(got.at(it) - want.at(it)) / std::abs(want.at(it));
      QVERIFY2(rel <= 1e-5, qPrintable(QString("iteration %1: loss %2 at TP 2 x PP 2 x DP 2, "
                                               "%3 in one process (relative %4 > 1e-5)")
                                           .arg(it)
                                           .arg(got.at(it), 0, 'g', 17)
                                           .arg(want.at(it), 0, 'g', 17)
                                           .arg(rel)));
    }
#endif
  }
};

QTEST_GUILESS_MAIN(CheckpointCompat)
#include "test_checkpoint_compat.moc"
