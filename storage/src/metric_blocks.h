// Per-block summaries of every metric series (table metric_blocks), kept by the writer so
// that a plot of millions of points reads a few thousand summaries instead of every point.
// Not a cache that may drift: each summary is recomputed from the points in the transaction
// that changes them. Private to storage/src.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "lattice/status.h"
#include "lattice/storage/run_store.h"
#include "sqlite_db.h"

namespace lattice::storage {

// Note "block summaries": level k cuts a series' steps into blocks of 16^(k+1) steps
// (block = step >> 4(k+1)), and metric_blocks holds the Bucket of each block's points. A
// block gets its row when it is closed, that is when the key's newest step has moved past
// it. So every block below the block of the newest step has a row exactly when it has points,
// and the newest step's block has none at any level: readers fold it from the next finer
// level, and level 0's from the points. A point logged into a closed block (the step went
// backwards) recomputes that block at every level in the same transaction.
inline constexpr int kBlockLevels = 4;
constexpr int block_shift(int level) {
  return 4 * (level + 1);
}

// Folds `piece` (one point, or a block's summary) into `into`; pieces arrive in step order.
void merge_bucket(Bucket* into, const Bucket& piece);

class MetricBlocks {
 public:
  // ---- writer: call inside the write transaction ---------------------------------------
  // Before a run's rows: forgets what this connection knew if another one has committed
  // since, then loads the run's newest step per key (latest_metrics) once.
  Status begin_write(Database& db, std::int64_t run_id);
  // After inserting a point of (run, key) at `step`: closes or recomputes blocks.
  Status after_insert(Database& db, std::int64_t run_id, std::int64_t key_id, std::int64_t step);
  // After a rollback or a run's deletion: what this connection knew may be wrong.
  void forget() { newest_.clear(); }
  // Every summary of every series, from the points: the migration that added the table.
  static Status rebuild_all(Database& db);

  // ---- readers: call inside a read transaction -----------------------------------------
  // downsample() of RunStore, for a known key id.
  Status downsample(Database& db, std::int64_t run_id, std::int64_t key_id, std::int64_t first_step,
                    std::int64_t last_step, int buckets, std::vector<Bucket>* out);
  // The number of points of (run, key); 0 when it has none.
  Status count(Database& db, std::int64_t run_id, std::int64_t key_id, std::int64_t* points);

 private:
  struct Cover;  // one downsample() call's state
  Status newest_step(Database& db, std::int64_t run_id, std::int64_t key_id, bool* found,
                     std::int64_t* step);
  // Recomputes the row of (run, key, level, block) from the level below (or the points).
  Status summarize(Database& db, std::int64_t run_id, std::int64_t key_id, int level,
                   std::int64_t block);
  Status cover(Database& db, Cover& c, std::int64_t lo, std::int64_t hi, int level);

  // run id -> key id -> newest step, as this connection last saw or wrote it.
  std::unordered_map<std::int64_t, std::unordered_map<std::int64_t, std::int64_t>> newest_;
  std::int64_t data_version_ = -1;
  // blocks_[k] reads level k; a downsample walks level k while it reads level k - 1.
  Statement blocks_[kBlockLevels];
  Statement points_, upsert_, load_newest_, newest_one_, first_step_, data_version_stmt_;
};

}  // namespace lattice::storage
