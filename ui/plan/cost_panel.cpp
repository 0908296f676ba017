// CostPanel: the memory chart (QCustomPlot) and the step-time figures, from the PlanModel's
// analysis; one queued replot per plan change.
#include "plan/cost_panel.h"

#include <qcustomplot.h>
#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QResizeEvent>
#include <QVBoxLayout>

#include "plan/plan_model.h"
#include "plan/text_format.h"

namespace lattice::ui {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
// Stage labels above the bars only while they have room.
constexpr int kMaxLabelledStages = 12;
// When the device holds more than this many times the largest stage, the scale follows the bars.
constexpr double kMaxCapacityRatio = 6;

QString seconds(double s) {
  if (s >= 1) return QString::number(s, 'f', s >= 100 ? 0 : 2) + " s";
  return QString::number(s * 1e3, 'f', s >= 0.01 ? 1 : 2) + " ms";
}

QString rate(double tokensPerSecond) {
  if (tokensPerSecond >= 1e6) return QString::number(tokensPerSecond / 1e6, 'f', 2) + " M";
  if (tokensPerSecond >= 1e3) return QString::number(tokensPerSecond / 1e3, 'f', 1) + " K";
  return QString::number(tokensPerSecond, 'f', 0);
}

QColor okColor(const QPalette& p) {
  return p.color(QPalette::Window).lightness() < 128 ? QColor(0x81, 0xc7, 0x84)
                                                     : QColor(0x2e, 0x7d, 0x32);
}

QColor badColor(const QPalette& p) {
  return p.color(QPalette::Window).lightness() < 128 ? QColor(0xff, 0x8a, 0x80)
                                                     : QColor(0xc6, 0x28, 0x28);
}

}  // namespace

CostPanel::CostPanel(PlanModel* model, QWidget* parent)
    : QWidget(parent), model_(model), plot_(new QCustomPlot(this)) {
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  auto* head = new QHBoxLayout;
  auto* title = new QLabel(tr("<b>Memory per rank</b> (GiB, one rank of each stage)"), this);
  title->setWordWrap(true);
  head->addWidget(title, 1);
  suggest_ = new QPushButton(tr("Suggest layouts…"), this);
  suggest_->setToolTip(
      tr("Every valid layout of this model on this cluster, ranked by "
         "estimated throughput (Ctrl+G)"));
  head->addWidget(suggest_);
  calibrate_ = new QPushButton(tr("Calibrate…"), this);
  calibrate_->setToolTip(
      tr("Run a few steps of this layout here, fit the planner's efficiency and bandwidths to "
         "the measured phase times, and rank Suggest with them"));
  head->addWidget(calibrate_);
  column->addLayout(head);
  // Not as wide as the legend on one row: the legend takes two rows when the plot is narrow
  // (a narrow window; the widest rows of the legend would hold the window at 1075 px).
  plot_->setMinimumSize(240, 160);
  plot_->installEventFilter(this);
  column->addWidget(plot_, 1);
  fit_ = new QLabel(this);
  fit_->setObjectName("fit");
  fit_->setWordWrap(true);
  step_ = new QLabel(this);
  step_->setObjectName("step");
  step_->setWordWrap(true);
  terms_ = new QLabel(this);
  terms_->setObjectName("step-terms");
  terms_->setWordWrap(true);
  terms_->setForegroundRole(QPalette::PlaceholderText);
  column->addWidget(fit_);
  column->addWidget(step_);
  column->addWidget(terms_);

  const QStringList names = {tr("weights"), tr("grads"), tr("optimizer"), tr("activations"),
                             tr("buffers")};
  const QColor colors[] = {{0x42, 0x85, 0xf4},
                           {0x7e, 0x57, 0xc2},
                           {0xfb, 0x8c, 0x00},
                           {0x26, 0xa6, 0x9a},
                           {0x9e, 0x9e, 0x9e}};
  for (int i = 0; i < names.size(); i++) {
    auto* bars = new QCPBars(plot_->xAxis, plot_->yAxis);
    bars->setName(names[i]);
    bars->setBrush(colors[i]);
    bars->setPen(QPen(colors[i].darker(130)));
    bars->setWidth(0.6);
    bars->setAntialiased(false);
    if (!bars_.isEmpty()) bars->moveAbove(bars_.back());
    bars_ << bars;
  }
  plot_->plotLayout()->insertRow(0);
  plot_->plotLayout()->addElement(0, 0, plot_->legend);
  plot_->legend->setVisible(true);
  plot_->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  plot_->plotLayout()->setRowStretchFactor(0, 0.001);
  plot_->yAxis->setLabel(tr("GiB"));

  connect(suggest_, &QPushButton::clicked, this, &CostPanel::suggestRequested);
  connect(calibrate_, &QPushButton::clicked, this, &CostPanel::calibrateRequested);
  connect(model_, &PlanModel::planChanged, this, &CostPanel::refresh);
  applyPalette();
  refresh();
}

void CostPanel::refresh() {
  refreshPlot();
  refreshStep();
  fitHeight();
}

void CostPanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  fitHeight();
}

void CostPanel::fitHeight() {
  const int needed = layout()->totalMinimumHeightForWidth(width());
  if (needed > 0 && needed != minimumHeight()) setMinimumHeight(needed);
}

void CostPanel::refreshPlot() {
  const PlanAnalysis& a = model_->analysis();
  plot_->clearItems();
  QVector<double> keys;
  QVector<QVector<double>> values(bars_.size());
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  const double capacity = a.cluster.device.memory_bytes / kGiB;
  double most = 0;  // the largest stage total
  if (a.memory) {
    const int n = static_cast<int>(a.memory->stages.size());
    const int every = std::max(1, n / 16);  // tick labels that do not collide
    for (int i = 0; i < n; i++) {
      const StageEstimate& s = a.memory->stages[i];
      keys << i;
      values[0] << s.weight_bytes / kGiB;
      values[1] << s.grad_bytes / kGiB;
      values[2] << s.optimizer_bytes / kGiB;
      values[3] << s.activation_bytes / kGiB;
      values[4] << (s.all_workspace_bytes() + s.comm_buffer_bytes) / kGiB;
      most = std::max(most, s.total_bytes() / kGiB);
      if (i % every == 0) ticker->addTick(i, n <= 8 ? tr("stage %1").arg(i) : QString::number(i));
    }
    for (int i = 0; i < n && n <= kMaxLabelledStages; i++) {
      const double total = a.memory->stages[i].total_bytes() / kGiB;
      auto* label = new QCPItemText(plot_);
      label->position->setCoords(i, total);
      label->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
      const double free = capacity - total;
      label->setText(free >= 0 ? tr("%1 GiB free").arg(QString::number(free, 'f', 1))
                               : tr("%1 GiB over").arg(QString::number(-free, 'f', 1)));
      label->setColor(free >= 0 ? okColor(palette()) : badColor(palette()));
      label->setPadding(QMargins(0, 0, 0, 2));
    }
  }
  for (int i = 0; i < bars_.size(); i++) bars_[i]->setData(keys, values[i], true);
  plot_->xAxis->setTicker(ticker);
  plot_->xAxis->setRange(-0.6, std::max<int>(keys.size(), 1) - 0.4);
  plot_->xAxis->setLabel(a.memory && keys.size() > 8 ? tr("pipeline stage") : QString());
  // Bars far below the device's memory would be invisible against it: then the scale follows
  // the bars and the capacity is named instead of drawn.
  const bool capacityOnScale = !a.memory || capacity <= kMaxCapacityRatio * most;
  plot_->yAxis->setRange(
      0, std::max((capacityOnScale ? std::max(capacity, most) : most) * 1.18, 1e-3));
  auto* lineLabel = new QCPItemText(plot_);
  lineLabel->position->setType(QCPItemPosition::ptAxisRectRatio);
  lineLabel->position->setAxes(plot_->xAxis, plot_->yAxis);
  lineLabel->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
  lineLabel->setColor(badColor(palette()));
  QColor behind = palette().color(QPalette::Base);  // readable where it crosses a bar
  behind.setAlphaF(0.85);
  lineLabel->setBrush(behind);
  lineLabel->setPadding(QMargins(3, 1, 3, 1));
  if (capacityOnScale) {
    auto* line = new QCPItemStraightLine(plot_);
    line->point1->setCoords(0, capacity);
    line->point2->setCoords(1, capacity);
    line->setPen(QPen(badColor(palette()), 1.5, Qt::DashLine));
    lineLabel->position->setTypeY(QCPItemPosition::ptPlotCoords);
    lineLabel->position->setCoords(0.01, capacity);
    lineLabel->setText(tr("device memory %1").arg(humanBytes(a.cluster.device.memory_bytes)));
  } else {
    lineLabel->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
    lineLabel->position->setCoords(0.01, 0.02);
    lineLabel->setText(tr("device memory %1, far above this scale")
                           .arg(humanBytes(a.cluster.device.memory_bytes)));
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void CostPanel::refreshStep() {
  const PlanAnalysis& a = model_->analysis();
  suggest_->setEnabled(a.parameters > 0);
  calibrate_->setEnabled(a.valid() && a.layout.has_value());
  if (!a.memory || !a.step) {
    fit_->setText(tr("Fix the errors in the form to see the estimate."));
    step_->clear();
    terms_->clear();
    return;
  }
  const MemoryEstimate& m = *a.memory;
  const StageEstimate& top = m.stages[m.most_loaded];
  const double usable = a.cluster.usable_memory_bytes();
  const QColor color = a.fits ? okColor(palette()) : badColor(palette());
  fit_->setText(QStringLiteral("<span style='color:%1'><b>%2</b></span> %3")
                    .arg(color.name(), a.fits ? tr("Fits.") : tr("Does not fit."),
                         tr("The most loaded rank (stage %1) needs %2 of %3 usable (%4 kept "
                            "free for the libraries and the allocator).")
                             .arg(top.pp_rank)
                             .arg(humanBytes(top.total_bytes()), humanBytes(usable),
                                  humanBytes(a.cluster.device.memory_bytes - usable))));
  const StepEstimate& s = *a.step;
  step_->setText(tr("<b>Step %1</b> &nbsp;·&nbsp; <b>%2 tokens/s</b> &nbsp;·&nbsp; "
                    "<b>MFU %3%</b> &nbsp;<small>(estimate at %4% of peak on the GEMMs%5)</small>")
                     .arg(seconds(s.total_s), rate(s.tokens_per_second))
                     .arg(s.mfu * 100, 0, 'f', 1)
                     .arg(a.cluster.compute_efficiency * 100, 0, 'f', 0)
                     .arg(a.calibrated
                              ? tr(", calibrated from run %1")
                                    .arg(QString::fromStdString(model_->calibration()->probe_run)
                                             .toHtmlEscaped())
                              : QString()));
  // The terms that are not zero for this layout.
  QStringList terms{tr("compute %1").arg(seconds(s.compute_s))};
  if (s.tp_comm_s > 0) terms << tr("TP communication %1").arg(seconds(s.tp_comm_s));
  if (s.pp_comm_s > 0) terms << tr("pipeline transfers %1").arg(seconds(s.pp_comm_s));
  if (s.pp_bubble_s > 0) terms << tr("pipeline bubble %1").arg(seconds(s.pp_bubble_s));
  if (s.dp_comm_total_s > 0)
    terms << tr("data-parallel %1 exposed of %2")
                 .arg(seconds(s.dp_comm_s), seconds(s.dp_comm_total_s));
  if (s.optimizer_s > 0) terms << tr("optimizer %1").arg(seconds(s.optimizer_s));
  if (a.layout && a.layout->pp > 1) terms << tr("slowest stage %1").arg(s.slowest_stage);
  terms_->setText(terms.join(QStringLiteral(" · ")));
}

void CostPanel::applyPalette() {
  const QPalette& p = palette();
  const QColor text = p.color(QPalette::Text), base = p.color(QPalette::Base);
  QColor grid = p.color(QPalette::Mid);
  grid.setAlphaF(0.5);
  plot_->setBackground(base);
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {
    axis->setBasePen(QPen(text));
    axis->setTickPen(QPen(text));
    axis->setSubTickPen(QPen(text));
    axis->setTickLabelColor(text);
    axis->setLabelColor(text);
    axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
  }
  plot_->xAxis->grid()->setVisible(false);
  plot_->legend->setBrush(base);
  plot_->legend->setTextColor(text);
  plot_->legend->setBorderPen(Qt::NoPen);
}

bool CostPanel::eventFilter(QObject* watched, QEvent* event) {
  if (watched == plot_ && event->type() == QEvent::Resize) fitLegend();
  return QWidget::eventFilter(watched, event);
}

void CostPanel::fitLegend() {
  QCPLegend* legend = plot_->legend;
  const int wrap = legend->wrap();
  legend->setWrap(0);
  legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
  if (legend->minimumOuterSizeHint().width() > plot_->width() - 40) {
    legend->setWrap(2);
    legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
  }
  if (legend->wrap() != wrap) plot_->replot(QCustomPlot::rpQueuedReplot);
}

void CostPanel::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) {
    applyPalette();
    refresh();
  }
}

}  // namespace lattice::ui
