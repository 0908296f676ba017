// fineTuneBase: a fine-tune's --load matched against the runs' --save directories.
#include "history/finetune_base.h"

#include <QDir>
#include <nlohmann/json.hpp>

#include "playground/playground_io.h"

namespace lattice::ui {

QString fineTuneCheckpoint(const storage::RunInfo& run) {
  const nlohmann::json config = nlohmann::json::parse(run.config_json, nullptr, false);
  if (!config.is_object()) return {};
  const auto finetune = config.find("finetune");
  const auto load = config.find("load");
  if (finetune == config.end() || !finetune->is_boolean() || !finetune->get<bool>()) return {};
  if (load == config.end() || !load->is_string()) return {};
  return QString::fromStdString(load->get<std::string>());
}

std::optional<qint64> fineTuneBase(const storage::RunInfo& fineTune,
                                   const std::vector<storage::RunInfo>& runs,
                                   const std::function<std::string(qint64)>& config) {
  const QString loaded = fineTuneCheckpoint(fineTune);
  if (loaded.isEmpty()) return std::nullopt;
  const QString wanted = QDir::cleanPath(loaded);
  std::optional<qint64> base;
  for (const storage::RunInfo& r : runs) {
    if (r.id >= fineTune.id || (base && r.id < *base)) continue;
    storage::RunInfo withConfig;
    withConfig.config_json = config(r.id);
    const QString save = runSaveDir(withConfig);
    if (!save.isEmpty() && QDir::cleanPath(save) == wanted) base = r.id;
  }
  return base;
}

}  // namespace lattice::ui
