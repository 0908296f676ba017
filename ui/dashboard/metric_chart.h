// A line chart of one or more metric keys of every shown run, read from the SeriesStore:
// the down-sampled range the chart asked for plus the live tail after it. Raw values are
// drawn faint behind TensorBoard's debiased EMA (series marked not smoothed: as logged); the x axis
// is the step, the tokens consumed or the time since the run started; the y axis fits the visible
// data (log scale optional). Follows the newest step until the user zooms (wheel) or pans (drag); a
// double click follows again. Zooming asks the feed for the visible range at the plot's pixel
// width.
#pragma once

#include <QHash>
#include <QTimer>

#include "dashboard/chart_card.h"
#include "dashboard/lineage_series.h"
#include "dashboard/series_store.h"

class QCPGraph;
class QCPItemStraightLine;
class QCPItemText;

namespace lattice::ui {

class DashboardFeed;

enum class XAxisMode { kStep, kTokens, kTime };

struct ChartSeriesSpec {
  QString key;    // the metric key in the run store
  QString label;  // legend text
  bool dashed = false;
  bool rightAxis = false;
  // false: drawn as logged, without the EMA: a schedule (learning rate, loss scale) or a
  // counter is no noisy measurement, and sparse points (validation) are each their own.
  bool smoothed = true;
  bool points = false;  // a marker on every point (sparse series)
  // Markers alone, no line: events at their steps (the instability events' values,
  // lattice/instability.h), drawn as logged.
  bool events = false;
};

class MetricChart : public ChartCard {
  Q_OBJECT

 public:
  MetricChart(int viewId, const QString& title, const QList<ChartSeriesSpec>& series,
              SeriesStore* store, DashboardFeed* feed, QWidget* parent = nullptr);

  void setSmoothing(double weight);
  void setLogScale(bool on);
  void setXAxisMode(XAxisMode mode);
  void setFollow(bool on);
  void forgetReads() { pending_.clear(); }
  // Draws a resumed run's ancestors before it (lineage_series.h); on by default. The time axis
  // never does: each run has its own clock.
  void setLineageVisible(bool on);
  const LineageOverlay& lineage() const {
    return lineage_;
  }  // the runs changed: ask again for every range
  bool following() const { return following_; }
  QString firstKey() const { return specs_.value(0).key; }
  QStringList keys() const;  // every series' key

  // Rebuilds the graphs from the store, asks the feed for ranges it lacks, fits the axes.
  // Does not replot: the caller replots once (DashboardView's coalescing timer).
  void refresh();

  // The raw (plotted) points of a run's key: what the test and the benchmark count.
  int plottedPoints(qint64 run, const QString& key) const;
  QCPGraph* rawGraph(qint64 run, const QString& key) const;
  QCPGraph* smoothGraph(qint64 run, const QString& key) const;
  // The crosshair's text at plot x coordinate x (empty when no run has a value there).
  QString crosshairText(double x) const;
  double xOf(qint64 run, double step) const;  // step -> x in the current mode

 signals:
  void followChanged(bool following);
  void replotWanted();  // a range read or an interaction changed what is drawn

 protected:
  void writeCsv(QTextStream& out) const override;
  void applyPalette() override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  struct Line {
    QCPGraph* raw = nullptr;
    QCPGraph* smooth = nullptr;
    QVector<Span> samples;  // what is plotted, in step order
    QVector<double> xs, smoothed;
  };
  struct Pending {
    qint64 first = -1, last = -1;
    int buckets = 0;
  };

  Line& line(int runIndex, qint64 run, int spec);
  void assemble(qint64 run, const ChartSeriesSpec& spec, Line& l);
  void requestReads();
  double stepOf(qint64 run, double x) const;
  int pixelWidth() const;
  void fitAxes();
  void onXRangeChanged();
  void moveCrosshair(double x);
  QString formatX(double x) const;

  int viewId_;
  QList<ChartSeriesSpec> specs_;
  SeriesStore* store_;
  DashboardFeed* feed_;
  QHash<QPair<qint64, int>, Line> lines_;  // (run, spec index)
  QHash<qint64, Pending> pending_;         // range reads asked for and not answered yet
  double weight_ = 0.6;
  bool log_ = false;
  bool following_ = true;
  bool settingRange_ = false;
  XAxisMode xMode_ = XAxisMode::kStep;
  QTimer refine_;  // debounces range reads while the user zooms
  QCPItemStraightLine* crossLine_;
  QCPItemText* crossText_;
  LineageOverlay lineage_;
};

}  // namespace lattice::ui
