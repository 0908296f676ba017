// What the plan costs: per pipeline stage, a stacked bar of weights, grads, optimizer state
// and activations of one rank against the device's memory, with the headroom or overflow in
// GiB; the estimated step time, tokens/s and MFU with their terms; the Suggest and Calibrate
// buttons.
#pragma once

#include <QWidget>

class QCustomPlot;
class QCPBars;
class QLabel;
class QPushButton;

namespace lattice::ui {

class PlanModel;

class CostPanel : public QWidget {
  Q_OBJECT

 public:
  explicit CostPanel(PlanModel* model, QWidget* parent = nullptr);
  QCustomPlot* plot() const { return plot_; }

 signals:
  void suggestRequested();
  void calibrateRequested();

 protected:
  void changeEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;  // the plot's resizes

 private:
  void refresh();
  // The legend on one row where the plot is wide enough, else on two.
  void fitLegend();
  // A minimum height that holds the wrapped lines at the current width: the splitter above
  // knows nothing of heights for widths and would let them overlap the plot.
  void fitHeight();
  void refreshPlot();
  void refreshStep();
  void applyPalette();

  PlanModel* model_;
  QCustomPlot* plot_;
  // weights, grads, optimizer, activations, buffers (workspace and communication buffers),
  // stacked in that order
  QList<QCPBars*> bars_;
  QLabel* fit_;
  QLabel* step_;
  QLabel* terms_;
  QPushButton* suggest_;
  QPushButton* calibrate_;
};

}  // namespace lattice::ui
