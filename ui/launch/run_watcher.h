// Watches the run store for a launched run: polls find_run(name) off the UI thread every
// kPollMs until stopped, and reports when the run appears and when its status changes.
// Each poll opens its own RunStore (one connection per thread, as run_store.h asks).
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QTimer>

namespace lattice::ui {

struct RunSnapshot {
  bool found = false;
  qint64 id = 0;
  QString name, status, error;
  qint64 latestStep = -1;
  QString problem;  // the store could not be read (not an absent run)
};

class RunWatcher : public QObject {
  Q_OBJECT

 public:
  explicit RunWatcher(QObject* parent = nullptr);

  void watch(const QString& database, const QString& runName);
  // One more poll, then no more (after the process ended).
  void finish();
  const RunSnapshot& last() const { return last_; }

  static constexpr int kPollMs = 500;
  // One read of the store (any thread).
  static RunSnapshot read(const QString& database, const QString& runName);

 signals:
  void runAppeared(const RunSnapshot& run);
  void runUpdated(const RunSnapshot& run);

 private:
  void poll();
  void onRead();

  QString database_, runName_;
  QTimer timer_;
  QFutureWatcher<RunSnapshot> pending_;
  RunSnapshot last_;
  bool finishing_ = false;
  bool finalIssued_ = false;  // the read after finish() is under way
};

}  // namespace lattice::ui
