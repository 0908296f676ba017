// RunProcess: step sequencing, batched output, staged stop.
#include "launch/run_process.h"

#include <signal.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>

namespace lattice::ui {

namespace {

constexpr int kFlushMs = 40;

// mpirun, mpiexec and orterun are the same launcher (tests and some systems use mpiexec).
bool isMpiLauncher(const QString& program) {
  const QString name = QFileInfo(program).fileName();
  return name == QLatin1String("mpirun") || name == QLatin1String("mpiexec") ||
         name == QLatin1String("orterun");
}

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
  const bool launcher = current_ >= 0 && isMpiLauncher(steps_[current_].program);
  ::kill(static_cast<pid_t>(process_.processId()), launcher ? SIGUSR1 : SIGTERM);
  if (process_.waitForFinished(3000)) return;
  for (qint64 child : childProcesses(process_.processId())) ::kill(child, SIGKILL);
  process_.kill();
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
  if (stopping_ && stopStage_ <= 1)
    summary = tr("Stopped in %1 s.").arg(stopClock_.elapsed() / 1000.0, 0, 'f', 1);
  else if (stopping_)
    summary = tr("Stopped: %1 s after the stop request it was still running and was %2.")
                  .arg(stopClock_.elapsed() / 1000.0, 0, 'f', 1)
                  .arg(stopStage_ == 2 ? tr("terminated (SIGTERM)") : tr("killed (SIGKILL)"));
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
  stopClock_.start();
  escalate();
}

void RunProcess::escalate() {
  if (!isRunning()) return;
  const pid_t pid = static_cast<pid_t>(process_.processId());
  const QString program = steps_[current_].program;
  if (stopStage_ == 0) {
    const bool launcher = isMpiLauncher(program);
    ::kill(pid, launcher ? SIGUSR1 : SIGTERM);
    emit output(launcher ? tr("\n[studio] Stop: SIGUSR1 to mpirun, which passes it to every rank; "
                              "they stop after the current iteration\n")
                         : tr("\n[studio] Stop: SIGTERM to %1\n").arg(program));
    stopStage_ = 1;
    stopTimer_.start(kGraceMs);
  } else if (stopStage_ == 1) {
    for (qint64 child : childProcesses(pid)) ::kill(static_cast<pid_t>(child), SIGTERM);
    process_.terminate();
    emit output(tr("\n[studio] still running after %1 s: SIGTERM to %2 and its children\n")
                    .arg(kGraceMs / 1000)
                    .arg(program));
    stopStage_ = 2;
    stopTimer_.start(kKillMs);
  } else {
    for (qint64 child : childProcesses(pid)) ::kill(static_cast<pid_t>(child), SIGKILL);
    process_.kill();
    emit output(tr("\n[studio] killed after %1 s\n").arg((kGraceMs + kKillMs) / 1000));
    stopStage_ = 3;
  }
}

}  // namespace lattice::ui
