// Benchmark (not a test): how long the layout canvas takes to rebuild its scene and to paint
// it, for 8 devices and for 1024 (folded and unfolded). Prints a table; docs/studio.md quotes it.
// Run offscreen: QT_QPA_PLATFORM=offscreen build/release/tests/studio/bench_studio_canvas
#include <QApplication>
#include <QElapsedTimer>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "plan/layout_canvas.h"

using lattice::ParallelLayout;
using lattice::ui::LayoutCanvas;

namespace {

ParallelLayout makeLayout(int tp, int pp, int dp, int layers) {
  ParallelLayout l;
  l.tp = tp, l.pp = pp, l.dp = dp;
  l.world = tp * pp * dp;
  l.num_layers = layers;
  return l;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  LayoutCanvas canvas;
  canvas.resize(1280, 560);
  canvas.show();
  QApplication::processEvents();
  struct Case {
    const char* name;
    ParallelLayout layout;
    int nodes, perNode;
    bool fold;
  };
  const Case cases[] = {
      {"8 devices (TP 2, PP 2, DP 2)", makeLayout(2, 2, 2, 4), 1, 8, true},
      {"1024 devices, folded", makeLayout(8, 16, 8, 96), 128, 8, true},
      {"1024 devices, unfolded", makeLayout(8, 16, 8, 96), 128, 8, false},
      {"1024 devices, 1 per node, folded", makeLayout(4, 8, 32, 96), 1024, 1, true}};
  std::printf("%-36s %10s %10s %10s %8s\n", "layout", "rebuild ms", "paint ms", "total ms",
              "tiles");
  for (const Case& c : cases) {
    std::vector<double> rebuild, paint;
    for (int rep = 0; rep < 9; rep++) {
      canvas.setFolding(c.fold);
      // Alternate with a different world so that every repetition really rebuilds.
      canvas.showLayout(makeLayout(1, 1, 1, 1), 1, 1);
      QElapsedTimer t;
      t.start();
      canvas.showLayout(c.layout, c.nodes, c.perNode);
      rebuild.push_back(t.nsecsElapsed() / 1e6);
      t.restart();
      canvas.viewport()->repaint();
      paint.push_back(t.nsecsElapsed() / 1e6);
    }
    const double r = median(rebuild), p = median(paint);
    std::printf("%-36s %10.1f %10.1f %10.1f %8lld\n", c.name, r, p, r + p,
                static_cast<long long>(canvas.deviceItems().size()));
  }
  return 0;
}
