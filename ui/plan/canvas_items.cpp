// Painting of the canvas items. Text is skipped when zoomed far out (level of detail), which
// keeps a 1024-device redraw cheap and the picture readable as coloured blocks.
#include "plan/canvas_items.h"

#include <QPainter>
#include <QPainterPath>
#include <QPainterPathStroker>
#include <QStyleOptionGraphicsItem>
#include <cmath>

namespace lattice::ui {

namespace {

QFont pixelFont(int px, bool bold) {
  QFont f;
  f.setPixelSize(px);
  f.setBold(bold);
  return f;
}

constexpr double kBadge = 18;  // side of the warning triangle
// Below this level of detail (zoomed far out) shapes are drawn without antialiasing and
// corners: thousands of small rounded shapes are what a 1024-device redraw spends its time on.
constexpr double kCoarseLod = 0.3;

QPainterPath badgePath(const QRectF& r) {
  const QPointF c(r.right() - kBadge / 2 + 4, r.top() + 2);
  QPainterPath p;
  p.moveTo(c.x(), c.y() - kBadge / 2);
  p.lineTo(c.x() + kBadge / 2, c.y() + kBadge / 2);
  p.lineTo(c.x() - kBadge / 2, c.y() + kBadge / 2);
  p.closeSubpath();
  return p;
}

}  // namespace

QColor roleColor(TileRole role, bool dark) {
  switch (role) {
    case TileRole::kSelf:
      return dark ? QColor(0xe1, 0x9d, 0xf0) : QColor(0x8e, 0x24, 0xaa);
    case TileRole::kTensorGroup:
      return dark ? QColor(0xff, 0xa7, 0x26) : QColor(0xe6, 0x51, 0x00);
    case TileRole::kPipelineGroup:
      return dark ? QColor(0x64, 0xb5, 0xf6) : QColor(0x15, 0x65, 0xc0);
    case TileRole::kDataGroup:
      return dark ? QColor(0x81, 0xc7, 0x84) : QColor(0x2e, 0x7d, 0x32);
    case TileRole::kContextGroup:
      return dark ? QColor(0x4d, 0xd0, 0xe1) : QColor(0x00, 0x83, 0x8f);
    case TileRole::kExpertGroup:
      return dark ? QColor(0xf0, 0x62, 0x92) : QColor(0xc2, 0x18, 0x5b);
    case TileRole::kExpertDataGroup:
      return dark ? QColor(0xd4, 0xe1, 0x57) : QColor(0x82, 0x77, 0x17);
    default:
      return QColor(0x80, 0x80, 0x80);
  }
}

QColor stageColor(int stage, int stages) {
  // Light tints of a qualitative palette: dark text stays readable on every one of them.
  static const QColor kPalette[] = {{0xa6, 0xce, 0xe3}, {0xb2, 0xdf, 0x8a}, {0xfd, 0xbf, 0x6f},
                                    {0xca, 0xb2, 0xd6}, {0xfb, 0x9a, 0x99}, {0xff, 0xf0, 0x99},
                                    {0x9e, 0xda, 0xd5}, {0xe5, 0xc4, 0x94}, {0xd9, 0xd9, 0xd9},
                                    {0xf4, 0xb6, 0xd9}};
  if (stages <= 10) return kPalette[stage % 10];
  return QColor::fromHsvF(0.85 * stage / stages, 0.35, 0.97);
}

QColor expertSliceColor(int ep) {  // golden-ratio hues: neighbours differ
  return QColor::fromHsvF(std::fmod(0.07 + 0.61803 * ep, 1.0), 0.65, 0.8);
}

QColor visionTagColor() {
  return QColor(0x4a, 0x14, 0x8c);
}

DeviceItem::DeviceItem(const CanvasTile& tile, QColor fill, bool darkBackground, bool showCp,
                       bool showEp, bool vision)
    : tile_(tile),
      fill_(fill),
      dark_(darkBackground),
      showCp_(showCp),
      showEp_(showEp),
      vision_(vision) {
  setAcceptHoverEvents(true);
  setZValue(1);
}

void DeviceItem::setRole(TileRole role, unsigned also) {
  if (role == role_ && also == also_) return;
  role_ = role;
  also_ = also;
  update();
}

QRectF DeviceItem::boundingRect() const {
  return tile_.rect.adjusted(-2, -2, 2, 2);
}

void DeviceItem::paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) {
  const double lod = option->levelOfDetailFromTransform(painter->worldTransform());
  if (role_ == TileRole::kDimmed) painter->setOpacity(0.35);
  const bool marked = role_ != TileRole::kNone && role_ != TileRole::kDimmed;
  const double width = role_ == TileRole::kSelf ? 5 : 3.5;
  painter->setPen(marked ? QPen(roleColor(role_, dark_), width) : QPen(fill_.darker(150), 1));
  painter->setBrush(fill_);
  // Every item sets the hint: the view does not save painter state between items.
  painter->setRenderHint(QPainter::Antialiasing, lod >= kCoarseLod);
  if (lod < kCoarseLod) {  // far out: blocks only
    painter->drawRect(tile_.rect);
    return;
  }
  painter->drawRoundedRect(tile_.rect, 6, 6);
  if (showEp_ && tile_.hasCoord) {  // the expert slice this device holds
    painter->setPen(Qt::NoPen);
    painter->setBrush(expertSliceColor(tile_.expert.ep));
    const QRectF& r = tile_.rect;
    painter->drawRect(QRectF(r.left() + 6, r.bottom() - 6, r.width() - 12, 4));
  }
  // The other groups this device shares with the focused one, as dots in its corner.
  for (int role = 0, dot = 0; role < 32; role++) {
    if (!(also_ & (1u << role))) continue;
    painter->setPen(QPen(QColor(0xff, 0xff, 0xff), 1));
    painter->setBrush(roleColor(static_cast<TileRole>(role), dark_));
    painter->drawEllipse(QPointF(tile_.rect.right() - 8 - 10 * dot++, tile_.rect.top() + 8), 4, 4);
  }
  if (lod < 0.45) return;

  // The vision tower's devices: a "ViT" tag in the top left corner, the rank beside it.
  const double tag = vision_ ? 28 : 0;
  if (vision_) {
    const QRectF r(tile_.rect.left() + 4, tile_.rect.top() + 6, tag - 4, 16);
    painter->setPen(Qt::NoPen);
    painter->setBrush(visionTagColor());
    painter->drawRoundedRect(r, 3, 3);
    static const QFont tagFont = pixelFont(11, true);
    painter->setFont(tagFont);
    painter->setPen(QColor(0xff, 0xff, 0xff));
    painter->drawText(r, Qt::AlignCenter, QStringLiteral("ViT"));
  }
  static const QFont rankFont = pixelFont(15, true), coordFont = pixelFont(13, false);
  const QRectF top(tile_.rect.left() + tag, tile_.rect.top() + 5, tile_.rect.width() - tag, 20);
  const QRectF bottom(tile_.rect.left(), tile_.rect.top() + 27, tile_.rect.width(), 20);
  painter->setPen(QColor(0x1a, 0x1a, 0x1a));
  painter->setFont(rankFont);
  QString rank = QStringLiteral("rank %1").arg(tile_.rank);
  if (tile_.folded > 1) rank = QStringLiteral("%1 ×%2").arg(tile_.rank).arg(tile_.folded);
  painter->drawText(top, Qt::AlignCenter, rank);
  if (!tile_.hasCoord) return;
  painter->setFont(coordFont);
  const ParallelLayout::Coord& c = tile_.coord;
  const QString dp = tile_.dpLast != c.dp ? QStringLiteral("%1–%2").arg(c.dp).arg(tile_.dpLast)
                                          : QString::number(c.dp);
  QString coord = QStringLiteral("t%1").arg(c.tp);
  if (showCp_) coord += QStringLiteral(" c%1").arg(c.cp);
  if (showEp_) coord += QStringLiteral(" e%1").arg(tile_.expert.ep);
  coord += QStringLiteral(" d%1 p%2").arg(dp).arg(c.pp);
  painter->drawText(bottom, Qt::AlignCenter, coord);
}

NodeItem::NodeItem(const CanvasNode& node, QColor fill, QColor border, QColor text)
    : node_(node), fill_(fill), border_(border), text_(text) {
  setZValue(0);
}

QRectF NodeItem::boundingRect() const {
  return node_.rect.adjusted(-1, -1, 9, 9);
}

void NodeItem::paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) {
  const double lod = option->levelOfDetailFromTransform(painter->worldTransform());
  painter->setPen(QPen(border_, 1));
  painter->setBrush(fill_);
  const bool coarse = lod < kCoarseLod;
  painter->setRenderHint(QPainter::Antialiasing, !coarse);
  const double radius = coarse ? 0 : 8;
  if (node_.lastNode > node_.firstNode)  // a folded stack: two cards behind
    for (double d : {8.0, 4.0})
      painter->drawRoundedRect(node_.rect.translated(d, d), radius, radius);
  painter->drawRoundedRect(node_.rect, radius, radius);
  if (coarse) return;
  static const QFont font = pixelFont(13, true);
  painter->setFont(font);
  painter->setPen(text_);
  painter->drawText(node_.rect.adjusted(10, 4, -10, 0), Qt::AlignLeft | Qt::AlignTop, node_.label);
}

OutlineItem::OutlineItem(const CanvasOutline& outline, QColor pen, QColor warning)
    : outline_(outline), pen_(pen), warning_(warning) {
  setZValue(2);
  if (outline.crossesNodes)
    setToolTip(QObject::tr("The TP group that starts at rank %1 spans two nodes: its "
                           "all-reduces in every layer cross the slower inter-node network. "
                           "Make devices per node a multiple of TP.")
                   .arg(outline.firstRank));
}

QRectF OutlineItem::boundingRect() const {
  return outline_.rect.adjusted(-2, -kBadge, kBadge, 2);
}

QPainterPath OutlineItem::shape() const {
  QPainterPath frame;
  frame.addRoundedRect(outline_.rect, 8, 8);
  QPainterPathStroker stroker;
  stroker.setWidth(4);
  QPainterPath path = stroker.createStroke(frame);
  if (outline_.crossesNodes) path.addPath(badgePath(outline_.rect));
  return path;
}

void OutlineItem::paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) {
  const double lod = option->levelOfDetailFromTransform(painter->worldTransform());
  const bool coarse = lod < kCoarseLod;
  painter->setRenderHint(QPainter::Antialiasing, !coarse);
  QPen pen(outline_.crossesNodes ? warning_ : pen_, 2);
  if (outline_.crossesNodes && !coarse) pen.setStyle(Qt::DashLine);
  painter->setPen(pen);
  painter->setBrush(Qt::NoBrush);
  painter->drawRoundedRect(outline_.rect, coarse ? 0 : 8, coarse ? 0 : 8);
  if (!outline_.crossesNodes) return;
  painter->setPen(QPen(QColor(0x5d, 0x40, 0x37), 1));
  painter->setBrush(QColor(0xff, 0xc1, 0x07));
  const QPainterPath badge = badgePath(outline_.rect);
  painter->drawPath(badge);
  QFont f;
  f.setPixelSize(12);
  f.setBold(true);
  painter->setFont(f);
  painter->setPen(QColor(0x3e, 0x27, 0x23));
  painter->drawText(badge.boundingRect().adjusted(0, 4, 0, 0), Qt::AlignCenter,
                    QStringLiteral("!"));
}

}  // namespace lattice::ui
