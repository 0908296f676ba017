// The layout canvas: every node and device of the plan (folded when there are many), coloured
// by pipeline stage, TP groups outlined, a warning badge on TP groups that cross nodes, and with
// EP > 1 a stripe in each device's expert-slice colour. Hovering or clicking a device highlights
// its TP, CP, EP, DP, PP and expert-DP groups (the engine's, DeviceGroups). Wheel zooms under the
// mouse, dragging the background pans. Non-goals: editing the layout by dragging devices.
#pragma once

#include <QGraphicsView>
#include <QTimer>
#include <functional>
#include <optional>

#include "plan/canvas_items.h"
#include "plan/device_groups.h"
#include "plan/layout_geometry.h"

namespace lattice::ui {

class LayoutCanvas : public QGraphicsView {
  Q_OBJECT

 public:
  explicit LayoutCanvas(QWidget* parent = nullptr);

  // Rebuilds the scene. Fits the view when the cluster's shape changed. `visionTower`: the first
  // pipeline stage's devices run a vision tower (Note [vision tower in the plan] in
  // engine/src/plan/vision_estimate.cpp) and carry a "ViT" tag.
  void showLayout(const std::optional<ParallelLayout>& layout, int nodes, int devicesPerNode,
                  bool visionTower = false);
  bool visionTower() const { return visionTower_; }
  // Fold runs of identical nodes when there are more than kFoldAbove nodes (default on).
  void setFolding(bool on);
  bool folding() const { return folding_; }
  static constexpr int kFoldAbove = 8;
  // Beyond this many tiles (after folding) nothing is drawn but a sentence saying why.
  static constexpr int kMaxTiles = 8192;

  const CanvasGeometry& geometry() const { return geometry_; }
  const DeviceGroups& groups() const { return groups_; }  // empty without a layout
  QList<DeviceItem*> deviceItems() const { return devices_; }
  double lastRebuildMs() const { return lastRebuildMs_; }

  // Text of a device's tooltip (the panel knows the memory estimate).
  void setToolTipProvider(std::function<QString(const CanvasTile&)> provider) {
    toolTipProvider_ = std::move(provider);
  }
  // Highlights `rank`'s groups as a click would (-1 clears the selection).
  void selectRank(int rank);
  int selectedRank() const { return selectedRank_; }

  void fitAll();
  void zoomBy(double factor);

 signals:
  // The device whose groups are highlighted now (hovered, else selected); null when none.
  void focusChanged(const CanvasTile* tile);

 protected:
  void wheelEvent(QWheelEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void changeEvent(QEvent* event) override;

 private:
  void rebuild();
  double viewAspect() const;
  DeviceItem* deviceAt(const QPoint& viewPos) const;
  void setHovered(DeviceItem* item);
  void applyHighlight();

  QGraphicsScene* scene_;
  std::optional<ParallelLayout> layout_;
  DeviceGroups groups_;  // layout_'s
  int nodes_ = 1, perNode_ = 1;
  bool folding_ = true;
  bool visionTower_ = false;
  bool autoFit_ = true;
  CanvasGeometry geometry_;
  QList<DeviceItem*> devices_;
  QGraphicsSimpleTextItem* message_ = nullptr;
  DeviceItem* hovered_ = nullptr;
  int selectedRank_ = -1;
  CanvasTile selected_;  // the selected rank when a folded tile stands for it
  double lastRebuildMs_ = 0;
  double aspect_ = 1.6;  // the view's width / height the node grid was laid out for
  QTimer relayout_;      // a resize that changes the aspect re-lays out the grid, once
  std::function<QString(const CanvasTile&)> toolTipProvider_;
};

}  // namespace lattice::ui
