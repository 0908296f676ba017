// The History view's reads and writes of the run store, for QtConcurrent: each call opens its
// own RunStore (one connection per thread, run_store.h) and returns plain values, so the UI
// thread never waits on SQLite. A missing database file is not created (a run creates it).
#pragma once

#include <QList>
#include <QString>
#include <QStringList>
#include <vector>

#include "history/run_table_model.h"
#include "lattice/storage/run_store.h"

namespace lattice::ui {

// How History may use a store. The local history is read and edited. A running cluster job's
// own store (the Studio follows it while the job runs) is only read: the job writes it, and
// when the job ends `lattice runs import` merges it into the local history, where it is edited.
enum class StoreAccess { kReadWrite, kReadOnly };

struct RunsRead {
  std::vector<storage::RunInfo> runs;  // list_runs: every run, by id
  double now = 0;                      // the clock the crashed test used (Unix seconds)
  bool missing = false;                // the file does not exist (yet)
  QString problem;                     // the store could not be opened or read
};

// Every run with its latest metrics. kReadOnly opens the file read-only (OpenOptions::
// read_only) and takes an empty file for a missing one: the job creates it. Any thread.
RunsRead readRuns(const QString& database, StoreAccess access = StoreAccess::kReadWrite);

// Applies the edits in order, each on its own (a refused one does not stop the rest), and
// returns the store's message for each refused one. Any thread.
QStringList applyEdits(const QString& database, const QList<RunEdit>& edits);

}  // namespace lattice::ui
