// The canvas with its controls (zoom, fit, folding), a legend, and a line describing the
// hovered or selected device: coordinates, groups and memory.
#pragma once

#include <QWidget>

class QCheckBox;
class QLabel;

namespace lattice::ui {

class LayoutCanvas;
class PlanModel;
struct CanvasTile;

class LayoutPanel : public QWidget {
  Q_OBJECT

 public:
  explicit LayoutPanel(PlanModel* model, QWidget* parent = nullptr);
  LayoutCanvas* canvas() const { return canvas_; }

  // "Rank 5 on node 0 ...": what the info line and the tooltip say about a device.
  QString describe(const CanvasTile& tile, bool rich) const;

 protected:
  void changeEvent(QEvent* event) override;  // the legend follows the palette

 private:
  void refresh();
  void showFocus(const CanvasTile* tile);

  PlanModel* model_;
  LayoutCanvas* canvas_;
  QLabel* legend_;
  QLabel* info_;
  QCheckBox* fold_;
};

}  // namespace lattice::ui
