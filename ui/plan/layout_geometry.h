// Where the layout canvas draws each node, device, TP-group outline and warning badge: pure
// geometry from the layout and the cluster shape, so it is testable without a scene and the
// scene builder stays a loop. Ranks fill nodes in order (rank r on node r / devices-per-node),
// as mpirun and srun place them by default.
//
// Folding: consecutive nodes whose devices hold the same (tp, cp, pp) coordinates slot by slot
// differ only in their data-parallel index, so one box stands for all of them ("nodes 8-15,
// x8") and each of its tiles shows the range of dp it stands for. This keeps 1024 devices to a
// few dozen boxes.
#pragma once

#include <QRectF>
#include <QString>
#include <optional>
#include <vector>

#include "lattice/layout.h"

namespace lattice::ui {

struct CanvasTile {
  int rank = 0;  // the first node's rank when folded
  int node = 0, slot = 0;
  bool hasCoord = false;  // false when the plan has no valid layout
  ParallelLayout::Coord coord;
  ParallelLayout::ExpertCoord expert;  // the first node's rank's place in the expert grid
  int dpLast = 0;  // last dp index this tile stands for (== coord.dp unless folded)
  int folded = 1;  // nodes this tile stands for
  QRectF rect;
};

struct CanvasNode {
  int firstNode = 0, lastNode = 0;
  QRectF rect;
  QString label;  // "node 3", "nodes 8–15 (×8)"
};

struct CanvasOutline {  // one TP group's tiles on one row of one node box
  QRectF rect;
  int firstRank = 0;  // the group's first rank
  bool crossesNodes = false;
};

struct CanvasGeometry {
  std::vector<CanvasNode> nodes;
  std::vector<CanvasTile> tiles;
  std::vector<CanvasOutline> outlines;
  QRectF bounds;
  bool folded = false;  // at least one box stands for several nodes
};

struct CanvasMetrics {
  double tileWidth = 96, tileHeight = 56, gap = 8, padding = 10, header = 24, nodeGap = 18;
  int maxColumns = 8;  // devices per row inside a node
};

// `layout` empty: the devices are drawn without coordinates (the plan is invalid).
// `fold`: fold runs of identical nodes (see above). `aspect`: width / height of the area the
// node boxes should fill (the view's).
CanvasGeometry canvasGeometry(const std::optional<ParallelLayout>& layout, int nodes,
                              int devicesPerNode, bool fold, double aspect = 1.6,
                              const CanvasMetrics& m = {});

}  // namespace lattice::ui
