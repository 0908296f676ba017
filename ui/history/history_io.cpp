// Background reads and writes of the History view.
#include "history/history_io.h"

#include <QDateTime>
#include <QFileInfo>
#include <memory>

namespace lattice::ui {

namespace {

std::vector<std::string> stdTags(const QStringList& tags) {
  std::vector<std::string> out;
  for (const QString& t : tags) out.push_back(t.toStdString());
  return out;
}

Status apply(storage::RunStore& store, const RunEdit& e) {
  switch (e.kind) {
    case RunEdit::Kind::kRename:
      return store.rename_run(e.runId, e.text.toStdString());
    case RunEdit::Kind::kAddTags:
      return store.add_tags(e.runId, stdTags(e.tags));
    case RunEdit::Kind::kRemoveTags:
      return store.remove_tags(e.runId, stdTags(e.tags));
    case RunEdit::Kind::kNotes:
      return store.set_notes(e.runId, e.text.toStdString());
    case RunEdit::Kind::kDelete:
      return store.delete_run(e.runId);
  }
  return Status::ok();
}

}  // namespace

RunsRead readRuns(const QString& database, StoreAccess access) {
  RunsRead read;
  read.now = static_cast<double>(QDateTime::currentMSecsSinceEpoch()) / 1000.0;
  const bool readOnly = access == StoreAccess::kReadOnly;
  const QFileInfo file(database);
  if (database.isEmpty() || !file.exists() || (readOnly && file.size() == 0)) {
    read.missing = true;
    return read;
  }
  storage::OpenOptions options;
  options.read_only = readOnly;
  Result<std::unique_ptr<storage::RunStore>> store =
      storage::RunStore::open(database.toStdString(), options);
  if (!store) {
    read.problem = QString::fromStdString(store.status().message());
    return read;
  }
  storage::RunFilter filter;
  filter.now = read.now;
  Result<std::vector<storage::RunInfo>> runs = (*store)->list_runs(filter);
  if (!runs) {
    read.problem = QString::fromStdString(runs.status().message());
    return read;
  }
  read.runs = std::move(*runs);
  return read;
}

QStringList applyEdits(const QString& database, const QList<RunEdit>& edits) {
  if (edits.isEmpty()) return {};
  if (!QFileInfo::exists(database)) return {QObject::tr("%1 does not exist").arg(database)};
  Result<std::unique_ptr<storage::RunStore>> store =
      storage::RunStore::open(database.toStdString());
  if (!store) return {QString::fromStdString(store.status().message())};
  QStringList errors;
  for (const RunEdit& e : edits) {
    if (Status s = apply(**store, e); !s) errors << QString::fromStdString(s.message());
  }
  return errors;
}

}  // namespace lattice::ui
