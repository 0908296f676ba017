// The planner against the run (issue 26, items 1 and 4), on the Dashboard's "Estimate and
// measurement" page: EstimateChart draws each rank's planned memory per category (the Plan
// view's estimate_memory for the run's recorded configuration and layout) beside the peak it
// measured, and names the gaps worth saying; BubbleChart draws each pipeline stage's measured
// wait / compute per recorded iteration beside the analytic (p - 1) / (v m). Both read the
// SeriesStore's EstimateSnapshot, which the feed fills off the UI thread.
#pragma once

#include <QList>
#include <QStringList>

#include "dashboard/chart_card.h"
#include "lattice/run_estimate.h"

class QCPBars;
class QCPGraph;
class QLabel;

namespace lattice::ui {

class SeriesStore;

class EstimateChart : public ChartCard {
  Q_OBJECT

 public:
  explicit EstimateChart(SeriesStore* store, QWidget* parent = nullptr);
  void setRun(qint64 run) { run_ = run; }
  void refresh();  // does not replot

  // What the card says under the chart: the gap sentences, that there is none, or why there
  // is no estimate ("No estimate: ..."); empty while nothing is known yet.
  QString verdict() const;
  const QStringList& gaps() const { return gaps_; }
  const QList<QCPBars*>& plannedBars() const { return planned_; }
  const QList<QCPBars*>& measuredBars() const { return measured_; }

 protected:
  void writeCsv(QTextStream& out) const override;
  void applyPalette() override;

 private:
  SeriesStore* store_;
  qint64 run_ = -1;
  QList<QCPBars*> planned_, measured_;  // one per planned category, stacked
  QLabel* note_;
  QStringList gaps_;
  struct Row {
    int rank = 0, pp = 0;
    double planned[kPlannedCategories] = {}, measured[kPlannedCategories] = {};
  };
  QList<Row> rows_;
};

class BubbleChart : public ChartCard {
  Q_OBJECT

 public:
  explicit BubbleChart(SeriesStore* store, QWidget* parent = nullptr);
  void setRun(qint64 run) { run_ = run; }
  void refresh();  // does not replot

  QString verdict() const;
  int stageCount() const { return stages_.size(); }
  // The measured share (wait / compute) of stage `pp` per recorded iteration, and the analytic.
  QList<QPointF> shares(int pp) const;
  double analytic() const { return analytic_; }

 protected:
  void writeCsv(QTextStream& out) const override;
  void applyPalette() override;

 private:
  SeriesStore* store_;
  qint64 run_ = -1;
  QList<QCPGraph*> stages_;
  QCPGraph* analyticLine_ = nullptr;
  QLabel* note_;
  double analytic_ = 0;
};

}  // namespace lattice::ui
