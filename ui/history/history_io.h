// The History view's reads and writes of the run store, for QtConcurrent: each call opens its
// own RunStore (one connection per thread, run_store.h) and returns plain values, so the UI
// thread never waits on SQLite. A missing database file is not created (a run creates it).
#pragma once

#include <QHash>
#include <QList>
#include <QString>
#include <QStringList>
#include <memory>
#include <vector>

#include "history/run_table_model.h"
#include "lattice/storage/run_store.h"
#include "lattice/storage/run_sweep.h"

namespace lattice::ui {

// How History may use a store. The local history is read and edited. A running cluster job's
// own store (the Studio follows it while the job runs) is only read: the job writes it, and
// when the job ends `lattice runs import` merges it into the local history, where it is edited.
enum class StoreAccess { kReadWrite, kReadOnly };

// A run's settings (storage::run_settings) with the config text they were parsed from: the
// History's runs are listed without their configs (RunFilter::with_config), which are read and
// parsed after the table shows (readSettings), and a re-read config that is unchanged keeps
// its parse (docs/studio.md "Many runs at once").
struct ParsedSettings {
  std::string config_json;
  storage::RunSettings settings;
};
using SettingsIndex = QHash<qint64, std::shared_ptr<const ParsedSettings>>;

struct RunsRead {
  std::vector<storage::RunInfo> runs;  // list_runs without configs: every run, by id
  double now = 0;                      // the clock the crashed test used (Unix seconds)
  bool missing = false;                // the file does not exist (yet)
  QString problem;                     // the store could not be opened or read
};

// Every run with its latest metrics, without its config (RunFilter::with_config false: the
// list then reads a tenth of the pages, Note "runs_listed" in storage/src/schema.cpp).
// kReadOnly opens the file read-only (OpenOptions::read_only) and takes an empty file for a
// missing one: the job creates it. Any thread.
RunsRead readRuns(const QString& database, StoreAccess access = StoreAccess::kReadWrite);

// The settings of the runs of `ids`: their configs read (RunStore::run_configs) and parsed,
// except where `known` holds the same config text, whose parse is kept. Runs the store no
// longer has are left out. Any thread.
struct SettingsRead {
  SettingsIndex settings;
  QString problem;
};
SettingsRead readSettings(const QString& database, const std::vector<qint64>& ids,
                          const SettingsIndex& known = {});

// Each run's points of `key` for a group curve, by run id: the whole series for runs of up to
// kGroupCurvePoints steps, else RunStore::downsample's bucket ends over [0, the longest run's
// last step] in kGroupCurvePoints buckets, which fall on the same steps in every run, so the
// runs of a group still align (Note "aligned steps" in storage/src/run_sweep.cpp). Any thread.
inline constexpr int kGroupCurvePoints = 2000;
struct SeriesRead {
  QHash<qint64, std::vector<storage::StepValue>> series;
  QString problem;
};
SeriesRead readGroupSeries(const QString& database, const QList<qint64>& runs,
                           const std::string& key, qint64 lastStep);

// Applies the edits in order, each on its own (a refused one does not stop the rest), and
// returns the store's message for each refused one. Any thread.
QStringList applyEdits(const QString& database, const QList<RunEdit>& edits);

}  // namespace lattice::ui
