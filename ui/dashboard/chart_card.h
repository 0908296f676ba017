// One Dashboard chart: a title row with an Export menu (PNG, SVG, CSV) above a QCustomPlot.
// Subclasses fill the plot and say what their CSV holds; the card themes the plot from the
// widget palette and writes the files.
#pragma once

#include <QWidget>

class QCustomPlot;
class QHBoxLayout;
class QLabel;
class QTextStream;
class QToolButton;

namespace lattice::ui {

class ChartCard : public QWidget {
  Q_OBJECT

 public:
  explicit ChartCard(const QString& title, QWidget* parent = nullptr);
  QCustomPlot* plot() const { return plot_; }
  QString title() const;

  // Each returns false (and leaves no partial promise) when the file cannot be written.
  bool exportPng(const QString& path) const;
  bool exportSvg(const QString& path) const;
  bool exportCsv(const QString& path) const;

  // The colour of the i-th run (shared by every chart so that a run looks the same).
  static QColor runColor(int index, const QPalette& palette);

 protected:
  virtual void writeCsv(QTextStream& out) const = 0;
  virtual void applyPalette();  // axes, grid, legend; subclasses add their own items
  void changeEvent(QEvent* event) override;
  void setSubtitle(const QString& text);
  void addHeaderWidget(QWidget* w);  // beside the title, before Export (a chart's picker)

 private:
  void exportWithDialog(const QString& suffix);

  QLabel* title_;
  QLabel* subtitle_;
  QHBoxLayout* head_;
  QToolButton* export_;
  QCustomPlot* plot_;
};

}  // namespace lattice::ui
