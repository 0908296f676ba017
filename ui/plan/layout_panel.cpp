// LayoutPanel: controls, legend and the hovered device's description.
#include "plan/layout_panel.h"

#include <QCheckBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolButton>
#include <QVBoxLayout>

#include "plan/device_groups.h"
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
  const bool vision = a.memory && a.memory->vision.parameters > 0;
  canvas_->showLayout(a.layout, plan.cluster.nodes, plan.cluster.devices_per_node, vision);
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
  const bool cp = a.layout && a.layout->cp > 1, ep = a.layout && a.layout->ep > 1;
  const std::pair<TileRole, QString> roles[] = {{TileRole::kSelf, tr("device")},
                                                {TileRole::kTensorGroup, tr("TP")},
                                                {TileRole::kContextGroup, tr("CP")},
                                                {TileRole::kExpertGroup, tr("EP")},
                                                {TileRole::kDataGroup, tr("DP")},
                                                {TileRole::kPipelineGroup, tr("PP")},
                                                {TileRole::kExpertDataGroup, tr("expert DP")}};
  for (const auto& [role, name] : roles) {
    if (role == TileRole::kContextGroup && !cp) continue;
    if ((role == TileRole::kExpertGroup || role == TileRole::kExpertDataGroup) && !ep) continue;
    legend += swatch(roleColor(role, palette().color(QPalette::Base).lightness() < 128)) +
              QStringLiteral("<small>%1</small> ").arg(name);
  }
  if (ep) {
    legend += QStringLiteral("&nbsp; ") + tr("expert slice") + " ";
    for (int e = 0; e < std::min(a.layout->ep, 6); e++)
      legend += swatch(expertSliceColor(e)) + QStringLiteral("<small>%1</small> ").arg(e);
    if (a.layout->ep > 6) legend += QStringLiteral("… ");
  }
  if (vision)
    legend += QStringLiteral(
                  "&nbsp; <span style=\"background:%1; color:white\"><small><b>&nbsp;ViT"
                  "&nbsp;</b></small></span> <small>%2</small>")
                  .arg(visionTagColor().name(), tr("vision tower (stage 0)"));
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
  const ParallelLayout::ExpertCoord e = l.expert_coord(t.rank);
  text += sep + tr("tp %1, cp %2, dp %3, pp %4; experts: ep %5, expert dp %6, etp %7")
                    .arg(c.tp)
                    .arg(c.cp)
                    .arg(c.dp)
                    .arg(c.pp)
                    .arg(e.ep)
                    .arg(e.edp)
                    .arg(e.etp);
  // The engine's groups (DeviceGroups), in Megatron's order of axes.
  const DeviceGroups& g = canvas_->groups();
  const std::pair<GroupKind, QString> kinds[] = {
      {GroupKind::kTensor, tr("TP group")},   {GroupKind::kContext, tr("CP group")},
      {GroupKind::kExpert, tr("EP group")},   {GroupKind::kData, tr("DP group")},
      {GroupKind::kPipeline, tr("PP group")}, {GroupKind::kExpertData, tr("expert-DP group")}};
  QStringList groups;
  for (const auto& [kind, name] : kinds)
    groups << QStringLiteral("%1 %2").arg(name, rankList(g.groupOf(kind, t.rank)));
  text += sep + groups.mid(0, 3).join(QStringLiteral(" · "));
  text += sep + groups.mid(3).join(QStringLiteral(" · "));
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
    text += sep + tr("memory: weights %1 + grads %2 + optimizer %3 + activations %4 + buffers "
                     "%5 = %6 of %7")
                      .arg(humanBytes(s.weight_bytes), humanBytes(s.grad_bytes),
                           humanBytes(s.optimizer_bytes), humanBytes(s.activation_bytes),
                           humanBytes(s.all_workspace_bytes() + s.comm_buffer_bytes),
                           humanBytes(s.total_bytes()), humanBytes(capacity));
    if (s.vision_parameters > 0)
      text +=
          sep + tr("vision tower (ViT + projector): %1 parameters, activations %2 per "
                   "micro-batch, %3 % of the model FLOPs")
                    .arg(humanCount(static_cast<double>(s.vision_parameters)),
                         humanBytes(s.vision_activation_bytes_per_micro_batch))
                    .arg(100 * a.memory->vision.flops_per_iteration / a.memory->flops_per_iteration,
                         0, 'f', 1);
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
