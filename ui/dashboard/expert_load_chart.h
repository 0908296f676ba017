// The experts' load of an MoE run (docs/studio.md "MoE"): for the chosen MoE layer, one line per
// expert of its share of the layer's routes (%) at each logged iteration, from the engine's
// "moe load/layer L/expert e" rows (lattice/run_record.h moe_load_key), with the even share
// (100 / E) dashed. A balanced router keeps every line near it; an expert that collapses
// (few routes) or hogs (many) stands out. The first shown run with such rows is drawn.
// Non-goals: overlaying several runs (their experts need not correspond).
#pragma once

#include <QList>
#include <QMap>

#include "dashboard/chart_card.h"

class QComboBox;
class QCPGraph;
class QCPItemStraightLine;

namespace lattice::ui {

class SeriesStore;

class ExpertLoadChart : public ChartCard {
  Q_OBJECT

 public:
  explicit ExpertLoadChart(SeriesStore* store, QWidget* parent = nullptr);

  // Whether a shown run has load rows (the Dashboard shows its MoE page for them).
  bool hasLoad() const { return run_ >= 0; }
  qint64 run() const { return run_; }
  QList<int> layers() const { return layers_.keys(); }  // MoE layers with rows, ascending
  int layer() const { return layer_; }                  // the layer drawn; -1 when none
  void setLayer(int layer);
  const QList<QCPGraph*>& expertGraphs() const { return graphs_; }  // one per expert
  void refresh();                                                   // does not replot

 protected:
  void writeCsv(QTextStream& out) const override;
  void applyPalette() override;

 private:
  SeriesStore* store_;
  QComboBox* layerBox_;
  qint64 run_ = -1;
  QMap<int, int> layers_;  // MoE layer -> experts (the largest index with rows + 1)
  int layer_ = -1;
  QList<QCPGraph*> graphs_;
  QCPItemStraightLine* even_ = nullptr;
};

}  // namespace lattice::ui
