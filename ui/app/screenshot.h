// `lattice-studio --screenshot FILE --view NAME [--size WxH]`: the window rendered to a PNG,
// offscreen, for the documentation and for looking at the views without a display.
#pragma once

#include <QSize>
#include <QString>

#include "app/main_window.h"
#include "lattice/status.h"

namespace lattice::ui {

// Shows `view` at `size`, lets the layouts and the queued plot replots settle, and writes the
// window's pixels to `file` (PNG).
Status saveScreenshot(MainWindow& window, MainWindow::View view, QSize size, const QString& file);

}  // namespace lattice::ui
