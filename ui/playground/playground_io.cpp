// The Playground's run-store reads, checkpoint directories and settings keys.
#include "playground/playground_io.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <algorithm>
#include <nlohmann/json.hpp>

namespace lattice::ui {

QString runSaveDir(const storage::RunInfo& run) {
  const nlohmann::json config = nlohmann::json::parse(run.config_json, nullptr, false);
  if (!config.is_object() || !config.contains("save") || !config["save"].is_string()) return {};
  return QString::fromStdString(config["save"].get<std::string>());
}

int checkpointIteration(const QString& dir) {
  static const QRegularExpression iterName(QStringLiteral("^iter_(\\d+)$"));
  const QFileInfo info(dir);
  const QRegularExpressionMatch m = iterName.match(info.fileName());
  if (m.hasMatch() && QFileInfo::exists(QDir(dir).filePath(QStringLiteral("metadata.json"))))
    return m.captured(1).toInt();
  QFile latest(QDir(dir).filePath(QStringLiteral("latest_checkpointed_iteration.txt")));
  if (!latest.open(QIODevice::ReadOnly)) return -1;
  bool ok = false;
  const int iteration = QString::fromUtf8(latest.readAll()).trimmed().toInt(&ok);
  return ok && iteration >= 0 ? iteration : -1;
}

RunCheckpointsRead readRunCheckpoints(const QString& database) {
  RunCheckpointsRead read;
  // Read-only: the Playground never writes a store, and the one shown may be a running
  // cluster job's (an empty file there is one the job has not written yet).
  const QFileInfo file(database);
  if (database.isEmpty() || !file.exists() || file.size() == 0) return read;
  storage::OpenOptions options;
  options.read_only = true;
  Result<std::unique_ptr<storage::RunStore>> store =
      storage::RunStore::open(database.toStdString(), options);
  if (!store) {
    read.problem = QString::fromStdString(store.status().message());
    return read;
  }
  Result<std::vector<storage::RunInfo>> runs = (*store)->list_runs();
  if (!runs) {
    read.problem = QString::fromStdString(runs.status().message());
    return read;
  }
  for (const storage::RunInfo& r : *runs) {
    const QString save = runSaveDir(r);
    if (save.isEmpty()) continue;
    const int iteration = checkpointIteration(save);
    if (iteration < 0) continue;
    read.runs.append(
        {r.id, QString::fromStdString(r.name), QFileInfo(save).absoluteFilePath(), iteration});
  }
  std::sort(read.runs.begin(), read.runs.end(),
            [](const RunCheckpoint& a, const RunCheckpoint& b) { return a.runId > b.runId; });
  return read;
}

void savePlaygroundSettings(QSettings& s, const PlaygroundSettings& p) {
  s.beginGroup("playground");
  s.setValue("prompt", p.request.prompt);
  s.setValue("tokens", p.request.tokens);
  s.setValue("temperature", p.request.temperature);
  s.setValue("top_k", p.request.topK);
  s.setValue("top_p", p.request.topP);
  s.setValue("seed", p.request.seed);
  s.setValue("stop_at_eod", p.request.stopAtEod);
  s.setValue("stop", p.request.stop);
  s.setValue("checkpoint", p.checkpoint);
  s.setValue("colour_tokens", p.colourTokens);
  s.endGroup();
}

PlaygroundSettings loadPlaygroundSettings(QSettings& s) {
  PlaygroundSettings p;
  PlaygroundRequest& r = p.request;
  s.beginGroup("playground");
  r.prompt = s.value("prompt", r.prompt).toString();
  r.tokens = s.value("tokens", r.tokens).toInt();
  r.temperature = s.value("temperature", r.temperature).toDouble();
  r.topK = s.value("top_k", r.topK).toInt();
  r.topP = s.value("top_p", r.topP).toDouble();
  r.seed = s.value("seed", r.seed).toULongLong();
  r.stopAtEod = s.value("stop_at_eod", r.stopAtEod).toBool();
  r.stop = s.value("stop", r.stop).toString();
  p.checkpoint = s.value("checkpoint").toString();
  p.colourTokens = s.value("colour_tokens", p.colourTokens).toBool();
  s.endGroup();
  return p;
}

}  // namespace lattice::ui
