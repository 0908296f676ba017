// The layout canvas's graphics items: a device tile (rank, coordinates, stage colour, the
// highlight of the hovered device's groups), a node box and a TP-group outline with its
// warning badge. Items only paint; the canvas decides colours and highlights.
#pragma once

#include <QColor>
#include <QGraphicsItem>

#include "plan/layout_geometry.h"

namespace lattice::ui {

// How a tile relates to the hovered or selected device: the first group, in the order TP, CP,
// EP, DP, PP, expert-DP, that holds both (groups of different grids overlap).
enum class TileRole {
  kNone,
  kSelf,
  kTensorGroup,
  kPipelineGroup,
  kDataGroup,
  kDimmed,
  kContextGroup,
  kExpertGroup,
  kExpertDataGroup
};

class DeviceItem : public QGraphicsItem {
 public:
  // `showCp`, `showEp`: the tile names its cp and ep coordinates and, with EP, has a stripe in
  // its expert slice's colour. `vision`: the device runs the vision tower (a "ViT" tag).
  DeviceItem(const CanvasTile& tile, QColor fill, bool darkBackground, bool showCp = false,
             bool showEp = false, bool vision = false);

  const CanvasTile& tile() const { return tile_; }
  bool showsVision() const { return vision_; }
  // `role` draws the border; `also` (bits 1 << TileRole) the other groups shared, as dots.
  void setRole(TileRole role, unsigned also = 0);
  TileRole role() const { return role_; }
  unsigned alsoRoles() const { return also_; }

  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) override;

  static constexpr int kType = UserType + 1;
  int type() const override { return kType; }

 private:
  CanvasTile tile_;
  QColor fill_;
  bool dark_;
  bool showCp_, showEp_, vision_;
  TileRole role_ = TileRole::kNone;
  unsigned also_ = 0;
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
// The stripe colour of the devices that hold expert slice `ep` (EP > 1).
QColor expertSliceColor(int ep);
// The "ViT" tag's colour (the vision tower's devices), shared with the legend.
QColor visionTagColor();
// Fill colour of pipeline stage `stage` of `stages` (qualitative up to 10, hues beyond).
QColor stageColor(int stage, int stages);

}  // namespace lattice::ui
