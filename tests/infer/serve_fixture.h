// The server the `lattice serve` tests talk to: the tests' tiny model trained into a temporary
// directory and served on a free port. Header-only: its checks are the including test's.
#pragma once

#include <QtTest/QtTest>

#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>

#include "common/process.h"

namespace lattice::testing {

// Trains the tiny model (2 layers, hidden 64, context 32, vocabulary 300; `extra` train flags
// on top) into dir/name; the checkpoint's path, or "" after a recorded failure.
inline QString train_tiny(const QTemporaryDir& dir, const QString& name, const QStringList& extra) {
  const QStringList train = {"train",
                             "--mock-data",
                             "--num-layers",
                             "2",
                             "--hidden-size",
                             "64",
                             "--num-attention-heads",
                             "4",
                             "--seq-length",
                             "32",
                             "--vocab-size",
                             "300",
                             "--micro-batch-size",
                             "2",
                             "--train-iters",
                             "2",
                             "--eval-iters",
                             "0"};
  const QString ckpt = dir.filePath(name);
  const Run trained = run_process(
      LATTICE_CLI_PATH,
      train + extra + QStringList{"--save", ckpt, "--db", dir.filePath(name + ".sqlite")});
  [&] { QVERIFY2(trained.exit_code == 0, qPrintable(trained.err)); }();
  return QTest::currentTestFailed() ? QString() : ckpt;
}

// Starts `server` (`lattice serve --load ckpt` with `flags`) on a free port; the port, or -1
// after a recorded failure.
inline int start_serve(QProcess& server, const QString& ckpt, const QStringList& flags = {}) {
  server.start(LATTICE_CLI_PATH, QStringList{"serve", "--load", ckpt, "--port", "0"} + flags);
  const bool ready = server.waitForReadyRead(60000);
  const QString line = QString::fromUtf8(server.readLine());
  const QRegularExpressionMatch m = QRegularExpression("http://127\\.0\\.0\\.1:(\\d+)").match(line);
  [&] { QVERIFY2(ready && m.hasMatch(), qPrintable("serve did not start: " + line)); }();
  return m.hasMatch() ? m.captured(1).toInt() : -1;
}

// train_tiny() into dir/name, then start_serve() on it.
inline int train_and_serve(QProcess& server, const QTemporaryDir& dir, const QString& name,
                           const QStringList& extra) {
  const QString ckpt = train_tiny(dir, name, extra);
  return ckpt.isEmpty() ? -1 : start_serve(server, ckpt);
}

}  // namespace lattice::testing
