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

struct RunsRead {
  std::vector<storage::RunInfo> runs;  // list_runs: every run, by id
  double now = 0;                      // the clock the crashed test used (Unix seconds)
  bool missing = false;                // the file does not exist (yet)
  QString problem;                     // the store could not be opened or read
};

// Every run with its latest metrics. Any thread.
RunsRead readRuns(const QString& database);

// Applies the edits in order, each on its own (a refused one does not stop the rest), and
// returns the store's message for each refused one. Any thread.
QStringList applyEdits(const QString& database, const QList<RunEdit>& edits);

}  // namespace lattice::ui
