// The Launch view: settings on the left; on the right the exact command (copyable), the Slurm
// batch script, what blocks a start, Start / Stop, the run's record in the store, and the
// live console. A Slurm job is stopped with scancel (its ranks save and record the run as
// killed) and its run store is merged into the local one when the job ends.
#pragma once

#include <QWidget>

#include "launch/launch_command.h"
#include "launch/run_watcher.h"

class QLabel;
class QPlainTextEdit;
class QPushButton;
class QTabWidget;

namespace lattice::ui {

class LaunchForm;
class PlanModel;
class RunProcess;

class LaunchView : public QWidget {
  Q_OBJECT

 public:
  LaunchView(PlanModel* model, LaunchEnvironment env, QWidget* parent = nullptr);

  LaunchForm* form() const { return form_; }
  const LaunchCommand& command() const { return command_; }
  const LaunchEnvironment& environment() const { return env_; }
  bool isRunning() const;
  QPushButton* startButton() const { return start_; }

 public slots:
  void startRun();
  void stopRun();

 signals:
  // The run was found in `database`, the store it is recorded in. `jobStore`: that store is a
  // Slurm job's own, written by the job until it ends and then merged into the local one
  // (jobImported); the Studio only reads it.
  void runRecorded(const QString& database, const RunSnapshot& run, bool jobStore);
  // The process sequence ended; `ok` when the last step exited 0.
  void runEnded(bool ok, const QString& summary);
  void runningChanged(bool running);
  // A Slurm job's store was merged into `database`, the local one; `runId` is the launched
  // run's id there (0 when it is not found).
  void jobImported(const QString& database, qint64 runId);

 protected:
  void changeEvent(QEvent* event) override;  // a new palette: new error colours

 private:
  void rebuild();
  void cancelJob();
  void importJobStore();
  void appendConsole(const QString& text);
  void showRun(const RunSnapshot& run);
  QWidget* commandBox();
  QWidget* consoleBox();

  PlanModel* model_;
  LaunchEnvironment env_;
  LaunchForm* form_;
  LaunchCommand command_;
  QString savedIn_;  // the running command's --save directory, if any
  RunProcess* process_;
  RunWatcher watcher_;
  QPlainTextEdit* preview_;
  QPlainTextEdit* script_;  // the Slurm batch script, for review (a tab beside the output)
  QTabWidget* tabs_;
  QString jobId_;  // the Slurm job of the running command, once submitted
  QLabel* problems_;
  QPushButton* start_;
  QPushButton* stop_;
  QLabel* state_;
  QLabel* record_;
  QPlainTextEdit* console_;
};

}  // namespace lattice::ui
