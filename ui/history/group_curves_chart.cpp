// GroupCurvesChart: group means over bands, in QCustomPlot.
#include "history/group_curves_chart.h"

#include <qcustomplot.h>
#include <QTextStream>
#include <cmath>

namespace lattice::ui {

QString bandText(BandKind band) {
  return band == BandKind::kMinMax ? QObject::tr("shaded: min–max of the group's runs")
                                   : QObject::tr("shaded: mean ± 1 std of the group's runs");
}

GroupCurvesChart::GroupCurvesChart(QWidget* parent)
    : ChartCard(QObject::tr("Grouped curves"), parent) {
  QCustomPlot* p = plot();
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  p->legend->setVisible(true);
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  p->legend->setFont(small);
  p->legend->setIconSize(16, 8);
  p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  p->xAxis->setLabel(tr("step"));
  applyPalette();
}

void GroupCurvesChart::setLines(const QList<GroupLine>& lines, const QString& metric,
                                BandKind band) {
  lines_ = lines;
  metric_ = metric;
  band_ = band;
  rebuild();
}

void GroupCurvesChart::rebuild() {
  QCustomPlot* p = plot();
  p->clearGraphs();
  graphs_.clear();
  p->yAxis->setLabel(metric_);
  setSubtitle(lines_.isEmpty() ? QString() : bandText(band_));
  for (int i = 0; i < lines_.size(); ++i) {
    const storage::GroupCurve& c = lines_[i].curve;
    const QColor color = runColor(i, palette());
    QColor shade = color;
    shade.setAlphaF(0.22);
    QVector<double> xs, mean, low, high;
    for (std::size_t k = 0; k < c.steps.size(); ++k) {
      xs << static_cast<double>(c.steps[k]);
      mean << c.mean[k];
      // NaN (fewer than two runs at the step) leaves a gap in the band, not a false edge.
      if (band_ == BandKind::kMinMax) {
        low << c.min[k], high << c.max[k];
      } else {
        low << c.mean[k] - c.stddev[k], high << c.mean[k] + c.stddev[k];
      }
    }
    Graphs g;
    g.low = p->addGraph();
    g.low->setPen(Qt::NoPen);
    g.low->removeFromLegend();
    g.low->setData(xs, low, true);
    g.high = p->addGraph();
    g.high->setPen(Qt::NoPen);
    g.high->setBrush(shade);
    g.high->setChannelFillGraph(g.low);
    g.high->removeFromLegend();
    g.high->setData(xs, high, true);
    g.mean = p->addGraph();
    g.mean->setPen(QPen(color, 1.6));
    g.mean->setName(lines_[i].label);
    g.mean->setData(xs, mean, true);
    graphs_ << g;
  }
  if (!lines_.isEmpty()) {
    // The band's meaning in the legend, once: a shaded swatch and its words.
    QCPGraph* key = p->addGraph();
    QColor swatch = palette().color(QPalette::Text);
    swatch.setAlphaF(0.22);
    key->setPen(Qt::NoPen);
    key->setBrush(swatch);
    key->setName(bandText(band_));
  }
  p->rescaleAxes();
  const QCPRange y = p->yAxis->range();
  const double pad = y.size() > 0 ? y.size() * 0.06 : std::max(std::fabs(y.center()) * 0.1, 1.0);
  p->yAxis->setRange(y.lower - pad, y.upper + pad);
  p->replot();
}

void GroupCurvesChart::writeCsv(QTextStream& out) const {
  out << "group,step,mean,std,min,max,runs\n";
  for (const GroupLine& l : lines_) {
    const storage::GroupCurve& c = l.curve;
    for (std::size_t k = 0; k < c.steps.size(); ++k) {
      out << '"' << QString(l.label).replace('"', "\"\"") << "\"," << c.steps[k] << ','
          << QString::number(c.mean[k], 'g', 17) << ',' << QString::number(c.stddev[k], 'g', 17)
          << ',' << QString::number(c.min[k], 'g', 17) << ',' << QString::number(c.max[k], 'g', 17)
          << ',' << c.runs[k] << '\n';
    }
  }
}

void GroupCurvesChart::applyPalette() {
  ChartCard::applyPalette();
  plot()->xAxis->grid()->setVisible(true);
  if (!lines_.isEmpty()) rebuild();
}

}  // namespace lattice::ui
