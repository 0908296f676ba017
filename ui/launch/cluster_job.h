// Following a cluster job after `lattice launch` submitted it: its id in the output, cancelling
// it, and merging its run store into the local one when it ends. Shared by the Launch view and
// the Plan view's Calibrate (a probe on the cluster), so that both treat a job the same way.
// Non-goals: submitting (launch_command.h builds the command, RunProcess runs it).
#pragma once

#include <QObject>
#include <QString>
#include <functional>

namespace lattice::ui {

// The Slurm job id `lattice launch` printed in `output` ("submitted batch job 42"); empty when
// the text has none.
QString submittedJobId(const QString& output);

// Starts `<lattice> launch cancel <jobId>` (scancel; the `lattice launch` following the job sees
// it end). `report` gets the command line first, then its output; the process is a child of
// `parent` and deletes itself.
void cancelJob(const QString& lattice, const QString& jobId, QObject* parent,
               const std::function<void(const QString&)>& report);

struct JobImport {
  bool ok = false;
  QString message;    // "Imported the job's runs into ...: 1 added, ...", or why not
  QString localName;  // the run `runName` under the name it has in the local store
  qint64 runId = 0;   // its id there; 0 when not found
};
// Merges the job's store `jobStore` into `into` and finds run `runName` there ("'a' as
// 'a (2)'" when 'a' was taken). Blocking: call it off the UI thread. Importing twice keeps one
// copy, so a job imported by hand is no problem.
JobImport importJobRuns(const QString& jobStore, const QString& into, const QString& runName);

}  // namespace lattice::ui
