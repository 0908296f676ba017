// Waiting in the Studio's test programs (screenshots, benchmarks) without QtTest: the event loop
// runs until a signal fires or a condition holds, or the time is up.
#pragma once

#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QObject>
#include <QTimer>

namespace lattice::ui {

// Runs the event loop until `signal` of `object` or `seconds` pass; false on the time-out.
template <typename Object, typename Signal>
bool waitFor(Object* object, Signal signal, int seconds) {
  QEventLoop loop;
  QTimer timer;
  bool fired = false;
  QObject::connect(object, signal, &loop, [&] {
    fired = true;
    loop.quit();
  });
  QObject::connect(&timer, &QTimer::timeout, &loop, &QEventLoop::quit);
  timer.start(seconds * 1000);
  loop.exec();
  return fired;
}

// Processes events (at most `slice_ms` at a time) until done() or `timeout_ms` pass; false on
// the time-out.
template <typename F>
bool waitFor(F done, int timeout_ms, int slice_ms = 5) {
  QElapsedTimer t;
  t.start();
  while (!done()) {
    if (t.elapsed() > timeout_ms) return false;
    QApplication::processEvents(QEventLoop::AllEvents, slice_ms);
  }
  return true;
}

}  // namespace lattice::ui
