// The block summaries of metric_blocks.h (note "block summaries"): the writer closing and
// recomputing blocks, the migration rebuilding them, and the exact down-sampler reading them.
#include "metric_blocks.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lattice::storage {
namespace {

// Bucket arithmetic multiplies a step offset by the bucket count: 128 bits cannot overflow.
__extension__ using Int128 = __int128;

constexpr const char* kBlocksSql =
    "SELECT block, first_step, last_step, min_value, max_value, last_value, count FROM "
    "metric_blocks WHERE "
    "run_id = ?1 AND key_id = ?2 AND level = ?3 AND block BETWEEN ?4 AND ?5 ORDER BY block";
// In step order straight from the (run, key, step, value) index: no sort. The rows of a
// repeated step come in value order, so for_each_step() picks the latest one by id.
constexpr const char* kPointsSql =
    "SELECT step, value, id FROM metrics WHERE run_id = ?1 AND key_id = ?2 AND step BETWEEN ?3 "
    "AND ?4 ORDER BY step";
constexpr const char* kUpsertSql =
    "INSERT OR REPLACE INTO metric_blocks(run_id, key_id, level, block, first_step, last_step, "
    "min_value, max_value, last_value, count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

double real_or_nan(const StatementUse& use, int col) {
  return use.is_null(col) ? std::numeric_limits<double>::quiet_NaN() : use.real(col);
}

// Steps through kPointsSql rows and calls emit(const Bucket&) -> Status once per step with the
// Bucket of that step's points (usually one), whose last is the value of the highest id.
template <typename Emit>
Status for_each_step(Database& db, StatementUse& use, Emit&& emit) {
  Bucket step_points;
  std::int64_t last_id = 0;
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) {
    const std::int64_t step = use.int64(0), id = use.int64(2);
    const double value = real_or_nan(use, 1);
    if (step_points.count > 0 && step != step_points.first_step) {
      if (Status s = emit(step_points); !s) return s;
      step_points.count = 0;
    }
    if (step_points.count == 0) {
      step_points = {step, step, value, value, value, 1};
      last_id = id;
      continue;
    }
    step_points.min = std::fmin(step_points.min, value);
    step_points.max = std::fmax(step_points.max, value);
    ++step_points.count;
    if (id > last_id) {
      step_points.last = value;
      last_id = id;
    }
  }
  if (rc != SQLITE_DONE) return db.error("cannot read metric points");
  return step_points.count > 0 ? emit(step_points) : Status::ok();
}

Bucket read_block(const StatementUse& use) {  // columns 1..6 of kBlocksSql
  return {use.int64(1),        use.int64(2),        real_or_nan(use, 3),
          real_or_nan(use, 4), real_or_nan(use, 5), use.int64(6)};
}

Status prepared(Database& db, Statement* stmt, const char* sql) {
  return *stmt ? Status::ok() : db.prepare(sql, stmt);
}

// Binds NaN as NULL, which is what SQLite stores for a NaN anyway.
Status write_block(Database& db, Statement& upsert, std::int64_t run_id, std::int64_t key_id,
                   int level, std::int64_t block, const Bucket& b) {
  StatementUse use(upsert);
  use.bind(1, run_id);
  use.bind(2, key_id);
  use.bind(3, level);
  use.bind(4, block);
  use.bind(5, b.first_step);
  use.bind(6, b.last_step);
  use.bind(7, b.min);
  use.bind(8, b.max);
  use.bind(9, b.last);
  use.bind(10, b.count);
  if (use.step() != SQLITE_DONE) return db.error("cannot write a metric block summary");
  return Status::ok();
}

}  // namespace

void merge_bucket(Bucket* into, const Bucket& piece) {
  if (into->count == 0) {
    *into = piece;
    return;
  }
  into->first_step = std::min(into->first_step, piece.first_step);
  if (piece.last_step >= into->last_step) {
    into->last_step = piece.last_step;
    into->last = piece.last;
  }
  into->min = std::fmin(into->min, piece.min);  // fmin and fmax skip a NaN operand
  into->max = std::fmax(into->max, piece.max);
  into->count += piece.count;
}

// ---- writer ----------------------------------------------------------------------------

Status MetricBlocks::begin_write(Database& db, std::int64_t run_id) {
  if (Status s = prepared(db, &data_version_stmt_, "PRAGMA data_version"); !s) return s;
  {
    StatementUse use(data_version_stmt_);
    if (use.step() != SQLITE_ROW) return db.error("cannot read the data version");
    if (use.int64(0) != data_version_) newest_.clear();  // another connection committed
    data_version_ = use.int64(0);
  }
  if (newest_.count(run_id)) return Status::ok();
  if (Status s =
          prepared(db, &load_newest_, "SELECT key_id, step FROM latest_metrics WHERE run_id = ?1");
      !s) {
    return s;
  }
  auto& keys = newest_[run_id];
  StatementUse use(load_newest_);
  use.bind(1, run_id);
  int rc;
  while ((rc = use.step()) == SQLITE_ROW) keys[use.int64(0)] = use.int64(1);
  if (rc != SQLITE_DONE) return db.error("cannot read the newest steps of a run");
  return Status::ok();
}

Status MetricBlocks::after_insert(Database& db, std::int64_t run_id, std::int64_t key_id,
                                  std::int64_t step) {
  auto [it, first_point] = newest_[run_id].try_emplace(key_id, step);
  if (first_point) return Status::ok();
  const std::int64_t newest = it->second;
  // Moving forward closes the old newest block at each level where the block changed;
  // going back into a closed block recomputes it. Within the newest block: nothing to do.
  const std::int64_t changed = step > newest ? newest : step;
  if (step > newest) it->second = step;
  for (int k = 0; k < kBlockLevels; ++k) {
    const int shift = block_shift(k);
    if ((step >> shift) == (newest >> shift)) break;  // and so at every coarser level
    if (Status s = summarize(db, run_id, key_id, k, changed >> shift); !s) return s;
  }
  return Status::ok();
}

Status MetricBlocks::summarize(Database& db, std::int64_t run_id, std::int64_t key_id, int level,
                               std::int64_t block) {
  Bucket sum;
  // The 16 finer blocks (or points) that make up this block.
  const std::int64_t lo = block << 4, hi = lo + 15;
  if (level == 0) {
    if (Status s = prepared(db, &points_, kPointsSql); !s) return s;
    StatementUse use(points_);
    use.bind(1, run_id);
    use.bind(2, key_id);
    use.bind(3, lo);
    use.bind(4, hi);
    if (Status s = for_each_step(db, use,
                                 [&](const Bucket& step_points) {
                                   merge_bucket(&sum, step_points);
                                   return Status::ok();
                                 });
        !s) {
      return s;
    }
  } else {
    Statement& finer = blocks_[level - 1];
    if (Status s = prepared(db, &finer, kBlocksSql); !s) return s;
    StatementUse use(finer);
    use.bind(1, run_id);
    use.bind(2, key_id);
    use.bind(3, level - 1);
    use.bind(4, lo);
    use.bind(5, hi);
    int rc;
    while ((rc = use.step()) == SQLITE_ROW) merge_bucket(&sum, read_block(use));
    if (rc != SQLITE_DONE) return db.error("cannot read block summaries to summarize");
  }
  if (sum.count == 0) return Status::ok();
  if (Status s = prepared(db, &upsert_, kUpsertSql); !s) return s;
  return write_block(db, upsert_, run_id, key_id, level, block, sum);
}

namespace {

// Feeds one series' points, in step order, through one open block per level: a level-k block
// is written when a piece of a later block arrives, and its summary then feeds level k + 1.
class BlockFolder {
 public:
  BlockFolder(Database& db, Statement& upsert, std::int64_t run_id, std::int64_t key_id)
      : db_(db), upsert_(upsert), run_id_(run_id), key_id_(key_id) {}

  Status add(int level, const Bucket& piece) {
    Open& o = open_[level];
    const std::int64_t block = piece.first_step >> block_shift(level);
    if (o.active && o.block != block) {
      if (Status s = close(level); !s) return s;
    }
    if (!o.active) {
      o = {true, block, piece};
    } else {
      merge_bucket(&o.sum, piece);
    }
    return Status::ok();
  }

  // Writes the blocks still open, except those of the newest step (they stay open).
  Status finish(std::int64_t newest) {
    for (int k = 0; k < kBlockLevels; ++k) {
      if (!open_[k].active || open_[k].block >= (newest >> block_shift(k))) continue;
      if (Status s = close(k); !s) return s;
    }
    return Status::ok();
  }

 private:
  struct Open {
    bool active = false;
    std::int64_t block = 0;
    Bucket sum;
  };

  Status close(int level) {
    Open& o = open_[level];
    o.active = false;
    if (Status s = write_block(db_, upsert_, run_id_, key_id_, level, o.block, o.sum); !s) {
      return s;
    }
    return level + 1 < kBlockLevels ? add(level + 1, o.sum) : Status::ok();
  }

  Database& db_;
  Statement& upsert_;
  std::int64_t run_id_, key_id_;
  Open open_[kBlockLevels];
};

}  // namespace

Status MetricBlocks::rebuild_all(Database& db) {
  Statement series, points, upsert;
  if (Status s = db.prepare("SELECT run_id, key_id, step FROM latest_metrics", &series); !s) {
    return s;
  }
  if (Status s = db.prepare(kPointsSql, &points); !s) return s;
  if (Status s = db.prepare(kUpsertSql, &upsert); !s) return s;
  StatementUse each(series);
  int rc;
  while ((rc = each.step()) == SQLITE_ROW) {
    const std::int64_t run_id = each.int64(0), key_id = each.int64(1), newest = each.int64(2);
    BlockFolder folder(db, upsert, run_id, key_id);
    StatementUse use(points);
    use.bind(1, run_id);
    use.bind(2, key_id);
    use.bind(3, std::numeric_limits<std::int64_t>::min());
    use.bind(4, std::numeric_limits<std::int64_t>::max());
    if (Status s = for_each_step(
            db, use, [&](const Bucket& step_points) { return folder.add(0, step_points); });
        !s) {
      return s;
    }
    if (Status s = folder.finish(newest); !s) return s;
  }
  if (rc != SQLITE_DONE) return db.error("cannot list metric series to summarize");
  return Status::ok();
}

// ---- readers ---------------------------------------------------------------------------

struct MetricBlocks::Cover {
  std::int64_t run_id = 0, key_id = 0, first = 0, newest = 0, buckets = 1;
  Int128 span = 1;
  std::vector<Bucket>* out = nullptr;
  std::int64_t out_bucket = -1;  // the bucket of out->back()

  std::int64_t bucket_of(std::int64_t step) const {
    return static_cast<std::int64_t>((Int128{step} - first) * buckets / span);
  }
  // Pieces arrive in step order, so buckets fill one after the other.
  void add(const Bucket& piece) {
    const std::int64_t b = bucket_of(piece.first_step);
    if (b != out_bucket) {
      out->push_back(piece);
      out_bucket = b;
    } else {
      merge_bucket(&out->back(), piece);
    }
  }
};

Status MetricBlocks::newest_step(Database& db, std::int64_t run_id, std::int64_t key_id,
                                 bool* found, std::int64_t* step) {
  if (Status s = prepared(db, &newest_one_,
                          "SELECT step FROM latest_metrics WHERE run_id = ?1 AND key_id = ?2");
      !s) {
    return s;
  }
  StatementUse use(newest_one_);
  use.bind(1, run_id);
  use.bind(2, key_id);
  const int rc = use.step();
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return db.error("cannot read a series' newest step");
  *found = rc == SQLITE_ROW;
  if (*found) *step = use.int64(0);
  return Status::ok();
}

// Adds the points of steps [lo, hi] to c: level-`level` summaries for the blocks that lie
// inside [lo, hi] and inside one bucket, finer levels for the others (one bucket edge, or
// the range's ends, cut them) and for the newest block, which has no summary yet.
Status MetricBlocks::cover(Database& db, Cover& c, std::int64_t lo, std::int64_t hi, int level) {
  if (lo > hi) return Status::ok();
  if (level < 0) {
    if (Status s = prepared(db, &points_, kPointsSql); !s) return s;
    StatementUse use(points_);
    use.bind(1, c.run_id);
    use.bind(2, c.key_id);
    use.bind(3, lo);
    use.bind(4, hi);
    return for_each_step(db, use, [&](const Bucket& step_points) {
      c.add(step_points);
      return Status::ok();
    });
  }
  const int shift = block_shift(level);
  const std::int64_t size = std::int64_t{1} << shift;
  const std::int64_t newest_block = c.newest >> shift;
  const std::int64_t first_block = lo >> shift, last_block = hi >> shift;
  if (first_block < newest_block) {
    Statement& stmt = blocks_[level];
    if (Status s = prepared(db, &stmt, kBlocksSql); !s) return s;
    StatementUse use(stmt);
    use.bind(1, c.run_id);
    use.bind(2, c.key_id);
    use.bind(3, level);
    use.bind(4, first_block);
    use.bind(5, std::min(last_block, newest_block - 1));
    int rc;
    while ((rc = use.step()) == SQLITE_ROW) {
      const std::int64_t block_lo = use.int64(0) << shift, block_hi = block_lo + size - 1;
      if (block_lo >= lo && block_hi <= hi && c.bucket_of(block_lo) == c.bucket_of(block_hi)) {
        c.add(read_block(use));
      } else if (Status s = cover(db, c, std::max(lo, block_lo), std::min(hi, block_hi), level - 1);
                 !s) {
        return s;
      }
    }
    if (rc != SQLITE_DONE) return db.error("cannot read metric block summaries");
  }
  // Blocks without a summary below the newest one have no points; above it there are none.
  if (newest_block < first_block || newest_block > last_block) return Status::ok();
  const std::int64_t newest_lo = newest_block << shift;
  return cover(db, c, std::max(lo, newest_lo), std::min(hi, newest_lo + size - 1), level - 1);
}

Status MetricBlocks::downsample(Database& db, std::int64_t run_id, std::int64_t key_id,
                                std::int64_t first_step, std::int64_t last_step, int buckets,
                                std::vector<Bucket>* out) {
  out->clear();
  bool found = false;
  std::int64_t newest = 0;
  if (Status s = newest_step(db, run_id, key_id, &found, &newest); !s || !found) return s;
  Cover c;
  c.run_id = run_id;
  c.key_id = key_id;
  c.first = first_step;
  c.newest = newest;
  c.buckets = buckets;
  c.span = Int128{last_step} - first_step + 1;
  c.out = out;
  // The coarsest level whose blocks are no wider than the narrowest bucket: it reads at most
  // about 16 summaries per bucket, and each bucket edge costs one short read per finer level.
  const Int128 narrowest = c.span / buckets;
  int top = -1;
  for (int k = 0; k < kBlockLevels; ++k) {
    if ((Int128{1} << block_shift(k)) <= narrowest) top = k;
  }
  return cover(db, c, first_step, std::min(last_step, newest), top);
}

Status MetricBlocks::count(Database& db, std::int64_t run_id, std::int64_t key_id,
                           std::int64_t* points) {
  *points = 0;
  if (Status s = prepared(db, &first_step_,
                          "SELECT min(step) FROM metrics WHERE run_id = ?1 AND key_id = ?2");
      !s) {
    return s;
  }
  std::int64_t first = 0;
  {
    StatementUse use(first_step_);
    use.bind(1, run_id);
    use.bind(2, key_id);
    if (use.step() != SQLITE_ROW) return db.error("cannot read a series' first step");
    if (use.is_null(0)) return Status::ok();
    first = use.int64(0);
  }
  std::vector<Bucket> all;
  if (Status s =
          downsample(db, run_id, key_id, first, std::numeric_limits<std::int64_t>::max(), 1, &all);
      !s) {
    return s;
  }
  for (const Bucket& b : all) *points += b.count;
  return Status::ok();
}

}  // namespace lattice::storage
