// The History's Groups tab: the runs (the selected ones, or every run shown) grouped by the
// value of a chosen setting, with each group's run count and final metrics (mean ± std), and
// the grouped curves of a chosen metric (GroupCurvesChart), whose series are read off the UI
// thread. Seeds are what a group averages over, so `seed` is never offered as the key.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <vector>

#include "history/group_curves_chart.h"
#include "history/history_io.h"
#include "history/sweep_runs.h"

class QComboBox;
class QLabel;
class QTableWidget;

namespace lattice::ui {

class GroupPanel : public QWidget {
  Q_OBJECT

 public:
  explicit GroupPanel(QWidget* parent = nullptr);

  // The chart draws the first kMaxCurves groups (by value); the table lists every group.
  static constexpr int kMaxCurves = 12;

  // The run store the curves are read from.
  void setDatabase(const QString& path);
  // The runs to group, in table order. Regroups when they changed; reads curves when needed.
  void setRuns(std::vector<SweepRun> runs);

  // The setting runs are grouped by; empty: none. The choices are the settings that differ.
  void setGroupSetting(const QString& setting);
  QString groupSetting() const;
  QStringList settingChoices() const;
  void setCurveMetric(const QString& key);  // "lm loss", "validation lm loss", ...
  void setBand(BandKind band);

  // The groups as shown: value, member run ids (in the runs' order).
  struct Group {
    QString value;  // as a person reads it; "(unset)" for runs without the setting
    QList<qint64> runs;
  };
  const QList<Group>& groups() const { return groups_; }
  QTableWidget* groupsTable() const { return table_; }
  GroupCurvesChart* chart() const { return chart_; }
  bool readingCurves() const { return reader_.isRunning(); }

 signals:
  void curvesShown();  // the chart shows the curves of the current groups

 private:
  void updateChoices();
  void regroup();
  void fillTable();
  void readCurves();
  void onCurvesRead();

  QString database_;
  std::vector<SweepRun> runs_;
  quint64 signature_ = 0;
  QString choicesKey_;
  QList<Group> groups_;
  QComboBox* setting_;
  QComboBox* metric_;
  QComboBox* band_;
  QLabel* hint_;
  QTableWidget* table_;
  GroupCurvesChart* chart_;
  QFutureWatcher<SeriesRead> reader_;
  QString curvesKey_;  // what the chart shows (or is being read)
  QString readKey_;    // the read under way
  bool rereadWanted_ = false;
};

}  // namespace lattice::ui
