// Runs a LaunchCommand's steps one after the other (QProcess, argument lists, no shell), hands
// their output on in ~40 ms batches, and stops them: SIGTERM first, SIGKILL after a timeout.
//
// Stopping an mpirun job: the ranks (mpirun's children) get SIGTERM themselves, so that they
// agree on a stop at the same iteration and rank 0 marks the run killed; mpirun alone would
// end them about a second later, before the run store hears of it (docs/status.md). If they
// are still there after kGraceMs, mpirun gets SIGTERM, and after kKillMs more, SIGKILL.
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

  static constexpr int kGraceMs = 10000;  // ranks' SIGTERM -> launcher's SIGTERM
  static constexpr int kKillMs = 5000;    // launcher's SIGTERM -> SIGKILL

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
  int stopStage_ = 0;  // 1: ranks signalled, 2: launcher signalled, 3: killed
  QStringDecoder decoder_{QStringDecoder::System};  // keeps split multi-byte characters
  QString pending_;
  QTimer flushTimer_;
  QTimer stopTimer_;
};

// Process ids of `pid`'s direct children (Linux /proc); empty when none or unknown.
std::vector<qint64> childProcesses(qint64 pid);

}  // namespace lattice::ui
