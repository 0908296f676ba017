// The layout canvas's graphics items: a device tile (rank, coordinates, stage colour, the
// highlight of the hovered device's groups), a node box and a TP-group outline with its
// warning badge. Items only paint; the canvas decides colours and highlights.
#pragma once

#include <QColor>
#include <QGraphicsItem>

#include "plan/layout_geometry.h"

namespace lattice::ui {

// How a tile relates to the hovered or selected device.
enum class TileRole { kNone, kSelf, kTensorGroup, kPipelineGroup, kDataGroup, kDimmed };

class DeviceItem : public QGraphicsItem {
 public:
  DeviceItem(const CanvasTile& tile, QColor fill, bool darkBackground);

  const CanvasTile& tile() const { return tile_; }
  void setRole(TileRole role);
  TileRole role() const { return role_; }

  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) override;

  static constexpr int kType = UserType + 1;
  int type() const override { return kType; }

 private:
  CanvasTile tile_;
  QColor fill_;
  bool dark_;
  TileRole role_ = TileRole::kNone;
};

class NodeItem : public QGraphicsItem {
 public:
  NodeItem(const CanvasNode& node, QColor fill, QColor border, QColor text);
  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) override;

 private:
  CanvasNode node_;
  QColor fill_, border_, text_;
};

class OutlineItem : public QGraphicsItem {
 public:
  OutlineItem(const CanvasOutline& outline, QColor pen, QColor warning);
  const CanvasOutline& outline() const { return outline_; }
  QRectF boundingRect() const override;
  // The stroke and the badge only, so that the tiles inside stay hoverable.
  QPainterPath shape() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) override;

 private:
  CanvasOutline outline_;
  QColor pen_, warning_;
};

// Highlight colours, shared by the tiles and the canvas legend; lighter on a dark background.
QColor roleColor(TileRole role, bool dark);
// Fill colour of pipeline stage `stage` of `stages` (qualitative up to 10, hues beyond).
QColor stageColor(int stage, int stages);

}  // namespace lattice::ui
