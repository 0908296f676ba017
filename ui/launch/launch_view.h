// The Launch view: settings on the left; on the right the exact command (copyable), what
// blocks a start, Start / Stop, the run's record in the store, and the live console.
#pragma once

#include <QWidget>

#include "launch/launch_command.h"
#include "launch/run_watcher.h"

class QLabel;
class QPlainTextEdit;
class QPushButton;

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
  // The run was found in the store (the Dashboard opens on it in part 2).
  void runRecorded(const QString& database, const RunSnapshot& run);
  // The process sequence ended; `ok` when the last step exited 0.
  void runEnded(bool ok, const QString& summary);
  void runningChanged(bool running);

 protected:
  void changeEvent(QEvent* event) override;  // a new palette: new error colours

 private:
  void rebuild();
  void appendConsole(const QString& text);
  void showRun(const RunSnapshot& run);
  QWidget* commandBox();
  QWidget* consoleBox();

  PlanModel* model_;
  LaunchEnvironment env_;
  LaunchForm* form_;
  LaunchCommand command_;
  RunProcess* process_;
  RunWatcher watcher_;
  QPlainTextEdit* preview_;
  QLabel* problems_;
  QPushButton* start_;
  QPushButton* stop_;
  QLabel* state_;
  QLabel* record_;
  QPlainTextEdit* console_;
};

}  // namespace lattice::ui
