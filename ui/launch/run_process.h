// Runs a LaunchCommand's steps one after the other (QProcess, argument lists, no shell), hands
// their output on in ~40 ms batches, and stops them: a stop request first, SIGTERM and SIGKILL
// after timeouts.
//
// Stopping an mpirun job: mpirun gets SIGUSR1, which it passes to every rank at once, on this
// machine and on the others (Note [stopping under mpirun] in app/cli/train_command.cpp); the
// ranks stop at the same iteration, save (with --save), rank 0 records the run as killed and
// they exit 0, which ends mpirun. A single rank gets SIGTERM, which does the same. Whatever is
// still there after kGraceMs gets SIGTERM (mpirun and its ranks), and after kKillMs, SIGKILL.
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QProcess>
#include <QStringDecoder>
#include <QTimer>
#include <vector>

#include "launch/launch_command.h"

namespace lattice::ui {

class RunProcess : public QObject {
  Q_OBJECT

 public:
  explicit RunProcess(QObject* parent = nullptr);
  ~RunProcess() override;

  void start(const LaunchCommand& command);
  void stop();
  bool isRunning() const { return process_.state() != QProcess::NotRunning; }
  bool isStopping() const { return stopping_; }

  static constexpr int kGraceMs = 10000;  // stop request -> SIGTERM to everything
  static constexpr int kKillMs = 5000;    // SIGTERM -> SIGKILL

 signals:
  void output(const QString& text);
  void stepStarted(int index, const QString& commandLine);
  // The last step ended (or an earlier one failed, or a stop ended it).
  void finished(int exitCode, bool ok, const QString& summary);

 private:
  void startStep(int index);
  void onStepFinished(int exitCode, QProcess::ExitStatus status);
  void flush();
  void escalate();

  QProcess process_;
  std::vector<LaunchStep> steps_;
  int current_ = -1;
  bool stopping_ = false;
  int stopStage_ = 0;  // 1: asked to stop, 2: SIGTERM, 3: SIGKILL
  QElapsedTimer stopClock_;
  QStringDecoder decoder_{QStringDecoder::System};  // keeps split multi-byte characters
  QString pending_;
  QTimer flushTimer_;
  QTimer stopTimer_;
};

// Process ids of `pid`'s direct children (Linux /proc); empty when none or unknown.
std::vector<qint64> childProcesses(qint64 pid);

}  // namespace lattice::ui
