// SweepRun: the History's runs as the sweep tabs read them.
#include "history/sweep_runs.h"

#include <QHash>
#include <map>

#include "history/run_table_model.h"
#include "history/run_text.h"

namespace lattice::ui {

std::vector<SweepRun> sweepRuns(const RunTableModel& model, const QList<qint64>& ids) {
  std::vector<SweepRun> out;
  out.reserve(static_cast<std::size_t>(ids.size()));
  for (qint64 id : ids) {
    const storage::RunInfo* r = model.run(id);
    if (!r) continue;
    SweepRun s;
    s.id = r->id;
    s.name = QString::fromStdString(r->name);
    s.lastStep = r->latest_step.value_or(-1);
    s.loss = latestMetric(*r, kLossKey);
    s.validation = latestMetric(*r, kValidationLossKey);
    s.tokens = latestMetric(*r, kTokensKey);
    s.settings = model.settings(id);
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<std::string> settingOf(const SweepRun& run, const std::string& setting) {
  if (!run.settings) return std::nullopt;
  const auto it = run.settings->settings.find(setting);
  if (it == run.settings->settings.end()) return std::nullopt;
  return it->second;
}

QStringList differingSettings(const std::vector<SweepRun>& runs, const QStringList& except) {
  static const storage::RunSettings kNone;
  const storage::RunSettings& first =
      runs.empty() || !runs[0].settings ? kNone : runs[0].settings->settings;
  std::map<std::string, bool> differs;  // every key seen -> whether it differs
  for (const auto& [key, value] : first) differs.emplace(key, false);
  for (std::size_t i = 1; i < runs.size(); ++i) {
    const storage::RunSettings& s = runs[i].settings ? runs[i].settings->settings : kNone;
    auto a = first.begin();
    auto b = s.begin();
    while (a != first.end() || b != s.end()) {
      if (b == s.end() || (a != first.end() && a->first < b->first)) {
        differs[a->first] = true;  // the first run has it, this one not
        ++a;
      } else if (a == first.end() || b->first < a->first) {
        differs[b->first] = true;
        ++b;
      } else {
        if (a->second != b->second) differs[a->first] = true;
        ++a, ++b;
      }
    }
  }
  QStringList out;
  for (const auto& [key, differ] : differs) {
    const QString name = QString::fromStdString(key);
    if (differ && !except.contains(name)) out << name;
  }
  return out;
}

quint64 sweepSignature(const std::vector<SweepRun>& runs) {
  size_t h = qHash(runs.size());
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (const SweepRun& r : runs) {
    mix(qHash(r.id));
    mix(qHash(r.lastStep));
    for (const std::optional<double>& m : {r.loss, r.validation, r.tokens}) mix(m ? qHash(*m) : 1);
    mix(reinterpret_cast<size_t>(r.settings.get()));
  }
  return h;
}

}  // namespace lattice::ui
