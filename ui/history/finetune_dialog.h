// "Fine-tune from this checkpoint…": the dataset (SFT, its loss mask checked), full parameters
// or LoRA (rank, alpha, target modules, dropout), iterations, learning rate, run name and save
// directory for a fine-tune of a History run's latest checkpoint, with the exact command it
// makes (fineTuneLaunch, then buildLaunchCommand as the Launch view builds it) and what blocks
// it. Accepting hands the plan and Launch settings to the caller, which puts them in the Plan
// and Launch views and starts the run there when startWanted().
#pragma once

#include <QDialog>

#include "lattice/storage/run_store.h"
#include "launch/finetune_command.h"

class QCheckBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QRadioButton;
class QSpinBox;

namespace lattice::ui {

class FineTuneDialog : public QDialog {
  Q_OBJECT

 public:
  // `base` with its configuration; `current` and `cluster` are the Launch form's settings and
  // the plan's cluster (fineTuneLaunch keeps their target, database and device).
  FineTuneDialog(const storage::RunInfo& base, const LaunchSettings& current,
                 const ClusterSettings& cluster, LaunchEnvironment env, QWidget* parent = nullptr);

  FineTuneSettings fineTuneSettings() const;
  void setFineTuneSettings(const FineTuneSettings& settings);
  const FineTuneLaunch& launch() const { return launch_; }
  const LaunchCommand& command() const { return command_; }
  // Accepted with "Start" (run now) rather than "Open in Launch" (review there first).
  bool startWanted() const { return startWanted_; }
  QString problemsText() const;  // what blocks the fine-tune, one line each; empty when none

 private:
  QGroupBox* dataGroup();
  QGroupBox* methodGroup();
  QGroupBox* runGroup();
  void rebuild();
  void updateSaveDir();

  storage::RunInfo base_;
  TrainOptions baseOptions_;
  QString baseOptionsProblem_;  // the recorded configuration does not parse
  LaunchSettings current_;
  ClusterSettings cluster_;
  LaunchEnvironment env_;
  FineTuneLaunch launch_;
  LaunchCommand command_;
  bool startWanted_ = false;
  QString autoSaveDir_;  // the save directory proposed for the run name (until edited)

  QLineEdit* dataPath_;
  QCheckBox* sft_;
  QRadioButton* full_;
  QRadioButton* lora_;
  QWidget* loraRows_;
  QSpinBox* rank_;
  QDoubleSpinBox* alpha_;
  QList<QCheckBox*> targets_;
  QDoubleSpinBox* dropout_;
  QSpinBox* iterations_;
  QLineEdit* lr_;
  QLineEdit* runName_;
  QLineEdit* saveDir_;
  QPlainTextEdit* preview_;
  QLabel* problems_;
  QPushButton* open_;
  QPushButton* start_;
};

}  // namespace lattice::ui
