// RunFilterModel: the History view's text, tag and status filters.
#include "history/run_filter_model.h"

#include "history/run_table_model.h"

namespace lattice::ui {

RunFilterModel::RunFilterModel(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(RunTableModel::kSortRole);
  setDynamicSortFilter(true);
}

void RunFilterModel::setText(const QString& text) {
  const QStringList words = text.simplified().split(QLatin1Char(' '), Qt::SkipEmptyParts);
  if (words == words_) return;
  words_ = words;
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
  if (words_.isEmpty()) return true;
  const QString haystack = index.data(RunTableModel::kSearchRole).toString();
  for (const QString& word : words_) {
    if (!haystack.contains(word, Qt::CaseInsensitive)) return false;
  }
  return true;
}

}  // namespace lattice::ui
