// The History view's runs table: one row per run of RunStore::list_runs, in the store's order
// (by id). setRuns() merges a fresh read into the rows in place (dataChanged for changed rows,
// insert/remove for runs that appeared or went), so a periodic refresh keeps the view's
// selection and scroll position. Edits in the name, tags and notes cells are requests
// (editRequested): the store is written elsewhere and the next read shows the result.
// Rows come without configs (RunFilter::with_config false); each run's parsed settings, with
// the config text, arrive later through addSettings() (HistoryView reads them off the UI
// thread) and stay with the row until its record changes.
#pragma once

#include <QAbstractTableModel>
#include <QHash>
#include <QSet>
#include <QStringList>
#include <memory>
#include <vector>

#include "lattice/storage/run_store.h"

namespace lattice::ui {

struct ParsedSettings;  // history_io.h

// A change a user asked for; HistoryView applies it to the store off the UI thread.
struct RunEdit {
  enum class Kind { kRename, kAddTags, kRemoveTags, kNotes, kDelete };
  Kind kind = Kind::kRename;
  qint64 runId = 0;
  QString text;      // kRename: the new name; kNotes: the notes
  QStringList tags;  // kAddTags, kRemoveTags
};

class RunTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kId,
    kName,
    kStatus,
    kLayout,
    kModelSize,
    kSteps,
    kLoss,
    kTokens,
    kStarted,
    kDuration,
    kTags,
    kNotes,
    kColumnCount
  };
  // kSortRole: numbers as numbers (steps, loss, size, times), text otherwise; runs missing a
  // value sort first. kRunIdRole: the run's id (any column). kTagsRole: its tags (QStringList).
  // kStatusRole: its status name ("crashed" included). kSearchRole: name, tags and notes.
  static constexpr int kSortRole = Qt::UserRole + 1;
  static constexpr int kRunIdRole = Qt::UserRole + 2;
  static constexpr int kTagsRole = Qt::UserRole + 3;
  static constexpr int kStatusRole = Qt::UserRole + 4;
  static constexpr int kSearchRole = Qt::UserRole + 5;

  explicit RunTableModel(QObject* parent = nullptr);

  // `runs` in the store's order (ascending id); `now` (Unix seconds) dates running runs. A run
  // whose record is new or changed joins the configs wanted (takeConfigsWanted); one that
  // changed keeps its settings until new ones arrive. A config changes only with the record:
  // create_run writes it, and import_runs replaces it only for a run that progressed (a new
  // status or more steps), so an unchanged record has an unchanged config.
  void setRuns(std::vector<storage::RunInfo> runs, double now);
  void clear();
  // false: no cell is editable and setData() asks for nothing (a store History only reads).
  void setEditable(bool editable);
  const std::vector<storage::RunInfo>& runs() const { return runs_; }
  int rowOfRun(qint64 id) const;  // -1 when absent; a hash lookup
  const storage::RunInfo* run(qint64 id) const;
  // The run's parsed settings (null when not read); every run's, by id.
  std::shared_ptr<const ParsedSettings> settings(qint64 id) const { return settings_.value(id); }
  // Adds parsed settings (readSettings) of runs the model holds.
  void addSettings(const QHash<qint64, std::shared_ptr<const ParsedSettings>>& more);
  // The runs whose configs are to be read (new or changed since their settings were read), in
  // row order; the list is emptied. wantConfigs puts runs back (a read that failed).
  std::vector<qint64> takeConfigsWanted();
  void wantConfigs(const std::vector<qint64>& ids);
  bool configsWanted() const { return !configsWanted_.isEmpty(); }
  const QHash<qint64, std::shared_ptr<const ParsedSettings>>& settingsIndex() const {
    return settings_;
  }
  QStringList allTags() const;  // sorted, once each

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  // Name, tags ("a, b") and notes cells: emits editRequested and returns false (the row shows
  // the store's value until the next read).
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

 signals:
  void editRequested(const QList<lattice::ui::RunEdit>& edits);

 private:
  QVariant display(const storage::RunInfo& r, int column) const;
  QVariant sortValue(const storage::RunInfo& r, int column) const;
  QVariant foreground(const storage::RunInfo& r, int column) const;

  void indexRows();

  std::vector<storage::RunInfo> runs_;
  QHash<qint64, int> rowOf_;  // run id -> row; 10,000 runs make a linear search show
  QHash<qint64, std::shared_ptr<const ParsedSettings>> settings_;
  QSet<qint64> configsWanted_;
  double now_ = 0;
  bool editable_ = true;
};

// "a, b, c" -> {"a", "b", "c"}: trimmed, empty parts dropped, duplicates once.
QStringList parseTags(const QString& text);

}  // namespace lattice::ui
