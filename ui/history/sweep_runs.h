// What the History's Groups and Parallel coordinates tabs know of each run: a compact copy of
// the runs table's row (name, final metrics) and its parsed settings, shared, not copied, so
// that 10,000 runs cost a few megabytes and no config is parsed twice (history_io.h).
#pragma once

#include <QList>
#include <QString>
#include <QStringList>
#include <memory>
#include <optional>
#include <vector>

#include "history/history_io.h"

namespace lattice::ui {

class RunTableModel;

struct SweepRun {
  qint64 id = 0;
  QString name;
  qint64 lastStep = -1;
  std::optional<double> loss, validation, tokens;  // the latest value of each; nullopt: none
  std::shared_ptr<const ParsedSettings> settings;  // null: not read yet
};

// The runs of `ids` that the model holds, in that order.
std::vector<SweepRun> sweepRuns(const RunTableModel& model, const QList<qint64>& ids);

// The JSON text of a setting of the run, nullopt when its config lacks it.
std::optional<std::string> settingOf(const SweepRun& run, const std::string& setting);

// The settings whose value is not the same in every run (missing in some counts), sorted,
// without those in `except`. One merge walk over the runs' sorted settings.
QStringList differingSettings(const std::vector<SweepRun>& runs, const QStringList& except = {});

// An order-sensitive hash of the runs' ids, steps, final metrics and settings: a panel given
// the same runs again rebuilds nothing.
quint64 sweepSignature(const std::vector<SweepRun>& runs);

}  // namespace lattice::ui
