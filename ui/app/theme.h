// Light and dark appearance: the Fusion style with a palette. Qt 6.4 (Debian 12) has no
// colour-scheme API, so the palette is the whole theme; widgets that paint themselves (the
// canvas, the plots) read it and repaint on QEvent::PaletteChange.
#pragma once

#include <QString>

namespace lattice::ui {

enum class Theme { kLight, kDark };

// Sets Fusion and the theme's palette on the running QApplication.
void applyTheme(Theme theme);
QString themeName(Theme theme);            // "light", "dark"
Theme themeFromName(const QString& name);  // anything but "dark" is light

}  // namespace lattice::ui
