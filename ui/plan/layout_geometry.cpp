// canvasGeometry: fold runs of identical nodes, grid the node boxes to the view's aspect, place
// tiles row by row inside each box, and outline each TP group's tiles per row.
#include "plan/layout_geometry.h"

#include <algorithm>
#include <cmath>

namespace lattice::ui {

namespace {

struct Run {
  int first = 0, last = 0;
};

bool sameSignature(const ParallelLayout& l, int a, int b, int perNode) {
  for (int s = 0; s < perNode; s++) {
    const ParallelLayout::Coord x = l.coord(a * perNode + s), y = l.coord(b * perNode + s);
    if (x.tp != y.tp || x.cp != y.cp || x.pp != y.pp) return false;
  }
  return true;
}

std::vector<Run> nodeRuns(const std::optional<ParallelLayout>& layout, int nodes, int perNode,
                          bool fold) {
  std::vector<Run> runs;
  for (int n = 0; n < nodes; n++) {
    if (fold && layout && !runs.empty() && sameSignature(*layout, runs.back().first, n, perNode))
      runs.back().last = n;
    else
      runs.push_back({n, n});
  }
  return runs;
}

// Columns of node boxes that let the grid be drawn largest in a view of this aspect.
int bestColumns(int boxes, double boxW, double boxH, double aspect) {
  aspect = std::clamp(aspect, 0.1, 20.0);
  int best = 1;
  double bestScale = 0;
  for (int cols = 1; cols <= boxes; cols++) {
    const int rows = (boxes + cols - 1) / cols;
    const double scale = std::min(aspect / (cols * boxW), 1.0 / (rows * boxH));
    if (scale > bestScale) best = cols, bestScale = scale;
  }
  return best;
}

QString nodeLabel(const Run& r) {
  if (r.first == r.last) return QStringLiteral("node %1").arg(r.first);
  return QStringLiteral("nodes %1–%2 (×%3)").arg(r.first).arg(r.last).arg(r.last - r.first + 1);
}

}  // namespace

CanvasGeometry canvasGeometry(const std::optional<ParallelLayout>& layout, int nodes, int perNode,
                              bool fold, double aspect, const CanvasMetrics& m) {
  CanvasGeometry g;
  nodes = std::max(nodes, 1);
  perNode = std::max(perNode, 1);
  const std::vector<Run> runs = nodeRuns(layout, nodes, perNode, fold);
  g.folded = runs.size() < static_cast<size_t>(nodes);

  const int cols = std::min(perNode, m.maxColumns);
  const int rows = (perNode + cols - 1) / cols;
  const double nodeW = 2 * m.padding + cols * m.tileWidth + (cols - 1) * m.gap;
  const double nodeH = m.header + 2 * m.padding + rows * m.tileHeight + (rows - 1) * m.gap;
  const int boxes = static_cast<int>(runs.size());
  const int boxCols = bestColumns(boxes, nodeW + m.nodeGap, nodeH + m.nodeGap, aspect);

  for (int b = 0; b < boxes; b++) {
    const Run& run = runs[b];
    const double x0 = (b % boxCols) * (nodeW + m.nodeGap);
    const double y0 = (b / boxCols) * (nodeH + m.nodeGap);
    CanvasNode node{run.first, run.last, QRectF(x0, y0, nodeW, nodeH), nodeLabel(run)};
    g.bounds = g.bounds.united(node.rect);
    g.nodes.push_back(node);

    const size_t firstTile = g.tiles.size();
    for (int s = 0; s < perNode; s++) {
      CanvasTile t;
      t.rank = run.first * perNode + s;
      t.node = run.first;
      t.slot = s;
      t.folded = run.last - run.first + 1;
      if (layout) {
        t.hasCoord = true;
        t.coord = layout->coord(t.rank);
        t.expert = layout->expert_coord(t.rank);
        t.dpLast = layout->coord(run.last * perNode + s).dp;
      }
      t.rect = QRectF(x0 + m.padding + (s % cols) * (m.tileWidth + m.gap),
                      y0 + m.header + m.padding + (s / cols) * (m.tileHeight + m.gap), m.tileWidth,
                      m.tileHeight);
      g.tiles.push_back(t);
    }

    if (!layout || layout->tp <= 1) continue;
    // One outline per TP group and row: TP groups are runs of `tp` consecutive ranks.
    const int tp = layout->tp;
    for (size_t i = firstTile; i < g.tiles.size();) {
      const int group = g.tiles[i].rank / tp;
      const int row = g.tiles[i].slot / cols;
      QRectF rect = g.tiles[i].rect;
      size_t j = i + 1;
      while (j < g.tiles.size() && g.tiles[j].rank / tp == group && g.tiles[j].slot / cols == row)
        rect = rect.united(g.tiles[j++].rect);
      const int firstRank = group * tp;
      g.outlines.push_back({rect.adjusted(-4, -4, 4, 4), firstRank,
                            firstRank / perNode != (firstRank + tp - 1) / perNode});
      i = j;
    }
  }
  return g;
}

}  // namespace lattice::ui
