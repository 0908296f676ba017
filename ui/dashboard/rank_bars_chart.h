// Per-rank stacked bars of one run: memory by category (weights, grads, optimizer state,
// activations, workspace, with peak RSS marked and the device capacity where it is known)
// or time per phase (forward, backward, pipeline wait, embedding comm, data-parallel comm,
// optimizer) at the latest step that logged them, per iteration (the engine's mean over its log
// interval). For a CPU run on this host the capacity is the physical RAM. Under the phase bars,
// the slow ranks, the stage the others wait on and a failed run's absent rank, in words
// (lattice/rank_health.h, Note [slow ranks]); a named rank's tick says so.
#pragma once

#include <QList>

#include "dashboard/chart_card.h"

class QCPBars;
class QLabel;
class QCPGraph;

namespace lattice::ui {

class SeriesStore;

// The colour of memory category `i` (weights, grads, optimizer state, activations, workspace),
// shared by every chart that draws memory.
QColor memoryCategoryColor(int i);

class RankBarsChart : public ChartCard {
  Q_OBJECT

 public:
  enum class Kind { kMemory, kPhases };
  RankBarsChart(Kind kind, SeriesStore* store, QWidget* parent = nullptr);

  void setRun(qint64 run);
  qint64 run() const { return run_; }
  void refresh();  // does not replot

  const QList<QCPBars*>& bars() const { return bars_; }
  int rankCount() const { return ranks_.size(); }
  double capacityBytes() const { return capacity_; }  // 0 when unknown
  QString findingsText() const;  // the phase chart's note; empty for the memory chart
  QString capacityText() const { return capacityText_; }
  static double physicalMemoryBytes();

 protected:
  void writeCsv(QTextStream& out) const override;
  void applyPalette() override;

 private:
  void refreshMemory();
  void refreshPhases();

  Kind kind_;
  SeriesStore* store_;
  qint64 run_ = -1;
  QList<QCPBars*> bars_;
  QCPGraph* peak_ = nullptr;
  QList<int> ranks_;
  QList<QList<double>> values_;  // [category][rank index], in the plot's unit
  double unit_ = 1;
  QString unitName_;
  double capacity_ = 0;
  QString capacityText_;
  qint64 step_ = -1;
  QLabel* findings_ = nullptr;  // kPhases: what find_slow_ranks and absent_ranks say
  QList<int> namedRanks_;       // ranks a finding names
};

}  // namespace lattice::ui
