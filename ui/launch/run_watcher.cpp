// RunWatcher: timer-driven background reads of the run store.
#include "launch/run_watcher.h"

#include <QFileInfo>
#include <QtConcurrent/QtConcurrentRun>

#include "lattice/storage/run_store.h"

namespace lattice::ui {

RunWatcher::RunWatcher(QObject* parent) : QObject(parent) {
  timer_.setInterval(kPollMs);
  connect(&timer_, &QTimer::timeout, this, &RunWatcher::poll);
  connect(&pending_, &QFutureWatcher<RunSnapshot>::finished, this, &RunWatcher::onRead);
}

RunSnapshot RunWatcher::read(const QString& database, const QString& runName) {
  RunSnapshot snap;
  snap.name = runName;
  if (QFileInfo(database).size() == 0) return snap;  // the run creates it; do not race it
  storage::OpenOptions options;
  options.read_only = true;  // the run (or its cluster job) is the writer
  Result<std::unique_ptr<storage::RunStore>> store =
      storage::RunStore::open(database.toStdString(), options);
  if (!store) {
    snap.problem = QString::fromStdString(store.status().message());
    return snap;
  }
  Result<storage::RunInfo> run = (*store)->find_run(runName.toStdString());
  if (!run) return snap;
  snap.found = true;
  snap.id = run->id;
  snap.status = QString::fromLatin1(storage::run_status_name(run->status));
  snap.error = QString::fromStdString(run->error);
  snap.latestStep = run->latest_step.value_or(-1);
  return snap;
}

void RunWatcher::watch(const QString& database, const QString& runName) {
  database_ = database;
  runName_ = runName;
  last_ = {};
  finishing_ = false;
  finalIssued_ = false;
  timer_.start();
}

void RunWatcher::finish() {
  timer_.stop();
  finishing_ = true;
  finalIssued_ = !pending_.isRunning();  // else the read under way is stale: read again after
  if (finalIssued_) poll();
}

void RunWatcher::poll() {
  if (pending_.isRunning() || runName_.isEmpty()) return;
  const QString database = database_, name = runName_;
  pending_.setFuture(QtConcurrent::run([database, name] { return read(database, name); }));
}

void RunWatcher::onRead() {
  const RunSnapshot snap = pending_.result();
  const bool appeared = snap.found && !last_.found;
  const bool changed =
      snap.found && (snap.status != last_.status || snap.latestStep != last_.latestStep);
  last_ = snap;
  if (appeared) emit runAppeared(snap);
  if (changed) emit runUpdated(snap);
  if (!finishing_) return;
  if (!finalIssued_) {
    finalIssued_ = true;
    poll();
  } else {
    runName_.clear();
  }
}

}  // namespace lattice::ui
