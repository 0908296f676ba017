// Toolbar icons, painted (Qt 6.4 here has no SVG module): one simple glyph per view in the
// palette's text colour, so they follow the light and dark themes. The application icon is
// resources/icons/lattice.png.
#pragma once

#include <QIcon>
#include <QPalette>

namespace lattice::ui {

enum class Glyph {
  kPlan,
  kLaunch,
  kDashboard,
  kHistory,
  kPlayground,
  kSuggest,
  kStop,
  kUndo,
  kRedo
};

QIcon glyphIcon(Glyph glyph, const QPalette& palette);
QIcon appIcon();

}  // namespace lattice::ui
