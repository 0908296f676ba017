// RunFilterModel: the History view's text, tag and status filters.
#include "history/run_filter_model.h"

#include "history/history_io.h"
#include "history/run_table_model.h"

namespace lattice::ui {

RunFilterModel::RunFilterModel(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(RunTableModel::kSortRole);
  setDynamicSortFilter(true);
}

void RunFilterModel::setText(const QString& text) {
  QStringList words;
  std::vector<SettingWord> settingWords;
  for (const QString& word : text.simplified().split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
    const qsizetype eq = word.indexOf(QLatin1Char('='));
    if (eq <= 0) {
      words << word;
      continue;
    }
    const QString value = word.mid(eq + 1);
    settingWords.push_back(
        {word.left(eq).toStdString(), value, storage::setting_number(value.toStdString())});
  }
  const bool same = words == words_ && settingWords.size() == settingWords_.size() &&
                    std::equal(settingWords.begin(), settingWords.end(), settingWords_.begin(),
                               [](const SettingWord& a, const SettingWord& b) {
                                 return a.setting == b.setting && a.text == b.text;
                               });
  if (same) return;
  words_ = words;
  settingWords_ = std::move(settingWords);
  invalidateFilter();
}

void RunFilterModel::setTag(const QString& tag) {
  if (tag == tag_) return;
  tag_ = tag;
  invalidateFilter();
}

void RunFilterModel::setStatus(const QString& status) {
  if (status == status_) return;
  status_ = status;
  invalidateFilter();
}

bool RunFilterModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
  const QModelIndex index = sourceModel()->index(sourceRow, 0, sourceParent);
  if (!status_.isEmpty() && index.data(RunTableModel::kStatusRole).toString() != status_)
    return false;
  if (!tag_.isEmpty() && !index.data(RunTableModel::kTagsRole).toStringList().contains(tag_))
    return false;
  if (!settingWords_.empty()) {
    const auto* runs = static_cast<const RunTableModel*>(sourceModel());
    const std::shared_ptr<const ParsedSettings> parsed =
        runs->settings(index.data(RunTableModel::kRunIdRole).toLongLong());
    if (!parsed) return false;
    for (const SettingWord& w : settingWords_) {
      const auto it = parsed->settings.find(w.setting);
      if (it == parsed->settings.end()) return false;
      const std::optional<double> number = storage::setting_number(it->second);
      const bool match = number && w.number
                             ? *number == *w.number
                             : QString::fromStdString(storage::setting_text(it->second))
                                       .compare(w.text, Qt::CaseInsensitive) == 0;
      if (!match) return false;
    }
  }
  if (words_.isEmpty()) return true;
  const QString haystack = index.data(RunTableModel::kSearchRole).toString();
  for (const QString& word : words_) {
    if (!haystack.contains(word, Qt::CaseInsensitive)) return false;
  }
  return true;
}

}  // namespace lattice::ui
