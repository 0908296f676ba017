// Glyphs drawn on a 32x32 grid with QPainter, rendered at 1x and 2x.
#include "app/icons.h"

#include <QPainter>
#include <QPainterPath>
#include <QPixmap>

namespace lattice::ui {

namespace {

void drawGlyph(QPainter& p, Glyph glyph, const QColor& c) {
  p.setPen(QPen(c, 2.4, Qt::SolidLine, Qt::RoundCap, Qt::RoundJoin));
  p.setBrush(Qt::NoBrush);
  switch (glyph) {
    case Glyph::kPlan:  // a 2x2 lattice of devices, one group outlined
      p.setBrush(c);
      for (int i = 0; i < 4; i++)
        p.drawRoundedRect(QRectF(6 + (i % 2) * 11, 6 + (i / 2) * 11, 8, 8), 2, 2);
      break;
    case Glyph::kLaunch: {
      QPainterPath play;
      play.moveTo(10, 6);
      play.lineTo(26, 16);
      play.lineTo(10, 26);
      play.closeSubpath();
      p.setBrush(c);
      p.drawPath(play);
      break;
    }
    case Glyph::kDashboard:
      p.drawLine(QPointF(5, 27), QPointF(27, 27));
      p.drawLine(QPointF(5, 27), QPointF(5, 5));
      p.drawPolyline(QPolygonF({{8, 10}, {13, 17}, {18, 19}, {26, 22}}));
      break;
    case Glyph::kHistory:
      p.drawEllipse(QPointF(16, 16), 11, 11);
      p.drawLine(QPointF(16, 16), QPointF(16, 9));
      p.drawLine(QPointF(16, 16), QPointF(21, 19));
      break;
    case Glyph::kPlayground: {
      QPainterPath bubble;
      bubble.addRoundedRect(QRectF(5, 6, 22, 15), 4, 4);
      bubble.moveTo(10, 21);
      bubble.lineTo(9, 27);
      bubble.lineTo(16, 21);
      p.drawPath(bubble);
      break;
    }
    case Glyph::kSuggest:  // a sparkle
      p.drawLine(QPointF(16, 4), QPointF(16, 28));
      p.drawLine(QPointF(4, 16), QPointF(28, 16));
      p.drawLine(QPointF(9, 9), QPointF(23, 23));
      p.drawLine(QPointF(23, 9), QPointF(9, 23));
      break;
    case Glyph::kUndo:
    case Glyph::kRedo: {  // a hooked arrow, mirrored for redo
      if (glyph == Glyph::kRedo) {
        p.translate(32, 0);
        p.scale(-1, 1);
      }
      QPainterPath hook;
      hook.moveTo(9, 13);
      hook.lineTo(20, 13);
      hook.cubicTo(30, 13, 30, 26, 20, 26);
      hook.lineTo(12, 26);
      p.drawPath(hook);
      p.drawPolyline(QPolygonF({{14, 7}, {8, 13}, {14, 19}}));
      break;
    }
    case Glyph::kStop:
      p.setBrush(c);
      p.drawRoundedRect(QRectF(8, 8, 16, 16), 2, 2);
      break;
  }
}

QPixmap render(Glyph glyph, const QColor& color, double dpr) {
  QPixmap pixmap(QSize(32, 32) * dpr);
  pixmap.setDevicePixelRatio(dpr);
  pixmap.fill(Qt::transparent);
  QPainter p(&pixmap);
  p.setRenderHint(QPainter::Antialiasing);
  drawGlyph(p, glyph, color);
  return pixmap;
}

}  // namespace

QIcon glyphIcon(Glyph glyph, const QPalette& palette) {
  QIcon icon;
  for (double dpr : {1.0, 2.0}) {
    icon.addPixmap(render(glyph, palette.color(QPalette::ButtonText), dpr), QIcon::Normal);
    icon.addPixmap(render(glyph, palette.color(QPalette::Disabled, QPalette::ButtonText), dpr),
                   QIcon::Disabled);
  }
  return icon;
}

QIcon appIcon() {
  return QIcon(QStringLiteral(":/icons/lattice.png"));
}

}  // namespace lattice::ui
