// The runs table as shown: RunTableModel filtered by text (name, tags, notes; case-insensitive,
// every word must match), by tag and by status, and sorted by RunTableModel::kSortRole.
#pragma once

#include <QSortFilterProxyModel>
#include <QStringList>

namespace lattice::ui {

class RunFilterModel : public QSortFilterProxyModel {
  Q_OBJECT

 public:
  explicit RunFilterModel(QObject* parent = nullptr);

  void setText(const QString& text);      // empty: any run
  void setTag(const QString& tag);        // empty: any tag
  void setStatus(const QString& status);  // a run_status_name ("crashed" too); empty: any

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

 private:
  QStringList words_;
  QString tag_, status_;
};

}  // namespace lattice::ui
