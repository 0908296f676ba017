// One curve across resumes (docs/studio.md): a shown run that resumed from a checkpoint of
// another run (RunStore::run_lineage) is drawn with its ancestors' points before it. Each
// ancestor's steps up to the next run's resume step are solid; its later steps, which the next
// run did again (a rollback, a requeue after a crash), are its discarded tail, drawn faded and
// dashed; a marker names the run that resumed at each resume step.
// readLineage assembles the points (no widgets); LineageOverlay draws them on a MetricChart.
// Non-goals: descendants of the shown run, and the time axis (ancestors have their own clock).
#pragma once

#include <QColor>
#include <QHash>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVector>
#include <functional>

#include "lattice/status.h"

class QCPAxis;
class QCPGraph;
class QCPItemText;
class QCustomPlot;

namespace lattice::storage {
class RunStore;
}

namespace lattice::ui {

// Points of one ancestor's key over one range of steps: kept in the lineage, or discarded.
struct LineagePiece {
  qint64 run = 0;
  QString name;
  bool discarded = false;
  QVector<qint64> steps;   // ascending; a down-sampled bucket's last step
  QVector<double> values;  // the bucket's last value
};

// Where a run of the lineage resumed: `run` (named `name`) continued from step `step`.
struct LineageResume {
  qint64 step = 0;
  qint64 run = 0;
  QString name;
};

// The ancestors' part of one key's curve, root first; empty for a run that never resumed.
// pieces alternate kept and (when the ancestor went further) discarded, ancestor by ancestor.
struct LineageCurve {
  QVector<LineagePiece> pieces;
  QVector<LineageResume> resumes;
  bool isEmpty() const { return pieces.isEmpty(); }
};

// The lineage of `run` in `store` with each ancestor's points of every key of `keys`, each
// range read down-sampled to at most `buckets` points. Keys an ancestor never logged have no
// pieces; a run without ancestors gives an empty map.
Result<QHash<QString, LineageCurve>> readLineage(storage::RunStore& store, qint64 run,
                                                 const QStringList& keys, int buckets = 2000);

// The graphs of one chart's lineage curves: per (run, series) a solid graph of every kept
// piece, a faded dashed graph of the discarded tails (NaN between tails breaks the line), and
// a marker with a label at each resume step. Owned by the chart's QCustomPlot.
class LineageOverlay {
 public:
  explicit LineageOverlay(QCustomPlot* plot) : plot_(plot) {}
  // Draws `curve` for (run, series) in `color` on `y`, x through `xOf` (a step -> x mapping);
  // `weight` > 0 smooths as the run's own line (the EMA); `labelled`: the markers carry the
  // label (one series of a chart says it). An empty curve removes the graphs.
  void draw(qint64 run, int series, const LineageCurve& curve, QCPAxis* y, const QColor& color,
            double weight, bool labelled, const std::function<double(double)>& xOf);
  // Removes the graphs of runs not in `runs`.
  void keepRuns(const QList<qint64>& runs);
  void setVisible(bool on);
  bool visible() const { return visible_; }
  // The graphs of (run, series), for the axes' fit and the tests; null when none.
  QCPGraph* keptGraph(qint64 run, int series) const;
  QCPGraph* tailGraph(qint64 run, int series) const;
  QCPGraph* markerGraph(qint64 run, int series) const;
  QList<QCPGraph*> graphs() const;
  QStringList labels() const;  // the resume labels' text

 private:
  struct Graphs {
    QCPGraph* kept = nullptr;
    QCPGraph* tail = nullptr;
    QCPGraph* markers = nullptr;
    QList<QCPItemText*> labels;
  };
  void remove(Graphs& g);

  QCustomPlot* plot_;
  QHash<QPair<qint64, int>, Graphs> graphs_;
  bool visible_ = true;
};

}  // namespace lattice::ui
