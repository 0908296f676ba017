// The History's Parallel coordinates tab (TensorBoard's HParams view): one vertical axis per
// setting that differs between the runs and one per final metric, one polyline per run
// (storage::parallel_coordinates), coloured by a chosen metric from blue (low) to red (high).
// Numeric axes span their values (log scale when they span 100x), other settings are
// categories. Hovering a line names the run; clicking it asks History to select it. Painted
// with QPainter into a cached image, so 10,000 lines cost one paint per change, not per hover.
#pragma once

#include <QImage>
#include <QWidget>
#include <vector>

#include "history/sweep_runs.h"
#include "lattice/storage/run_sweep.h"

class QComboBox;
class QLabel;

namespace lattice::ui {

class ParallelPlot : public QWidget {
  Q_OBJECT

 public:
  explicit ParallelPlot(QWidget* parent = nullptr);

  // The model, the run of each line, the axis lines are coloured by (-1: one colour).
  void setModel(storage::ParallelCoordinates model, QList<qint64> runs, QStringList names,
                int colourAxis);
  const storage::ParallelCoordinates& model() const { return model_; }
  // The line under the widget point (within a few pixels), -1 when none.
  int lineAt(const QPointF& point) const;
  void setHighlighted(int line);  // drawn on top, thick; -1: none
  int highlighted() const { return highlighted_; }
  QPointF pointOf(int line, int axis) const;  // where a line crosses an axis (widget pixels)

 signals:
  void hovered(int line);  // -1 when the mouse leaves every line
  void clicked(qint64 run);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  QRectF plotArea() const;
  double axisX(int axis) const;
  QColor lineColour(int line) const;
  void paintLines();
  void paintAxes(QPainter& p) const;

  storage::ParallelCoordinates model_;
  QList<qint64> runs_;
  QStringList names_;
  int colourAxis_ = -1;
  int highlighted_ = -1;
  // Per numeric axis, the positions (0..1) of its distinct values when there are at most a
  // dozen (a swept lr: each value named); empty: the axis names its low and high ends.
  std::vector<std::vector<double>> ticks_;
  QImage lines_;  // the polylines at the widget's size; redrawn when the model or size change
};

class ParallelPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ParallelPanel(QWidget* parent = nullptr);

  // At most kMaxSettingAxes settings: those with the fewest distinct values first.
  static constexpr int kMaxSettingAxes = 8;

  // The runs, in table order; rebuilds the axes when they changed.
  void setRuns(std::vector<SweepRun> runs);
  void setColourBy(const QString& axisName);
  QString colourBy() const;
  ParallelPlot* plotWidget() const { return plot_; }
  QString hoverText() const;  // the line under the mouse, named

 signals:
  void runClicked(qint64 run);

 private:
  void rebuild();

  std::vector<SweepRun> runs_;
  quint64 signature_ = 0;
  QComboBox* colour_;
  QLabel* hover_;
  ParallelPlot* plot_;
};

}  // namespace lattice::ui
