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

#include "plan/form_section.h"
#include "plan/plan_model.h"
#include "plan/suggest_model.h"
#include "plan/text_format.h"

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
      verdict_(new QLabel(this)),
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
  verdict_->setObjectName("suggest-verdict");
  verdict_->setWordWrap(true);
  verdict_->setVisible(false);
  QFont bold = verdict_->font();
  bold.setBold(true);
  verdict_->setFont(bold);
  column->addWidget(verdict_);
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
  verdict_->setVisible(false);
  apply_->setEnabled(false);
  watcher_.setFuture(QtConcurrent::run([base, cluster] {
    QElapsedTimer timer;
    timer.start();
    Answer answer;
    answer.candidates = suggest_layouts(base, cluster, kMaxResults, &answer.stats);
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
  const bool noneFits = shown > 0 && fitting == 0;
  // Nothing fits: said first, above the table, and the rows closest to fitting come first.
  if (noneFits) {
    view_->sortByColumn(SuggestModel::kMemory, Qt::AscendingOrder);
    const double closest =
        proxy_->index(0, SuggestModel::kMemory).data(SuggestModel::kSortRole).toDouble();
    QPalette palette = verdict_->palette();
    palette.setColor(QPalette::WindowText, errorColor(palette));
    verdict_->setPalette(palette);
    verdict_->setText(
        tr("None of the %1 valid layouts fits in %2 per device. Below: the %3 fastest, sorted "
           "by memory; the closest needs %4 on its most loaded device. More devices, a device "
           "with more memory, recomputation or a smaller micro batch or model make room.")
            .arg(answer.stats.valid)
            .arg(humanBytes(deviceMemory_))
            .arg(shown)
            .arg(humanBytes(closest)));
  } else {
    view_->sortByColumn(-1, Qt::AscendingOrder);  // the engine's ranking
  }
  verdict_->setVisible(noneFits);
  if (shown == 0)
    status_->setText(tr("No valid layout: the global batch, heads or layers leave no "
                        "combination for this many devices (searched in %1 ms).")
                         .arg(answer.elapsedMs, 0, 'f', 0));
  else
    status_->setText(tr("%1 of %2 valid layouts shown, %3 of them fit; searched in %4 ms.")
                         .arg(shown)
                         .arg(answer.stats.valid)
                         .arg(fitting)
                         .arg(answer.elapsedMs, 0, 'f', 0));
  // A layout that fits is one Enter away; one that does not must be chosen.
  if (fitting > 0) view_->selectRow(0);
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
