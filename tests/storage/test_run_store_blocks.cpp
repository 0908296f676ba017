// Specification of the run store's block summaries (note "block summaries" in
// storage/src/metric_blocks.h): downsample() equals folding every point on random data, with
// steps going backwards, repeated steps, NaN and negative steps; a second writer of the same
// run; and the migration that builds the summaries of a version-1 database.
#include <sqlite3.h>

#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lattice/storage/run_store.h"
#include "storage/run_store_testing.h"

using lattice::storage::Bucket;
using lattice::storage::NewRun;
using lattice::storage::RunStore;
using lattice::storage::StepRecord;
using lattice::storage::testing::open_or_fail;

namespace {

std::int64_t running_run(RunStore& store, const std::string& name) {
  NewRun spec;
  spec.name = name;
  const std::int64_t id = store.create_run(spec).value();
  if (!store.mark_running(id)) qFatal("cannot start run %s", name.c_str());
  return id;
}

// The specification of downsample(): every point of the range folded by the bucket rule.
std::vector<Bucket> brute_force(RunStore& store, std::int64_t run, const std::string& key,
                                std::int64_t first, std::int64_t last, int n) {
  std::vector<Bucket> out;
  std::int64_t current = -1;
  const auto points = store.series(run, key, first, last);
  for (const auto& p : points.value()) {
    const std::int64_t b = (p.step - first) * n / (last - first + 1);
    if (b != current) {
      out.push_back({p.step, p.step, p.value, p.value, p.value, 0});
      current = b;
    }
    Bucket& e = out.back();
    e.last_step = p.step;
    e.last = p.value;
    e.min = std::fmin(e.min, p.value);
    e.max = std::fmax(e.max, p.value);
    e.count++;
  }
  return out;
}

bool same(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

// Empty when equal, else which bucket and field differ.
QByteArray compare_buckets(const std::vector<Bucket>& got, const std::vector<Bucket>& want) {
  if (got.size() != want.size()) {
    return "bucket count " + QByteArray::number(qulonglong(got.size())) + " != expected " +
           QByteArray::number(qulonglong(want.size()));
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Bucket &g = got[i], &w = want[i];
    const QByteArray where = "bucket " + QByteArray::number(qulonglong(i)) + " (steps " +
                             QByteArray::number(qlonglong(w.first_step)) + ".." +
                             QByteArray::number(qlonglong(w.last_step)) + "): ";
    if (g.first_step != w.first_step || g.last_step != w.last_step) return where + "step range";
    if (g.count != w.count) return where + "count " + QByteArray::number(qlonglong(g.count));
    if (!same(g.min, w.min) || !same(g.max, w.max)) {
      return where + "min/max " + QByteArray::number(g.min) + "/" + QByteArray::number(g.max) +
             " != " + QByteArray::number(w.min) + "/" + QByteArray::number(w.max);
    }
    if (!same(g.last, w.last)) return where + "last " + QByteArray::number(g.last);
  }
  return {};
}

#define QVERIFY_DOWNSAMPLE(store, run, key, first, last, n)                                   \
  do {                                                                                        \
    const auto got_ = (store).downsample(run, key, first, last, n);                           \
    QVERIFY2(got_.is_ok(), got_.status().message().c_str());                                  \
    const QByteArray diff_ =                                                                  \
        compare_buckets(got_.value(), brute_force(store, run, key, first, last, n));          \
    QVERIFY2(diff_.isEmpty(), QByteArray(key) + " [" + QByteArray::number(qlonglong(first)) + \
                                  ", " + QByteArray::number(qlonglong(last)) + "] / " +       \
                                  QByteArray::number(n) + ": " + diff_);                      \
  } while (0)

// Every row of metric_blocks, in key order, as text: to compare two databases' summaries.
std::string block_rows(const std::string& path) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "SELECT * FROM metric_blocks ORDER BY run_id, key_id, level, block", -1,
                     &stmt, nullptr);
  std::string rows;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
      const auto* text = sqlite3_column_text(stmt, c);
      rows += text ? reinterpret_cast<const char*>(text) : "NULL";
      rows += c + 1 < sqlite3_column_count(stmt) ? "|" : "\n";
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return rows;
}

int header_user_version(const std::string& path) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, nullptr);
  const int version = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : -1;
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return version;
}

// A series long enough for every summary level (level 3 blocks span 65536 steps), then points
// logged backwards into closed blocks at each level, repeated steps and NaN.
void write_random_history(RunStore& store, std::int64_t run, std::int64_t other, int steps) {
  std::mt19937_64 rng(20240611);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<StepRecord> batch, other_batch;
  for (int s = 0; s < steps; ++s) {
    StepRecord r;
    r.step = s;
    double v = std::sin(s * 1e-3) + 0.1 * noise(rng);
    if (rng() % 4999 == 0) v = std::numeric_limits<double>::quiet_NaN();
    if (rng() % 997 == 0) v += (rng() % 2 ? 40.0 : -40.0);
    r.values["loss"] = v;
    if (s % 777 == 0) r.values["sparse"] = noise(rng);
    batch.push_back(std::move(r));
    const double n = noise(rng);
    other_batch.push_back({s - steps / 2, {{"negative", n}, {"loss", -n}}, {}});
    if (batch.size() == 500 || s + 1 == steps) {
      if (!store.log_steps(run, batch) || !store.log_steps(other, other_batch)) {
        qFatal("log_steps failed");
      }
      batch.clear();
      other_batch.clear();
    }
  }
  // Backwards into closed blocks at level 0, 1, 2 and 3, a repeated step, and a NaN.
  for (std::int64_t s : {std::int64_t{5}, std::int64_t{5}, std::int64_t{300}, std::int64_t{4095},
                         std::int64_t{70000}, std::int64_t{65535}}) {
    if (!store.log_step(run, s, {{"loss", 1000.0 + s}}).is_ok()) qFatal("log_step failed");
  }
  if (!store.log_step(run, 9000, {{"loss", std::numeric_limits<double>::quiet_NaN()}})) {
    qFatal("log_step failed");
  }
  if (!store.log_step(run, 6, {{"loss", -1000.0}})) qFatal("log_step failed");
}

}  // namespace

class TestRunStoreBlocks : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string db_path(const char* name) const { return dir_.filePath(name).toStdString(); }

 private slots:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void downsample_equals_folding_every_point_of_random_series() {
    const std::string path = db_path("random.db");
    auto store = open_or_fail(path);
    const std::int64_t run = running_run(*store, "random");
    const std::int64_t other = running_run(*store, "interleaved");
    const int steps = 140000;
    write_random_history(*store, run, other, steps);

    // The plot sizes of the benchmark and the Studio, over the whole series.
    for (int n : {1, 2, 7, 333, 2000, 100000, 200000}) {
      QVERIFY_DOWNSAMPLE(*store, run, "loss", 0, steps - 1, n);
    }
    QVERIFY_DOWNSAMPLE(*store, run, "sparse", 0, steps - 1, 2000);
    QVERIFY_DOWNSAMPLE(*store, other, "negative", -steps / 2, steps / 2, 2000);
    QVERIFY_DOWNSAMPLE(*store, other, "loss", -100000, 100000, 3);
    // Ranges wider than the data, and inside one block.
    QVERIFY_DOWNSAMPLE(*store, run, "loss", -1000000, 1000000, 2000);
    QVERIFY_DOWNSAMPLE(*store, run, "loss", 17, 30, 5);
    // Random ranges and bucket counts.
    std::mt19937_64 rng(7);
    for (int i = 0; i < 300; ++i) {
      const std::int64_t first = static_cast<std::int64_t>(rng() % (steps + 20000)) - 10000;
      const std::int64_t last = first + static_cast<std::int64_t>(rng() % (steps + 10000));
      const int n = 1 + static_cast<int>(rng() % (i % 3 == 0 ? 20 : 4000));
      QVERIFY_DOWNSAMPLE(*store, run, "loss", first, last, n);
    }
    QCOMPARE(store->logged_steps(run).value(), std::int64_t{steps + 8});  // 8 logged backwards
  }

  void a_second_writer_of_the_same_run_keeps_the_summaries_exact() {
    const std::string path = db_path("two_writers.db");
    auto first = open_or_fail(path);
    auto second = open_or_fail(path);
    const std::int64_t run = running_run(*first, "shared");
    // Each connection writes past the other's newest step, then back into its blocks.
    for (int round = 0; round < 6; ++round) {
      RunStore& writer = round % 2 ? *second : *first;
      for (int s = round * 3000; s < (round + 1) * 3000; ++s) {
        QVERIFY(writer.log_step(run, s, {{"loss", std::cos(s * 0.01) * (round + 1)}}).is_ok());
      }
      QVERIFY(writer.log_step(run, round * 1000 + 17, {{"loss", 50.0 + round}}).is_ok());
    }
    QVERIFY_DOWNSAMPLE(*first, run, "loss", 0, 17999, 2000);
    QVERIFY_DOWNSAMPLE(*second, run, "loss", 0, 17999, 60);
  }

  void migration_from_version_1_builds_the_same_summaries_the_writer_keeps() {
    const std::string path = db_path("version1.db");
    std::int64_t run = 0;
    {
      auto store = open_or_fail(path);
      run = running_run(*store, "old");
      const std::int64_t other = running_run(*store, "old-other");
      write_random_history(*store, run, other, 20000);
    }
    const std::string kept_by_writer = block_rows(path);
    QVERIFY(!kept_by_writer.empty());
    // What a version-1 Lattice left: the same tables without metric_blocks (nor the
    // runs_listed index of version 3, nor the run_parents table of version 4).
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db,
                          "DROP TABLE metric_blocks; DROP INDEX runs_listed; DROP TABLE "
                          "run_parents; PRAGMA user_version = 1;",
                          nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(db);
    QCOMPARE(header_user_version(path), 1);

    auto store = open_or_fail(path);
    QCOMPARE(header_user_version(path), lattice::storage::kSchemaVersion);
    QCOMPARE(block_rows(path), kept_by_writer);
    QVERIFY_DOWNSAMPLE(*store, run, "loss", 0, 19999, 2000);
    QVERIFY_DOWNSAMPLE(*store, run, "loss", 0, 19999, 1);
    QVERIFY(store->check_integrity().is_ok());
  }
};

QTEST_GUILESS_MAIN(TestRunStoreBlocks)
#include "test_run_store_blocks.moc"
