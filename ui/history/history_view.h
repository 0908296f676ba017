// The History view: every run of the run store in a sortable, filterable table (RunTableModel
// behind RunFilterModel), edited in place (rename, tags, notes, delete after asking), and a
// tabbed area under it: the ComparePanel for two to kMaxCompared selected runs, the Groups tab
// (runs grouped by a setting, grouped curves) and the Parallel coordinates tab, both over the
// selected runs when two or more are selected, else over every run the table shows. Reads and
// writes run off the UI thread
// (history_io.h); a visible view re-reads every kRefreshMs. A store shown read-only (a running
// cluster job's own) is never written: its edits are disabled and a banner says why. Owns no
// plots: "Open in Dashboard" and "Compare curves" hand the selected run ids to whoever shows
// curves.
#pragma once

#include <QFutureWatcher>
#include <QList>
#include <QStringList>
#include <QTimer>
#include <QWidget>
#include <optional>

#include "history/history_io.h"
#include "history/run_table_model.h"

class QAction;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSplitter;
class QTabWidget;
class QTableView;
class QToolButton;

namespace lattice::ui {

class ComparePanel;
class GroupPanel;
class ParallelPanel;
class RunFilterModel;

class HistoryView : public QWidget {
  Q_OBJECT

 public:
  explicit HistoryView(QWidget* parent = nullptr);

  static constexpr int kRefreshMs = 2000;
  // Compare shows runs side by side up to this many; Groups and Parallel coordinates take all.
  static constexpr int kMaxCompared = 50;
  enum AnalysisTab { kCompareTab, kGroupsTab, kParallelTab };

  // The run database to show (an absent file shows no runs until a run creates it), and how
  // (StoreAccess): kReadOnly opens it read-only, disables rename, tags, notes and delete, and
  // says above the table that the runs can be edited once the job is imported.
  void setDatabase(const QString& path, StoreAccess access = StoreAccess::kReadWrite);
  const QString& database() const { return database_; }
  StoreAccess access() const { return access_; }
  // Re-reads now, off the UI thread; refreshed() follows.
  void refresh();
  QList<qint64> selectedRuns() const;  // in the table's order
  // Selects exactly these runs (those not read yet are selected when they appear).
  void selectRuns(const QList<qint64>& ids);

  // Edits, written off the UI thread in the order asked, each into the store shown when it
  // was asked; editsApplied() then refreshed() follow. A refused edit leaves the store as it
  // was and shows the store's message; on a read-only store every edit is refused unwritten.
  void renameRun(qint64 id, const QString& name);
  void addTags(const QList<qint64>& ids, const QStringList& tags);
  void removeTags(const QList<qint64>& ids, const QStringList& tags);
  void setNotes(qint64 id, const QString& notes);
  // Asks first (a dialog naming the runs); false when the user declined, or without asking
  // when the store is read-only.
  bool deleteRuns(const QList<qint64>& ids);

  QString errorText() const;  // the message shown above the table; empty when none
  RunTableModel* tableModel() const { return model_; }
  RunFilterModel* filterModel() const { return proxy_; }
  QTableView* tableView() const { return table_; }
  ComparePanel* comparePanel() const { return compare_; }
  GroupPanel* groupPanel() const { return groups_; }
  ParallelPanel* parallelPanel() const { return parallel_; }
  QTabWidget* analysisTabs() const { return analysis_; }
  void setAnalysisTab(AnalysisTab tab);
  // The runs Groups and Parallel coordinates show: the selected ones when two or more are
  // selected, else every run the table shows, in table order.
  QList<qint64> analysisRuns() const;
  // Gives the current analysis tab its runs now (done after every change, coalesced).
  void updateAnalysisNow();
  // The run `id` was fine-tuned from (finetune_base.h), once the settings are read; none for
  // a run that is no fine-tune or whose base is not in this store.
  std::optional<qint64> baseRunOf(qint64 id) const;
  // "Compare with base": selects the fine-tune `id` and its base run and shows them in the
  // Compare tab (whose "Compare curves" overlays their loss curves). False without a base.
  bool compareWithBase(qint64 id);
  QAction* fineTuneAction() const { return fineTuneAction_; }
  QAction* compareBaseAction() const { return compareBaseAction_; }

 signals:
  void openInDashboard(const QList<qint64>& runIds);
  // "Open in Playground" on a run that saved checkpoints (its --save is recorded).
  void openInPlayground(qint64 runId);
  // "Fine-tune from this checkpoint…" on such a run: `base` with its configuration.
  void fineTuneRequested(const storage::RunInfo& base);
  void refreshed();       // a read is shown, no newer one pending
  void settingsParsed();  // every shown run's settings are known (filters and tabs use them)
  // Every queued edit is written (refreshed() follows); the store's messages for those refused.
  void editsApplied(const QStringList& errors);

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void buildToolbar();
  void buildTable();
  void updateAccess();
  void onRead();
  void readSettingsWanted();
  void onParsed();
  void queueEdits(const QList<RunEdit>& edits);
  void refuseEdits();
  void startWrites();
  void onWritten();
  void showError(const QString& text);
  void updateTagChoices();
  void updateSelectionDependents();
  void updateStatusLine();
  void applyPendingSelection();
  void buildAnalysis();
  void scheduleAnalysis();
  void openSelected();
  void renameCurrent();
  void editNotesOfCurrent();
  void askAddTags();
  void askRemoveTag();
  void askDelete();
  QList<qint64> selectedOrCurrent() const;
  // A copy of the row with its config, once read (the rows come without: RunTableModel).
  storage::RunInfo withConfig(const storage::RunInfo& run) const;

  QString database_;
  StoreAccess access_ = StoreAccess::kReadWrite;
  quint64 generation_ = 0;  // bumped by setDatabase: a read of the old file is dropped
  RunTableModel* model_;
  RunFilterModel* proxy_;
  QTableView* table_ = nullptr;
  ComparePanel* compare_;
  QLabel* compareHint_ = nullptr;  // in the Compare tab while compare_ is hidden
  GroupPanel* groups_ = nullptr;
  ParallelPanel* parallel_ = nullptr;
  QTabWidget* analysis_ = nullptr;
  QTimer analysisTimer_;  // coalesces selection, filter and refresh changes into one update
  QSplitter* splitter_ = nullptr;
  QLineEdit* filterText_ = nullptr;
  QComboBox* tagFilter_ = nullptr;
  QComboBox* statusFilter_ = nullptr;
  QPushButton* openButton_ = nullptr;
  QAction* playgroundAction_ = nullptr;
  QAction* fineTuneAction_ = nullptr;
  QAction* compareBaseAction_ = nullptr;
  QPushButton* renameButton_ = nullptr;
  QPushButton* addTagButton_ = nullptr;
  QPushButton* removeTagButton_ = nullptr;
  QPushButton* notesButton_ = nullptr;
  QPushButton* deleteButton_ = nullptr;
  QList<QAction*> editActions_;  // the table's rename, tags, notes and delete actions
  QLabel* readOnly_ = nullptr;   // the banner shown while the store is read-only
  QLabel* error_ = nullptr;
  QToolButton* errorClose_ = nullptr;
  QLabel* statusLine_ = nullptr;
  QTimer timer_;

  QFutureWatcher<RunsRead> reader_;
  QFutureWatcher<SettingsRead> parser_;  // the settings of runs new or changed since read
  quint64 parseGeneration_ = 0;
  std::vector<qint64> parsing_;  // the runs whose settings parser_ reads
  quint64 readGeneration_ = 0;
  bool rereadWanted_ = false;
  RunsRead last_;  // the last read shown (its runs moved into the model)

  // Edits asked while a batch is written, each batch for the store shown when it was asked.
  struct EditBatch {
    QString database;
    QList<RunEdit> edits;
  };
  QFutureWatcher<QStringList> writer_;
  QList<EditBatch> queuedEdits_;
  QStringList writeErrors_;  // of the batches written since the queue was last empty
  QList<qint64> pendingSelection_;
  bool columnsSized_ = false;
};

}  // namespace lattice::ui
