// JSON <-> flags <-> TrainOptions, through the engine's parser (see train_flags.h).
#include "plan/train_flags.h"

#include <QFile>
#include <QSaveFile>
#include <nlohmann/json.hpp>
#include <sstream>

#include "plan/plan.h"

namespace lattice::ui {

namespace {

// Flag names in `lattice train --help` order (the engine's option table order).
const std::vector<std::string>& flagOrder() {
  static const std::vector<std::string> order = [] {
    std::vector<std::string> names;
    std::istringstream in(train_options_help());
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("  --", 0) != 0) continue;
      const std::string name = line.substr(4, line.find(' ', 4) - 4);
      if (name != "config") names.push_back(name);
    }
    return names;
  }();
  return order;
}

std::string valueText(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// Appends the flags that set `key` to `value`.
void appendFlag(std::vector<std::string>& out, const std::string& key, const nlohmann::json& v) {
  const std::string flag = "--" + key;
  if (v.is_boolean()) {
    out.push_back(v.get<bool>() ? flag : flag + "=false");
  } else if (v.is_array()) {
    if (v.empty()) return;
    out.push_back(flag);
    for (const nlohmann::json& item : v) out.push_back(valueText(item));
  } else {
    const std::string text = valueText(v);
    if (text.empty() || text[0] == '-') {
      out.push_back(flag + "=" + text);
    } else {
      out.push_back(flag);
      out.push_back(text);
    }
  }
}

}  // namespace

Result<std::vector<std::string>> flagsFromJson(const std::string& json_text) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::invalid_argument(std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_object())
    return Status::invalid_argument("expected a JSON object of flag names to values");
  std::vector<std::string> flags;
  for (auto& [key, value] : doc.items()) appendFlag(flags, key, value);
  return flags;
}

Result<TrainOptions> optionsFromJson(const std::string& json_text) {
  Result<std::vector<std::string>> flags = flagsFromJson(json_text);
  if (!flags) return flags.status();
  Result<TrainOptions> options = parse_train_flags(*flags);
  if (!options) return options.status();
  normalizeOptions(*options);
  return options;
}

QStringList changedTrainFlags(const TrainOptions& options, const std::set<std::string>& exclude) {
  const nlohmann::json now = nlohmann::json::parse(train_options_json(options));
  // A named default rather than a temporary: GCC 12 warned of maybe-uninitialised strings in
  // the temporary's copy (a false positive); made once, as a default never changes.
  static const nlohmann::json defaults = [] {
    const TrainOptions fresh;
    return nlohmann::json::parse(train_options_json(fresh));
  }();
  std::vector<std::string> flags;
  for (const std::string& key : flagOrder()) {
    if (exclude.count(key) || !now.contains(key)) continue;
    if (defaults.contains(key) && defaults[key] == now[key]) continue;
    appendFlag(flags, key, now[key]);
  }
  QStringList out;
  for (const std::string& f : flags) out << QString::fromStdString(f);
  return out;
}

Result<TrainOptions> readConfigFile(const QString& path) {
  Result<TrainOptions> options = parse_train_flags({"--config", path.toStdString()});
  if (!options) return options.status();
  options->config_path.clear();
  normalizeOptions(*options);
  return options;
}

Status writeConfigFile(const QString& path, const TrainOptions& options) {
  const nlohmann::json flat = nlohmann::json::parse(train_options_json(options));
  nlohmann::ordered_json ordered;
  for (const std::string& key : flagOrder())
    if (flat.contains(key)) ordered[key] = flat[key];
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Text))
    return Status::io_error(path.toStdString() + ": cannot write (" +
                            file.errorString().toStdString() + ")");
  const std::string text = ordered.dump(2) + "\n";
  file.write(text.data(), static_cast<qint64>(text.size()));
  if (!file.commit())
    return Status::io_error(path.toStdString() + ": cannot write (" +
                            file.errorString().toStdString() + ")");
  return Status::ok();
}

}  // namespace lattice::ui
