// LayoutCanvas: scene building from canvasGeometry, highlight roles, zoom and pan.
#include "plan/layout_canvas.h"

#include <QElapsedTimer>
#include <QEvent>
#include <QMouseEvent>
#include <QScrollBar>
#include <QWheelEvent>
#include <cmath>

namespace lattice::ui {

namespace {

constexpr double kMaxFitScale = 1.25;  // a few devices are not blown up to fill the view
constexpr double kMinScale = 0.02, kMaxScale = 6;

// Whether tile `t` stands for `rank` (itself, or the same slot of a node it folds).
bool standsFor(const CanvasTile& t, int rank, int perNode) {
  const int node = rank / perNode;
  return rank % perNode == t.slot && node >= t.node && node < t.node + t.folded;
}

// Whether one of the ranks tile `t` stands for shares the `kind` group with `rank`.
bool shares(const CanvasTile& t, int rank, GroupKind kind, int perNode, const DeviceGroups& g) {
  for (int i = 0; i < t.folded; i++)
    if (g.sameGroup(kind, (t.node + i) * perNode + t.slot, rank)) return true;
  return false;
}

struct Roles {
  TileRole role = TileRole::kNone;
  unsigned also = 0;  // bits 1 << TileRole of the other groups shared
};

// How tile `t` relates to the focused tile `f` (see TileRole). The expert grid's groups only
// with EP > 1: otherwise the expert group is the device alone and expert-DP is DP x CP.
Roles rolesOf(const CanvasTile& t, const CanvasTile& f, int perNode, const DeviceGroups& g,
              bool experts) {
  if (standsFor(t, f.rank, perNode)) return {TileRole::kSelf};
  if (!t.hasCoord || !f.hasCoord || g.empty()) return {TileRole::kDimmed};
  static const std::pair<GroupKind, TileRole> kOrder[] = {
      {GroupKind::kTensor, TileRole::kTensorGroup},
      {GroupKind::kContext, TileRole::kContextGroup},
      {GroupKind::kExpert, TileRole::kExpertGroup},
      {GroupKind::kData, TileRole::kDataGroup},
      {GroupKind::kPipeline, TileRole::kPipelineGroup},
      {GroupKind::kExpertData, TileRole::kExpertDataGroup}};
  Roles r{TileRole::kDimmed};
  for (const auto& [kind, role] : kOrder) {
    if (!experts && (kind == GroupKind::kExpert || kind == GroupKind::kExpertData)) continue;
    if (!shares(t, f.rank, kind, perNode, g)) continue;
    if (r.role == TileRole::kDimmed)
      r.role = role;
    else
      r.also |= 1u << static_cast<int>(role);
  }
  return r;
}

}  // namespace

LayoutCanvas::LayoutCanvas(QWidget* parent)
    : QGraphicsView(parent), scene_(new QGraphicsScene(this)) {
  setScene(scene_);
  setRenderHint(QPainter::Antialiasing);
  setDragMode(QGraphicsView::ScrollHandDrag);
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setViewportUpdateMode(QGraphicsView::SmartViewportUpdate);
  setOptimizationFlags(QGraphicsView::DontSavePainterState);
  // No index: a few thousand static items are found faster by a scan than the BSP tree is
  // built for every rebuild.
  scene_->setItemIndexMethod(QGraphicsScene::NoIndex);
  viewport()->setMouseTracking(true);
  setMinimumSize(240, 160);
  relayout_.setSingleShot(true);
  relayout_.setInterval(120);
  connect(&relayout_, &QTimer::timeout, this, [this] {
    rebuild();
    if (autoFit_) fitAll();
  });
}

double LayoutCanvas::viewAspect() const {
  const QSize s = viewport()->size();
  return s.width() > 0 && s.height() > 0 ? static_cast<double>(s.width()) / s.height() : 1.6;
}

void LayoutCanvas::showLayout(const std::optional<ParallelLayout>& layout, int nodes, int perNode,
                              bool visionTower) {
  const bool reshaped = nodes != nodes_ || perNode != perNode_;
  layout_ = layout;
  visionTower_ = visionTower && layout;
  groups_ = layout ? DeviceGroups(*layout) : DeviceGroups();
  nodes_ = std::max(nodes, 1);
  perNode_ = std::max(perNode, 1);
  rebuild();
  if (reshaped) autoFit_ = true;
  if (autoFit_) fitAll();
}

void LayoutCanvas::setFolding(bool on) {
  if (on == folding_) return;
  folding_ = on;
  rebuild();
  autoFit_ = true;
  fitAll();
}

void LayoutCanvas::rebuild() {
  QElapsedTimer timer;
  timer.start();
  hovered_ = nullptr;
  devices_.clear();
  message_ = nullptr;
  scene_->clear();

  const QPalette& pal = palette();
  scene_->setBackgroundBrush(pal.color(QPalette::Base));
  const int64_t world = static_cast<int64_t>(nodes_) * perNode_;
  const bool fold = folding_ && nodes_ > kFoldAbove;
  // Folding is computed per node, so the bound on the world is loose with it.
  if (world <= (fold ? 64 : 1) * int64_t{kMaxTiles})
    geometry_ = canvasGeometry(layout_, nodes_, perNode_, fold, aspect_ = viewAspect());
  else
    geometry_ = {};
  if (geometry_.tiles.empty() || geometry_.tiles.size() > kMaxTiles) {
    geometry_ = {};
    const QString why =
        fold ? tr("%1 devices are too many to draw, even with identical nodes folded.")
             : tr("%1 devices are too many to draw one by one; turn on folding of identical "
                  "nodes.");
    message_ = scene_->addSimpleText(why.arg(world));
    message_->setBrush(pal.color(QPalette::Text));
    scene_->setSceneRect(message_->boundingRect().adjusted(-20, -20, 20, 20));
    lastRebuildMs_ = timer.nsecsElapsed() / 1e6;
    return;
  }

  const QColor nodeFill = pal.color(QPalette::AlternateBase);
  const QColor border = pal.color(QPalette::Mid);
  const QColor text = pal.color(QPalette::Text);
  for (const CanvasNode& n : geometry_.nodes)
    scene_->addItem(new NodeItem(n, nodeFill, border, text));
  const int stages = layout_ ? layout_->pp : 1;
  const bool dark = pal.color(QPalette::Base).lightness() < 128;
  devices_.reserve(static_cast<int>(geometry_.tiles.size()));
  for (const CanvasTile& t : geometry_.tiles) {
    const QColor fill = t.hasCoord ? stageColor(t.coord.pp, stages) : QColor(0xd0, 0xd0, 0xd0);
    const bool vision = visionTower_ && t.hasCoord && layout_->is_first_stage(t.coord.pp);
    auto* item = new DeviceItem(t, fill, dark, layout_ && layout_->cp > 1,
                                layout_ && layout_->ep > 1, vision);
    scene_->addItem(item);
    devices_.push_back(item);
  }
  QColor outline = text;
  outline.setAlphaF(0.75);
  for (const CanvasOutline& o : geometry_.outlines)
    scene_->addItem(new OutlineItem(o, outline, QColor(0xf5, 0x7c, 0x00)));
  scene_->setSceneRect(geometry_.bounds.adjusted(-24, -24, 24, 24));
  applyHighlight();
  lastRebuildMs_ = timer.nsecsElapsed() / 1e6;
}

void LayoutCanvas::fitAll() {
  if (scene_->sceneRect().isEmpty()) return;
  resetTransform();
  fitInView(scene_->sceneRect(), Qt::KeepAspectRatio);
  const double s = transform().m11();
  if (s > kMaxFitScale) {
    resetTransform();
    scale(kMaxFitScale, kMaxFitScale);
  }
  centerOn(scene_->sceneRect().center());
}

void LayoutCanvas::zoomBy(double factor) {
  const double s = transform().m11() * factor;
  if (s < kMinScale || s > kMaxScale) return;
  autoFit_ = false;
  scale(factor, factor);
}

void LayoutCanvas::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() / 120.0;
  if (steps == 0) return;
  zoomBy(std::pow(1.15, steps));
  event->accept();
}

DeviceItem* LayoutCanvas::deviceAt(const QPoint& viewPos) const {
  for (QGraphicsItem* item : items(viewPos))
    if (item->type() == DeviceItem::kType) return static_cast<DeviceItem*>(item);
  return nullptr;
}

void LayoutCanvas::setHovered(DeviceItem* item) {
  if (item == hovered_) return;
  hovered_ = item;
  if (item && toolTipProvider_) item->setToolTip(toolTipProvider_(item->tile()));
  applyHighlight();
}

void LayoutCanvas::applyHighlight() {
  const CanvasTile* focus = hovered_ ? &hovered_->tile() : nullptr;
  if (!focus && selectedRank_ >= 0)
    for (DeviceItem* d : devices_) {
      const CanvasTile& t = d->tile();
      if (!standsFor(t, selectedRank_, perNode_)) continue;
      focus = &t;
      if (t.rank != selectedRank_) {  // a rank inside a folded tile: describe that rank
        selected_ = t;
        selected_.rank = selectedRank_;
        selected_.node = selectedRank_ / perNode_;
        selected_.folded = 1;
        if (layout_) {
          selected_.coord = layout_->coord(selectedRank_);
          selected_.expert = layout_->expert_coord(selectedRank_);
        }
        selected_.dpLast = selected_.coord.dp;
        focus = &selected_;
      }
    }
  const bool experts = layout_ && layout_->ep > 1;
  for (DeviceItem* d : devices_) {
    const Roles r = focus ? rolesOf(d->tile(), *focus, perNode_, groups_, experts) : Roles{};
    d->setRole(r.role, r.also);
  }
  emit focusChanged(focus);
}

void LayoutCanvas::selectRank(int rank) {
  selectedRank_ = rank;
  applyHighlight();
}

void LayoutCanvas::mouseMoveEvent(QMouseEvent* event) {
  QGraphicsView::mouseMoveEvent(event);
  if (event->buttons() == Qt::NoButton) setHovered(deviceAt(event->pos()));
}

void LayoutCanvas::mousePressEvent(QMouseEvent* event) {
  if (event->button() == Qt::LeftButton) {
    DeviceItem* item = deviceAt(event->pos());
    selectedRank_ = item ? item->tile().rank : -1;
    applyHighlight();
  }
  QGraphicsView::mousePressEvent(event);
}

void LayoutCanvas::leaveEvent(QEvent* event) {
  setHovered(nullptr);
  QGraphicsView::leaveEvent(event);
}

void LayoutCanvas::resizeEvent(QResizeEvent* event) {
  QGraphicsView::resizeEvent(event);
  if (autoFit_) fitAll();
  if (std::abs(std::log(viewAspect() / aspect_)) > 0.25) relayout_.start();
}

void LayoutCanvas::changeEvent(QEvent* event) {
  QGraphicsView::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) rebuild();
}

}  // namespace lattice::ui
