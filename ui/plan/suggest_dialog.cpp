// SuggestDialog: background search, sortable table, Apply.
#include "plan/suggest_dialog.h"

#include <QDialogButtonBox>
#include <QElapsedTimer>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "plan/plan_model.h"
#include "plan/suggest_model.h"

namespace lattice::ui {

namespace {

constexpr int kMaxResults = 200;

}  // namespace

SuggestDialog::SuggestDialog(PlanModel* model, QWidget* parent)
    : QDialog(parent),
      model_(model),
      table_(new SuggestModel(this)),
      proxy_(new QSortFilterProxyModel(this)),
      view_(new QTableView(this)),
      status_(new QLabel(this)) {
  setWindowTitle(tr("Suggest layouts"));
  auto* column = new QVBoxLayout(this);
  auto* intro = new QLabel(tr("Every valid combination of tensor, pipeline and virtual stages, "
                              "micro batch, recomputation and distributed optimizer for this "
                              "model, global batch and cluster; layouts that fit first, by "
                              "estimated tokens/s. Hover a row for its flags."),
                           this);
  intro->setWordWrap(true);
  column->addWidget(intro);
  proxy_->setSourceModel(table_);
  proxy_->setSortRole(SuggestModel::kSortRole);
  view_->setModel(proxy_);
  view_->setSortingEnabled(true);
  view_->sortByColumn(-1, Qt::AscendingOrder);  // the engine's ranking until a header click
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setSelectionMode(QAbstractItemView::SingleSelection);
  view_->verticalHeader()->hide();
  view_->verticalHeader()->setDefaultSectionSize(view_->fontMetrics().height() + 8);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view_->horizontalHeader()->setStretchLastSection(true);
  column->addWidget(view_, 1);
  column->addWidget(status_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  apply_ = buttons->addButton(tr("Apply"), QDialogButtonBox::AcceptRole);
  apply_->setEnabled(false);
  column->addWidget(buttons);
  resize(980, 560);

  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(apply_, &QPushButton::clicked, this, [this] {
    const QModelIndexList rows = view_->selectionModel()->selectedRows();
    if (!rows.isEmpty()) applyRow(rows.front().row());
  });
  connect(view_, &QTableView::doubleClicked, this,
          [this](const QModelIndex& index) { applyRow(index.row()); });
  connect(view_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { apply_->setEnabled(view_->selectionModel()->hasSelection()); });
  connect(&watcher_, &QFutureWatcher<Answer>::finished, this, &SuggestDialog::showAnswer);
}

void SuggestDialog::search() {
  if (watcher_.isRunning()) return;
  const PlanAnalysis& a = model_->analysis();
  const TrainOptions base = model_->plan().options;
  const ClusterSpec cluster = a.cluster;
  deviceMemory_ = cluster.device.memory_bytes;
  status_->setText(tr("Searching %1 devices…").arg(cluster.world()));
  apply_->setEnabled(false);
  watcher_.setFuture(QtConcurrent::run([base, cluster] {
    QElapsedTimer timer;
    timer.start();
    Answer answer;
    answer.candidates = suggest_layouts(base, cluster, kMaxResults);
    answer.elapsedMs = timer.nsecsElapsed() / 1e6;
    return answer;
  }));
}

void SuggestDialog::showAnswer() {
  Answer answer = watcher_.result();
  const size_t fitting =
      static_cast<size_t>(std::count_if(answer.candidates.begin(), answer.candidates.end(),
                                        [](const LayoutCandidate& c) { return c.fits; }));
  const size_t shown = answer.candidates.size();
  table_->setCandidates(std::move(answer.candidates), deviceMemory_);
  if (shown == 0)
    status_->setText(tr("No valid layout: the global batch, heads or layers leave no "
                        "combination for this many devices (searched in %1 ms).")
                         .arg(answer.elapsedMs, 0, 'f', 0));
  else
    status_->setText(tr("%1 layouts shown, %2 of them fit; searched in %3 ms.")
                         .arg(shown)
                         .arg(fitting)
                         .arg(answer.elapsedMs, 0, 'f', 0));
  if (shown > 0) view_->selectRow(0);
  emit searchFinished();
}

void SuggestDialog::applyRow(int row) {
  const QModelIndex source = proxy_->mapToSource(proxy_->index(row, 0));
  if (!source.isValid()) return;
  const LayoutCandidate& c = table_->candidate(source.row());
  Plan next = model_->plan();
  next.options = c.options;
  model_->replacePlan(
      next,
      tr("Apply layout TP %1 × PP %2 × DP %3").arg(c.layout.tp).arg(c.layout.pp).arg(c.layout.dp));
  accept();
}

}  // namespace lattice::ui
