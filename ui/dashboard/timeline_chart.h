// The pipeline timeline of one iteration: one lane per (virtual) pipeline stage, a box per
// event, time on x. Forward and backward boxes have two colours and carry their micro-batch
// number where the box is wide enough; pipeline wait, the tied-embedding all-reduce
// ("embedding comm"), data-parallel comm and optimizer boxes are drawn distinctly. When several
// ranks hold a stage (TP and DP replicas), the lane shows the lowest of them: replicas run the same
// schedule.
#pragma once

#include <QList>
#include <QString>
#include <QVector>
#include <vector>

#include "dashboard/chart_card.h"
#include "lattice/storage/run_store.h"

class QCPItemRect;
class QCPItemText;

namespace lattice::ui {

class SeriesStore;

struct TimelineBox {
  int lane = 0;
  int rank = 0;
  int microbatch = 0;
  QString kind;
  double start = 0, end = 0;  // seconds from the step's start
};

struct TimelineLayout {
  QList<int> laneStage;  // lane -> stage, ascending
  QList<int> laneRank;   // lane -> the rank drawn
  QVector<TimelineBox> boxes;
  double start = 0, end = 0;  // the extent of every box
};

// Pure: events (any order) -> lanes and boxes.
TimelineLayout layoutTimeline(const std::vector<storage::TimelineEvent>& events);

class TimelineChart : public ChartCard {
  Q_OBJECT

 public:
  explicit TimelineChart(SeriesStore* store, QWidget* parent = nullptr);

  void setRun(qint64 run);
  void refresh();  // does not replot
  const TimelineLayout& layout() const { return layout_; }
  int boxCount() const { return rects_.size(); }
  int visibleLabelCount() const;
  qint64 step() const { return step_; }
  static QColor kindColor(const QString& kind);

 protected:
  void writeCsv(QTextStream& out) const override;
  void applyPalette() override;

 private:
  void updateLabels();  // show a micro-batch number only where it fits

  SeriesStore* store_;
  qint64 run_ = -1;
  qint64 step_ = -1;
  TimelineLayout layout_;
  QList<QCPItemRect*> rects_;
  QList<QCPItemText*> labels_;  // parallel to rects_ (nullptr: no label)
};

}  // namespace lattice::ui
