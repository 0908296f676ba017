// Cluster jobs after submission: id, cancel, import (cluster_job.h).
#include "launch/cluster_job.h"

#include <QProcess>
#include <QRegularExpression>

#include "lattice/storage/run_store.h"
#include "launch/launch_command.h"

namespace lattice::ui {

QString submittedJobId(const QString& output) {
  static const QRegularExpression submitted(QStringLiteral("submitted batch job (\\d+)"));
  const QRegularExpressionMatch m = submitted.match(output);
  return m.hasMatch() ? m.captured(1) : QString();
}

void cancelJob(const QString& lattice, const QString& jobId, QObject* parent,
               const std::function<void(const QString&)>& report) {
  auto* cancel = new QProcess(parent);
  cancel->setProcessChannelMode(QProcess::MergedChannels);
  QObject::connect(cancel, &QProcess::finished, parent, [cancel, report] {
    report(QString::fromLocal8Bit(cancel->readAll()));
    cancel->deleteLater();
  });
  report(QStringLiteral("$ %1 launch cancel %2\n").arg(shellQuote(lattice), jobId));
  cancel->start(lattice, {"launch", "cancel", jobId});
}

JobImport importJobRuns(const QString& jobStore, const QString& into, const QString& runName) {
  JobImport out;
  out.localName = runName;
  Result<std::unique_ptr<storage::RunStore>> store = storage::RunStore::open(into.toStdString());
  if (!store) {
    out.message =
        QObject::tr("Not imported: %1").arg(QString::fromStdString(store.status().message()));
    return out;
  }
  Result<storage::ImportReport> r = (*store)->import_runs(jobStore.toStdString());
  if (!r) {
    out.message = QObject::tr("Not imported: %1").arg(QString::fromStdString(r.status().message()));
    return out;
  }
  const std::string name = runName.toStdString();
  std::string local = name;
  const std::string prefix = "'" + name + "' as '";
  for (const std::string& renamed : r->renamed)
    if (renamed.starts_with(prefix))
      local = renamed.substr(prefix.size(), renamed.size() - prefix.size() - 1);
  out.ok = true;
  out.localName = QString::fromStdString(local);
  Result<storage::RunInfo> run = (*store)->find_run(local);
  if (run) out.runId = run->id;
  out.message = QObject::tr("Imported the job's runs into %1: %2 added, %3 updated, %4 unchanged.")
                    .arg(into)
                    .arg(r->added)
                    .arg(r->updated)
                    .arg(r->unchanged);
  return out;
}

}  // namespace lattice::ui
