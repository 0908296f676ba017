// The runs table as shown: RunTableModel filtered by text (name, tags, notes; case-insensitive,
// every word must match; a word "setting=value", such as lr=3e-4 or tokenizer-type=NullTokenizer,
// matches the runs whose setting has that value, numbers by value), by tag and by status, and
// sorted by RunTableModel::kSortRole.
#pragma once

#include <QSortFilterProxyModel>
#include <QStringList>
#include <optional>
#include <string>
#include <vector>

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
  // A "setting=value" word: the value as typed, and as a number when it is one.
  struct SettingWord {
    std::string setting;
    QString text;
    std::optional<double> number;
  };

  QStringList words_;  // the plain words
  std::vector<SettingWord> settingWords_;
  QString tag_, status_;
};

}  // namespace lattice::ui
