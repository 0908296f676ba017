// The History's grouped curves: one line per group of runs (a setting's value), the mean over
// the group's runs at each step, over a shaded band (min-max or +-1 standard deviation, as the
// legend says) where two or more runs have the step (Note "aligned steps",
// storage/src/run_sweep.cpp). The legend names the value and the run count:
// "lr=0.0003 (3 runs)". Draws what it is given; GroupPanel reads the series.
#pragma once

#include <QList>
#include <QString>

#include "dashboard/chart_card.h"
#include "lattice/storage/run_sweep.h"

class QCPGraph;

namespace lattice::ui {

enum class BandKind { kMinMax, kStd };

struct GroupLine {
  QString label;  // "lr=0.0003 (3 runs)"
  storage::GroupCurve curve;
};

class GroupCurvesChart : public ChartCard {
  Q_OBJECT

 public:
  explicit GroupCurvesChart(QWidget* parent = nullptr);

  // Replaces the lines; `metric` names the y axis. Replots.
  void setLines(const QList<GroupLine>& lines, const QString& metric, BandKind band);
  const QList<GroupLine>& lines() const { return lines_; }
  BandKind band() const { return band_; }
  // The plotted graphs of line i: the mean, and the band's lower and upper edges.
  QCPGraph* meanGraph(int line) const { return graphs_.value(line).mean; }
  QCPGraph* lowGraph(int line) const { return graphs_.value(line).low; }
  QCPGraph* highGraph(int line) const { return graphs_.value(line).high; }

 protected:
  void writeCsv(QTextStream& out) const override;
  void applyPalette() override;

 private:
  struct Graphs {
    QCPGraph *mean = nullptr, *low = nullptr, *high = nullptr;
  };
  void rebuild();

  QList<GroupLine> lines_;
  QList<Graphs> graphs_;
  QString metric_;
  BandKind band_ = BandKind::kMinMax;
};

// The legend's words for the band: "band: min–max of the group's runs".
QString bandText(BandKind band);

}  // namespace lattice::ui
