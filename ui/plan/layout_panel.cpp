// LayoutPanel: controls, legend and the hovered device's description.
#include "plan/layout_panel.h"

#include <QCheckBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolButton>
#include <QVBoxLayout>

#include "plan/layout_canvas.h"
#include "plan/plan_model.h"
#include "plan/text_format.h"

namespace lattice::ui {

namespace {

QString swatch(const QColor& c) {
  return QStringLiteral("<span style='background-color:%1'>&nbsp;&nbsp;&nbsp;&nbsp;</span>")
      .arg(c.name());
}

// "[0, 2, 4, 6]", or the first eight and a count.
QString rankList(const std::vector<int>& ranks) {
  QStringList items;
  for (size_t i = 0; i < ranks.size() && i < 8; i++) items << QString::number(ranks[i]);
  QString text = "[" + items.join(", ");
  if (ranks.size() > 8) text += QStringLiteral(", … %1 ranks").arg(ranks.size());
  return text + "]";
}

QToolButton* toolButton(const QString& text, const QString& tip, QWidget* parent) {
  auto* b = new QToolButton(parent);
  b->setText(text);
  b->setToolTip(tip);
  b->setAutoRaise(true);
  return b;
}

}  // namespace

LayoutPanel::LayoutPanel(PlanModel* model, QWidget* parent)
    : QWidget(parent), model_(model), canvas_(new LayoutCanvas(this)) {
  auto* column = new QVBoxLayout(this);
  column->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout;
  auto* title = new QLabel(tr("<b>Layout</b>"), this);
  legend_ = new QLabel(this);
  legend_->setTextFormat(Qt::RichText);
  legend_->setWordWrap(true);
  fold_ = new QCheckBox(tr("Fold identical nodes"), this);
  fold_->setChecked(true);
  fold_->setToolTip(tr("With more than %1 nodes, draw consecutive nodes that hold the same "
                       "TP and PP coordinates as one stack")
                        .arg(LayoutCanvas::kFoldAbove));
  QToolButton* zoomOut = toolButton(QStringLiteral("−"), tr("Zoom out (wheel)"), this);
  QToolButton* zoomIn = toolButton(QStringLiteral("+"), tr("Zoom in (wheel)"), this);
  QToolButton* fit = toolButton(tr("Fit"), tr("Show every node"), this);
  bar->addWidget(title);
  bar->addStretch(1);
  bar->addWidget(fold_);
  bar->addWidget(zoomOut);
  bar->addWidget(zoomIn);
  bar->addWidget(fit);
  column->addLayout(bar);
  column->addWidget(legend_);  // its own row: beside the controls it widened the window
  column->addWidget(canvas_, 1);
  info_ = new QLabel(this);
  info_->setObjectName("device-info");
  info_->setWordWrap(true);
  info_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  info_->setMinimumHeight(info_->fontMetrics().lineSpacing() * 3 + 4);
  info_->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  column->addWidget(info_);

  connect(zoomIn, &QToolButton::clicked, canvas_, [this] { canvas_->zoomBy(1.25); });
  connect(zoomOut, &QToolButton::clicked, canvas_, [this] { canvas_->zoomBy(0.8); });
  connect(fit, &QToolButton::clicked, canvas_, &LayoutCanvas::fitAll);
  connect(fold_, &QCheckBox::toggled, canvas_, &LayoutCanvas::setFolding);
  connect(canvas_, &LayoutCanvas::focusChanged, this, &LayoutPanel::showFocus);
  canvas_->setToolTipProvider([this](const CanvasTile& t) { return describe(t, false); });
  connect(model_, &PlanModel::planChanged, this, &LayoutPanel::refresh);
  refresh();
}

void LayoutPanel::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) refresh();
}

void LayoutPanel::refresh() {
  const Plan& plan = model_->plan();
  const PlanAnalysis& a = model_->analysis();
  canvas_->showLayout(a.layout, plan.cluster.nodes, plan.cluster.devices_per_node);
  QString legend;
  if (a.layout) {
    legend += tr("stage") + " ";
    for (int s = 0; s < std::min(a.layout->pp, 6); s++)
      legend += swatch(stageColor(s, a.layout->pp)) + QStringLiteral("<small>%1</small> ").arg(s);
    if (a.layout->pp > 6) legend += QStringLiteral("… ");
  } else {
    legend += tr("<i>no layout until the errors are fixed</i> ");
  }
  legend += QStringLiteral("&nbsp; ") + tr("hover:") + " ";
  const std::pair<TileRole, QString> roles[] = {{TileRole::kSelf, tr("device")},
                                                {TileRole::kTensorGroup, tr("TP")},
                                                {TileRole::kPipelineGroup, tr("PP")},
                                                {TileRole::kDataGroup, tr("DP")}};
  for (const auto& [role, name] : roles)
    legend += swatch(roleColor(role, palette().color(QPalette::Base).lightness() < 128)) +
              QStringLiteral("<small>%1</small> ").arg(name);
  legend_->setText(legend);
  if (canvas_->selectedRank() >= plan.cluster.world()) canvas_->selectRank(-1);
  showFocus(nullptr);
}

QString LayoutPanel::describe(const CanvasTile& t, bool rich) const {
  const PlanAnalysis& a = model_->analysis();
  const QString sep = rich ? QStringLiteral(" · ") : QStringLiteral("\n");
  QString text = tr("Rank %1 on node %2, slot %3").arg(t.rank).arg(t.node).arg(t.slot);
  if (t.folded > 1)
    text += tr(" (this tile stands for %1 identical nodes: ranks %2, %3, …)")
                .arg(t.folded)
                .arg(t.rank)
                .arg(t.rank + model_->plan().cluster.devices_per_node);
  if (!t.hasCoord || !a.layout) return text;
  const ParallelLayout& l = *a.layout;
  const ParallelLayout::Coord& c = t.coord;
  text += sep + tr("tp %1, pp %2, dp %3").arg(c.tp).arg(c.pp).arg(c.dp);
  std::vector<int> tpGroup, ppGroup, dpGroup;
  for (int i = 0; i < l.tp; i++) tpGroup.push_back(l.rank({i, c.dp, c.pp}));
  for (int i = 0; i < l.pp; i++) ppGroup.push_back(l.rank({c.tp, c.dp, i}));
  for (int i = 0; i < l.dp; i++) dpGroup.push_back(l.rank({c.tp, i, c.pp}));
  text += sep + tr("TP group %1 · PP group %2 · DP group %3")
                    .arg(rankList(tpGroup), rankList(ppGroup), rankList(dpGroup));
  QStringList chunks;  // one layer range per model chunk, the first few
  for (int chunk = 0; chunk < l.vpp && chunk < 4; chunk++) {
    const ParallelLayout::LayerRange r = l.stage_layers(c.pp, chunk);
    chunks << QStringLiteral("%1–%2").arg(r.begin).arg(r.end - 1);
  }
  if (l.vpp > 4) chunks << QStringLiteral("… (%1 chunks)").arg(l.vpp);
  text += sep + tr("layers %1").arg(chunks.join(", "));
  if (a.memory && c.pp < static_cast<int>(a.memory->stages.size())) {
    const StageEstimate& s = a.memory->stages[c.pp];
    const double capacity = a.cluster.device.memory_bytes;
    text += sep + tr("memory: weights %1 + grads %2 + optimizer %3 + activations %4 = %5 of %6")
                      .arg(humanBytes(s.weight_bytes), humanBytes(s.grad_bytes),
                           humanBytes(s.optimizer_bytes), humanBytes(s.activation_bytes),
                           humanBytes(s.total_bytes()), humanBytes(capacity));
  }
  return text;
}

void LayoutPanel::showFocus(const CanvasTile* tile) {
  if (tile) {
    info_->setText(describe(*tile, true));
    return;
  }
  const Plan& plan = model_->plan();
  info_->setText(tr("%1 × %2. Hover over a device to see its coordinates, groups and memory; "
                    "click to keep it selected. Wheel zooms, dragging pans.")
                     .arg(plural(plan.cluster.nodes, "node", "nodes"),
                          plural(plan.cluster.devices_per_node, "device", "devices")));
}

}  // namespace lattice::ui
