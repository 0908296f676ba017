// The Dashboard's "System metrics" page (issue 26, item 8; docs/studio.md "System metrics"):
// for the run picked, one SystemChart per quantity (CPU use, resident memory, and the GPU's
// utilisation, memory, power and temperature where NVML recorded them), one line per rank
// against the step, from the "rank R <key>" series (lattice/system_metrics.h): the history as
// one down-sampled read through the feed (each bucket drawn at its last value), then the live
// tail the store keeps. GPU cards stay hidden for runs that recorded none.
#pragma once

#include <QList>
#include <QWidget>

#include "dashboard/chart_card.h"

class QCPGraph;
class QComboBox;

namespace lattice::ui {

class DashboardFeed;
class SeriesStore;

class SystemChart : public ChartCard {
  Q_OBJECT

 public:
  enum class Quantity { kCpu, kRss, kGpuUtilization, kGpuMemory, kGpuPower, kGpuTemperature };
  SystemChart(Quantity quantity, SeriesStore* store, DashboardFeed* feed,
              QWidget* parent = nullptr);
  void setRun(qint64 run);
  void refresh();  // does not replot

  Quantity quantity() const { return quantity_; }
  // The ranks drawn (those with points), in order, and each one's line.
  const QList<int>& ranks() const { return ranks_; }
  const QList<QCPGraph*>& lines() const { return lines_; }

 protected:
  void writeCsv(QTextStream& out) const override;
  void applyPalette() override;

 private:
  static constexpr int kBuckets = 512;  // points of the history read, per rank
  int viewId() const;                   // the store's view of this card (past MetricChart's)
  QVector<QPointF> points(int rank) const;

  Quantity quantity_;
  SeriesStore* store_;
  DashboardFeed* feed_;
  qint64 run_ = -1;
  qint64 requested_ = -1;  // the last step of the history read asked for run_
  QList<int> ranks_;
  QList<QCPGraph*> lines_;
};

class SystemPage : public QWidget {
  Q_OBJECT

 public:
  SystemPage(SeriesStore* store, DashboardFeed* feed, QWidget* parent = nullptr);
  void setRuns(const QList<qint64>& runs);  // the picker's choices; the first is shown
  void refresh();                           // reads the store and replots the visible cards
  SystemChart* chart(SystemChart::Quantity quantity) const;

 signals:
  void runChanged();

 private:
  SeriesStore* store_;
  QComboBox* run_;
  QList<SystemChart*> charts_;
};

}  // namespace lattice::ui
