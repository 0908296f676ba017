// The experts' load of an MoE run (docs/studio.md "MoE"): for the chosen MoE layer, one line per
// expert of its share of the layer's routes (%) at each logged iteration, from the engine's
// "moe load/layer L/expert e" rows (lattice/run_record.h moe_load_key), with the even share
// (100 / E) dashed. A balanced router keeps every line near it; an expert that collapses
// (few routes) or hogs (many) stands out. The first shown MoE run (RunMeta::numExperts) is
// drawn: its past read once per layer through the feed (down-sampled to kBuckets, each bucket's
// last point), then the live tail.
// Non-goals: overlaying several runs (their experts need not correspond).
#pragma once

#include <QList>

#include "dashboard/chart_card.h"

class QComboBox;
class QCPGraph;
class QCPItemStraightLine;

namespace lattice::ui {

class DashboardFeed;
class SeriesStore;

class ExpertLoadChart : public ChartCard {
  Q_OBJECT

 public:
  static constexpr int kViewId = 1 << 20;  // the feed's view id (MetricCharts count from 0)
  static constexpr int kBuckets = 2000;
  ExpertLoadChart(SeriesStore* store, DashboardFeed* feed, QWidget* parent = nullptr);

  // Whether a shown run is an MoE model's (the Dashboard shows its MoE page for it).
  bool hasLoad() const { return run_ >= 0; }
  qint64 run() const { return run_; }
  QList<int> layers() const { return layers_; }  // the run's MoE layers, ascending
  int layer() const { return layer_; }           // the layer drawn; -1 when none
  void setLayer(int layer);
  const QList<QCPGraph*>& expertGraphs() const { return graphs_; }  // one per expert
  void refresh();                                                   // does not replot

 protected:
  void writeCsv(QTextStream& out) const override;
  void applyPalette() override;

 private:
  SeriesStore* store_;
  DashboardFeed* feed_;
  QComboBox* layerBox_;
  qint64 run_ = -1;
  QList<int> layers_;
  int experts_ = 0;
  int layer_ = -1;
  struct Asked {
    qint64 run = -1, last = -1;
    int layer = -1;
  } asked_;  // the range read asked of the feed last
  QList<QCPGraph*> graphs_;
  QCPItemStraightLine* even_ = nullptr;
};

}  // namespace lattice::ui
