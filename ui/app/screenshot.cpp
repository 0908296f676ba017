// saveScreenshot: show, settle, grab.
#include "app/screenshot.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QPixmap>
#include <QThread>

namespace lattice::ui {

namespace {

// Layouts, queued QCustomPlot replots and deferred deletes all run from the event loop.
void settle(int ms) {
  QElapsedTimer timer;
  timer.start();
  while (timer.elapsed() < ms) {
    QApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(5);
  }
}

}  // namespace

Status saveScreenshot(MainWindow& window, MainWindow::View view, QSize size, const QString& file) {
  window.showView(view);
  window.resize(size);
  window.show();
  // The Dashboard, History and the Playground's run list read the run store off the UI thread
  // (a poll every few hundred ms, then a coalesced replot): give them time to show it.
  const bool readsStore = view == MainWindow::View::kDashboard ||
                          view == MainWindow::View::kHistory ||
                          view == MainWindow::View::kPlayground;
  settle(readsStore ? 2000 : 300);
  window.resize(size);  // a window manager (xvfb) may have changed it on show
  settle(200);
  const QPixmap pixels = window.grab();
  if (pixels.isNull()) return Status::internal("the window could not be rendered");
  if (!pixels.save(file, "PNG"))
    return Status::io_error(file.toStdString() + ": cannot write the PNG");
  return Status::ok();
}

}  // namespace lattice::ui
