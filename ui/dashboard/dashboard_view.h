// The Dashboard: live and finished runs of one run store, overlaid. A toolbar (x axis by
// step / tokens / time, EMA smoothing, log scale, follow) above three pages of charts:
// training (loss and validation loss, learning rate, grad norm, loss scale and skipped
// iterations), throughput (tokens/s, TFLOP/s per device, MFU, step time) and memory & timers
// (memory per rank, time per phase per rank, the pipeline timeline of a chosen iteration), and
// estimate and measurement (planned memory against measured, the measured pipeline bubble),
// and for MoE runs the experts' load and the load-balancing loss.
// Data flows DashboardFeed (worker thread) -> SeriesStore -> charts; one coalescing timer
// (kReplotMs) rebuilds and replots the visible page however many rows arrived.
#pragma once

#include <QList>
#include <QTimer>
#include <QWidget>

#include "dashboard/metric_chart.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QSlider;
class QStackedWidget;
class QTabWidget;

namespace lattice::ui {

class BubbleChart;
class DashboardFeed;
class EstimateChart;
class ExpertLoadChart;
class RankBarsChart;
class SeriesStore;
class SystemPage;
class TimelineChart;

class DashboardView : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kReplotMs = 40;
  enum Page {
    kTrainingPage,
    kThroughputPage,
    kSystemPage,
    kEstimatePage,
    kSystemMetricsPage,
    kTasksPage,
    kMoePage  // shown while a shown run is an MoE model's
  };

  explicit DashboardView(QWidget* parent = nullptr);
  ~DashboardView() override;

  void setDatabase(const QString& path);  // the run store file (read-only use)
  QString database() const { return database_; }
  void showRuns(const QList<qint64>& runIds);  // replace the runs shown (overlaid)
  QList<qint64> runs() const;

  void setSmoothing(double weight);  // 0 .. 0.999
  double smoothing() const { return smoothing_; }
  void setLogScale(bool on);
  void setXAxisMode(XAxisMode mode);
  void setFollow(bool on);  // every line chart follows the newest step again
  // One curve across resumes (lineage_series.h): a resumed run's ancestors drawn before it,
  // their discarded tails faded. On by default.
  void setLineageVisible(bool on);
  void setCurrentPage(Page page);
  // The timeline's iteration (-1: the newest, following new iterations).
  void selectTimelineStep(qint64 step);

  // The line chart whose first series is `key` ("lm loss", "learning rate", ...).
  MetricChart* chart(const QString& key) const;
  const QList<MetricChart*>& metricCharts() const { return charts_; }
  RankBarsChart* memoryChart() const { return memory_; }
  RankBarsChart* phaseChart() const { return phases_; }
  TimelineChart* timelineChart() const { return timeline_; }
  EstimateChart* estimateChart() const { return estimate_; }
  SystemPage* systemMetrics() const { return systemMetrics_; }
  BubbleChart* bubbleChart() const { return bubble_; }
  ExpertLoadChart* expertLoadChart() const { return expertLoad_; }
  bool isPageShown(Page page) const;  // the MoE page hides for dense runs
  const SeriesStore* store() const { return store_; }

  // Rebuilds and replots the visible page now (what the coalescing timer does).
  void replotNow();
  int replotCount() const { return replots_; }

 signals:
  void replotted();
  void problem(const QString& message);

 private:
  QWidget* buildToolbar();
  QWidget* buildPages();
  MetricChart* addChart(const QString& title, const QList<ChartSeriesSpec>& series);
  void scheduleReplot();
  void refreshRunLabel();
  void refreshSystemRun();
  void refreshTimelineSteps();
  void loadLineage(const QList<qint64>& runIds);

  QString database_;
  SeriesStore* store_;
  DashboardFeed* feed_;
  QList<MetricChart*> charts_;
  QList<QWidget*> pageOf_;  // parallel to charts_: the page holding each chart
  RankBarsChart* memory_ = nullptr;
  RankBarsChart* phases_ = nullptr;
  TimelineChart* timeline_ = nullptr;
  EstimateChart* estimate_ = nullptr;
  SystemPage* systemMetrics_ = nullptr;  // CPU, memory and GPU per rank (system_charts.h)
  BubbleChart* bubble_ = nullptr;
  ExpertLoadChart* expertLoad_ = nullptr;
  QTimer replotTimer_;
  int replots_ = 0;
  double smoothing_ = 0.6;

  QLabel* runLabel_;
  QComboBox* xMode_;
  QSlider* smoothSlider_;
  QLabel* smoothValue_;
  QCheckBox* log_;
  QCheckBox* follow_;
  QCheckBox* lineage_;
  QStackedWidget* stack_;
  QTabWidget* tabs_;
  QComboBox* systemRun_;
  QComboBox* estimateRun_;  // the run of the estimate page
  QComboBox* iteration_;
  QLabel* problem_;
};

}  // namespace lattice::ui
