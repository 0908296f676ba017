// Feeds the SeriesStore from the run store off the UI thread. A worker thread holds its own
// RunStore (one connection per thread, as run_store.h asks) and, every kPollMs, tails each
// shown run with rows_after(last id, run, kMaxRowsPerPoll), reading memory samples and the
// timeline when new steps appear; each poll's rows reach the UI thread as one FeedBatch per
// run. Charts ask for down-sampled ranges (requestRange) which the worker answers with
// RunStore::downsample; requests for the same chart and run that queue up are merged.
// Read-only: the feed never writes to the database.
#pragma once

#include <QObject>
#include <QStringList>
#include <QThread>
#include <atomic>

#include "dashboard/series_store.h"

namespace lattice::ui {

class FeedWorker;

class DashboardFeed : public QObject {
  Q_OBJECT

 public:
  static constexpr int kPollMs = 150;
  static constexpr std::size_t kMaxRowsPerPoll = 50000;

  explicit DashboardFeed(SeriesStore* store, QObject* parent = nullptr);
  ~DashboardFeed() override;

  void setDatabase(const QString& path);
  // Replaces the runs tailed; the store is reset to them first.
  void showRuns(const QList<qint64>& runs);
  // Reads every key of `keys` for [first, last] in `buckets` buckets and sets the store's
  // view `view` of (run, key). A later request for the same view and run replaces one that
  // has not started.
  void requestRange(int view, qint64 run, const QStringList& keys, qint64 first, qint64 last,
                    int buckets);
  // The timeline of one step; -1 follows the newest step with events.
  void requestTimeline(qint64 run, qint64 step);

 signals:
  void problem(const QString& message);  // the database could not be read

 private:
  SeriesStore* store_;
  QThread thread_;
  FeedWorker* worker_;
  std::shared_ptr<std::atomic<int>> epoch_;  // bumped by showRuns: stale results are dropped
};

}  // namespace lattice::ui
