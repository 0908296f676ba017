// Fusion palettes. The dark one follows the usual Fusion dark scheme, with link and highlight
// colours bright enough on dark grey.
#include "app/theme.h"

#include <QApplication>
#include <QPalette>
#include <QStyle>
#include <QStyleFactory>

namespace lattice::ui {

namespace {

QPalette darkPalette() {
  QPalette p;
  const QColor window(0x2b, 0x2d, 0x31), base(0x1f, 0x21, 0x24), text(0xe8, 0xea, 0xed);
  const QColor disabled(0x80, 0x84, 0x8a);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, QColor(0x33, 0x36, 0x3b));
  p.setColor(QPalette::ToolTipBase, QColor(0x3c, 0x40, 0x45));
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, QColor(0x9a, 0xa0, 0xa6));
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, QColor(0x35, 0x38, 0x3d));
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, QColor(0xff, 0x8a, 0x80));
  p.setColor(QPalette::Light, QColor(0x4a, 0x4e, 0x54));
  p.setColor(QPalette::Midlight, QColor(0x40, 0x44, 0x49));
  p.setColor(QPalette::Mid, QColor(0x5f, 0x63, 0x68));
  p.setColor(QPalette::Dark, QColor(0x1a, 0x1b, 0x1e));
  p.setColor(QPalette::Shadow, QColor(0x10, 0x10, 0x10));
  p.setColor(QPalette::Highlight, QColor(0x3d, 0x7e, 0xd6));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(0x8a, 0xb4, 0xf8));
  p.setColor(QPalette::LinkVisited, QColor(0xc5, 0x8a, 0xf9));
  for (QPalette::ColorRole role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, disabled);
  p.setColor(QPalette::Disabled, QPalette::Base, window);
  return p;
}

QPalette lightPalette() {
  QPalette p = QApplication::style()->standardPalette();
  p.setColor(QPalette::AlternateBase, QColor(0xf3, 0xf5, 0xf8));
  p.setColor(QPalette::PlaceholderText, QColor(0x60, 0x64, 0x6a));
  return p;
}

}  // namespace

void applyTheme(Theme theme) {
  if (QApplication::style()->name() != QLatin1String("fusion"))
    QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  QApplication::setPalette(theme == Theme::kDark ? darkPalette() : lightPalette());
}

QString themeName(Theme theme) {
  return theme == Theme::kDark ? QStringLiteral("dark") : QStringLiteral("light");
}

Theme themeFromName(const QString& name) {
  return name == QLatin1String("dark") ? Theme::kDark : Theme::kLight;
}

}  // namespace lattice::ui
