// The History view's comparison of two or more runs: the settings that differ (or, with "Show
// all settings", every setting, the differing ones marked) from storage::compare_configs, the
// final metrics side by side, and "Compare curves" for the Dashboard's overlaid plots.
#pragma once

#include <QStringList>
#include <QWidget>
#include <string>
#include <vector>

#include "lattice/storage/run_store.h"

class QCheckBox;
class QLabel;
class QPushButton;
class QTableWidget;

namespace lattice::ui {

class ComparePanel : public QWidget {
  Q_OBJECT

 public:
  explicit ComparePanel(QWidget* parent = nullptr);

  // The runs in column order; `now` dates running runs. Rebuilds the settings only when the
  // runs' configs changed, so a periodic refresh keeps the scroll position.
  void setRuns(const std::vector<storage::RunInfo>& runs, double now);
  bool showAllSettings() const;
  void setShowAllSettings(bool all);

  QStringList shownSettings() const;  // the setting paths in the table, top to bottom
  QTableWidget* settingsTable() const { return settings_; }
  QTableWidget* metricsTable() const { return metrics_; }

  // The rows of the metrics table, top to bottom.
  enum MetricRow { kStatusRow, kStepsRow, kLossRow, kValidationRow, kTokensRow, kDurationRow };

 signals:
  void compareCurvesClicked();

 private:
  void rebuildSettings();
  void rebuildMetrics(double now);

  std::vector<storage::RunInfo> runs_;
  std::string settingsKey_;  // what the settings table shows now
  QLabel* title_;
  QLabel* settingsTitle_;
  QCheckBox* showAll_;
  QTableWidget* settings_;
  QTableWidget* metrics_;
  QPushButton* curves_;
};

}  // namespace lattice::ui
