// RunProcess: step sequencing, batched output, staged stop.
#include "launch/run_process.h"

#include <signal.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>

namespace lattice::ui {

namespace {

constexpr int kFlushMs = 40;

}  // namespace

std::vector<qint64> childProcesses(qint64 pid) {
  std::vector<qint64> children;
  // Every thread's children file; the main thread's is enough for processes that fork from it,
  // but mpirun may fork from another thread.
  const QDir tasks(QStringLiteral("/proc/%1/task").arg(pid));
  for (const QString& task : tasks.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    QFile file(tasks.filePath(task + "/children"));
    if (!file.open(QIODevice::ReadOnly)) continue;
    for (const QByteArray& word : file.readAll().split(' ')) {
      bool ok = false;
      const qint64 child = word.trimmed().toLongLong(&ok);
      if (ok && child > 0) children.push_back(child);
    }
  }
  return children;
}

RunProcess::RunProcess(QObject* parent) : QObject(parent) {
  process_.setProcessChannelMode(QProcess::MergedChannels);
  flushTimer_.setInterval(kFlushMs);
  stopTimer_.setSingleShot(true);
  connect(&process_, &QProcess::readyRead, this, [this] {
    pending_ += decoder_.decode(process_.readAll());
    if (!flushTimer_.isActive()) flushTimer_.start();
  });
  connect(&flushTimer_, &QTimer::timeout, this, &RunProcess::flush);
  connect(&process_, &QProcess::finished, this, &RunProcess::onStepFinished);
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error != QProcess::FailedToStart) return;
    flush();
    const QString program = steps_[current_].program;
    steps_.clear();
    current_ = -1;
    emit finished(-1, false, tr("Could not start %1: %2").arg(program, process_.errorString()));
  });
  connect(&stopTimer_, &QTimer::timeout, this, &RunProcess::escalate);
}

RunProcess::~RunProcess() {
  if (!isRunning()) return;
  // The window is closing: the job must not outlive it. Whoever listens is being destroyed too,
  // so the process's end is reported to no one.
  process_.disconnect(this);
  blockSignals(true);
  for (qint64 child : childProcesses(process_.processId())) ::kill(child, SIGTERM);
  process_.terminate();
  if (!process_.waitForFinished(3000)) process_.kill();
  process_.waitForFinished(1000);
}

void RunProcess::start(const LaunchCommand& command) {
  if (isRunning() || command.steps.empty()) return;
  steps_ = command.steps;
  stopping_ = false;
  stopStage_ = 0;
  startStep(0);
}

void RunProcess::startStep(int index) {
  current_ = index;
  const LaunchStep& step = steps_[index];
  QStringList words{shellQuote(step.program)};
  for (const QString& a : step.arguments) words << shellQuote(a);
  emit stepStarted(index, words.join(' '));
  process_.start(step.program, step.arguments);
}

void RunProcess::onStepFinished(int exitCode, QProcess::ExitStatus status) {
  flush();
  const bool ok = status == QProcess::NormalExit && exitCode == 0;
  if (ok && !stopping_ && current_ + 1 < static_cast<int>(steps_.size())) {
    startStep(current_ + 1);
    return;
  }
  stopTimer_.stop();
  QString summary;
  if (stopping_)
    summary = tr("Stopped.");
  else if (status == QProcess::CrashExit)
    summary = tr("%1 crashed.").arg(steps_[current_].purpose);
  else if (!ok)
    summary = tr("%1 failed with exit code %2.").arg(steps_[current_].purpose).arg(exitCode);
  else
    summary = tr("Finished.");
  steps_.clear();
  current_ = -1;
  stopping_ = false;
  emit finished(exitCode, ok, summary);
}

void RunProcess::flush() {
  flushTimer_.stop();
  if (pending_.isEmpty()) return;
  emit output(pending_);
  pending_.clear();
}

void RunProcess::stop() {
  if (!isRunning() || stopping_) return;
  stopping_ = true;
  stopStage_ = 0;
  escalate();
}

void RunProcess::escalate() {
  if (!isRunning()) return;
  const qint64 pid = process_.processId();
  const std::vector<qint64> children = childProcesses(pid);
  // mpirun, mpiexec and orterun are the same launcher (tests and some systems use mpiexec).
  const QString program = QFileInfo(steps_[current_].program).fileName();
  const bool launcher = program == QLatin1String("mpirun") || program == QLatin1String("mpiexec") ||
                        program == QLatin1String("orterun");
  if (stopStage_ == 0 && launcher && !children.empty()) {
    for (qint64 child : children) ::kill(static_cast<pid_t>(child), SIGTERM);
    emit output(tr("\n[studio] SIGTERM sent to the %1 ranks\n").arg(children.size()));
    stopStage_ = 1;
    stopTimer_.start(kGraceMs);
  } else if (stopStage_ <= 1) {
    process_.terminate();
    emit output(tr("\n[studio] SIGTERM sent to %1\n").arg(steps_[current_].program));
    stopStage_ = 2;
    stopTimer_.start(kKillMs);
  } else {
    for (qint64 child : children) ::kill(static_cast<pid_t>(child), SIGKILL);
    process_.kill();
    emit output(tr("\n[studio] killed after %1 s\n").arg((kGraceMs + kKillMs) / 1000));
    stopStage_ = 3;
  }
}

}  // namespace lattice::ui
