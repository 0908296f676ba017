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
  filter.with_config = false;
  Result<std::vector<storage::RunInfo>> runs = (*store)->list_runs(filter);
  if (!runs) {
    read.problem = QString::fromStdString(runs.status().message());
    return read;
  }
  read.runs = std::move(*runs);
  return read;
}

SettingsRead readSettings(const QString& database, const std::vector<qint64>& ids,
                          const SettingsIndex& known) {
  SettingsRead read;
  if (ids.empty()) return read;
  storage::OpenOptions options;
  options.read_only = true;  // readRuns opened it first, and migrated it where it may
  Result<std::unique_ptr<storage::RunStore>> store =
      storage::RunStore::open(database.toStdString(), options);
  if (!store) {
    read.problem = QString::fromStdString(store.status().message());
    return read;
  }
  Result<std::vector<std::pair<std::int64_t, std::string>>> configs =
      (*store)->run_configs(std::vector<std::int64_t>(ids.begin(), ids.end()));
  if (!configs) {
    read.problem = QString::fromStdString(configs.status().message());
    return read;
  }
  read.settings.reserve(static_cast<qsizetype>(configs->size()));
  for (auto& [id, config] : *configs) {
    const auto was = known.constFind(id);
    if (was != known.constEnd() && (*was)->config_json == config) {
      read.settings.insert(id, *was);
      continue;
    }
    storage::RunSettings settings = storage::run_settings(config);
    read.settings.insert(id, std::make_shared<const ParsedSettings>(
                                 ParsedSettings{std::move(config), std::move(settings)}));
  }
  return read;
}

SeriesRead readGroupSeries(const QString& database, const QList<qint64>& runs,
                           const std::string& key, qint64 lastStep) {
  SeriesRead read;
  if (runs.isEmpty() || lastStep < 0) return read;
  storage::OpenOptions options;
  options.read_only = true;  // never a writer: History's reads may follow a job's store
  Result<std::unique_ptr<storage::RunStore>> store =
      storage::RunStore::open(database.toStdString(), options);
  if (!store) {
    read.problem = QString::fromStdString(store.status().message());
    return read;
  }
  for (qint64 id : runs) {
    std::vector<storage::StepValue> points;
    if (lastStep < kGroupCurvePoints) {
      Result<std::vector<storage::StepValue>> all = (*store)->series(id, key, 0, lastStep);
      if (!all) {
        read.problem = QString::fromStdString(all.status().message());
        return read;
      }
      points = std::move(*all);
    } else {
      Result<std::vector<storage::Bucket>> buckets =
          (*store)->downsample(id, key, 0, lastStep, kGroupCurvePoints);
      if (!buckets) {
        read.problem = QString::fromStdString(buckets.status().message());
        return read;
      }
      // Each bucket at the last step of its interval (the same in every run), with the value
      // logged last in it: a run's curve, not its noise, is what a group averages.
      const qint64 span = lastStep + 1;
      for (const storage::Bucket& b : *buckets) {
        const qint64 index = b.first_step * kGroupCurvePoints / span;
        const qint64 end = ((index + 1) * span + kGroupCurvePoints - 1) / kGroupCurvePoints - 1;
        points.push_back({end, b.last});
      }
    }
    read.series.insert(id, std::move(points));
  }
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
