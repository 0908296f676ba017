// The Launch view's settings: target, data set and tokenizer, run name, tags, database and
// extra flags. Holds no plan state; the view combines its settings() with the plan.
#pragma once

#include <QWidget>

#include "launch/launch_command.h"

class QButtonGroup;
class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace lattice::ui {

class LaunchForm : public QWidget {
  Q_OBJECT

 public:
  explicit LaunchForm(QWidget* parent = nullptr);

  LaunchSettings settings() const;
  void setSettings(const LaunchSettings& settings);
  // A fresh generated run name (after each start).
  void newRunName();
  // "4 ranks on this machine's 2 cores" under the target.
  void setTargetSummary(const QString& text);

 signals:
  void settingsChanged();

 private:
  QWidget* targetGroup();
  QWidget* clusterRows(QWidget* parent);
  void updateTargetRows();
  QWidget* dataGroup();
  QWidget* runGroup();
  void updateDataRows();
  QLineEdit* pathEdit(const QString& objectName, const QString& placeholder);
  QWidget* withBrowse(QLineEdit* edit, const QString& filter, bool prefix);

  QLabel* targetSummary_;
  QComboBox* target_;
  QWidget* hostfileRows_;
  QLineEdit* hostfile_;
  QComboBox* network_;
  QLineEdit* networkInterface_;
  QWidget* slurmRows_;
  QLineEdit* partition_;
  QLineEdit* account_;
  QLineEdit* timeLimit_;
  QLineEdit* outputDir_;
  QComboBox* launcher_;
  QSpinBox* cpusPerTask_;
  QButtonGroup* source_;
  QLineEdit* dataPath_;
  QComboBox* tokenizer_;
  QLineEdit* tokenizerModel_;
  QLineEdit* vocabFile_;
  QLineEdit* mergeFile_;
  QWidget* datasetRows_;
  QLineEdit* runName_;
  QLineEdit* tags_;
  QLineEdit* database_;
  QLineEdit* extraFlags_;
  QCheckBox* saveCheckpoints_;
  QString checkpointsFolder_ = QStringLiteral("checkpoints");  // LaunchSettings'
};

}  // namespace lattice::ui
