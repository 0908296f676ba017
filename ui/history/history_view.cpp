// HistoryView: the toolbar, the runs table, the compare panel, and the background reads that
// feed them (the edits are in history_view_edits.cpp).
#include "history/history_view.h"

#include <QAction>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>

#include "history/compare_panel.h"
#include "history/finetune_base.h"
#include "history/group_panel.h"
#include "history/parallel_view.h"
#include "history/run_filter_model.h"
#include "history/run_text.h"
#include "history/sweep_runs.h"
#include "plan/text_format.h"
#include "playground/playground_io.h"

namespace lattice::ui {

namespace {

constexpr storage::RunStatus kStatuses[] = {
    storage::RunStatus::kCreated, storage::RunStatus::kRunning, storage::RunStatus::kFinished,
    storage::RunStatus::kFailed,  storage::RunStatus::kKilled,  storage::RunStatus::kCrashed};

}  // namespace

HistoryView::HistoryView(QWidget* parent)
    : QWidget(parent),
      model_(new RunTableModel(this)),
      proxy_(new RunFilterModel(this)),
      compare_(new ComparePanel(this)) {
  proxy_->setSourceModel(model_);
  buildToolbar();
  buildTable();

  readOnly_ = new QLabel(
      tr("Read-only: these runs belong to a cluster job that is still running (it writes this "
         "store). Rename, tags, notes and delete work once the job ends and its runs are "
         "imported into the local history."),
      this);
  readOnly_->setObjectName(QStringLiteral("historyReadOnly"));
  readOnly_->setWordWrap(true);
  readOnly_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  readOnly_->hide();

  auto* errorBar = new QWidget(this);
  error_ = new QLabel(errorBar);
  error_->setObjectName(QStringLiteral("historyError"));
  error_->setWordWrap(true);
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_->setStyleSheet(QStringLiteral("color: #d9453a;"));
  errorClose_ = new QToolButton(errorBar);
  errorClose_->setText(QStringLiteral("×"));
  errorClose_->setAutoRaise(true);
  errorClose_->setToolTip(tr("Dismiss"));
  connect(errorClose_, &QToolButton::clicked, this, [this] { showError({}); });
  auto* errorRow = new QHBoxLayout(errorBar);
  errorRow->setContentsMargins(0, 0, 0, 0);
  errorRow->addWidget(error_, 1);
  errorRow->addWidget(errorClose_, 0, Qt::AlignTop);
  errorBar->hide();

  statusLine_ = new QLabel(this);
  statusLine_->setObjectName(QStringLiteral("historyStatusLine"));
  statusLine_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  buildAnalysis();
  splitter_ = new QSplitter(Qt::Vertical, this);
  splitter_->setChildrenCollapsible(false);
  splitter_->addWidget(table_);
  splitter_->addWidget(analysis_);
  splitter_->setStretchFactor(0, 3);
  splitter_->setStretchFactor(1, 2);

  // Filters on one row, the actions on the next: on one row they held the window at 964 px.
  auto* filters = new QHBoxLayout;
  filters->addWidget(filterText_, 2);
  filters->addWidget(tagFilter_);
  filters->addWidget(statusFilter_);
  auto* actions = new QHBoxLayout;
  for (QPushButton* b :
       {openButton_, renameButton_, addTagButton_, removeTagButton_, notesButton_, deleteButton_}) {
    actions->addWidget(b);
  }
  actions->addStretch(1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(filters);
  layout->addLayout(actions);
  layout->addWidget(readOnly_);
  layout->addWidget(errorBar);
  layout->addWidget(splitter_, 1);
  layout->addWidget(statusLine_);

  connect(model_, &RunTableModel::editRequested, this, &HistoryView::queueEdits);
  connect(&reader_, &QFutureWatcher<RunsRead>::finished, this, &HistoryView::onRead);
  connect(&parser_, &QFutureWatcher<SettingsRead>::finished, this, &HistoryView::onParsed);
  connect(&writer_, &QFutureWatcher<QStringList>::finished, this, &HistoryView::onWritten);
  timer_.setInterval(kRefreshMs);
  connect(&timer_, &QTimer::timeout, this, [this] {
    if (isVisible()) refresh();
  });
  timer_.start();
  updateSelectionDependents();
  updateStatusLine();
}

void HistoryView::buildToolbar() {
  filterText_ = new QLineEdit(this);
  filterText_->setObjectName(QStringLiteral("historyFilter"));
  filterText_->setPlaceholderText(tr("Filter by name, tag or notes"));
  filterText_->setClearButtonEnabled(true);
  filterText_->setMinimumWidth(180);
  connect(filterText_, &QLineEdit::textChanged, proxy_, &RunFilterModel::setText);

  tagFilter_ = new QComboBox(this);
  tagFilter_->setObjectName(QStringLiteral("historyTagFilter"));
  tagFilter_->setToolTip(tr("Only runs with this tag"));
  tagFilter_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  tagFilter_->setMinimumContentsLength(12);  // a long tag does not widen the window
  tagFilter_->addItem(tr("All tags"), QString());
  connect(tagFilter_, &QComboBox::currentIndexChanged, this,
          [this] { proxy_->setTag(tagFilter_->currentData().toString()); });

  statusFilter_ = new QComboBox(this);
  statusFilter_->setObjectName(QStringLiteral("historyStatusFilter"));
  statusFilter_->setToolTip(tr("Only runs with this status"));
  statusFilter_->addItem(tr("Any status"), QString());
  for (storage::RunStatus s : kStatuses) statusFilter_->addItem(runStatusText(s), runStatusText(s));
  connect(statusFilter_, &QComboBox::currentIndexChanged, this,
          [this] { proxy_->setStatus(statusFilter_->currentData().toString()); });

  auto button = [this](const QString& text, const QString& tip, void (HistoryView::*slot)()) {
    auto* b = new QPushButton(text, this);
    b->setToolTip(tip);
    connect(b, &QPushButton::clicked, this, slot);
    return b;
  };
  openButton_ = button(tr("Open in Dashboard"),
                       tr("Show the selected runs' curves in the Dashboard (Enter, double click)"),
                       &HistoryView::openSelected);
  renameButton_ = button(tr("Rename"), tr("Rename the run (F2)"), &HistoryView::renameCurrent);
  addTagButton_ =
      button(tr("Add tag…"), tr("Add tags to the selected runs"), &HistoryView::askAddTags);
  removeTagButton_ = button(tr("Remove tag…"), tr("Remove a tag from the selected runs"),
                            &HistoryView::askRemoveTag);
  notesButton_ = button(tr("Notes…"), tr("Edit the run's notes"), &HistoryView::editNotesOfCurrent);
  deleteButton_ = button(tr("Delete…"), tr("Delete the selected runs after asking (Delete)"),
                         &HistoryView::askDelete);
  renameButton_->setObjectName(QStringLiteral("historyRename"));
  addTagButton_->setObjectName(QStringLiteral("historyAddTag"));
  removeTagButton_->setObjectName(QStringLiteral("historyRemoveTag"));
  notesButton_->setObjectName(QStringLiteral("historyNotes"));
  deleteButton_->setObjectName(QStringLiteral("historyDelete"));
}

void HistoryView::buildTable() {
  table_ = new QTableView(this);
  table_->setObjectName(QStringLiteral("historyTable"));
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(RunTableModel::kId, Qt::DescendingOrder);  // newest first
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  // A click on a selected name, tags or notes cell edits it; a double click opens the run.
  table_->setEditTriggers(QAbstractItemView::SelectedClicked | QAbstractItemView::EditKeyPressed);
  table_->setAlternatingRowColors(true);
  table_->setWordWrap(false);
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 8);
  QHeaderView* header = table_->horizontalHeader();
  header->setHighlightSections(false);
  header->setStretchLastSection(true);
  header->setMinimumSectionSize(40);
  // Columns fit the rows in view, not the first 1000 rows: at 10,000 runs Qt's default
  // precision formats ~9,000 cells (dates, durations) on every sort, filter and refresh.
  header->setResizeContentsPrecision(0);
  for (int c = 0; c < RunTableModel::kColumnCount; ++c) {
    const bool free =
        c == RunTableModel::kName || c == RunTableModel::kTags || c == RunTableModel::kNotes;
    header->setSectionResizeMode(c,
                                 free ? QHeaderView::Interactive : QHeaderView::ResizeToContents);
  }
  header->resizeSection(RunTableModel::kName, 220);
  header->resizeSection(RunTableModel::kTags, 140);
  connect(table_, &QTableView::doubleClicked, this, [this] { openSelected(); });
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &HistoryView::updateSelectionDependents);

  auto action = [this](const QString& text, const QKeySequence& keys, void (HistoryView::*slot)()) {
    auto* a = new QAction(text, table_);
    a->setShortcut(keys);
    a->setShortcutContext(Qt::WidgetShortcut);  // not while a cell editor has the keys
    connect(a, &QAction::triggered, this, slot);
    table_->addAction(a);
    return a;
  };
  action(tr("Open in Dashboard"), QKeySequence(Qt::Key_Return), &HistoryView::openSelected);
  playgroundAction_ = new QAction(tr("Open in Playground"), table_);
  playgroundAction_->setToolTip(tr("Generate text from the run's latest checkpoint"));
  connect(playgroundAction_, &QAction::triggered, this, [this] {
    if (const QList<qint64> ids = selectedRuns(); ids.size() == 1) emit openInPlayground(ids[0]);
  });
  table_->addAction(playgroundAction_);
  fineTuneAction_ = new QAction(tr("Fine-tune from this checkpoint…"), table_);
  fineTuneAction_->setObjectName(QStringLiteral("historyFineTune"));
  fineTuneAction_->setToolTip(
      tr("Train on an SFT dataset from the run's latest checkpoint, all parameters or LoRA"));
  connect(fineTuneAction_, &QAction::triggered, this, [this] {
    const QList<qint64> ids = selectedRuns();
    if (ids.size() != 1) return;
    if (const storage::RunInfo* r = model_->run(ids[0])) emit fineTuneRequested(withConfig(*r));
  });
  table_->addAction(fineTuneAction_);
  compareBaseAction_ = new QAction(tr("Compare with base"), table_);
  compareBaseAction_->setObjectName(QStringLiteral("historyCompareBase"));
  compareBaseAction_->setToolTip(tr("Select the run this fine-tune started from beside it"));
  connect(compareBaseAction_, &QAction::triggered, this, [this] {
    if (const QList<qint64> ids = selectedRuns(); ids.size() == 1) compareWithBase(ids[0]);
  });
  table_->addAction(compareBaseAction_);
  editActions_ << action(tr("Rename"), QKeySequence(Qt::Key_F2), &HistoryView::renameCurrent);
  QAction* separator = new QAction(table_);
  separator->setSeparator(true);
  table_->addAction(separator);
  editActions_ << action(tr("Add tag…"), {}, &HistoryView::askAddTags)
               << action(tr("Remove tag…"), {}, &HistoryView::askRemoveTag)
               << action(tr("Notes…"), {}, &HistoryView::editNotesOfCurrent)
               << action(tr("Delete…"), QKeySequence::Delete, &HistoryView::askDelete);
  table_->setContextMenuPolicy(Qt::ActionsContextMenu);
}

void HistoryView::buildAnalysis() {
  auto* comparePage = new QWidget(this);
  compareHint_ = new QLabel(
      tr("Select two or more runs to compare their settings and final metrics."), comparePage);
  compareHint_->setObjectName(QStringLiteral("historyCompareHint"));
  compareHint_->setWordWrap(true);
  compareHint_->setAlignment(Qt::AlignCenter);
  auto* compareLayout = new QVBoxLayout(comparePage);
  compareLayout->setContentsMargins(0, 0, 0, 0);
  compareLayout->addWidget(compare_, 1);
  compareLayout->addWidget(compareHint_, 1);
  compare_->hide();
  connect(compare_, &ComparePanel::compareCurvesClicked, this,
          [this] { emit openInDashboard(selectedRuns()); });
  groups_ = new GroupPanel(this);
  parallel_ = new ParallelPanel(this);
  connect(parallel_, &ParallelPanel::runClicked, this, [this](qint64 id) { selectRuns({id}); });

  analysis_ = new QTabWidget(this);
  analysis_->setObjectName(QStringLiteral("historyAnalysis"));
  analysis_->setDocumentMode(true);
  analysis_->addTab(comparePage, tr("Compare"));
  analysis_->addTab(groups_, tr("Groups"));
  analysis_->addTab(parallel_, tr("Parallel coordinates"));
  analysis_->setTabToolTip(kGroupsTab, tr("The runs grouped by a setting: final metrics and "
                                          "mean curves with a band over each group's runs"));
  analysis_->setTabToolTip(kParallelTab, tr("Settings against final metrics, one line per run"));
  connect(analysis_, &QTabWidget::currentChanged, this, [this] { scheduleAnalysis(); });

  analysisTimer_.setSingleShot(true);
  analysisTimer_.setInterval(0);
  connect(&analysisTimer_, &QTimer::timeout, this, &HistoryView::updateAnalysisNow);
  connect(proxy_, &QAbstractItemModel::modelReset, this, [this] { scheduleAnalysis(); });
  connect(proxy_, &QAbstractItemModel::layoutChanged, this, [this] { scheduleAnalysis(); });
  connect(proxy_, &QAbstractItemModel::rowsInserted, this, [this] { scheduleAnalysis(); });
  connect(proxy_, &QAbstractItemModel::rowsRemoved, this, [this] { scheduleAnalysis(); });
  connect(proxy_, &QAbstractItemModel::dataChanged, this, [this] { scheduleAnalysis(); });
}

void HistoryView::setAnalysisTab(AnalysisTab tab) {
  analysis_->setCurrentIndex(tab);
  updateAnalysisNow();
}

void HistoryView::scheduleAnalysis() {
  if (analysis_->currentIndex() != kCompareTab) analysisTimer_.start();
}

QList<qint64> HistoryView::analysisRuns() const {
  QList<qint64> ids = selectedRuns();
  if (ids.size() >= 2) return ids;
  ids.clear();
  const int rows = proxy_->rowCount();
  ids.reserve(rows);
  for (int row = 0; row < rows; ++row)
    ids << proxy_->index(row, 0).data(RunTableModel::kRunIdRole).toLongLong();
  return ids;
}

void HistoryView::updateAnalysisNow() {
  analysisTimer_.stop();
  const int tab = analysis_->currentIndex();
  if (tab == kGroupsTab) groups_->setRuns(sweepRuns(*model_, analysisRuns()));
  if (tab == kParallelTab) parallel_->setRuns(sweepRuns(*model_, analysisRuns()));
}

void HistoryView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  refresh();
}

// ---- reads -----------------------------------------------------------------------------

void HistoryView::setDatabase(const QString& path, StoreAccess access) {
  if (access != access_) {
    access_ = access;
    updateAccess();
  }
  if (path != database_) {
    database_ = path;
    ++generation_;
    pendingSelection_.clear();
    model_->clear();
    last_ = {};
    groups_->setDatabase(path);
  }
  refresh();
}

void HistoryView::refresh() {
  if (reader_.isRunning()) {
    rereadWanted_ = true;  // the read under way may predate what the caller knows changed
    return;
  }
  readGeneration_ = generation_;
  const QString database = database_;
  const StoreAccess access = access_;
  reader_.setFuture(QtConcurrent::run([database, access] { return readRuns(database, access); }));
}

void HistoryView::updateAccess() {
  const bool editable = access_ == StoreAccess::kReadWrite;
  readOnly_->setVisible(!editable);
  model_->setEditable(editable);  // an editor open now commits nothing
  updateSelectionDependents();
}

void HistoryView::onRead() {
  RunsRead read = reader_.future().takeResult();  // moved: a copy of 10,000 runs shows
  const bool current = readGeneration_ == generation_;
  const bool again = rereadWanted_ || !current;
  rereadWanted_ = false;
  if (current) {
    last_.now = read.now;
    last_.missing = read.missing;
    last_.problem = read.problem;
    if (read.problem.isEmpty()) {
      model_->setRuns(std::move(read.runs), read.now);
      if (!parser_.isRunning()) readSettingsWanted();  // else onParsed reads what is left
    }
    if (!columnsSized_ && model_->rowCount() > 0) {
      columnsSized_ = true;
      table_->resizeColumnToContents(RunTableModel::kTags);
      const QAbstractItemView* view = table_;  // sizeHintForColumn is public there
      QHeaderView* header = table_->horizontalHeader();
      header->resizeSection(RunTableModel::kName,
                            std::clamp(view->sizeHintForColumn(RunTableModel::kName), 120, 280));
      header->resizeSection(RunTableModel::kTags,
                            std::clamp(header->sectionSize(RunTableModel::kTags), 80, 220));
    }
    updateTagChoices();
    applyPendingSelection();
    updateSelectionDependents();
    updateStatusLine();
  }
  if (again) {
    refresh();
    return;
  }
  emit refreshed();
}

// The configs of the runs that are new or changed since their settings were read, read and
// parsed off the UI thread; the table shows before (a few hundred ms at 10,000 runs).
void HistoryView::readSettingsWanted() {
  parsing_ = model_->takeConfigsWanted();
  if (parsing_.empty()) return;
  parseGeneration_ = generation_;
  parser_.setFuture(
      QtConcurrent::run([database = database_, ids = parsing_, known = model_->settingsIndex()] {
        return readSettings(database, ids, known);
      }));
}

void HistoryView::onParsed() {
  SettingsRead read = parser_.future().takeResult();
  if (parseGeneration_ != generation_) {  // read for another store: read this one's
    readSettingsWanted();
    return;
  }
  if (!read.problem.isEmpty()) {
    model_->wantConfigs(parsing_);  // asked again after the next read of the runs
    return;
  }
  model_->addSettings(read.settings);
  if (model_->configsWanted()) {
    readSettingsWanted();  // runs that changed or appeared meanwhile
    return;
  }
  if (filterText_->text().contains(QLatin1Char('='))) proxy_->invalidate();  // setting words
  updateSelectionDependents();  // Compare's settings, the Playground action (the config's --save)
  emit settingsParsed();
}

void HistoryView::updateTagChoices() {
  const QStringList tags = model_->allTags();
  QStringList shown;
  for (int i = 1; i < tagFilter_->count(); ++i) shown << tagFilter_->itemData(i).toString();
  if (tags == shown) return;
  const QString chosen = tagFilter_->currentData().toString();
  {
    const QSignalBlocker block(tagFilter_);
    while (tagFilter_->count() > 1) tagFilter_->removeItem(1);
    for (const QString& t : tags) tagFilter_->addItem(t, t);
    const int at = tagFilter_->findData(chosen);
    tagFilter_->setCurrentIndex(std::max(at, 0));
  }
  proxy_->setTag(tagFilter_->currentData().toString());  // a tag no run has any more: all
}

void HistoryView::updateStatusLine() {
  if (!last_.problem.isEmpty()) {
    statusLine_->setText(tr("Cannot read the runs: %1").arg(last_.problem));
    statusLine_->setStyleSheet(QStringLiteral("color: #d9453a;"));
    return;
  }
  statusLine_->setStyleSheet({});
  if (database_.isEmpty()) {
    statusLine_->setText(tr("No run database"));
  } else if (last_.missing) {
    statusLine_->setText(tr("No runs yet: %1 is created by the first run").arg(database_));
  } else {
    const int all = model_->rowCount(), shown = proxy_->rowCount();
    QString text = plural(all, "run", "runs");
    if (shown != all) text += tr(", %1 shown").arg(shown);
    const int selected = static_cast<int>(selectedRuns().size());
    if (selected > 0) text += tr(", %1 selected").arg(selected);
    statusLine_->setText(text + QStringLiteral(" · ") + database_ +
                         (access_ == StoreAccess::kReadOnly ? tr(" (read-only)") : QString()));
  }
}

// ---- selection ---------------------------------------------------------------------------

QList<qint64> HistoryView::selectedRuns() const {
  QModelIndexList rows = table_->selectionModel()->selectedRows();
  std::sort(rows.begin(), rows.end(),
            [](const QModelIndex& a, const QModelIndex& b) { return a.row() < b.row(); });
  QList<qint64> ids;
  for (const QModelIndex& i : rows) ids << i.data(RunTableModel::kRunIdRole).toLongLong();
  return ids;
}

void HistoryView::selectRuns(const QList<qint64>& ids) {
  pendingSelection_ = ids;
  table_->selectionModel()->clearSelection();
  applyPendingSelection();
}

void HistoryView::applyPendingSelection() {
  if (pendingSelection_.isEmpty()) return;
  QItemSelection selection;
  QList<qint64> notYet;
  QModelIndex first;
  for (qint64 id : pendingSelection_) {
    const int sourceRow = model_->rowOfRun(id);
    const QModelIndex at =
        sourceRow < 0 ? QModelIndex() : proxy_->mapFromSource(model_->index(sourceRow, 0));
    if (!at.isValid()) {
      if (sourceRow < 0) notYet << id;  // filtered-out runs stay unselected
      continue;
    }
    selection.select(at, at);
    if (!first.isValid()) first = at;
  }
  pendingSelection_ = notYet;
  if (selection.isEmpty()) return;
  table_->selectionModel()->select(selection,
                                   QItemSelectionModel::Select | QItemSelectionModel::Rows);
  table_->selectionModel()->setCurrentIndex(first, QItemSelectionModel::NoUpdate);
  table_->scrollTo(first);
}

storage::RunInfo HistoryView::withConfig(const storage::RunInfo& run) const {
  storage::RunInfo copy = run;
  if (const std::shared_ptr<const ParsedSettings> parsed = model_->settings(run.id))
    copy.config_json = parsed->config_json;
  return copy;
}

std::optional<qint64> HistoryView::baseRunOf(qint64 id) const {
  const storage::RunInfo* run = model_->run(id);
  if (!run) return std::nullopt;
  return fineTuneBase(withConfig(*run), model_->runs(), [this](qint64 other) {
    const std::shared_ptr<const ParsedSettings> parsed = model_->settings(other);
    return parsed ? parsed->config_json : std::string();
  });
}

bool HistoryView::compareWithBase(qint64 id) {
  const std::optional<qint64> base = baseRunOf(id);
  if (!base) return false;
  selectRuns({*base, id});
  setAnalysisTab(kCompareTab);
  return true;
}

QList<qint64> HistoryView::selectedOrCurrent() const {
  QList<qint64> ids = selectedRuns();
  const QModelIndex current = table_->currentIndex();
  if (ids.isEmpty() && current.isValid())
    ids << current.data(RunTableModel::kRunIdRole).toLongLong();
  return ids;
}

void HistoryView::updateSelectionDependents() {
  const QList<qint64> ids = selectedRuns();
  const bool editable = access_ == StoreAccess::kReadWrite;
  openButton_->setEnabled(!ids.isEmpty());
  renameButton_->setEnabled(editable && ids.size() == 1);
  notesButton_->setEnabled(editable && ids.size() == 1);
  addTagButton_->setEnabled(editable && !ids.isEmpty());
  deleteButton_->setEnabled(editable && !ids.isEmpty());
  for (QAction* a : editActions_) a->setEnabled(editable);
  bool anyTags = false;
  std::vector<const storage::RunInfo*> chosen;
  for (qint64 id : ids) {
    if (const storage::RunInfo* r = model_->run(id)) {
      anyTags = anyTags || !r->tags.empty();
      chosen.push_back(r);
    }
  }
  removeTagButton_->setEnabled(editable && anyTags);
  playgroundAction_->setEnabled(chosen.size() == 1 &&
                                !runSaveDir(withConfig(*chosen[0])).isEmpty());
  fineTuneAction_->setEnabled(playgroundAction_->isEnabled());
  compareBaseAction_->setEnabled(chosen.size() == 1 && baseRunOf(chosen[0]->id).has_value());
  if (chosen.size() >= 2 && chosen.size() <= kMaxCompared) {
    // Oldest first, as `lattice runs compare` lists them: columns stay put when the table
    // re-sorts.
    std::vector<storage::RunInfo> runs;
    for (const storage::RunInfo* r : chosen) runs.push_back(withConfig(*r));
    std::sort(runs.begin(), runs.end(),
              [](const storage::RunInfo& x, const storage::RunInfo& y) { return x.id < y.id; });
    compare_->setRuns(runs, last_.now);
    compare_->show();
    compareHint_->hide();
  } else {
    compare_->hide();
    compareHint_->setText(
        chosen.size() > kMaxCompared
            ? tr("%1 selected: Compare shows up to %2 runs side by side. Groups and Parallel "
                 "coordinates show them all.")
                  .arg(plural(static_cast<long long>(chosen.size()), "run", "runs"))
                  .arg(kMaxCompared)
            : tr("Select two or more runs to compare their settings and final metrics. Groups "
                 "and Parallel coordinates show every run in the table, or the selected ones."));
    compareHint_->show();
  }
  scheduleAnalysis();
  updateStatusLine();
}

}  // namespace lattice::ui
